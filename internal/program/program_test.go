package program

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/wasm/program/wire"
)

// cacheDir is the tests' compilation cache (testenv.WazeroCache).
var cacheDir string

func TestMain(m *testing.M) {
	dir, err := testenv.WazeroCache()
	if err != nil {
		fmt.Fprintln(os.Stderr, "wazero cache:", err)
		os.Exit(1)
	}
	cacheDir = dir
	os.Exit(m.Run())
}

var (
	guestOnce  sync.Once
	guestBytes []byte
	guestErr   error
)

// testGuest builds testdata/guest for wasip1 (once per test binary).
func testGuest(t testing.TB) []byte {
	t.Helper()
	guestOnce.Do(func() {
		dir, err := os.MkdirTemp("", "program-guest")
		if err != nil {
			guestErr = err
			return
		}
		defer os.RemoveAll(dir)
		out := filepath.Join(dir, "guest.wasm")
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-trimpath", "-o", out, "./testdata/guest")
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0", "GOFLAGS=")
		if msg, err := cmd.CombinedOutput(); err != nil {
			guestErr = fmt.Errorf("build testdata/guest: %v\n%s", err, msg)
			return
		}
		guestBytes, guestErr = os.ReadFile(out)
	})
	if guestErr != nil {
		t.Fatal(guestErr)
	}
	return guestBytes
}

// newRuntime is a ready Runtime of module, closed with the test.
func newRuntime(t testing.TB, module []byte) *Runtime {
	t.Helper()
	ctx := context.Background()
	r, err := New(ctx, Options{CacheDir: cacheDir, Module: module})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	if err := r.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	return r
}

// goid is the calling goroutine's ID, from its stack header.
func goid() int {
	var buf [64]byte
	s := strings.TrimPrefix(string(buf[:runtime.Stack(buf[:], false)]), "goroutine ")
	id, _ := strconv.Atoi(s[:strings.IndexByte(s, ' ')])
	return id
}

// fakeHost answers each call with {"echo": ID}, in start order, and
// notes any Start or Wait made on another goroutine than Run's.
type fakeHost struct {
	t       testing.TB
	runG    int
	started []wire.GuestMessage
	queue   []int
	waits   int
	block   chan struct{} // when set, Wait blocks until it is closed
	waiting chan struct{} // when set, closed as Wait first blocks
}

func (h *fakeHost) check(what string) {
	if g := goid(); g != h.runG {
		h.t.Errorf("%s called on goroutine %d, not Run's %d", what, g, h.runG)
	}
}

func (h *fakeHost) Start(m wire.GuestMessage) {
	h.check("Start")
	h.started = append(h.started, m)
	h.queue = append(h.queue, m.ID)
}

func (h *fakeHost) Wait() wire.Reply {
	h.check("Wait")
	h.waits++
	if h.block != nil {
		if h.waiting != nil {
			close(h.waiting)
			h.waiting = nil
		}
		<-h.block
	}
	if len(h.queue) == 0 {
		h.t.Fatal("Wait with no call started")
	}
	id := h.queue[0]
	h.queue = h.queue[1:]
	return wire.Reply{ID: id, Outcome: "ok", Result: json.RawMessage(fmt.Sprintf(`{"echo":%d}`, id))}
}

// run runs source on r with a fresh fakeHost on this goroutine.
func run(t testing.TB, r *Runtime, source string, memoryBytes int64) (wire.Done, *fakeHost) {
	t.Helper()
	h := &fakeHost{t: t, runG: goid()}
	d, err := r.Run(context.Background(), wire.Request{ProgramID: "p1", Source: source}, memoryBytes, h)
	if err != nil {
		t.Fatalf("Run(%q): %v", source, err)
	}
	return d, h
}

