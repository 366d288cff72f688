package credstore

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"regexp"
	"strings"
)

// EnvKeys holds the credential keys: "ID:KEY[,ID:KEY…]", each KEY 32
// random bytes in base64url (`airlock credentials key` makes one). The
// first encrypts; every one listed decrypts, so a key is rotated by
// putting a new one first and keeping the old one after it until
// `airlock credentials rekey` has re-encrypted what it sealed.
const EnvKeys = "AIRLOCK_CREDENTIAL_KEYS"

// maxKeys bounds the list (a rotation needs two).
const maxKeys = 16

var keyIDRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,31}$`)

// Keyring is the credential keys of a deployment.
type Keyring struct {
	current string
	keys    map[string][]byte
	aeads   map[string]cipher.AEAD
}

// ParseKeys reads EnvKeys' form. Errors name the entry and say how to
// write it; they never repeat a key.
func ParseKeys(s string) (*Keyring, error) {
	kr := &Keyring{keys: map[string][]byte{}, aeads: map[string]cipher.AEAD{}}
	entries := strings.Split(strings.TrimSpace(s), ",")
	if len(entries) > maxKeys {
		return nil, fmt.Errorf("%s: %d keys; keep at most %d (the current one and those not yet re-encrypted away by `airlock credentials rekey`)", EnvKeys, len(entries), maxKeys)
	}
	for i, e := range entries {
		id, enc, ok := strings.Cut(strings.TrimSpace(e), ":")
		if !ok {
			return nil, fmt.Errorf("%s: entry %d is not ID:KEY; write e.g. 2026-12:<32 bytes of base64url from `airlock credentials key`>", EnvKeys, i+1)
		}
		if !keyIDRE.MatchString(id) {
			return nil, fmt.Errorf("%s: entry %d: key ID %q is not 1-32 lower-case letters, digits, '.', '_' or '-'", EnvKeys, i+1, clip(id))
		}
		if _, dup := kr.keys[id]; dup {
			return nil, fmt.Errorf("%s: key ID %q is listed twice; give each key its own ID", EnvKeys, id)
		}
		b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(enc, "="))
		if err != nil || len(b) != 32 {
			return nil, fmt.Errorf("%s: key %q is not 32 bytes of base64url; make one with `airlock credentials key`", EnvKeys, id)
		}
		blk, err := aes.NewCipher(b)
		if err != nil {
			return nil, err
		}
		a, err := cipher.NewGCM(blk)
		if err != nil {
			return nil, err
		}
		kr.keys[id], kr.aeads[id] = b, a
		if i == 0 {
			kr.current = id
		}
	}
	return kr, nil
}

// KeysFromEnv reads EnvKeys; nil, nil when it is not set.
func KeysFromEnv(getenv func(string) string) (*Keyring, error) {
	s := getenv(EnvKeys)
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	return ParseKeys(s)
}

// NewKey makes a key in EnvKeys' KEY form.
func NewKey() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Current is the ID of the key that encrypts.
func (k *Keyring) Current() string { return k.current }

// IDs are the key IDs, the current one first.
func (k *Keyring) IDs() []string {
	out := []string{k.current}
	for id := range k.keys {
		if id != k.current {
			out = append(out, id)
		}
	}
	return out
}

func (k *Keyring) seal(aad, plain []byte) (kid string, nonce, ct []byte) {
	a := k.aeads[k.current]
	nonce = make([]byte, a.NonceSize())
	_, _ = rand.Read(nonce)
	return k.current, nonce, a.Seal(nil, nonce, plain, aad)
}

func (k *Keyring) open(kid string, aad, nonce, ct []byte) ([]byte, error) {
	a, ok := k.aeads[kid]
	if !ok {
		return nil, fmt.Errorf("%w: it is encrypted with key %q, which %s does not hold (it holds %s); add that key back after the current one", ErrKey, clip(kid), EnvKeys, strings.Join(k.IDs(), ", "))
	}
	if len(nonce) != a.NonceSize() {
		return nil, ErrTampered
	}
	p, err := a.Open(nil, nonce, ct, aad)
	if err != nil {
		return nil, ErrTampered
	}
	return p, nil
}

// MAC authenticates msg with the key kid ("" for the current one); it
// returns the key ID used. The gateway binds a call to the user whose
// credential it may use with it (consent.Subject).
func (k *Keyring) MAC(kid string, msg []byte) (string, []byte, error) {
	if kid == "" {
		kid = k.current
	}
	key, ok := k.keys[kid]
	if !ok {
		return "", nil, fmt.Errorf("%w: key %q is not in %s (it holds %s)", ErrKey, clip(kid), EnvKeys, strings.Join(k.IDs(), ", "))
	}
	// A key of its own for MACs, derived, so that no AES key is also an
	// HMAC key.
	dk := hmac.New(sha256.New, key)
	dk.Write([]byte("airlock credential mac v1"))
	m := hmac.New(sha256.New, dk.Sum(nil))
	m.Write(msg)
	return kid, m.Sum(nil), nil
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return strings.ToValidUTF8(s, "?")
}
