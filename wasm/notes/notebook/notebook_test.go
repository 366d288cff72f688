package notebook_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/wasm/notes/notebook"
)

func TestWriteReadDelete(t *testing.T) {
	root := t.TempDir()
	n := notebook.New(root)

	w, err := n.Write("todo", "buy milk")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(notebook.Written{Name: "todo", Bytes: 8, Created: true}, w); diff != "" {
		t.Errorf("first write (-want +got):\n%s", diff)
	}
	w, err = n.Write("todo", "buy oat milk")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(notebook.Written{Name: "todo", Bytes: 12, Created: false}, w); diff != "" {
		t.Errorf("second write (-want +got):\n%s", diff)
	}
	// The note is a plain file, and no temporary file is left beside it.
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "todo.txt" {
		t.Errorf("root holds %v, want only todo.txt", entries)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "todo.txt")); string(b) != "buy oat milk" {
		t.Errorf("todo.txt holds %q", b)
	}

	note, err := n.Read("todo")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(notebook.Note{Name: "todo", Content: "buy oat milk"}, note); diff != "" {
		t.Errorf("read (-want +got):\n%s", diff)
	}

	for i, want := range []notebook.Deleted{{Name: "todo", Deleted: true}, {Name: "todo", Deleted: false}} {
		d, err := n.Delete("todo")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, d); diff != "" {
			t.Errorf("delete %d (-want +got):\n%s", i+1, diff)
		}
	}

	_, err = n.Read("todo")
	var nf *notebook.NotFoundError
	if !errors.As(err, &nf) || !errors.Is(err, fs.ErrNotExist) || err.Error() != "note todo does not exist" {
		t.Errorf("read after delete: %v, want a NotFoundError \"note todo does not exist\"", err)
	}
}

func TestEmptyAndLargestNotes(t *testing.T) {
	n := notebook.New(t.TempDir())
	for _, content := range []string{"", strings.Repeat("x", notebook.MaxBytes)} {
		if _, err := n.Write("n", content); err != nil {
			t.Fatalf("writing %d bytes: %v", len(content), err)
		}
		note, err := n.Read("n")
		if err != nil || note.Content != content {
			t.Errorf("read back %d bytes, err %v; want %d", len(note.Content), err, len(content))
		}
	}
}

func TestErrors(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "binary.txt"), []byte{0xff, 0xfe}, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(root, "missing")
	for _, tt := range []struct {
		name string
		do   func(n *notebook.Notebook) error
		root string
		want string
	}{
		{
			name: "name with a dot",
			do:   func(n *notebook.Notebook) error { _, err := n.Write("../etc/passwd", "x"); return err },
			want: `note name "../etc/passwd" is not allowed: use 1 to 64 characters of a-z, 0-9, _ and - (no dots, slashes, spaces or capitals)`,
		},
		{
			name: "capitals",
			do:   func(n *notebook.Notebook) error { _, err := n.Read("Todo"); return err },
			want: `note name "Todo" is not allowed: use 1 to 64 characters of a-z, 0-9, _ and - (no dots, slashes, spaces or capitals)`,
		},
		{
			name: "too long",
			do:   func(n *notebook.Notebook) error { _, err := n.Delete(strings.Repeat("a", 65)); return err },
			want: `note name "` + strings.Repeat("a", 65) + `" is not allowed: use 1 to 64 characters of a-z, 0-9, _ and - (no dots, slashes, spaces or capitals)`,
		},
		{
			name: "empty name",
			do:   func(n *notebook.Notebook) error { _, err := n.Read(""); return err },
			want: "argument name is required: 1 to 64 characters of a-z, 0-9, _ and -",
		},
		{
			name: "too large",
			do: func(n *notebook.Notebook) error {
				_, err := n.Write("big", strings.Repeat("x", notebook.MaxBytes+1))
				return err
			},
			want: "content is 262145 bytes, more than a note holds (262144, 256KiB); split it into several notes",
		},
		{
			name: "not UTF-8 on disk",
			do:   func(n *notebook.Notebook) error { _, err := n.Read("binary"); return err },
			want: "note binary is not UTF-8 text (binary.txt was changed outside the notes tools); fix or remove the file",
		},
		{
			name: "no mount, read",
			root: missing,
			do:   func(n *notebook.Notebook) error { _, err := n.Read("todo"); return err },
			want: "the notes directory " + missing + " is not there; the manifest must mount one (wasm.mounts: [{host: ..., guest: " + missing + ", mode: rw}]) and the host directory must exist",
		},
		{
			name: "no mount, delete",
			root: missing,
			do:   func(n *notebook.Notebook) error { _, err := n.Delete("todo"); return err },
			want: "the notes directory " + missing + " is not there; the manifest must mount one (wasm.mounts: [{host: ..., guest: " + missing + ", mode: rw}]) and the host directory must exist",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := root
			if tt.root != "" {
				r = tt.root
			}
			err := tt.do(notebook.New(r))
			if err == nil {
				t.Fatal("no error")
			}
			if diff := cmp.Diff(tt.want, err.Error()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