func TestCalls(t *testing.T) {
	r := newRuntime(t, testGuest(t))
	for _, tc := range []struct {
		source string
		calls  int
	}{
		{"calls 3", 3},
		{"parallel 5", 5},
		{"tinybuf", 1}, // every message first refused for a 1-byte buffer
		{"calls 0", 0},
	} {
		t.Run(tc.source, func(t *testing.T) {
			d, h := run(t, r, tc.source, 0)
			if d.Outcome != wire.OutcomeOK {
				t.Fatalf("Done = %+v", d)
			}
			var replies []wire.Reply
			if err := json.Unmarshal(d.Result, &replies); err != nil {
				t.Fatal(err)
			}
			if len(h.started) != tc.calls || h.waits != tc.calls || len(replies) != tc.calls {
				t.Fatalf("%d starts, %d waits, %d replies; want %d each", len(h.started), h.waits, len(replies), tc.calls)
			}
			for i, m := range h.started {
				if m.Op != wire.OpStart || m.ID != i+1 || m.Tool != "t" || string(m.Args) != fmt.Sprintf(`{"i":%d}`, i+1) || m.Line != i+1 {
					t.Errorf("start %d = %+v", i+1, m)
				}
				if rep := replies[i]; rep.ID != i+1 || string(rep.Result) != fmt.Sprintf(`{"echo":%d}`, i+1) {
					t.Errorf("reply %d as the guest saw it = %+v", i+1, rep)
				}
			}
		})
	}
}

// TestRequestReachesGuest checks that the guest reads the whole Request,
// however large (past its first 4 KiB buffer).
func TestRequestReachesGuest(t *testing.T) {
	r := newRuntime(t, testGuest(t))
	src := "calls 2 " + strings.Repeat("x", 1<<20)
	d, h := run(t, r, src, 0)
	if d.Outcome != wire.OutcomeOK || len(h.started) != 2 {
		t.Fatalf("Done = %+v after %d starts", d, len(h.started))
	}
}

func TestEnvironmentIsFixed(t *testing.T) {
	r := newRuntime(t, testGuest(t))
	d1, _ := run(t, r, "env", 0)
	d2, _ := run(t, r, "env", 0)
	if d1.Outcome != wire.OutcomeOK || !bytes.Equal(d1.Result, d2.Result) {
		t.Fatalf("two runs saw different environments:\n%s\n%s", d1.Result, d2.Result)
	}
	var env struct {
		Args    []string
		Env     []string
		Now     int64
		Elapsed int64
		Dir     bool
		File    bool
	}
	if err := json.Unmarshal(d1.Result, &env); err != nil {
		t.Fatal(err)
	}
	if len(env.Args) != 1 || env.Args[0] != guestName || len(env.Env) != 0 || !env.Dir || !env.File {
		t.Errorf("the guest saw args %q, env %q, a readable / %v, /etc/passwd %v; want only its name, nothing, and no files", env.Args, env.Env, !env.Dir, !env.File)
	}
	if now := time.Unix(0, env.Now).UTC(); now.Year() != 2000 || env.Elapsed <= 0 || env.Elapsed > 100*clockStep {
		t.Errorf("the guest's clock said %v and %d ns passed between two reads; want the fixed epoch and a few fixed steps", now, env.Elapsed)
	}
}

func TestMemoryLimit(t *testing.T) {
	r := newRuntime(t, testGuest(t))
	want := wire.Done{Outcome: wire.OutcomeLimit, Error: "the program used more than its 64 MiB of memory; work on less data at a time"}
	for i := range 2 {
		if d, _ := run(t, r, "alloc 100", 64<<20); !equalDone(d, want) {
			t.Fatalf("run %d: Done = %+v, want %+v", i+1, d, want)
		}
	}
	if d, _ := run(t, r, "alloc 100", 0); !equalDone(d, want) {
		t.Errorf("the default cap: Done = %+v, want %+v", d, want)
	}
	// The same program fits a larger cap, and a cap not in pages is
	// rounded up.
	if d, _ := run(t, r, "alloc 100", 512<<20); d.Outcome != wire.OutcomeOK || string(d.Result) != "100" {
		t.Errorf("512 MiB: Done = %+v", d)
	}
	want.Error = "the program used more than its 33619968 bytes of memory; work on less data at a time"
	if d, _ := run(t, r, "alloc 100", 32<<20+1); !equalDone(d, want) {
		t.Errorf("a cap of 32 MiB + 1 byte: Done = %+v, want %+v", d, want)
	}
	if d, _ := run(t, r, "alloc 1", 64<<10); d.Outcome != wire.OutcomeLimit || !strings.Contains(d.Error, "below the") {
		t.Errorf("a 64 KiB cap: Done = %+v; want a limit naming the interpreter's initial memory", d)
	}
	for _, bad := range []int64{-1, 4<<30 + 1} {
		if _, err := r.Run(context.Background(), wire.Request{Source: "calls 0"}, bad, &fakeHost{t: t, runG: goid()}); err == nil {
			t.Errorf("memoryBytes %d: no error", bad)
		}
	}
}

