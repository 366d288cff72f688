package wasmmem

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
)

// Reactor is a WASI reactor module rewritten so that an instance of it can
// be started from a snapshot of another one's state after _initialize
// (see PrepareReactor).
type Reactor struct {
	// Module is the module to compile: the original with no data section
	// and each mutable global it defines exported as GlobalExport(i).
	Module []byte
	// Data is what the removed data section wrote (merged as MergeData
	// merges it): a host writes it into an instance's memory before
	// calling _initialize, which makes the instance the original's.
	Data []Segment
	// Globals are the indexes of the exported mutable globals, in the
	// module's global index space.
	Globals []uint32
}

// Segment is one active data segment: Init written at Offset of memory 0.
type Segment struct {
	Offset uint32
	Init   []byte
}

// GlobalExport is the export name PrepareReactor gives the mutable global
// of index i.
func GlobalExport(i uint32) string { return "airlock.global." + strconv.FormatUint(uint64(i), 10) }

// PrepareReactor rewrites module (a compiled, valid module) for
// snapshots, or returns an error saying why it cannot:
//
// The state of an instance of the rewritten module is its memory, its
// mutable globals and its tables (its host state, WASI's, is the host's).
// The memory and globals can be read and written through the exports; the
// tables cannot, so they are what the element segments make them: a
// module whose _initialize changes a table is not one this ABI serves
// (Go's compiler emits no table-changing instruction). Data segments would
// overwrite a snapshot's memory on instantiation, so they are removed and
// the host writes them itself into an instance that runs _initialize.
//
// Refused: a start section (it would run before the snapshot is
// restored), an imported memory or global (not the module's own state), a
// data count section or a data segment that is not active at an
// i32.const offset of memory 0 (something may name the segment), a
// mutable global of a type other than i32, i64, f32 or f64, and an
// existing export named like ours.
func PrepareReactor(module []byte) (*Reactor, error) {
	const (
		importSection    = 2
		globalSection    = 6
		exportSection    = 7
		startSection     = 8
		dataSection      = 11
		dataCountSection = 12
	)
	if len(module) < 8 {
		return nil, fmt.Errorf("not a wasm module")
	}
	type sec struct {
		id         byte
		start, end int // the section's whole bytes
		body       []byte
	}
	var secs []sec
	for off := 8; off < len(module); {
		id := module[off]
		size, n := uleb(module[off+1:])
		if n == 0 || uint64(len(module)-off-1-n) < size {
			return nil, fmt.Errorf("section at byte %d is cut short", off)
		}
		end := off + 1 + n + int(size)
		secs = append(secs, sec{id: id, start: off, end: end, body: module[off+1+n : end]})
		off = end
	}
	r := &Reactor{}
	var exports []byte // the export section's entries, without its count
	var exportCount uint64
	haveExports := false
	for _, s := range secs {
		switch s.id {
		case importSection:
			if importsMemory(s.body) {
				return nil, fmt.Errorf("it imports a memory")
			}
			if importsGlobal(s.body) {
				return nil, fmt.Errorf("it imports a global")
			}
		case startSection:
			return nil, fmt.Errorf("it has a start function")
		case dataCountSection:
			return nil, fmt.Errorf("it has a data count section (passive data segments)")
		case dataSection:
			segs, ok := parseData(s.body)
			if !ok {
				return nil, fmt.Errorf("a data segment is not active at an i32.const offset of memory 0")
			}
			for _, sg := range mergeSegments(segs) {
				r.Data = append(r.Data, Segment{Offset: uint32(sg.offset), Init: sg.init})
			}
		case globalSection:
			g, err := mutableGlobals(s.body)
			if err != nil {
				return nil, err
			}
			r.Globals = g
		case exportSection:
			c, n := uleb(s.body)
			if n == 0 {
				return nil, fmt.Errorf("export section is malformed")
			}
			names, err := exportNames(s.body)
			if err != nil {
				return nil, err
			}
			for _, name := range names {
				if len(name) > len("airlock.global.") && name[:len("airlock.global.")] == "airlock.global." {
					return nil, fmt.Errorf("it exports %q, a name the host uses", name)
				}
			}
			exportCount, exports, haveExports = c, s.body[n:], true
		}
	}
	if !haveExports {
		return nil, fmt.Errorf("it exports nothing")
	}
	var ex []byte
	ex = appendUleb(ex, exportCount+uint64(len(r.Globals)))
	ex = append(ex, exports...)
	for _, g := range r.Globals {
		name := GlobalExport(g)
		ex = appendUleb(ex, uint64(len(name)))
		ex = append(ex, name...)
		ex = append(ex, 3) // a global
		ex = appendUleb(ex, uint64(g))
	}
	out := make([]byte, 0, len(module))
	out = append(out, module[:8]...)
	for _, s := range secs {
		switch s.id {
		case dataSection:
			continue
		case exportSection:
			out = append(out, exportSection)
			out = appendUleb(out, uint64(len(ex)))
			out = append(out, ex...)
		default:
			out = append(out, module[s.start:s.end]...)
		}
	}
	r.Module = out
	return r, nil
}

