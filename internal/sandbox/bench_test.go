package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/airlock-run/airlock/internal/testenv"
)

// BenchmarkSandbox measures what a native tool call costs:
//
//	go test -run '^$' -bench Sandbox -benchtime 20x ./internal/sandbox
//
// compile/* are per Load in a new Sandbox; call/* are per Run of the guest's
// "upper" tool and report p50/p99 wall time of the individual calls;
// native/upper is the same JSON in, JSON out as a plain Go function, for
// the ratio; enforce/* isolate what the timeout machinery costs (see there).
func BenchmarkSandbox(b *testing.B) {
	ctx := context.Background()
	stdin := []byte(`{"text":"hello, native tools"}`)
	want := `{"content":[{"type":"text","text":"HELLO, NATIVE TOOLS"}]}` + "\n"

	b.Run("compile/cold", func(b *testing.B) {
		for b.Loop() {
			s, err := New(ctx, Options{})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.Load(ctx, guestWasm, guestSHA256); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			_ = s.Close(ctx)
			b.StartTimer()
		}
	})

	b.Run("compile/warm-disk-cache", func(b *testing.B) {
		dir := b.TempDir()
		warm, err := New(ctx, Options{CacheDir: dir})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := warm.Load(ctx, guestWasm, guestSHA256); err != nil {
			b.Fatal(err)
		}
		_ = warm.Close(ctx)
		for b.Loop() {
			s, err := New(ctx, Options{CacheDir: dir}) // a new process, as far as wazero knows
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.Load(ctx, guestWasm, guestSHA256); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			_ = s.Close(ctx)
			b.StartTimer()
		}
	})

	b.Run("call/upper", func(b *testing.B) {
		m := guest(b)
		call := Call{Args: []string{"upper"}, Stdin: stdin}
		percentiles(b, func() {
			r, err := m.Run(ctx, call)
			if err != nil || string(r.Stdout) != want {
				b.Fatalf("%q, %v", r.Stdout, err)
			}
		})
	})

	// call/upper-warm is call/upper with the pool given time to refill
	// between calls (outside the timer), as calls spaced by the rest of
	// their way through airlock find it: each call takes a parked
	// instance. call/upper-cold is the same with pools off (Warm: -1):
	// every call instantiates and starts the guest, as before pools.
	b.Run("call/upper-warm", func(b *testing.B) {
		m := guest(b)
		call := Call{Args: []string{"upper"}, Stdin: stdin}
		var ds []time.Duration
		for b.Loop() {
			b.StopTimer()
			waitWarm(b, m, call)
			b.StartTimer()
			start := time.Now()
			r, err := m.Run(ctx, call)
			ds = append(ds, time.Since(start))
			if err != nil || string(r.Stdout) != want {
				b.Fatalf("%q, %v", r.Stdout, err)
			}
		}
		report(b, ds)
	})

	b.Run("call/upper-cold", func(b *testing.B) {
		s, err := New(ctx, Options{CacheDir: sharedCache, Warm: -1})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close(ctx)
		m, err := s.Load(ctx, guestWasm, guestSHA256)
		if err != nil {
			b.Fatal(err)
		}
		call := Call{Args: []string{"upper"}, Stdin: stdin}
		percentiles(b, func() {
			r, err := m.Run(ctx, call)
			if err != nil || string(r.Stdout) != want {
				b.Fatalf("%q, %v", r.Stdout, err)
			}
		})
	})

	// reactor/* are call/* on the reactor build of the guest: each call's
	// instance made from the snapshot of its start (reactor.go).
	// reactor/upper is back to back (the pool refilling between calls
	// competes with them), reactor/upper-warm spaced, reactor/upper-cold
	// without pools (each call instantiates from the snapshot).
	reactor := func(b *testing.B, warm int) *Module {
		s, err := New(ctx, Options{CacheDir: sharedCache, Warm: warm})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close(ctx) })
		m, err := s.Load(ctx, reactorWasm, reactorSHA256)
		if err != nil {
			b.Fatal(err)
		}
		if r, err := m.Run(ctx, Call{Args: []string{"upper"}, Stdin: stdin}); err != nil || string(r.Stdout) != want {
			b.Fatalf("%q, %v", r.Stdout, err) // the first: takes the snapshot
		}
		return m
	}
	b.Run("reactor/upper", func(b *testing.B) {
		m := reactor(b, 0)
		call := Call{Args: []string{"upper"}, Stdin: stdin}
		percentiles(b, func() {
			r, err := m.Run(ctx, call)
			if err != nil || string(r.Stdout) != want {
				b.Fatalf("%q, %v", r.Stdout, err)
			}
		})
	})
	b.Run("reactor/upper-warm", func(b *testing.B) {
		m := reactor(b, 0)
		call := Call{Args: []string{"upper"}, Stdin: stdin}
		var ds []time.Duration
		for b.Loop() {
			b.StopTimer()
			waitWarm(b, m, call)
			b.StartTimer()
			start := time.Now()
			r, err := m.Run(ctx, call)
			ds = append(ds, time.Since(start))
			if err != nil || string(r.Stdout) != want {
				b.Fatalf("%q, %v", r.Stdout, err)
			}
		}
		report(b, ds)
	})
	b.Run("reactor/upper-cold", func(b *testing.B) {
		m := reactor(b, -1)
		call := Call{Args: []string{"upper"}, Stdin: stdin}
		percentiles(b, func() {
			r, err := m.Run(ctx, call)
			if err != nil || string(r.Stdout) != want {
				b.Fatalf("%q, %v", r.Stdout, err)
			}
		})
	})

	b.Run("native/upper", func(b *testing.B) {
		percentiles(b, func() {
			var out bytes.Buffer
			if err := nativeUpper(bytes.NewReader(stdin), &out); err != nil || out.String() != want {
				b.Fatalf("%q, %v", out.String(), err)
			}
		})
	})

	// enforce/* run "upper" on bare wazero runtimes that differ only in
	// timeout enforcement. Sandbox always enforces, so this cannot be
	// measured through Run. "off" is WithCloseOnContextDone(false) with
	// context.Background(): no termination checks compiled into loops and
	// function entries, no goroutine watching the context. "on" is what
	// Run does: checks compiled in, and a 30s context.WithTimeout per call.
	wasm, err := os.ReadFile(guestWasm)
	if err != nil {
		b.Fatal(err)
	}
	for _, enforce := range []bool{false, true} {
		name := map[bool]string{false: "enforce/off", true: "enforce/on"}[enforce]
		b.Run(name, func(b *testing.B) {
			r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().
				WithMemoryLimitPages(pagesFor(0)).
				WithCloseOnContextDone(enforce).
				WithCompilationCache(sharedCompilationCache(b)))
			defer r.Close(ctx)
			wasi_snapshot_preview1.MustInstantiate(ctx, r)
			cm, err := r.CompileModule(ctx, wasm)
			if err != nil {
				b.Fatal(err)
			}
			percentiles(b, func() {
				callCtx, cancel := ctx, context.CancelFunc(func() {})
				if enforce {
					callCtx, cancel = context.WithTimeout(ctx, DefaultTimeout)
				}
				var out bytes.Buffer
				mod, err := r.InstantiateModule(callCtx, cm, wazero.NewModuleConfig().
					WithName("").
					WithArgs("guest", "upper").
					WithStdin(bytes.NewReader(stdin)).
					WithStdout(&out).
					WithSysWalltime().WithSysNanotime().WithRandSource(rand.Reader))
				cancel()
				if mod != nil {
					_ = mod.Close(ctx)
				}
				if err != nil || out.String() != want {
					b.Fatalf("%q, %v", out.String(), err)
				}
			})
		})
	}
}

