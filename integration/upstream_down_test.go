package integration

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/internal/upstream"
	"github.com/airlock-run/airlock/manifests"
)

// pidsWithArg returns the processes whose command line contains arg.
func pidsWithArg(t *testing.T, arg string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		testenv.Skipf(t, "no /proc to find the server's process in: %v", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), arg) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestUpstreamKilledMidTask kills the real npm memory server in the middle
// of a task and keeps it from coming back: calls fail with a clear,
// bounded isError result (never a hung call) while the filesystem upstream
// keeps working; once the server can start again the pool reconnects and
// the same task carries on with the data the server persisted.
func TestUpstreamKilledMidTask(t *testing.T) {
	t.Parallel()
	testenv.RequireNode(t)
	server := testenv.NPMServer(t, "server-memory")
	dir := t.TempDir()
	// The memory server is started through a symlink we can remove to keep
	// it down (node resolves the real path for its imports).
	link := filepath.Join(dir, "memory-server-under-test.js")
	if err := os.Symlink(server, link); err != nil {
		t.Fatal(err)
	}
	mem := loadExample(t, "memory.yaml", "server-memory", nil, map[string]string{"MEMORY_FILE_PATH": filepath.Join(dir, "memory.jsonl")})
	mem.Server.Stdio.Args = []string{link}
	for _, tool := range mem.Tools {
		tool.Retry = &manifests.Retry{MaxAttempts: 2, InitialInterval: manifests.Duration(200 * time.Millisecond)}
	}
	sandbox := t.TempDir()
	fsm := loadExample(t, "filesystem.yaml", "server-filesystem", []string{sandbox}, nil)
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{mem, fsm}})
	cs := s.connect(t, nil)
	waitTools(t, cs, "memory__create_entities", "memory__open_nodes", "filesystem__list_directory")

	res := call(t, cs, "memory__create_entities", map[string]any{"entities": []any{
		map[string]any{"name": "incident-42", "entityType": "incident", "observations": []string{"paged"}},
	}}, "")
	if res.IsError {
		t.Fatalf("create_entities: %s", text(res))
	}
	task := res.Meta["airlock.dev/task"]

	// Kill it and keep it down.
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	pids := pidsWithArg(t, link)
	if len(pids) == 0 {
		t.Fatal("memory server process not found")
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	waitFor(t, "the pool to notice the upstream is gone", 30*time.Second, func() bool {
		return s.pool.Status("memory").State != upstream.StateConnected
	})

	start := time.Now()
	res = call(t, cs, "memory__open_nodes", map[string]any{"names": []string{"incident-42"}}, "")
	took := time.Since(start)
	if !res.IsError || !strings.Contains(text(res), "did not run") || !strings.Contains(text(res), `"memory"`) {
		t.Fatalf("call while the upstream is down: isError=%v %q", res.IsError, text(res))
	}
	if took > 60*time.Second {
		t.Fatalf("call while the upstream is down took %s", took)
	}
	t.Logf("down: answered in %s: %s", took.Round(time.Millisecond), text(res))
	if res.Meta["airlock.dev/task"] != task {
		t.Fatalf("call ran in task %v, want %v", res.Meta["airlock.dev/task"], task)
	}
	// The other upstream is unaffected.
	if res := call(t, cs, "filesystem__list_directory", map[string]any{"path": sandbox}, ""); res.IsError {
		t.Fatalf("filesystem while memory is down: %s", text(res))
	}

	// Bring it back: the pool reconnects, the task carries on.
	if err := os.Symlink(server, link); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pool to reconnect", 60*time.Second, func() bool {
		return s.pool.Status("memory").State == upstream.StateConnected
	})
	res = call(t, cs, "memory__open_nodes", map[string]any{"names": []string{"incident-42"}}, "")
	if res.IsError || !strings.Contains(text(res), "paged") {
		t.Fatalf("after recovery: isError=%v %s", res.IsError, text(res))
	}
	if res.Meta["airlock.dev/task"] != task {
		t.Fatalf("recovered call ran in task %v, want %v", res.Meta["airlock.dev/task"], task)
	}
}