// mergeSegments joins segments as MergeData does; segs must not overlap
// (then their order does not matter), or the result is nil.
func mergeSegments(segs []segment) []segment {
	sorted := slices.Clone(segs)
	slices.SortStableFunc(sorted, func(a, b segment) int { return cmp.Compare(a.offset, b.offset) })
	var merged []segment
	for i, s := range sorted {
		if i > 0 && s.offset < sorted[i-1].end() {
			return segs // overlapping: keep the order they are written in
		}
		if k := len(merged) - 1; k >= 0 && s.offset-merged[k].end() <= mergeGap {
			last := &merged[k]
			last.init = append(last.init, make([]byte, s.offset-last.end())...)
			last.init = append(last.init, s.init...)
			continue
		}
		merged = append(merged, segment{offset: s.offset, init: append([]byte(nil), s.init...)})
	}
	return merged
}

// importsGlobal reports whether an import section imports a global, or
// cannot be read.
func importsGlobal(sec []byte) bool {
	count, n := uleb(sec)
	if n == 0 {
		return true
	}
	sec = sec[n:]
	for range count {
		for range 2 { // module and field names
			l, n := uleb(sec)
			if n == 0 || uint64(len(sec)-n) < l {
				return true
			}
			sec = sec[n+int(l):]
		}
		if len(sec) == 0 {
			return true
		}
		kind := sec[0]
		sec = sec[1:]
		switch kind {
		case 0:
			_, n := uleb(sec)
			if n == 0 {
				return true
			}
			sec = sec[n:]
		case 1:
			if len(sec) < 2 {
				return true
			}
			flags := sec[1]
			sec = sec[2:]
			for range 1 + int(flags&1) {
				_, n := uleb(sec)
				if n == 0 {
					return true
				}
				sec = sec[n:]
			}
		default: // a global, a memory (refused before), or not understood
			return true
		}
	}
	return false
}

// mutableGlobals returns the indexes of the mutable globals a global
// section defines (the module imports none, so they start at 0).
func mutableGlobals(sec []byte) ([]uint32, error) {
	count, n := uleb(sec)
	if n == 0 {
		return nil, fmt.Errorf("global section is malformed")
	}
	sec = sec[n:]
	var out []uint32
	for i := range count {
		if len(sec) < 2 {
			return nil, fmt.Errorf("global %d is cut short", i)
		}
		typ, mut := sec[0], sec[1]
		sec = sec[2:]
		if mut == 1 {
			switch typ {
			case 0x7f, 0x7e, 0x7d, 0x7c: // i32 i64 f32 f64
				out = append(out, uint32(i))
			default:
				return nil, fmt.Errorf("mutable global %d is of type 0x%x, which the host cannot read", i, typ)
			}
		}
		n, err := constExprLen(sec)
		if err != nil {
			return nil, fmt.Errorf("global %d: %w", i, err)
		}
		sec = sec[n:]
	}
	return out, nil
}

// constExprLen is the length of the constant expression at the start of
// b, through its end opcode.
func constExprLen(b []byte) (int, error) {
	for i := 0; i < len(b); {
		op := b[i]
		i++
		switch op {
		case 0x0b: // end
			return i, nil
		case 0x41, 0x42, 0x23, 0xd2: // i32.const, i64.const, global.get, ref.func
			_, n := uleb(b[i:]) // a signed LEB128 has the same length
			if n == 0 {
				return 0, fmt.Errorf("malformed constant expression")
			}
			i += n
		case 0x43:
			i += 4
		case 0x44:
			i += 8
		case 0xd0: // ref.null
			i++
		case 0x6a, 0x6b, 0x6c, 0x7c, 0x7d, 0x7e: // extended constant arithmetic
		default:
			return 0, fmt.Errorf("constant expression opcode 0x%x is not understood", op)
		}
	}
	return 0, fmt.Errorf("constant expression has no end")
}

// exportNames returns the names an export section exports.
func exportNames(sec []byte) ([]string, error) {
	count, n := uleb(sec)
	if n == 0 {
		return nil, fmt.Errorf("export section is malformed")
	}
	sec = sec[n:]
	names := make([]string, 0, min(count, uint64(len(sec))))
	for range count {
		l, n := uleb(sec)
		if n == 0 || uint64(len(sec)-n) < l {
			return nil, fmt.Errorf("export section is malformed")
		}
		names = append(names, string(sec[n:n+int(l)]))
		sec = sec[n+int(l):]
		if len(sec) == 0 {
			return nil, fmt.Errorf("export section is malformed")
		}
		_, n = uleb(sec[1:])
		if n == 0 {
			return nil, fmt.Errorf("export section is malformed")
		}
		sec = sec[1+n:]
	}
	return names, nil
}

// HasExports reports whether the module (well formed, or the answer is
// false) exports every one of names.
func HasExports(module []byte, names ...string) bool {
	b := module[min(8, len(module)):]
	for len(b) > 0 {
		id := b[0]
		size, n := uleb(b[1:])
		if n == 0 || uint64(len(b)-1-n) < size {
			return false
		}
		sec := b[1+n : 1+n+int(size)]
		b = b[1+n+int(size):]
		if id != 7 {
			continue
		}
		have, err := exportNames(sec)
		if err != nil {
			return false
		}
		for _, want := range names {
			if !slices.Contains(have, want) {
				return false
			}
		}
		return true
	}
	return false
}
