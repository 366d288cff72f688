package sandbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/testenv"
)

// reactorModule assembles a WASI reactor of the snapshot ABI. Its
// _initialize runs initCode, its airlock_run runCode (whose value, if
// result, is the exit code); one mutable i32 global (index 0, initially 0)
// and one page of memory; fd_write is function 0.
func reactorModule(initCode, runCode []byte, result bool, extra ...[]byte) []byte {
	uleb := func(v uint64) []byte { return appendULEB(nil, v) }
	section := func(id byte, body ...[]byte) []byte {
		joined := bytes.Join(body, nil)
		return append(append([]byte{id}, uleb(uint64(len(joined)))...), joined...)
	}
	name := func(s string) []byte { return append(uleb(uint64(len(s))), s...) }
	fn := func(code []byte) []byte {
		body := append([]byte{0}, code...)
		return append(uleb(uint64(len(body))), body...)
	}
	runType := []byte{0x60, 0, 0}
	if result {
		runType = []byte{0x60, 0, 1, 0x7f}
	}
	exports := [][]byte{uleb(3), name(reactorInit), {0, 1}, name(reactorRun), {0, 2}, name("memory"), {2, 0}}
	for _, e := range extra {
		exports[0] = uleb(4)
		exports = append(exports, e)
	}
	return bytes.Join([][]byte{
		{0, 'a', 's', 'm', 1, 0, 0, 0},
		section(1, uleb(3), []byte{0x60, 4, 0x7f, 0x7f, 0x7f, 0x7f, 1, 0x7f}, []byte{0x60, 0, 0}, runType),
		section(2, uleb(1), name("wasi_snapshot_preview1"), name("fd_write"), []byte{0, 0}),
		section(3, uleb(2), uleb(1), uleb(2)),
		section(5, uleb(1), []byte{0}, uleb(1)),
		section(6, uleb(1), []byte{0x7f, 1, 0x41, 0, 0x0b}),
		section(7, exports...),
		section(10, uleb(2), fn(append(initCode, 0x0b)), fn(append(runCode, 0x0b))),
		// "ab" at 50: data the host writes before _initialize.
		section(11, uleb(1), []byte{0, 0x41, 50, 0x0b, 2, 'a', 'b'}),
	}, nil)
}

var (
	i32     = func(v byte) []byte { return []byte{0x41, v} } // small non-negative constants only
	store8  = []byte{0x3a, 0, 0}
	load8   = []byte{0x2d, 0, 0}
	store32 = []byte{0x36, 2, 0}
	add     = []byte{0x6a}
)

func code(ops ...[]byte) []byte { return bytes.Join(ops, nil) }

// printState writes the global and mem[60] as digits, then the data at
// 50, then increments both.
var printState = code(
	i32(16), i32('0'), []byte{0x23, 0}, add, store8,
	i32(17), i32('0'), i32(60), load8, add, store8,
	i32(18), i32(50), load8, store8,
	i32(19), i32(51), load8, store8,
	i32(20), i32('\n'), store8,
	i32(0), i32(16), store32, i32(4), i32(5), store32,
	i32(1), i32(0), i32(1), i32(8), []byte{0x10, 0}, []byte{0x1a},
	[]byte{0x23, 0}, i32(1), add, []byte{0x24, 0},
	i32(60), i32(60), load8, i32(1), add, store8,
)

// setState is an _initialize that leaves the global and mem[60] at 5.
var setState = code(i32(5), []byte{0x24, 0}, i32(60), i32(5), store8)

func loadBytes(t *testing.T, s *Sandbox, b []byte) (*Module, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "reactor.wasm")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return s.Load(context.Background(), p, hex.EncodeToString(sum[:]))
}

// TestReactorCallsStartFromTheSnapshot: every call of a reactor sees the
// state _initialize left (the global and memory at 5, the data segment
// written), never what an earlier call changed, whether its instance ran
// _initialize or was made from the snapshot; after the first call of the
// shape they are made from it, with pools or without.
func TestReactorCallsStartFromTheSnapshot(t *testing.T) {
	for _, warm := range []int{2, -1} {
		ctx := context.Background()
		s, err := New(ctx, Options{Warm: warm})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(ctx)
		m, err := loadBytes(t, s, reactorModule(setState, printState, false))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			if i > 0 && warm > 0 {
				waitReady(t, s, 2)
			}
			r, err := m.Run(ctx, Call{})
			if err != nil || string(r.Stdout) != "55ab\n" || r.ExitCode != 0 {
				t.Errorf("warm %d, call %d: %q, exit %d, %v; want 55ab (the state _initialize left)", warm, i, r.Stdout, r.ExitCode, err)
			}
		}
		// Concurrent calls, each in its own instance.
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				if r, err := m.Run(ctx, Call{}); err != nil || string(r.Stdout) != "55ab\n" {
					t.Errorf("warm %d, concurrent call %d: %q, %v", warm, i, r.Stdout, err)
				}
			})
		}
		wg.Wait()
		if st := s.Stats(); st.Snapshots != 1 {
			t.Errorf("warm %d: stats %+v: want the shape's snapshot", warm, st)
		}
	}
}

