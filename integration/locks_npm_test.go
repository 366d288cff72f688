package integration

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/manifests"
)

// TestLocksOnNPMFilesystem runs resource locks on the npm reference
// filesystem server: its write_file declared with
// locks: ['"file:" + args.path'] (and the example's capture and
// compensation). A holds the lock of one file, stuck in its capture: the
// file is a named pipe, so the server's read_text_file blocks until the
// test writes to it. B, writing the same file, waits behind A; C, writing
// another file, runs and ends meanwhile. Once A's capture is let go, A
// writes and releases, then B captures and writes: by their histories'
// event order, A's capture→write and B's never interleave.
func TestLocksOnNPMFilesystem(t *testing.T) {
	t.Parallel()
	sandbox, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	trash, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fsm := loadExample(t, "filesystem.yaml", "server-filesystem", []string{sandbox, trash}, nil)
	fsm.Tools["write_file"].Locks = []manifests.Lock{{Key: `"file:" + args.path`}}
	if ps := fsm.Validate(); len(ps) > 0 {
		t.Fatalf("the manifest with locks: %v", ps)
	}
	shared := filepath.Join(sandbox, "shared.txt")
	if err := syscall.Mkfifo(shared, 0o600); err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{fsm}})
	// Should the test fail while the server reads the pipe, end its read
	// (EOF) so that the stack can stop (cleanups run last
	// first: this one before the stack's).
	t.Cleanup(func() {
		if f, err := os.OpenFile(shared, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = f.Close()
		}
	})
	ctx := context.Background()
	csA, csB, csC := s.connect(t, nil), s.connect(t, nil), s.connect(t, nil)
	waitTools(t, csA, "filesystem__write_file")
	taskA, taskB := fsTaskOf(t, csA), fsTaskOf(t, csB)
	key := "file:" + shared

	a := lockCall(ctx, csA, "filesystem__write_file", map[string]any{"path": shared, "content": "from A\n"})
	waitFor(t, "A to hold "+key, 30*time.Second, func() bool {
		_, ok := hasLock(lockStatus(t, s.client, taskA), api.LockHeld, key)
		return ok
	})
	b := lockCall(ctx, csB, "filesystem__write_file", map[string]any{"path": shared, "content": "from B\n"})
	waitFor(t, "B to wait for "+key+" behind A", 30*time.Second, func() bool {
		l, ok := hasLock(lockStatus(t, s.client, taskB), api.LockWaiting, key)
		return ok && len(l.Holders) == 1 && l.Holders[0].TaskID == taskA
	})
	// C, on another file, is not held up by A's lock.
	if res := call(t, csC, "filesystem__write_file", map[string]any{"path": filepath.Join(sandbox, "other.txt"), "content": "from C\n"}, ""); res.IsError {
		t.Fatalf("C: %s", text(res))
	}
	if !notDone(a) || !notDone(b) {
		t.Fatal("A or B ended before C: C did not run while A held its lock")
	}

	// Let A's capture go: it reads "before A" from the pipe.
	pipe, err := os.OpenFile(shared, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pipe.WriteString("before A\n"); err != nil {
		t.Fatal(err)
	}
	if err := pipe.Close(); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]<-chan asyncResult{"A": a, "B": b} {
		if res := awaitCall(t, name, ch); res.IsError {
			t.Fatalf("%s: %s", name, text(res))
		}
	}
	spA, spB := spanOf(t, s.client, taskA, "write_file"), spanOf(t, s.client, taskB, "write_file")
	if !spA.lastCompleted.After(spA.firstScheduled) || spB.firstScheduled.Before(spA.released) || spB.firstScheduled.Before(spA.lastCompleted) {
		t.Errorf("capture→write of A and B interleave: A %+v, B %+v", spA, spB)
	}
	if got, err := os.ReadFile(shared); err != nil || string(got) != "from B\n" {
		t.Errorf("%s holds %q (%v), want B's write, the last", shared, got, err)
	}
	if got, err := os.ReadFile(filepath.Join(sandbox, "other.txt")); err != nil || string(got) != "from C\n" {
		t.Errorf("other.txt holds %q (%v), want C's write", got, err)
	}
}

// fsTaskOf is the task a session's calls run in, from a harmless call of
// the filesystem server.
func fsTaskOf(t *testing.T, cs *mcp.ClientSession) string {
	t.Helper()
	res := call(t, cs, "filesystem__list_allowed_directories", map[string]any{}, "")
	id, _ := res.Meta[gateway.MetaTask].(string)
	if id == "" {
		t.Fatalf("no task in %v", res.Meta)
	}
	return id
}
