//go:build unix

package notebook_test

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/wasm/notes/notebook"
)

// readOnlyEnv hands a child run of TestReadOnlyRoot the directory to
// write into.
const readOnlyEnv = "NOTEBOOK_READ_ONLY_ROOT"

// nobody is the conventional unprivileged user (and group) a root test
// process drops to.
const nobody = 65534

// TestReadOnlyRoot writes into a notes directory the process may not
// write to, and wants the advice to mount it writable. Root writes into
// any directory whatever its mode, so as root (CI runs as root) the check
// runs in a child process, a copy of this test binary, as the user nobody.
func TestReadOnlyRoot(t *testing.T) {
	if root := os.Getenv(readOnlyEnv); root != "" {
		checkReadOnlyRoot(t, root)
		return
	}
	if os.Geteuid() != 0 {
		root := t.TempDir()
		if err := os.Chmod(root, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(root, 0o755) })
		checkReadOnlyRoot(t, root)
		return
	}

	// A directory nobody can reach, holding the notes directory, which
	// nobody cannot write, and a copy of this binary nobody may run (the
	// original sits in the go command's private build directory).
	dir, err := os.MkdirTemp("", "notebook-readonly-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	notes := filepath.Join(dir, "notes")
	if err := os.Mkdir(notes, 0o755); err != nil {
		t.Fatal(err)
	}
	for p, mode := range map[string]os.FileMode{dir: 0o755, notes: 0o555} {
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	exe := filepath.Join(dir, "notebook.test")
	copyExecutable(t, exe)

	cmd := exec.Command(exe, "-test.run=^TestReadOnlyRoot$", "-test.v", "-test.count=1")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), readOnlyEnv+"="+notes)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		testenv.Skipf(t, "root writes into read-only directories, and the check could not run as nobody (uid %d): %v", nobody, err)
	}
	if err != nil || !strings.Contains(string(out), "--- PASS: TestReadOnlyRoot") {
		t.Fatalf("the check as nobody (uid %d) failed: %v\n%s", nobody, err, out)
	}
	if entries, err := os.ReadDir(notes); err != nil || len(entries) != 0 {
		t.Errorf("the read-only directory holds %v (%v), want nothing", entries, err)
	}
}

func checkReadOnlyRoot(t *testing.T, root string) {
	t.Helper()
	_, err := notebook.New(root).Write("todo", "x")
	if err == nil || !strings.Contains(err.Error(), "must be mounted writable (mode: rw)") {
		t.Errorf("write into a read-only root (uid %d): %v, want advice to mount it rw", os.Geteuid(), err)
	}
}

// copyExecutable copies the running test binary to path, executable by
// anyone.
func copyExecutable(t *testing.T, path string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
