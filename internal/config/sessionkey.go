package config

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// DefaultSessionKeyEnv is gateway.session_key_env's default.
const DefaultSessionKeyEnv = "AIRLOCK_SESSION_KEY"

// MinSessionKeyBytes is the shortest session key accepted (the gateway's
// HMAC-SHA256 wants at least 32 bytes of key).
const MinSessionKeyBytes = 32

// SessionKey returns the key that signs MCP session IDs and says where it
// came from: the variable gateway.session_key_env when it is set, else the
// file gateway.session_key_file (relative to this configuration file), else
// <dataDir>/session.key. A missing default file is made with a random key
// (mode 0600), so one host's replicas that share a data directory share the
// key; replicas on several hosts need the same key in the variable or file.
func (c *Config) SessionKey(dataDir string) (key []byte, source string, err error) {
	env := c.Gateway.SessionKeyEnv
	if env == "" {
		env = DefaultSessionKeyEnv
	}
	if v := strings.TrimSpace(os.Getenv(env)); v != "" {
		if len(v) < MinSessionKeyBytes {
			return nil, "", fmt.Errorf("environment variable %s (gateway.session_key_env): the session key is %d characters, fewer than %d; make one with `openssl rand -hex 32`", env, len(v), MinSessionKeyBytes)
		}
		return []byte(v), "$" + env, nil
	}
	path := c.Gateway.SessionKeyFile
	explicit := path != ""
	switch {
	case !explicit:
		path = filepath.Join(dataDir, "session.key")
	case !filepath.IsAbs(path) && c.File != "":
		path = filepath.Join(filepath.Dir(c.File), path)
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		var raw [32]byte
		if _, err := rand.Read(raw[:]); err != nil {
			return nil, "", err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, "", fmt.Errorf("making the session key %s: %w", path, err)
		}
		k := hex.EncodeToString(raw[:])
		// O_EXCL: when two replicas start together, one key wins.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			_, err = f.WriteString(k + "\n")
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return nil, "", fmt.Errorf("writing the session key %s: %w", path, err)
			}
			return []byte(k), path + " (new)", nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, "", fmt.Errorf("making the session key %s: %w", path, err)
		}
		b, err = os.ReadFile(path)
	}
	field := "gateway.session_key_file"
	if !explicit {
		field = "the default session key file"
	}
	if err != nil {
		return nil, "", fmt.Errorf("%s %s: %w; set %s or fix the file", field, path, err, env)
	}
	v := strings.TrimSpace(string(b))
	if len(v) < MinSessionKeyBytes {
		return nil, "", fmt.Errorf("%s %s: the session key is %d characters, fewer than %d; write one made with `openssl rand -hex 32`", field, path, len(v), MinSessionKeyBytes)
	}
	return []byte(v), path, nil
}
