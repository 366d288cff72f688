package sandbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/testenv"
)

// pooled is a Sandbox of its own with warm instances per shape, and the
// guest loaded in it.
func pooled(t *testing.T, warm int) (*Sandbox, *Module) {
	t.Helper()
	ctx := context.Background()
	s, err := New(ctx, Options{CacheDir: sharedCache, Warm: warm})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(ctx) })
	m, err := s.Load(ctx, guestWasm, guestSHA256)
	if err != nil {
		t.Fatal(err)
	}
	return s, m
}

// waitReady waits until the sandbox's pools hold n parked instances.
func waitReady(t *testing.T, s *Sandbox, n int) {
	t.Helper()
	testenv.WaitFor(t, fmt.Sprintf("%d warm instances", n), 60*time.Second, func() bool { return s.Stats().Ready >= n })
}

// TestWarmInstancesStartFresh: calls served by warm instances never see
// what an earlier call left in its instance — a package variable, an
// environment variable, an open descriptor — only the mount's files,
// which are the tool's to keep; each gets its own stdin.
func TestWarmInstancesStartFresh(t *testing.T) {
	ctx := context.Background()
	s, m := pooled(t, 2)
	dir := t.TempDir()
	call := func(i int) string {
		r, err := m.Run(ctx, Call{Args: []string{"leave", "/data"}, Stdin: fmt.Appendf(nil, "call-%d", i),
			Mounts: []Mount{{HostDir: dir, GuestPath: "/data"}}})
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("call %d: %v, exit %d, stderr %q", i, err, r.ExitCode, r.Stderr)
		}
		return string(r.Stdout)
	}
	call(0) // cold; makes the pool
	for i := 1; i <= 4; i++ {
		waitReady(t, s, 2)
		warm := s.Stats().WarmCalls
		// Descriptors 3 and 4 are the preopens (/data and /).
		want := fmt.Sprintf("stdin=call-%d calls=1 env=\"\" open=2\n", i)
		if got := call(i); got != want {
			t.Errorf("call %d: %q, want %q", i, got, want)
		}
		if s.Stats().WarmCalls != warm+1 {
			t.Errorf("call %d did not take a warm instance: %+v", i, s.Stats())
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "left"))
	if err != nil || string(b) != "call-0\ncall-1\ncall-2\ncall-3\ncall-4\n" {
		t.Errorf("the mount holds %q, %v: want every call's line", b, err)
	}
}

// statefulModule assembles a WASI command whose _start prints its mutable
// global and a byte of its memory as digits, then increments both: a
// reused instance would print "11".
func statefulModule() []byte {
	uleb := func(v uint64) []byte { return appendULEB(nil, v) }
	section := func(id byte, body ...[]byte) []byte {
		joined := bytes.Join(body, nil)
		return append(append([]byte{id}, uleb(uint64(len(joined)))...), joined...)
	}
	name := func(s string) []byte { return append(uleb(uint64(len(s))), s...) }
	i32 := func(v byte) []byte { return []byte{0x41, v} } // small non-negative constants only
	store8, load8 := []byte{0x3a, 0, 0}, []byte{0x2d, 0, 0}
	store := []byte{0x36, 2, 0}
	add := []byte{0x6a}
	var code []byte
	for _, op := range [][]byte{
		i32(16), i32('0'), {0x23, 0}, add, store8, // mem[16] = '0'+g
		i32(17), i32('0'), i32(60), load8, add, store8, // mem[17] = '0'+mem[60]
		i32(18), i32('\n'), store8,
		i32(0), i32(16), store, i32(4), i32(3), store, // iovec {16, 3} at 0
		i32(1), i32(0), i32(1), i32(8), {0x10, 0}, {0x1a}, // fd_write(1, 0, 1, 8); drop
		{0x23, 0}, i32(1), add, {0x24, 0}, // g++
		i32(60), i32(60), load8, i32(1), add, store8, // mem[60]++
		{0x0b},
	} {
		code = append(code, op...)
	}
	body := append([]byte{0}, code...)
	return bytes.Join([][]byte{
		{0, 'a', 's', 'm', 1, 0, 0, 0},
		section(1, uleb(2), []byte{0x60, 4, 0x7f, 0x7f, 0x7f, 0x7f, 1, 0x7f}, []byte{0x60, 0, 0}),
		section(2, uleb(1), name("wasi_snapshot_preview1"), name("fd_write"), []byte{0, 0}),
		section(3, uleb(1), uleb(1)),
		section(5, uleb(1), []byte{0}, uleb(1)),
		section(6, uleb(1), []byte{0x7f, 1, 0x41, 0, 0x0b}), // mutable i32 = 0
		section(7, uleb(2), name("_start"), []byte{0, 1}, name("memory"), []byte{2, 0}),
		section(10, uleb(1), uleb(uint64(len(body))), body),
	}, nil)
}

