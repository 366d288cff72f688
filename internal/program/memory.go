package program

import "github.com/tetratelabs/wazero/experimental"

// guestMemory allocates the linear memory of one instance (wazero's
// experimental.MemoryAllocator) and enforces its cap: a memory.grow past
// it fails, and Go's wasm runtime dies with "out of memory", which Run
// reports as the program's memory limit. The approach is
// internal/sandbox's: one Runtime allowing the most a wasm32 memory can
// hold, so one compiled module serves every cap.
//
// Where the OS allows (mapMemory) the memory is an anonymous mapping of
// the cap outside the Go heap, committed as the guest touches it and
// given back when the instance ends; a freed Go slice would stay in the
// process until the scavenger returns it.
//
// wazero calls Free when it closes the module, possibly while the guest
// still runs on another goroutine, so Free does nothing; the instance's
// goroutine calls release once the guest has returned.
type guestMemory struct {
	limit uint64
	mems  []*linearMemory
}

var _ experimental.MemoryAllocator = (*guestMemory)(nil)

func (g *guestMemory) Allocate(_, max uint64) experimental.LinearMemory {
	reserve := min(g.limit, max)
	m := &linearMemory{limit: reserve, mapped: mapMemory(reserve)}
	g.mems = append(g.mems, m)
	return m
}

// release returns the memory to the OS. The guest must have returned.
func (g *guestMemory) release() {
	for _, m := range g.mems {
		if m.mapped != nil {
			unmapMemory(m.mapped)
		}
		m.mapped, m.buf = nil, nil
	}
	g.mems = nil
}

// linearMemory is one memory: a slice of its mapping, or a Go slice when
// mapping failed or is not supported.
type linearMemory struct {
	limit  uint64
	mapped []byte
	buf    []byte
}

func (m *linearMemory) Reallocate(size uint64) []byte {
	switch {
	case size > m.limit:
		return nil // memory.grow fails
	case m.mapped != nil:
		return m.mapped[:size]
	case size <= uint64(cap(m.buf)):
		// Never shrinks, so the bytes past len were never written: zero.
		m.buf = m.buf[:size]
	default:
		b := make([]byte, size, max(size, min(2*uint64(cap(m.buf)), m.limit)))
		copy(b, m.buf)
		m.buf = b
	}
	return m.buf
}

// Free is a no-op; see guestMemory.
func (m *linearMemory) Free() {}
