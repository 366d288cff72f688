//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package testenv

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestLockFileExcludes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	// tryLock takes the lock through its own open file, as another
	// process would, without waiting.
	tryLock := func() error {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	unlock, err := lockFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := tryLock(); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Errorf("while held: %v, want EWOULDBLOCK", err)
	}
	unlock()
	if err := tryLock(); err != nil {
		t.Errorf("after release: %v", err)
	}
}
