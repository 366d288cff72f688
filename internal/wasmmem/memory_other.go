//go:build !linux

package wasmmem

// mapMemory is not used outside Linux: a guest's memory is a Go slice,
// which the Go runtime returns to the OS in its own time.
func mapMemory(uint64) []byte { return nil }

func unmapMemory([]byte) {}
