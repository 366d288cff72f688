package sandbox

import "github.com/tetratelabs/wazero/experimental"

// callMemory allocates the linear memory of one call (wazero's
// experimental.MemoryAllocator) and enforces the call's memory limit: a
// memory.grow past it fails, and the guest sees what it would see on a
// machine out of memory.
//
// Where the OS allows (mapMemory), the memory is an anonymous mapping of
// the limit, outside the Go heap: pages are committed as the guest touches
// them, never copied on growth, and given back to the OS by release when
// the call ends. On the Go heap instead, a freed 64 MiB buffer stays in the
// process until the runtime's scavenger returns it, which after a burst of
// memory bombs took minutes or never happened.
//
// wazero calls Free when it closes the instance, which Sandbox.Close may do
// from another goroutine while the guest is still running; so Free does
// nothing, and Run calls release once the guest has returned.
type callMemory struct {
	limit uint64
	mems  []*linearMemory
}

var _ experimental.MemoryAllocator = (*callMemory)(nil)

func (c *callMemory) Allocate(_, max uint64) experimental.LinearMemory {
	reserve := min(c.limit, max)
	m := &linearMemory{limit: reserve, mapped: mapMemory(reserve)}
	c.mems = append(c.mems, m)
	return m
}

// release returns the call's memory to the OS. The guest must be done.
func (c *callMemory) release() {
	for _, m := range c.mems {
		if m.mapped != nil {
			unmapMemory(m.mapped)
		}
		m.mapped, m.buf = nil, nil
	}
	c.mems = nil
}

// linearMemory is one memory of a call: a slice of its mapping, or a Go
// slice when mapping failed or is not supported.
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

// Free is a no-op; see callMemory.
func (m *linearMemory) Free() {}