// sharedCompilationCache lets the enforce/* runtimes reuse compiled code
// across benchmark rounds; "on" and "off" compile differently and are
// cached apart.
func sharedCompilationCache(b *testing.B) wazero.CompilationCache {
	c, err := wazero.NewCompilationCacheWithDir(sharedCache)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// percentiles runs op b.N times and reports the median and 99th percentile
// of the individual runs next to the mean ns/op.
func percentiles(b *testing.B, op func()) {
	b.Helper()
	var ds []time.Duration
	for b.Loop() {
		start := time.Now()
		op()
		ds = append(ds, time.Since(start))
	}
	report(b, ds)
}

// waitWarm waits until the sandbox's pools hold DefaultWarm parked
// instances.
func waitWarm(b *testing.B, m *Module, _ Call) {
	b.Helper()
	testenv.WaitFor(b, "warm instances", time.Minute, func() bool { return m.s.Stats().Ready >= DefaultWarm })
}

// report puts the median and 99th percentile of ds beside ns/op.
func report(b *testing.B, ds []time.Duration) {
	slices.Sort(ds)
	at := func(p float64) float64 {
		return float64(ds[int(p*float64(len(ds)-1))]) / float64(time.Microsecond)
	}
	b.ReportMetric(at(0.50), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
}

// nativeUpper is the guest's "upper" tool as plain Go.
func nativeUpper(in *bytes.Reader, out *bytes.Buffer) error {
	var args struct {
		Text string `json:"text"`
	}
	if err := json.NewDecoder(in).Decode(&args); err != nil {
		return err
	}
	type content struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	return json.NewEncoder(out).Encode(struct {
		Content []content `json:"content"`
	}{Content: []content{{Type: "text", Text: strings.ToUpper(args.Text)}}})
}