// TestReactorExitCode: airlock_run's i32 is the call's exit code.
func TestReactorExitCode(t *testing.T) {
	ctx := context.Background()
	s, err := New(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	m, err := loadBytes(t, s, reactorModule(setState, code(printState, []byte{0x23, 0}), true))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		r, err := m.Run(ctx, Call{})
		if err != nil || r.ExitCode != 6 || string(r.Stdout) != "55ab\n" {
			t.Errorf("call %d: %q, exit %d, %v; want exit 6 (the global after the call)", i, r.Stdout, r.ExitCode, err)
		}
	}
}

// TestReactorInitUsingTheCallKeepsNoSnapshot: an _initialize that writes
// to stdout (so would to a call's output) waits for its call, as a
// command's start does, and its shape gets no snapshot: every call runs
// _initialize, and sees its output.
func TestReactorInitUsingTheCallKeepsNoSnapshot(t *testing.T) {
	ctx := context.Background()
	s, err := New(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	writeInit := code(setState,
		i32(16), i32('#'), store8, i32(17), i32('\n'), store8,
		i32(0), i32(16), store32, i32(4), i32(2), store32,
		i32(1), i32(0), i32(1), i32(8), []byte{0x10, 0}, []byte{0x1a})
	m, err := loadBytes(t, s, reactorModule(writeInit, printState, false))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if i > 0 {
			waitReady(t, s, 2)
		}
		r, err := m.Run(ctx, Call{})
		if err != nil || string(r.Stdout) != "#\n55ab\n" {
			t.Errorf("call %d: %q, %v; want _initialize's line, then the call's", i, r.Stdout, err)
		}
	}
	if st := s.Stats(); st.Snapshots != 0 {
		t.Errorf("stats %+v: want no snapshot", st)
	}
}

// TestReactorRefused: modules that export the reactor ABI but cannot be
// run from a snapshot, or whose exports do not fit it, are refused at
// Load, saying why.
func TestReactorRefused(t *testing.T) {
	ctx := context.Background()
	s, err := New(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	good := reactorModule(setState, printState, false)
	name := func(s string) []byte { return append(appendULEB(nil, uint64(len(s))), s...) }
	withStart := reactorModule(setState, printState, false, append(name("_start"), 0, 1))
	collide := reactorModule(setState, printState, false, append(name("airlock.global.0"), 3, 0))
	tests := []struct {
		name string
		b    []byte
		want string
	}{
		{"also a command", withStart, "a command or a reactor, not both"},
		{"export name of the host's", collide, `exports "airlock.global.0"`},
	}
	for _, tt := range tests {
		_, err := loadBytes(t, s, tt.b)
		if !errors.Is(err, ErrInvalidModule) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want %v saying %q", tt.name, err, ErrInvalidModule, tt.want)
		}
	}
	if _, err := loadBytes(t, s, good); err != nil {
		t.Errorf("the module they are made from: %v", err)
	}
}

// TestReactorSnapshotsBounded: a burst of first calls of more shapes than
// may keep a snapshot (each a tool, here distinct argv) is answered in
// full, each from the state _initialize left; at most maxPools shapes keep
// one, and the rest run _initialize in every call.
func TestReactorSnapshotsBounded(t *testing.T) {
	ctx := context.Background()
	s, err := New(ctx, Options{Warm: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	m, err := loadBytes(t, s, reactorModule(setState, printState, false))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range maxPools + 16 {
		wg.Go(func() {
			for j := range 2 {
				r, err := m.Run(ctx, Call{Args: []string{fmt.Sprint(i)}})
				if err != nil || string(r.Stdout) != "55ab\n" {
					t.Errorf("shape %d, call %d: %q, %v", i, j, r.Stdout, err)
				}
			}
		})
	}
	wg.Wait()
	if st := s.Stats(); st.Snapshots != maxPools {
		t.Errorf("stats %+v: want %d snapshots", st, maxPools)
	}
	// Released just after their results.
	testenv.WaitFor(t, "no instance left", 60*time.Second, func() bool { return s.Stats().Instances == 0 })
}
