// Package notebook is the logic of notes.wasm: short text notes kept as
// <name>.txt files in one directory (in the module, the /notes mount).
// Notebook does the file work against any root so it is tested natively;
// Tools wires it to the native-tool protocol (package guest).
package notebook

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"unicode/utf8"
)

// MaxBytes bounds a note's content. It keeps a note_read result (the
// content twice, as text and structuredContent, JSON-escaped) within the
// output limit the manifest gives it: a capture that failed for size would
// leave before null, and a rollback would then delete the note rather than
// restore it.
const MaxBytes = 256 << 10

// NameRule is how a valid name is described in errors.
const NameRule = "1 to 64 characters of a-z, 0-9, _ and -"

// Notebook keeps notes under Root.
type Notebook struct {
	Root string
}

// New returns the notebook kept in the directory root.
func New(root string) *Notebook { return &Notebook{Root: root} }

// NotFoundError is Read's error for a note that does not exist. It
// matches fs.ErrNotExist.
type NotFoundError struct{ Name string }

func (e *NotFoundError) Error() string { return "note " + e.Name + " does not exist" }

func (e *NotFoundError) Unwrap() error { return fs.ErrNotExist }

// Written is the outcome of Write.
type Written struct {
	Name  string `json:"name"`
	Bytes int    `json:"bytes"`
	// Created is false when the note existed and was replaced.
	Created bool `json:"created"`
}

// Note is a note as Read returns it.
type Note struct {
	Name    string `json:"name"`
	Content string `json:"content"`
}

// Deleted is the outcome of Delete.
type Deleted struct {
	Name string `json:"name"`
	// Deleted is false when there was no such note (nothing to do).
	Deleted bool `json:"deleted"`
}

// Write creates or replaces the note. The content goes to a temporary
// file renamed over the note, so a call cut short (a timeout kills the
// module) leaves the old note or the new one, never half of it.
func (n *Notebook) Write(name, content string) (Written, error) {
	p, err := n.path(name)
	if err != nil {
		return Written{}, err
	}
	if len(content) > MaxBytes {
		return Written{}, fmt.Errorf("content is %d bytes, more than a note holds (%d, 256KiB); split it into several notes", len(content), MaxBytes)
	}
	if !utf8.ValidString(content) {
		return Written{}, fmt.Errorf("content is not UTF-8 text; notes hold text only")
	}
	_, err = os.Lstat(p)
	created := errors.Is(err, fs.ErrNotExist)
	if err != nil && !created {
		return Written{}, n.fsError("writing note "+name, err)
	}
	// Names of temporary files start with "." so they never collide with a
	// note (names have no dots).
	tmp, err := os.CreateTemp(n.Root, "."+name+".*.tmp")
	if err != nil {
		return Written{}, n.fsError("writing note "+name, err)
	}
	_, err = tmp.WriteString(content)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return Written{}, n.fsError("writing note "+name, err)
	}
	return Written{Name: name, Bytes: len(content), Created: created}, nil
}

// Read returns the note, or a *NotFoundError.
func (n *Notebook) Read(name string) (Note, error) {
	p, err := n.path(name)
	if err != nil {
		return Note{}, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return Note{}, &NotFoundError{Name: name}
	}
	if err != nil {
		return Note{}, n.fsError("reading note "+name, err)
	}
	if !utf8.Valid(b) {
		// Only a file changed outside the tool can be; passing it on would
		// replace bytes with U+FFFD silently.
		return Note{}, fmt.Errorf("note %s is not UTF-8 text (%s was changed outside the notes tools); fix or remove the file", name, filepath.Base(p))
	}
	return Note{Name: name, Content: string(b)}, nil
}

// Delete removes the note. A missing note is not an error: deleting is
// idempotent, and Deleted says whether there was anything to delete.
func (n *Notebook) Delete(name string) (Deleted, error) {
	p, err := n.path(name)
	if err != nil {
		return Deleted{}, err
	}
	err = os.Remove(p)
	if errors.Is(err, fs.ErrNotExist) {
		if err := n.checkRoot(); err != nil {
			return Deleted{}, err
		}
		return Deleted{Name: name}, nil
	}
	if err != nil {
		return Deleted{}, n.fsError("deleting note "+name, err)
	}
	return Deleted{Name: name, Deleted: true}, nil
}

// path checks the name and returns the note's file. The name rule is
// what keeps a note inside Root: no separators, no dots, no "..".
func (n *Notebook) path(name string) (string, error) {
	if !validName(name) {
		if name == "" {
			return "", fmt.Errorf("argument name is required: %s", NameRule)
		}
		return "", fmt.Errorf("note name %q is not allowed: use %s (no dots, slashes, spaces or capitals)", name, NameRule)
	}
	if err := n.checkRoot(); err != nil {
		return "", err
	}
	return filepath.Join(n.Root, name+".txt"), nil
}

// validName is [a-z0-9_-]{1,64}, by hand: regexp would add half a
// megabyte to the module.
func validName(name string) bool {
	if len(name) < 1 || len(name) > 64 {
		return false
	}
	for _, c := range []byte(name) {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// checkRoot tells a missing mount from a missing note.
func (n *Notebook) checkRoot() error {
	fi, err := os.Stat(n.Root)
	if err != nil || !fi.IsDir() {
		return fmt.Errorf("the notes directory %s is not there; the manifest must mount one (wasm.mounts: [{host: ..., guest: %s, mode: rw}]) and the host directory must exist", n.Root, n.Root)
	}
	return nil
}

// fsError adds what to do when the mount is read-only. (wazero refuses
// creating a file in a read-only mount with ENOSYS, not EROFS.)
func (n *Notebook) fsError(doing string, err error) error {
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.ENOSYS) {
		return fmt.Errorf("%s: %v; the notes directory %s must be mounted writable (mode: rw) and writable on the host", doing, err, n.Root)
	}
	return fmt.Errorf("%s: %v", doing, err)
}
