//go:build unix

package policy

import (
	"syscall"
	"time"
)

// processCPU is the CPU time the process has used (user and system, every
// thread). Benchmarks report it beside wall time because the machines they
// run on are shared: wall time per operation grows with the other load,
// CPU time per operation much less.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
