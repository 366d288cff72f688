//go:build unix

package testenv

import (
	"syscall"
	"time"
)

// ProcessCPU is the CPU time this process has used (user and system, every
// thread), and whether it could be read. Benchmarks report it beside wall
// time because the machines they run on are shared: wall time per operation
// grows with the other load, CPU time per operation much less.
func ProcessCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