func appendULEB(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

// TestWarmInstancesFreshGlobals: a module's globals and memory are its
// instance's own: every call, warm or not, starts from the module's
// initial values.
func TestWarmInstancesFreshGlobals(t *testing.T) {
	ctx := context.Background()
	s, err := New(ctx, Options{Warm: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	b := statefulModule()
	p := filepath.Join(t.TempDir(), "stateful.wasm")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	m, err := s.Load(ctx, p, hex.EncodeToString(sum[:]))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if i > 0 {
			waitReady(t, s, 2)
		}
		r, err := m.Run(ctx, Call{})
		if err != nil || string(r.Stdout) != "00\n" {
			t.Errorf("call %d: %q, %v; want 00 (the global and memory as the module defines them)", i, r.Stdout, err)
		}
	}
	if st := s.Stats(); st.WarmCalls != 4 || st.ColdCalls != 1 {
		t.Errorf("stats %+v: want 1 cold call, then 4 warm", st)
	}
}

// TestPoolBurst: a burst of calls far past the pool's size is answered in
// full, each call with its own input's result; the calls past the pool
// start their own instances.
func TestPoolBurst(t *testing.T) {
	ctx := context.Background()
	s, m := pooled(t, 2)
	upper := func(text string) Call {
		return Call{Args: []string{"upper"}, Stdin: fmt.Appendf(nil, `{"text":%q}`, text)}
	}
	if _, err := m.Run(ctx, upper("first")); err != nil {
		t.Fatal(err)
	}
	waitReady(t, s, 2)
	const n = 24
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			text := fmt.Sprintf("burst call %d", i)
			r, err := m.Run(ctx, upper(text))
			want := fmt.Sprintf(`{"content":[{"type":"text","text":%q}]}`+"\n", strings.ToUpper(text))
			if err != nil || string(r.Stdout) != want {
				t.Errorf("call %d: %q, %v; want %q", i, r.Stdout, err, want)
			}
		})
	}
	wg.Wait()
	st := s.Stats()
	if st.WarmCalls+st.ColdCalls != n+1 || st.WarmCalls < 2 || st.ColdCalls < 1 {
		t.Errorf("stats %+v: want %d calls, at least the 2 warm ones taken and the rest cold", st, n+1)
	}
}

// TestCloseReleasesPool: Close stops and releases every warm instance and
// filler before it returns, and later calls fail with ErrClosed.
func TestCloseReleasesPool(t *testing.T) {
	ctx := context.Background()
	s, err := New(ctx, Options{CacheDir: sharedCache, Warm: 3})
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.Load(ctx, guestWasm, guestSHA256)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"echo", "upper"} { // two shapes, two pools; both park (read stdin)
		if _, err := m.Run(ctx, Call{Args: []string{mode}, Stdin: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	waitReady(t, s, 6)
	if st := s.Stats(); st.Pools != 2 || st.Instances < 6 {
		t.Fatalf("stats %+v: want 2 pools holding 6 instances", st)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Instances != 0 || st.Pools != 0 || st.Ready != 0 {
		t.Errorf("after Close: %+v, want no instance left", st)
	}
	if _, err := m.Run(ctx, Call{Args: []string{"echo"}}); err == nil || !strings.Contains(err.Error(), ErrClosed.Error()) {
		t.Errorf("Run after Close: %v, want ErrClosed", err)
	}
}

// TestWarmInstanceSeesMountAsItIs: a warm instance started before its
// mount's directory was replaced reads the new directory: mounts are
// opened when the call starts.
func TestWarmInstanceSeesMountAsItIs(t *testing.T) {
	ctx := context.Background()
	s, m := pooled(t, 1)
	base := t.TempDir()
	dir := filepath.Join(base, "data")
	write := func(content string) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "f.txt"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	call := Call{Args: []string{"cat", "/data/f.txt"}, Mounts: []Mount{{HostDir: dir, GuestPath: "/data", ReadOnly: true}}}
	write("old")
	if r, err := m.Run(ctx, call); err != nil || string(r.Stdout) != "old" {
		t.Fatalf("first call: %q, %v", r.Stdout, err)
	}
	waitReady(t, s, 1)
	if err := os.Rename(dir, filepath.Join(base, "moved")); err != nil {
		t.Fatal(err)
	}
	write("new")
	if r, err := m.Run(ctx, call); err != nil || string(r.Stdout) != "new" {
		t.Errorf("after the directory was replaced: %q, %v; want the new one's file", r.Stdout, err)
	}
	waitReady(t, s, 1)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Run(ctx, call); err == nil || !strings.Contains(err.Error(), "mount host dir "+dir) {
		t.Errorf("after the directory was removed: %v, want an error naming it", err)
	}
}

// TestPoolSkipsHoarders: a guest that fills its memory before its first
// use of the call (a memory bomb) is not kept warm, so an idle pool never
// holds a tool's whole memory limit; its calls still fail as they should.
func TestPoolSkipsHoarders(t *testing.T) {
	ctx := context.Background()
	s, m := pooled(t, 2)
	hog := func(i int) {
		_, err := m.Run(ctx, Call{Args: []string{"hog"}, Limits: Limits{Timeout: DefaultTimeout * slowdown}})
		if err == nil || !strings.Contains(err.Error(), ErrMemoryLimit.Error()) {
			t.Errorf("call %d: %v, want %v", i, err, ErrMemoryLimit)
		}
	}
	hog(0) // cold; makes the pool, whose filler starts one
	// It parks holding its 64 MiB, and the filler gives up on it.
	testenv.WaitFor(t, "the hog's filler to stop", 60*time.Second, func() bool { return s.Stats().Instances == 0 })
	hog(1)
	hog(2)
	if st := s.Stats(); st.Ready != 0 || st.WarmCalls != 0 {
		t.Errorf("stats %+v: want no warm hog", st)
	}
	// Their memory is unmapped just after their results.
	testenv.WaitFor(t, "the hogs to be released", 60*time.Second, func() bool { return s.Stats().Instances == 0 })
}
