package wasmmem

import (
	"bytes"
	"testing"
)

func TestAllocatorCapsGrowth(t *testing.T) {
	a := New(4 * PageSize)
	// The module asks for more than the cap may hold: the cap wins.
	m := a.Allocate(PageSize, MaxPages*PageSize)
	b := m.Reallocate(PageSize)
	if len(b) != PageSize {
		t.Fatalf("len = %d, want %d", len(b), PageSize)
	}
	b[0], b[PageSize-1] = 1, 2
	grown := m.Reallocate(4 * PageSize)
	if len(grown) != 4*PageSize {
		t.Fatalf("len after growth = %d, want %d", len(grown), 4*PageSize)
	}
	if grown[0] != 1 || grown[PageSize-1] != 2 {
		t.Error("growth lost the bytes already written")
	}
	if !bytes.Equal(grown[PageSize:], make([]byte, 3*PageSize)) {
		t.Error("grown pages are not zero")
	}
	if m.Reallocate(4*PageSize+1) != nil {
		t.Error("Reallocate past the cap succeeded; want nil (memory.grow fails)")
	}
	m.Free() // a no-op: the memory stays usable until Release
	grown[1] = 3
	a.Release()
	if a.mems != nil {
		t.Error("Release kept the memories")
	}
}

func TestAllocatorUnderModuleMaximum(t *testing.T) {
	a := New(MaxPages * PageSize)
	m := a.Allocate(0, 2*PageSize) // the module's own maximum is below the cap
	defer a.Release()
	if m.Reallocate(2*PageSize) == nil {
		t.Fatal("Reallocate to the module's maximum failed")
	}
	if m.Reallocate(3*PageSize) != nil {
		t.Error("Reallocate past the module's maximum succeeded")
	}
}

// TestGoSliceMemory covers the memory used where mapping is not possible:
// growth copies, keeps what was written and never shrinks.
func TestGoSliceMemory(t *testing.T) {
	m := &linearMemory{limit: 8 * PageSize}
	b := m.Reallocate(PageSize)
	b[10] = 7
	b = m.Reallocate(3 * PageSize)
	if len(b) != 3*PageSize || b[10] != 7 {
		t.Fatalf("len %d, b[10] %d after growth; want %d, 7", len(b), b[10], 3*PageSize)
	}
	if !bytes.Equal(b[PageSize:], make([]byte, 2*PageSize)) {
		t.Error("grown bytes are not zero")
	}
	if m.Reallocate(8*PageSize) == nil || m.Reallocate(8*PageSize+1) != nil {
		t.Error("the limit is not where it should be")
	}
}