func equalDone(a, b wire.Done) bool {
	return a.Outcome == b.Outcome && bytes.Equal(a.Result, b.Result) && a.Output == b.Output &&
		a.Error == b.Error && a.Line == b.Line && a.Steps == b.Steps
}

// TestGuestDeaths runs guests that die or break the protocol: each is an
// error Done, the same twice, naming no address.
func TestGuestDeaths(t *testing.T) {
	r := newRuntime(t, testGuest(t))
	for source, want := range map[string]string{
		"exit 3":    "exited with code 3 without a result",
		"exit 0":    "exited without a result",
		"nothing":   "exited without a result",
		"panic":     "crashed (an airlock bug; please report it): panic: assignment to entry in nil map",
		"garbage":   "not a JSON GuestMessage",
		"badop":     `sent op "jump"`,
		"big":       "a message of 16777217 bytes, more than the 16777216 allowed",
		"recvfirst": "with no message due",
		"waitidle":  "waited with no call in flight",
		"twice":     "before receiving the host's",
		"skipid":    "started call 2 after call 0",
		"nodone":    "done without a Done",
	} {
		t.Run(source, func(t *testing.T) {
			d1, _ := run(t, r, source, 0)
			d2, _ := run(t, r, source, 0)
			if d1.Outcome != wire.OutcomeError || !strings.Contains(d1.Error, want) {
				t.Fatalf("Done = %+v; want an error containing %q", d1, want)
			}
			if !equalDone(d1, d2) {
				t.Errorf("two runs ended differently:\n%+v\n%+v", d1, d2)
			}
			if hexNumber.MatchString(d1.Error) {
				t.Errorf("the error names an address: %q", d1.Error)
			}
		})
	}
}

func TestSanitize(t *testing.T) {
	for in, want := range map[string]string{
		"panic: at 0xdeadbeef pc=0x1f\ngoroutine 1": "panic: at 0x… pc=0x…",
		strings.Repeat("é", 400):                    strings.Repeat("é", 150) + "…",
		"  wasm error: unreachable  ":               "wasm error: unreachable",
	} {
		if got := sanitize(in); got != want {
			t.Errorf("sanitize(%q) = %q, want %q", in, got, want)
		}
	}
	if got := trapLine("module[] function[_start] failed: wasm error: unreachable\nwasm stack trace:\n\t.main(...)"); got != "wasm error: unreachable" {
		t.Errorf("trapLine = %q", got)
	}
}

func TestLongComputation(t *testing.T) {
	r := newRuntime(t, testGuest(t))
	d, _ := run(t, r, "spin 50000000", 0)
	if d.Outcome != wire.OutcomeOK || len(d.Result) == 0 {
		t.Fatalf("Done = %+v", d)
	}
}

func TestConcurrentRuns(t *testing.T) {
	r := newRuntime(t, testGuest(t))
	var wg sync.WaitGroup
	results := make([]wire.Done, 8)
	for i := range results {
		wg.Go(func() {
			source := fmt.Sprintf("calls %d", i)
			if i%3 == 2 {
				source = "alloc 100"
			}
			d, h := run(t, r, source, 0)
			if source != "alloc 100" && (d.Outcome != wire.OutcomeOK || len(h.started) != i) {
				t.Errorf("%s: Done = %+v after %d starts", source, d, len(h.started))
			}
			if source == "alloc 100" && d.Outcome != wire.OutcomeLimit {
				t.Errorf("%s: Done = %+v", source, d)
			}
		})
	}
	wg.Wait()
}

