package wasmmem

import "syscall"

// mapMemory reserves n bytes of address space for a guest's memory,
// read-write, backed by nothing until touched (MAP_NORESERVE: a 4 GiB limit
// commits no swap). It returns nil if the mapping fails; the memory is then
// an ordinary Go slice.
func mapMemory(n uint64) []byte {
	if n == 0 || n > MaxPages*PageSize {
		return nil
	}
	b, err := syscall.Mmap(-1, 0, int(n), syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS|syscall.MAP_NORESERVE)
	if err != nil {
		return nil
	}
	return b
}

func unmapMemory(b []byte) { _ = syscall.Munmap(b) }
