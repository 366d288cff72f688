package main

import (
	"strings"
	"testing"

	"github.com/airlock-run/airlock/internal/exchange"
)

// TestKeysSubject: `airlock keys subject` prints a private key and its
// public half that read back as one pair, and a new pair each time.
func TestKeysSubject(t *testing.T) {
	env := func(out string) map[string]string {
		m := map[string]string{}
		for _, line := range strings.Split(out, "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				m[k] = v
			}
		}
		return m
	}
	code, stdout, stderr := runBounded(t, []string{"keys", "subject"})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	first := env(stdout)
	priv, err := exchange.ParseKey(first[exchange.EnvKey])
	if err != nil {
		t.Fatal(err)
	}
	pub, err := exchange.ParsePublicKey(first[exchange.EnvPublicKey])
	if err != nil || !pub.Equal(priv.PublicKey()) || !strings.Contains(stdout, exchange.KeyID(pub)) {
		t.Fatalf("the public key is not the private key's: %v\n%s", err, stdout)
	}
	_, again, _ := runBounded(t, []string{"keys", "subject"})
	if env(again)[exchange.EnvKey] == first[exchange.EnvKey] {
		t.Fatal("the same key twice")
	}
	if code, _, _ := runBounded(t, []string{"keys", "subject", "extra"}); code == 0 {
		t.Fatal("an argument was accepted")
	}
}