// TestWarmStart checks that once the pool has filled, a program starts
// on an instance already parked in its first recv.
func TestWarmStart(t *testing.T) {
	r := newRuntime(t, testGuest(t))
	pages := uint32(DefaultMemoryBytes / pageSize)
	r.mu.Lock()
	p := r.pools[pages]
	r.mu.Unlock()
	if p == nil {
		t.Fatal("no pool for the default cap after Ready")
	}
	testenv.WaitFor(t, "the default cap's pool to fill", time.Minute, func() bool { return len(p.ready) == cap(p.ready) })
	inst, err := r.take(pages)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-inst.parked:
	default:
		t.Error("take gave an instance not yet parked in its first recv")
	}
	inst.stop()
	<-inst.exited
	// A new cap gets its own pool, filled after the first use.
	run(t, r, "calls 1", 128<<20)
	r.mu.Lock()
	p = r.pools[128<<20/pageSize]
	r.mu.Unlock()
	if p == nil {
		t.Fatal("no pool for a 128 MiB cap after a program used it")
	}
	testenv.WaitFor(t, "the 128 MiB pool to fill", time.Minute, func() bool { return len(p.ready) == cap(p.ready) })
	// Past maxPools caps, programs still run, on cold instances.
	for i := range maxPools + 2 {
		if d, _ := run(t, r, "calls 1", int64(200+i)<<20); d.Outcome != wire.OutcomeOK {
			t.Fatalf("cap %d MiB: Done = %+v", 200+i, d)
		}
	}
	r.mu.Lock()
	n := len(r.pools)
	r.mu.Unlock()
	if n != maxPools {
		t.Errorf("%d pools after %d caps; want at most %d", n, maxPools+4, maxPools)
	}
}

func TestClose(t *testing.T) {
	ctx := context.Background()
	module := testGuest(t)
	before := runtime.NumGoroutine()
	r, err := New(ctx, Options{CacheDir: cacheDir, Module: module})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	// A program waiting for a call when Close comes: Run returns
	// ErrClosed once the call ends.
	h := &fakeHost{t: t, block: make(chan struct{}), waiting: make(chan struct{})}
	waiting := h.waiting
	errc := make(chan error, 1)
	go func() {
		h.runG = goid()
		_, err := r.Run(ctx, wire.Request{Source: "calls 1"}, 0, h)
		errc <- err
	}()
	<-waiting
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	close(h.block)
	if err := <-errc; err != ErrClosed {
		t.Errorf("Run across Close: %v, want ErrClosed", err)
	}
	if _, err := r.Run(ctx, wire.Request{Source: "calls 0"}, 0, h); err != ErrClosed {
		t.Errorf("Run after Close: %v, want ErrClosed", err)
	}
	if err := r.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
	testenv.WaitFor(t, "the runtime's goroutines to end", time.Minute, func() bool { return runtime.NumGoroutine() <= before })
}

// ctxHost cancels Run's context as the first call starts.
type ctxHost struct {
	fakeHost
	cancel context.CancelFunc
}

func (h *ctxHost) Start(m wire.GuestMessage) {
	h.fakeHost.Start(m)
	h.cancel()
}

func TestRunContext(t *testing.T) {
	r := newRuntime(t, testGuest(t))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.Run(ctx, wire.Request{Source: "calls 1"}, 0, &fakeHost{t: t, runG: goid()}); err != context.Canceled {
		t.Errorf("Run with a cancelled context: %v", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	h := &ctxHost{fakeHost: fakeHost{t: t, runG: goid()}, cancel: cancel}
	if _, err := r.Run(ctx, wire.Request{Source: "calls 3"}, 0, h); err != context.Canceled {
		t.Errorf("Run whose context ends during a call: %v", err)
	}
	if len(h.started) != 1 || h.waits != 0 {
		t.Errorf("%d starts and %d waits after the context ended at the first start", len(h.started), h.waits)
	}
}

func TestBadModule(t *testing.T) {
	ctx := context.Background()
	if _, err := New(ctx, Options{}); err == nil {
		t.Error("New without a module: no error")
	}
	r, err := New(ctx, Options{Module: []byte("\x00asm\x01\x00\x00\x00garbage")})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if err := r.Ready(ctx); err == nil || !strings.Contains(err.Error(), "compile the guest") {
		t.Errorf("Ready = %v", err)
	}
	if _, err := r.Run(ctx, wire.Request{}, 0, &fakeHost{t: t}); err == nil {
		t.Error("Run of a module that did not compile: no error")
	}
}
