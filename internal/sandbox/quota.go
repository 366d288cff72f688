package sandbox

import (
	"fmt"
	"io/fs"
	"os"
	"sync"

	"github.com/tetratelabs/wazero/sys"
)

// callState is what the file systems of one call share: how many files
// the guest has open, and the first limit it hit, which stops the call.
//
// The guest's single thread makes most calls, but wazero may close files
// from another goroutine (Sandbox.Close), hence the lock.
type callState struct {
	mu      sync.Mutex
	maxOpen int
	open    int
	hit     error
	stop    func() // cancels the call; set before the guest starts
}

// acquire counts one more open file, or records ErrOpenFiles and reports
// false when the guest already has its limit open.
func (c *callState) acquire() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open >= c.maxOpen {
		c.failLocked(fmt.Errorf("%w: %d files open at once", ErrOpenFiles, c.maxOpen))
		return false
	}
	c.open++
	return true
}

func (c *callState) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open--
}

// fail records err as the limit the call hit (the first one counts) and
// stops the guest. The operation that hit it fails too: stopping takes
// effect at the guest's next function call or loop, and a guest that
// ignored the error could otherwise keep trying until its timeout.
func (c *callState) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failLocked(err)
}

func (c *callState) failLocked(err error) {
	if c.hit == nil {
		c.hit = err
	}
	if c.stop != nil {
		c.stop()
	}
}

func (c *callState) limitHit() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hit
}

// quota is the usage of one read-write host directory, shared by the calls
// that mount it at the same time so that together they stay within it.
// It is counted by walking the directory when the first of them starts,
// and kept up to date by every change they make through rootFS (which
// holds mu across the change and its accounting); changes made on the host
// meanwhile are seen by the next walk.
type quota struct {
	key  string
	refs int // guarded by Sandbox.mu

	mu    sync.Mutex
	bytes int64 // regular files' sizes, a file with several links once
	files int64 // entries below the directory
	// walked is how many entries the walk was allowed to count; full
	// means it stopped there, so the directory holds more than any limit
	// up to walked-1 and files is only a lower bound.
	walked int64
	full   bool
}

// acquireQuota returns the usage of a read-write mount's directory,
// counting it if no other call has it mounted. The walk stops one entry
// past maxFiles: a directory that holds more is over its quota whatever
// the rest holds, and a guest cannot make the walk of the next call
// arbitrarily long.
func (s *Sandbox) acquireQuota(root *os.Root, fi os.FileInfo, maxFiles int64) *quota {
	st := sys.NewStat_t(fi)
	key := fmt.Sprintf("%d:%d", st.Dev, st.Ino)
	if st.Ino == 0 { // no inode numbers on this OS
		key = root.Name()
	}
	s.mu.Lock()
	q, ok := s.quotas[key]
	if !ok {
		q = &quota{key: key}
		s.quotas[key] = q
	}
	q.refs++
	s.mu.Unlock()

	q.mu.Lock()
	defer q.mu.Unlock()
	if q.walked == 0 || q.full && q.walked <= maxFiles {
		q.walk(root, maxFiles+1)
	}
	return q
}

func (s *Sandbox) releaseQuota(q *quota) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q.refs--; q.refs == 0 && s.quotas[q.key] == q {
		delete(s.quotas, q.key)
	}
}

// walk counts what the directory holds, at most bound entries. Entries it
// cannot read are skipped: the guest cannot read them either.
func (q *quota) walk(root *os.Root, bound int64) {
	q.bytes, q.files, q.walked, q.full = 0, 0, bound, false
	seen := map[[2]uint64]bool{}
	_ = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "." {
			return nil
		}
		if q.files++; q.files >= bound {
			q.full = true
			return fs.SkipAll
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		st := sys.NewStat_t(fi)
		if st.Nlink > 1 {
			id := [2]uint64{st.Dev, st.Ino}
			if seen[id] {
				return nil
			}
			seen[id] = true
		}
		q.bytes += st.Size
		return nil
	})
}

// addFile makes room for one more entry, or reports false if the mount's
// limit does not allow it. Callers hold q.mu.
func (q *quota) addFile(max int64) bool {
	if q.full || q.files+1 > max {
		return false
	}
	q.files++
	return true
}

// removeFile accounts for an entry removed: its bytes when it was the
// last link of a regular file. Callers hold q.mu.
func (q *quota) removeFile(st sys.Stat_t) {
	q.files = max(q.files-1, 0)
	if st.Mode.IsRegular() && st.Nlink <= 1 {
		q.bytes = max(q.bytes-st.Size, 0)
	}
}

// grow makes room for n more bytes (n may be negative), or reports false
// if the mount's limit does not allow it. A directory found over its
// entry limit takes no more bytes either: its byte count is incomplete.
// Callers hold q.mu.
func (q *quota) grow(n, max int64) bool {
	if n > 0 && (q.full || q.bytes+n > max) {
		return false
	}
	q.adjust(n)
	return true
}

// adjust counts n more bytes (or fewer), never below zero. Callers hold
// q.mu.
func (q *quota) adjust(n int64) {
	q.bytes = max(q.bytes+n, 0)
}
