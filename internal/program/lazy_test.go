package program

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-run/airlock/wasm/program/wire"
)

// TestLazy: with Options.Lazy, New compiles nothing; the first Run
// compiles (once, however many Runs come at once) and runs the program as
// an eager runtime would; a lazy runtime closed before any program never
// compiles, and its Ready and Run then say it is closed; a bad module is
// still Ready's and Run's error.
func TestLazy(t *testing.T) {
	ctx := context.Background()
	module := testGuest(t)
	r, err := New(ctx, Options{CacheDir: cacheDir, Module: module, Lazy: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(ctx) })
	if r.Loading() {
		t.Fatal("a lazy runtime started compiling at New")
	}
	var wg sync.WaitGroup
	dones := make([]wire.Done, 4)
	for i := range dones {
		wg.Go(func() {
			h := &fakeHost{t: t, runG: goid()}
			d, err := r.Run(ctx, wire.Request{ProgramID: "p", Source: "calls 2"}, 0, h)
			if err != nil {
				t.Errorf("Run %d: %v", i, err)
			}
			dones[i] = d
		})
	}
	wg.Wait()
	if !r.Loading() || r.cm == nil {
		t.Fatal("Run did not compile the module")
	}
	eager := newRuntime(t, module)
	want, _ := run(t, eager, "calls 2", 0)
	for i, d := range dones {
		if d.Outcome != want.Outcome || string(d.Result) != string(want.Result) {
			t.Errorf("lazy Run %d ended %s %s, eager %s %s", i, d.Outcome, d.Result, want.Outcome, want.Result)
		}
	}

	closed, err := New(ctx, Options{CacheDir: cacheDir, Module: module, Lazy: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := closed.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := closed.Ready(ctx); err != ErrClosed {
		t.Errorf("Ready of a lazy runtime closed before loading: %v, want ErrClosed", err)
	}
	if _, err := closed.Run(ctx, wire.Request{Source: "calls 0"}, 0, &fakeHost{t: t, runG: goid()}); err != ErrClosed {
		t.Errorf("Run of a lazy runtime closed before loading: %v, want ErrClosed", err)
	}
	if closed.cm != nil {
		t.Error("a lazy runtime closed before any program compiled its module")
	}

	bad, err := New(ctx, Options{Module: []byte("\x00asm\x01\x00\x00\x00garbage"), Lazy: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close(ctx)
	if _, err := bad.Run(ctx, wire.Request{}, 0, &fakeHost{t: t}); err == nil || !strings.Contains(err.Error(), "compile the guest") {
		t.Errorf("lazy Run of a module that does not compile: %v", err)
	}
}
