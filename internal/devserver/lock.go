package devserver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrLocked reports that another process (or another Server in this process)
// holds the data directory.
var ErrLocked = errors.New("data dir is locked")

const lockFileName = "airlock.lock"

// dirLock is an exclusive flock(2) on a file in the data directory. SQLite's
// own locking would let two servers open the same database and corrupt each
// other's view of shard ownership; the flock makes the second one fail fast.
// The kernel drops the lock when the process dies, so kill -9 leaves nothing
// to clean up.
type dirLock struct {
	f *os.File
}

func lockDir(dir string) (*dirLock, error) {
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := readHolder(f)
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data dir %s: another airlock%s is using it: %w", dir, holder, ErrLocked)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// The PID is only a hint for the error message above; the flock is what
	// counts, so a failure to record it is not fatal.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &dirLock{f: f}, nil
}

func readHolder(f *os.File) string {
	buf := make([]byte, 32)
	n, _ := f.ReadAt(buf, 0)
	pid := strings.TrimSpace(string(buf[:n]))
	if _, err := strconv.Atoi(pid); err != nil {
		return ""
	}
	return " (pid " + pid + ")"
}

func (l *dirLock) release() error {
	// Closing the descriptor releases the flock. The file stays: removing it
	// would race with a process that has just opened it and is about to lock.
	if err := l.f.Close(); err != nil {
		return fmt.Errorf("release data dir lock: %w", err)
	}
	return nil
}
