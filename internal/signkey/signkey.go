// Package signkey reads and writes the Ed25519 key pair that signs audit
// receipts (airlock audit keygen, config audit.signing_key_file, airlock
// audit verify --public-key): PEM files, PKCS #8 for the private key and
// PKIX for the public one, as openssl writes them, so either can be made
// or checked with other tools. It imports only the standard library.
package signkey

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// KeyID names a public key in receipts: "sha256:" and the hex SHA-256 of
// its 32 bytes.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Generate writes a new key pair: the private key to privPath (mode 0600)
// and the public key to pubPath (0644). Neither file may exist already:
// overwriting a signing key would orphan every receipt it signed.
func Generate(privPath, pubPath string) (ed25519.PublicKey, error) {
	for _, p := range []string{privPath, pubPath} {
		if _, err := os.Lstat(p); err == nil {
			return nil, fmt.Errorf("%s exists; keygen does not overwrite a key (receipts signed with it would no longer verify): remove it or choose another path", p)
		}
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	if err := writeNew(privPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	if err := writeNew(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		os.Remove(privPath)
		return nil, err
	}
	return pub, nil
}

func writeNew(path string, b []byte, mode fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}

// ReadPrivate reads an Ed25519 private key (PEM, PKCS #8). The file must
// be readable by its owner only (mode 0600 or 0400), as ssh demands of its
// keys: a signing key others can read signs for them too.
func ReadPrivate(path string) (ed25519.PrivateKey, error) {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s does not exist: %w", path, err)
	}
	if err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s is readable by others (mode %04o); a signing key must be private: chmod 600 %s", path, st.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	key, err := ParsePrivate(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return key, nil
}

// ParsePrivate reads a PEM "PRIVATE KEY" block holding an Ed25519 key.
func ParsePrivate(b []byte) (ed25519.PrivateKey, error) {
	der, err := onePEM(b, "PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("not a PKCS #8 private key: %v (airlock audit keygen writes one)", err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("a %T, not an Ed25519 private key (airlock audit keygen writes one; openssl genpkey -algorithm ed25519 too)", k)
	}
	return priv, nil
}

// ReadPublic reads an Ed25519 public key (PEM, PKIX).
func ReadPublic(path string) (ed25519.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	der, err := onePEM(b, "PUBLIC KEY")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("%s: not a PKIX public key: %v", path, err)
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%s: a %T, not an Ed25519 public key", path, k)
	}
	return pub, nil
}

// onePEM is the DER of the one PEM block of type typ in b; anything but
// whitespace after it is refused, so a file holds one key only.
func onePEM(b []byte, typ string) ([]byte, error) {
	blk, rest := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("no PEM block; want -----BEGIN " + typ + "-----")
	}
	if blk.Type != typ {
		return nil, fmt.Errorf("a PEM %q block; want %q", blk.Type, typ)
	}
	for _, c := range rest {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return nil, errors.New("bytes after the PEM block; the file must hold one key")
		}
	}
	return blk.Bytes, nil
}
