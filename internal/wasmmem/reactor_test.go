package wasmmem

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// asm assembles a module of the given sections (id, body).
func asm(secs ...[]byte) []byte {
	out := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	for _, s := range secs {
		out = append(out, s[0])
		out = appendUleb(out, uint64(len(s)-1))
		out = append(out, s[1:]...)
	}
	return out
}

func sec(id byte, body ...[]byte) []byte { return append([]byte{id}, bytes.Join(body, nil)...) }

func name(s string) []byte { return append(appendUleb(nil, uint64(len(s))), s...) }

var (
	typeSec   = sec(1, []byte{1, 0x60, 0, 0})
	funcSec   = sec(3, []byte{1, 0})
	memSec    = sec(5, []byte{1, 0, 1})
	exportSec = sec(7, []byte{2}, name("_initialize"), []byte{0, 0}, name("airlock_run"), []byte{0, 0})
	codeSec   = sec(10, []byte{1, 2, 0, 0x0b})
	// i32 const 7 (immutable), i64 mutable, f64 mutable: indexes 1 and 2.
	globalSec = sec(6, []byte{3},
		[]byte{0x7f, 0, 0x41, 7, 0x0b},
		[]byte{0x7e, 1, 0x42, 0x80, 0x01, 0x0b},
		[]byte{0x7c, 1, 0x44, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0x0b})
	dataSec = sec(11, []byte{2},
		[]byte{0, 0x41, 16, 0x0b, 2, 'h', 'i'},
		[]byte{0, 0x41, 8, 0x0b, 1, '!'})
)

func TestPrepareReactor(t *testing.T) {
	m := asm(typeSec, funcSec, memSec, globalSec, exportSec, codeSec, dataSec)
	r, err := PrepareReactor(m)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Globals, []uint32{1, 2}) {
		t.Errorf("globals %v, want the mutable ones, 1 and 2", r.Globals)
	}
	// The segments merged (8 bytes apart), in order of offset.
	if len(r.Data) != 1 || r.Data[0].Offset != 8 || string(r.Data[0].Init) != "!\x00\x00\x00\x00\x00\x00\x00hi" {
		t.Errorf("data %+v", r.Data)
	}
	if bytes.Contains(r.Module, []byte("hi")) {
		t.Error("the rewritten module still holds the data section")
	}
	if !HasExports(r.Module, "_initialize", "airlock_run", GlobalExport(1), GlobalExport(2)) || HasExports(r.Module, GlobalExport(0)) {
		t.Error("the rewritten module does not export exactly the mutable globals beside its own exports")
	}
	if !HasExports(m, "_initialize", "airlock_run") || HasExports(m, "_start") {
		t.Error("HasExports of the original")
	}
}

// TestPrepareReactorRefuses: every module it cannot snapshot faithfully,
// and malformed ones, get an error naming why, never a panic.
func TestPrepareReactorRefuses(t *testing.T) {
	tests := []struct {
		name string
		m    []byte
		want string
	}{
		{"start section", asm(typeSec, funcSec, memSec, exportSec, sec(8, []byte{0}), codeSec), "start function"},
		{"imported global", asm(typeSec, sec(2, []byte{1}, name("env"), name("g"), []byte{3, 0x7f, 1}), funcSec, memSec, exportSec, codeSec), "imports a global"},
		{"imported memory", asm(typeSec, sec(2, []byte{1}, name("env"), name("m"), []byte{2, 0, 1}), funcSec, exportSec, codeSec), "imports a memory"},
		{"data count", asm(typeSec, funcSec, memSec, exportSec, sec(12, []byte{1}), codeSec, dataSec), "data count"},
		{"passive segment", asm(typeSec, funcSec, memSec, exportSec, codeSec, sec(11, []byte{1, 1, 1, 'x'})), "not active"},
		{"v128 global", asm(typeSec, funcSec, memSec, sec(6, []byte{1, 0x7b, 1, 0xfd, 12}, make([]byte, 16), []byte{0x0b}), exportSec, codeSec), "0x7b"},
		{"host's export name", asm(typeSec, funcSec, memSec, sec(7, []byte{3}, name("_initialize"), []byte{0, 0}, name("airlock_run"), []byte{0, 0}, name("airlock.global.9"), []byte{0, 0}), codeSec), "a name the host uses"},
		{"no exports", asm(typeSec, funcSec, memSec, codeSec), "exports nothing"},
		{"cut short", asm(typeSec, funcSec, memSec, exportSec, codeSec)[:30], "cut short"},
		{"bad global expression", asm(typeSec, funcSec, memSec, sec(6, []byte{1, 0x7f, 1, 0x99, 0x0b}), exportSec, codeSec), "not understood"},
		{"global without end", asm(typeSec, funcSec, memSec, sec(6, []byte{1, 0x7f, 1, 0x41}), exportSec, codeSec), "malformed"},
		{"not wasm", []byte("wasm"), "not a wasm module"},
		{"huge count", asm(typeSec, funcSec, memSec, sec(7, []byte{0xff, 0xff, 0xff, 0xff, 0x0f}), codeSec), "malformed"},
	}
	for _, tt := range tests {
		_, err := PrepareReactor(tt.m)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want one saying %q", tt.name, err, tt.want)
		}
	}
	// Every prefix of a good module: an error or a result, never a panic.
	good := asm(typeSec, funcSec, memSec, globalSec, exportSec, codeSec, dataSec)
	for i := range good {
		_, _ = PrepareReactor(good[:i])
		_ = HasExports(good[:i], "_initialize")
	}
}

// TestImage: a memory made from an image starts with its bytes; writes
// to it are its own, not the image's nor another memory's.
func TestImage(t *testing.T) {
	b := make([]byte, 2*PageSize)
	copy(b, "snapshot")
	b[PageSize+3] = 9
	im, err := NewImage(b)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	var mems [2][]byte
	var allocs [2]*Allocator
	for i := range mems {
		allocs[i] = NewFromImage(4*PageSize, im)
		lm := allocs[i].Allocate(PageSize, 4*PageSize)
		mems[i] = lm.Reallocate(PageSize)
		mems[i] = lm.Reallocate(2 * PageSize) // as wazero grows it to the snapshot
		if !bytes.Equal(mems[i], b) {
			t.Fatalf("memory %d does not start as the image", i)
		}
		if grown := lm.Reallocate(3 * PageSize); grown[2*PageSize] != 0 || len(grown) != 3*PageSize {
			t.Errorf("memory %d past the image is not zero", i)
		}
		if lm.Reallocate(5*PageSize) != nil {
			t.Errorf("memory %d grew past its limit", i)
		}
	}
	mems[0][0] = 'S'
	mems[0][PageSize+3] = 1
	if mems[1][0] != 's' || mems[1][PageSize+3] != 9 {
		t.Error("a write to one memory reached another made from the same image")
	}
	third := NewFromImage(4*PageSize, im)
	if m := third.Allocate(PageSize, 4*PageSize).Reallocate(2 * PageSize); !bytes.Equal(m, b) {
		t.Error("a write to a memory reached the image")
	}
	for _, a := range append(allocs[:], third) {
		a.Release()
	}
	// An image larger than the limit is not used: the memory starts zero.
	small := NewFromImage(PageSize, im)
	if m := small.Allocate(PageSize, PageSize).Reallocate(PageSize); m[0] != 0 || small.FromImage() {
		t.Error("an image past the limit was mapped")
	}
	if !third.FromImage() {
		t.Error("FromImage of a memory made from it")
	}
	small.Release()
}
