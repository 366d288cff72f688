package wasmmem

import "github.com/tetratelabs/wazero/experimental"

// Allocator allocates the linear memory of one instance (wazero's
// experimental.MemoryAllocator, given to it with
// experimental.WithMemoryAllocator) and enforces its limit: a memory.grow
// past it fails, and the guest sees what it would see on a machine out of
// memory.
//
// Where the OS allows (mapMemory), the memory is an anonymous mapping of
// the limit, outside the Go heap: pages are committed as the guest touches
// them, never copied on growth, and given back to the OS by Release when
// the instance ends. On the Go heap instead, a freed 64 MiB buffer stays in
// the process until the runtime's scavenger returns it, which after a burst
// of memory bombs took minutes or never happened.
//
// wazero calls Free when it closes the instance, which the host may do
// from another goroutine while the guest is still running (a timeout, a
// Close); so Free does nothing, and the host calls Release once the guest
// has returned.
type Allocator struct {
	limit  uint64
	image  *Image // the first memory's contents, if not zeros
	imaged bool   // the first memory was made from image
	mems   []*linearMemory
}

var _ experimental.MemoryAllocator = (*Allocator)(nil)

// New returns an Allocator whose memories may hold at most limit bytes
// each.
func New(limit uint64) *Allocator { return &Allocator{limit: limit} }

// Allocate implements experimental.MemoryAllocator.
func (a *Allocator) Allocate(_, max uint64) experimental.LinearMemory {
	reserve := min(a.limit, max)
	m := &linearMemory{limit: reserve, mapped: mapMemory(reserve)}
	if a.image != nil && len(a.mems) == 0 && a.image.size <= reserve {
		a.image.fill(m)
		a.imaged = true
	}
	a.mems = append(a.mems, m)
	return m
}

// FromImage reports whether the first memory was made from the image
// NewFromImage was given (it is not when the image does not fit).
func (a *Allocator) FromImage() bool { return a.imaged }

// Release returns the memory to the OS. The guest must have returned: its
// memory is unmapped under it.
func (a *Allocator) Release() {
	for _, m := range a.mems {
		if m.mapped != nil {
			unmapMemory(m.mapped)
		}
		m.mapped, m.buf = nil, nil
	}
	a.mems = nil
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
		// Past len are zeros (it never shrinks) or, in a memory made
		// from an image, the image's bytes, which wazero grows it to.
		m.buf = m.buf[:size]
	default:
		b := make([]byte, size, max(size, min(2*uint64(cap(m.buf)), m.limit)))
		copy(b, m.buf)
		m.buf = b
	}
	return m.buf
}

// Free is a no-op; see Allocator.
func (m *linearMemory) Free() {}
