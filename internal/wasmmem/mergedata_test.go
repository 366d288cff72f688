package wasmmem

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// dataSeg is an active segment for memory 0 at an i32.const offset.
func dataSeg(offset int32, init []byte) []byte {
	return bytes.Join([][]byte{{0, 0x41}, appendSleb(nil, int64(offset)), {0x0b}, leb(uint64(len(init))), init}, nil)
}

// memModule is a module with one memory of a page, exported as "memory",
// and the given data section body, plus extra sections where they go.
func memModule(data []byte, extra ...[]byte) []byte {
	mem := section(5, leb(1), []byte{0}, leb(1))
	exp := section(7, leb(1), leb(6), []byte("memory"), []byte{2}, leb(0))
	secs := append([][]byte{mem, exp}, extra...)
	return module(append(secs, section(11, data))...)
}

// memoryAfter instantiates module (without running a start function) and
// returns its exported memory's bytes.
func memoryAfter(t *testing.T, r wazero.Runtime, module []byte) []byte {
	t.Helper()
	ctx := context.Background()
	cm, err := r.CompileModule(ctx, module)
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Close(ctx)
	mod, err := r.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName("").WithStartFunctions())
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Close(ctx)
	b, ok := mod.Memory().Read(0, mod.Memory().Size())
	if !ok {
		t.Fatal("memory not readable")
	}
	return bytes.Clone(b)
}

func segmentCount(t *testing.T, module []byte) int {
	t.Helper()
	for off := 8; off < len(module); {
		size, n := uleb(module[off+1:])
		if module[off] == 11 {
			count, _ := uleb(module[off+1+n:])
			return int(count)
		}
		off += 1 + n + int(size)
	}
	return 0
}

func TestMergeData(t *testing.T) {
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer r.Close(ctx)
	segs := func(ss ...[]byte) []byte { return append(leb(uint64(len(ss))), bytes.Join(ss, nil)...) }

	merged := []struct {
		name string
		data []byte
		want int // segments after
	}{
		{"ascending, close", segs(dataSeg(16, []byte("ab")), dataSeg(20, []byte("cd")), dataSeg(22, []byte("ef"))), 1},
		{"out of order", segs(dataSeg(300, []byte("late")), dataSeg(10, []byte("early")), dataSeg(100, []byte("mid"))), 1},
		{"a gap too wide", segs(dataSeg(0, []byte("a")), dataSeg(1+mergeGap+1, []byte("b")), dataSeg(1+mergeGap+3, []byte("c"))), 2},
		{"gap of exactly mergeGap", segs(dataSeg(0, []byte("a")), dataSeg(1+mergeGap, []byte("b"))), 1},
		{"empty segments", segs(dataSeg(5, nil), dataSeg(5, []byte("x")), dataSeg(9, nil)), 1},
		{"at the end of the page", segs(dataSeg(PageSize-4, []byte("tail")), dataSeg(PageSize-10, []byte("near"))), 1},
	}
	for _, tt := range merged {
		t.Run(tt.name, func(t *testing.T) {
			orig := memModule(tt.data)
			got := MergeData(orig)
			if n := segmentCount(t, got); n != tt.want {
				t.Errorf("%d segments after merging, want %d", n, tt.want)
			}
			if !bytes.Equal(memoryAfter(t, r, orig), memoryAfter(t, r, got)) {
				t.Error("the merged module's memory differs from the original's")
			}
		})
	}

	datacount := section(12, leb(2))
	importMem := section(2, leb(1), leb(3), []byte("env"), leb(3), []byte("mem"), []byte{2, 0}, leb(1))
	unchanged := []struct {
		name   string
		module []byte
	}{
		{"overlapping", memModule(segs(dataSeg(0, []byte("abcd")), dataSeg(2, []byte("XY"))))},
		{"data count section (memory.init may name a segment)", memModule(segs(dataSeg(0, []byte("a")), dataSeg(2, []byte("b"))), datacount)},
		{"passive segment", memModule(append(segs(dataSeg(0, []byte("a"))), 1, 1, 'p')[1:])},
		{"global.get offset", memModule(segs(dataSeg(0, []byte("a")), []byte{0, 0x23, 0, 0x0b, 1, 'g'}))},
		{"imported memory (not all zeros)", module(importMem, section(11, segs(dataSeg(0, []byte("a")), dataSeg(2, []byte("b")))))},
		{"one segment", memModule(segs(dataSeg(0, []byte("a"))))},
		{"no data section", module(section(5, leb(1), []byte{0}, leb(1)))},
		{"truncated data section", append(module(section(5, leb(1), []byte{0}, leb(1))), 11, 9, 2, 0, 0x41)},
		{"segment count past its entries", memModule(append(leb(5), dataSeg(0, []byte("a"))...))},
		{"too short", header[:6]},
	}
	for _, tt := range unchanged {
		t.Run(tt.name, func(t *testing.T) {
			if got := MergeData(tt.module); !bytes.Equal(got, tt.module) {
				t.Errorf("rewritten:\n%x\nwant as it was:\n%x", got, tt.module)
			}
		})
	}
}

// TestMergeDataGoModules: the repository's Go-built modules (tens of
// thousands of segments each) merge into a few and instantiate to exactly
// the same memory.
func TestMergeDataGoModules(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join("..", "..")
	paths, err := filepath.Glob(filepath.Join(root, "wasm", "*.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	paths = append(paths, filepath.Join(root, "internal", "sandbox", "testdata", "guest.wasm"))
	if len(paths) < 2 {
		t.Fatalf("found %v, want the repository's modules", paths)
	}
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			orig, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
			defer r.Close(ctx)
			wasi_snapshot_preview1.MustInstantiate(ctx, r)
			stubImports(t, r, orig)
			got := MergeData(orig)
			before, after := segmentCount(t, orig), segmentCount(t, got)
			t.Logf("%d data segments, %d after merging", before, after)
			if before < 1000 || after > before/100 {
				t.Errorf("%d data segments became %d: want a Go module's thousands merged into a few", before, after)
			}
			if !bytes.Equal(memoryAfter(t, r, orig), memoryAfter(t, r, got)) {
				t.Error("the merged module's memory differs from the original's")
			}
		})
	}
}

// stubImports gives r a do-nothing host function for each function module
// imports from a module other than WASI (the program interpreter's
// "airlock"), so that it instantiates.
func stubImports(t *testing.T, r wazero.Runtime, module []byte) {
	t.Helper()
	ctx := context.Background()
	cm, err := r.CompileModule(ctx, module)
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Close(ctx)
	builders := map[string]wazero.HostModuleBuilder{}
	for _, f := range cm.ImportedFunctions() {
		mod, name, _ := f.Import()
		if mod == wasi_snapshot_preview1.ModuleName {
			continue
		}
		if builders[mod] == nil {
			builders[mod] = r.NewHostModuleBuilder(mod)
		}
		builders[mod].NewFunctionBuilder().
			WithGoModuleFunction(api.GoModuleFunc(func(context.Context, api.Module, []uint64) {}), f.ParamTypes(), f.ResultTypes()).
			Export(name)
	}
	for mod, b := range builders {
		if _, err := b.Instantiate(ctx); err != nil {
			t.Fatalf("stub %s: %v", mod, err)
		}
	}
}
