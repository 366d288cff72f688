// Package blob keeps large values out of workflow histories: a
// content-addressed store of byte strings in a directory, referenced from
// history by "sha256:<hex>". The worker keeps the pre-images it captures and
// the compensations it computes here when they are large, so a task that
// edits big files neither bloats its history nor exceeds what one
// continue-as-new can carry.
//
// Every worker that may run a task's activities must see the same
// directory (airlock dev has one process; a fleet of workers needs a shared
// mount). A value is verified against its hash when read.
//
// This package is a leaf: standard library only, no logging.
package blob

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Prefix starts every reference.
const Prefix = "sha256:"

// Store is a directory of blobs named by their SHA-256. It is safe for
// concurrent use by goroutines and processes: writes are atomic renames of
// identical content.
type Store struct {
	dir string
}

// New opens (creating it if needed) the store in dir.
func New(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("blob store %s: %w", dir, err)
	}
	return &Store{dir: dir}, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// Put stores data and returns its reference. Storing the same data twice
// is harmless.
func (s *Store) Put(data []byte) (string, error) {
	sum := sha256.Sum256(data)
	name := hex.EncodeToString(sum[:])
	path := s.path(name)
	if _, err := os.Stat(path); err == nil {
		return Prefix + name, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("blob store %s: %w", s.dir, err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), name+".tmp-*")
	if err != nil {
		return "", fmt.Errorf("blob store %s: %w", s.dir, err)
	}
	_, werr := f.Write(data)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		_ = os.Remove(f.Name())
		return "", fmt.Errorf("blob store %s: writing %s: %w", s.dir, name, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		_ = os.Remove(f.Name())
		return "", fmt.Errorf("blob store %s: %w", s.dir, err)
	}
	return Prefix + name, nil
}

// Get reads the blob a reference names and checks its hash.
func (s *Store) Get(ref string) ([]byte, error) {
	name, ok := strings.CutPrefix(ref, Prefix)
	if !ok || len(name) != sha256.Size*2 {
		return nil, fmt.Errorf("blob reference %q is not %s<64 hex digits>", ref, Prefix)
	}
	if _, err := hex.DecodeString(name); err != nil {
		return nil, fmt.Errorf("blob reference %q is not %s<64 hex digits>", ref, Prefix)
	}
	b, err := os.ReadFile(s.path(name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("blob %s is not in %s: every worker must share this directory (the worker that stored it wrote it there)", ref, s.dir)
	}
	if err != nil {
		return nil, fmt.Errorf("blob store %s: %w", s.dir, err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != name {
		return nil, fmt.Errorf("blob %s in %s is corrupt (its content no longer matches its hash)", ref, s.dir)
	}
	return b, nil
}

// path spreads blobs over 256 subdirectories.
func (s *Store) path(name string) string {
	return filepath.Join(s.dir, name[:2], name)
}
