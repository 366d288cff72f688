package signkey

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGenerateAndRead(t *testing.T) {
	dir := t.TempDir()
	priv, pub := filepath.Join(dir, "audit.key"), filepath.Join(dir, "audit.pub")
	k, err := Generate(priv, pub)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(priv); st.Mode().Perm() != 0o600 {
		t.Errorf("private key mode %04o, want 0600", st.Mode().Perm())
	}
	sk, err := ReadPrivate(priv)
	if err != nil || !sk.Public().(ed25519.PublicKey).Equal(k) {
		t.Fatalf("ReadPrivate: %v", err)
	}
	pk, err := ReadPublic(pub)
	if err != nil || !pk.Equal(k) {
		t.Fatalf("ReadPublic: %v", err)
	}
	if id := KeyID(pk); !strings.HasPrefix(id, "sha256:") || len(id) != 7+64 {
		t.Errorf("KeyID %q", id)
	}
	if _, err := Generate(priv, filepath.Join(dir, "other.pub")); err == nil || !strings.Contains(err.Error(), "does not overwrite") {
		t.Errorf("Generate over an existing key: %v", err)
	}

	write := func(name string, b []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, _ := os.ReadFile(priv)
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecDER, _ := x509.MarshalPKCS8PrivateKey(ec)
	for _, tc := range []struct {
		name, path, want string
	}{
		{"readable by others", write("open.key", good, 0o644), "chmod 600"},
		{"not PEM", write("junk.key", []byte("hello"), 0o600), "no PEM block"},
		{"a public key", write("pub-as-priv.key", mustRead(t, pub), 0o600), `want "PRIVATE KEY"`},
		{"an ECDSA key", write("ec.key", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER}), 0o600), "not an Ed25519 private key"},
		{"two keys", write("two.key", append(append([]byte{}, good...), good...), 0o600), "one key"},
		{"missing", filepath.Join(dir, "missing.key"), "no such file"},
	} {
		if _, err := ReadPrivate(tc.path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := ReadPublic(priv); err == nil || !strings.Contains(err.Error(), `want "PUBLIC KEY"`) {
		t.Errorf("ReadPublic of a private key: %v", err)
	}
}

func mustRead(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
