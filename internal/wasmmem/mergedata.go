package wasmmem

import (
	"cmp"
	"slices"
)

// MergeData returns the module with its active data segments coalesced into
// few, or the module itself when it cannot be done safely; the result
// instantiates to the same memory.
//
// Why: Go's linker emits one data segment per run of non-zero bytes, some
// 50,000 for a small tool, and wazero evaluates each one's offset
// expression and copies it on every instantiation, with allocations: most
// of what instantiating such a module costs (milliseconds). A segment
// written into a fresh memory, which is all zeros, may be widened with the
// zeros around it, so segments that are close are joined with the bytes
// between them.
//
// It rewrites only a module whose every segment is active, for memory 0,
// at an i32.const offset, with no two overlapping (then their order does
// not matter), and that has no data count section: the bulk memory
// instructions that name segments (memory.init, data.drop) require one, so
// without it nothing refers to a segment by its index. Segments are joined
// across gaps of at most mergeGap bytes (so that few pages are touched that
// would not have been). Sections other than the data section are copied
// as they are.
func MergeData(module []byte) []byte {
	const importSection, dataSection, dataCountSection = 2, 11, 12
	if len(module) < 8 {
		return module
	}
	hdr, start, end := -1, 0, 0 // the data section's header and contents
	for off := 8; off < len(module); {
		id := module[off]
		size, n := uleb(module[off+1:])
		if n == 0 || uint64(len(module)-off-1-n) < size {
			return module
		}
		body := module[off+1+n : off+1+n+int(size)]
		switch id {
		case importSection:
			if importsMemory(body) {
				return module // not all zeros: the gaps must not be written
			}
		case dataCountSection:
			return module
		case dataSection:
			hdr, start, end = off, off+1+n, off+1+n+int(size)
		}
		off += 1 + n + int(size)
	}
	if hdr < 0 {
		return module
	}
	segs, ok := parseData(module[start:end])
	if !ok || len(segs) < 2 {
		return module
	}
	slices.SortStableFunc(segs, func(a, b segment) int { return cmp.Compare(a.offset, b.offset) })
	for i := 1; i < len(segs); i++ {
		if segs[i].offset < segs[i-1].end() {
			return module // overlapping: their order matters
		}
	}
	var merged []segment
	for _, s := range segs {
		if k := len(merged) - 1; k >= 0 && s.offset-merged[k].end() <= mergeGap {
			last := &merged[k]
			last.init = append(last.init, make([]byte, s.offset-last.end())...)
			last.init = append(last.init, s.init...)
			continue
		}
		merged = append(merged, segment{offset: s.offset, init: slices.Clone(s.init)})
	}
	var sec []byte
	sec = appendUleb(sec, uint64(len(merged)))
	for _, s := range merged {
		sec = append(sec, 0, 0x41) // active for memory 0; i32.const
		sec = appendSleb(sec, int64(int32(uint32(s.offset))))
		sec = append(sec, 0x0b) // end
		sec = appendUleb(sec, uint64(len(s.init)))
		sec = append(sec, s.init...)
	}
	out := make([]byte, 0, len(module))
	out = append(out, module[:hdr]...)
	out = append(out, dataSection)
	out = appendUleb(out, uint64(len(sec)))
	out = append(out, sec...)
	return append(out, module[end:]...)
}

// importsMemory reports whether an import section imports a memory, or
// cannot be read (then the caller must assume it does).
func importsMemory(sec []byte) bool {
	count, n := uleb(sec)
	if n == 0 {
		return true
	}
	sec = sec[n:]
	skipName := func() bool {
		l, n := uleb(sec)
		if n == 0 || uint64(len(sec)-n) < l {
			return false
		}
		sec = sec[n+int(l):]
		return true
	}
	skipUleb := func() bool {
		_, n := uleb(sec)
		sec = sec[n:]
		return n > 0
	}
	skipLimits := func() bool {
		if len(sec) == 0 {
			return false
		}
		flags := sec[0]
		sec = sec[1:]
		if !skipUleb() {
			return false
		}
		return flags&1 == 0 || skipUleb()
	}
	for range count {
		if !skipName() || !skipName() || len(sec) == 0 {
			return true
		}
		kind := sec[0]
		sec = sec[1:]
		var ok bool
		switch kind {
		case 0: // function: its type index
			ok = skipUleb()
		case 1: // table: its element type, then limits
			ok = len(sec) > 0
			if ok {
				sec = sec[1:]
				ok = skipLimits()
			}
		case 3: // global: its value type and mutability
			ok = len(sec) >= 2
			if ok {
				sec = sec[2:]
			}
		default: // 2, a memory; anything else is not understood
			return true
		}
		if !ok {
			return true
		}
	}
	return false
}

// mergeGap is the widest run of zeros MergeData writes between two
// segments to join them.
const mergeGap = 256

// segment is an active data segment; offset is the i32 as wazero uses it
// (unsigned), in 64 bits so that offset+len cannot overflow.
type segment struct {
	offset uint64
	init   []byte
}

func (s segment) end() uint64 { return s.offset + uint64(len(s.init)) }

// parseData reads a data section's segments, or false when one is not an
// active segment for memory 0 at an i32.const offset.
func parseData(sec []byte) ([]segment, bool) {
	count, n := uleb(sec)
	if n == 0 {
		return nil, false
	}
	sec = sec[n:]
	segs := make([]segment, 0, min(count, uint64(len(sec))))
	for range count {
		// Flag 0 (active, memory 0), i32.const, its operand, end.
		if len(sec) < 2 || sec[0] != 0 || sec[1] != 0x41 {
			return nil, false
		}
		v, n := sleb32(sec[2:])
		if n == 0 || len(sec) < 2+n+1 || sec[2+n] != 0x0b {
			return nil, false
		}
		sec = sec[2+n+1:]
		size, n := uleb(sec)
		if n == 0 || uint64(len(sec)-n) < size {
			return nil, false
		}
		segs = append(segs, segment{offset: uint64(uint32(v)), init: sec[n : n+int(size)]})
		sec = sec[n+int(size):]
	}
	if len(sec) != 0 {
		return nil, false
	}
	return segs, true
}

// sleb32 decodes a signed LEB128 i32, returning it and its length (0 when b
// does not hold one).
func sleb32(b []byte) (int32, int) {
	var v int64
	for i := 0; i < len(b) && i < 5; i++ {
		v |= int64(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			if shift := 7 * (i + 1); shift < 64 && b[i]&0x40 != 0 {
				v |= -1 << shift
			}
			return int32(v), i + 1
		}
	}
	return 0, 0
}

func appendUleb(b []byte, v uint64) []byte {
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

func appendSleb(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
