package config

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/airlock-run/airlock/internal/signkey"
	"github.com/airlock-run/airlock/manifests"
)

// AuditSigningKeyPath is audit.signing_key_file resolved against this
// configuration file's directory; "" when unset.
func (c *Config) AuditSigningKeyPath() string {
	p := c.Audit.SigningKeyFile
	if p == "" || filepath.IsAbs(p) || c.File == "" {
		return p
	}
	return filepath.Join(filepath.Dir(c.File), p)
}

// AuditSigningKey reads audit.signing_key_file; nil (and no error) when
// it is unset.
func (c *Config) AuditSigningKey() (ed25519.PrivateKey, error) {
	p := c.AuditSigningKeyPath()
	if p == "" {
		return nil, nil
	}
	k, err := signkey.ReadPrivate(p)
	if err != nil {
		return nil, fmt.Errorf("audit.signing_key_file: %w (airlock audit keygen writes a key pair)", err)
	}
	return k, nil
}

// validateAuditKey checks audit.signing_key_file when it is given: a
// private Ed25519 key that only its owner can read. It is read here, at
// load, so a bad key is reported when the configuration is, not at the
// first export.
func (c *Config) validateAuditKey(v *validator, lines manifests.Lines) {
	const at = "audit.signing_key_file"
	if !lines.Has(at) {
		return
	}
	if strings.TrimSpace(c.Audit.SigningKeyFile) == "" {
		v.add(at, "is empty; omit it to export unsigned records, or name an Ed25519 private key file (relative to this configuration file; airlock audit keygen writes one)")
		return
	}
	_, err := signkey.ReadPrivate(c.AuditSigningKeyPath())
	switch {
	case errors.Is(err, fs.ErrNotExist):
		v.add(at, "%v; airlock audit keygen --out %s writes a key pair there", err, c.Audit.SigningKeyFile)
	case err != nil:
		v.add(at, "%v", err)
	}
}
