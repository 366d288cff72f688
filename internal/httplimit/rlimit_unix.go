//go:build linux || darwin

package httplimit

import "syscall"

// RaiseOpenFiles raises the soft limit on open file descriptors to the hard
// limit, where the OS allows, and returns both as they are then. Every
// connection holds a descriptor, so the soft limit (often 1024) is how many
// clients a listener can hold at all. (Go raises it itself at start-up on
// Linux and macOS since 1.19; this makes sure, and tells what it is.)
func RaiseOpenFiles() (soft, hard uint64, err error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, 0, err
	}
	if rl.Cur < rl.Max {
		want := rl
		want.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
			return rl.Cur, rl.Max, err // macOS refuses an unlimited soft limit
		}
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			return 0, 0, err
		}
	}
	return rl.Cur, rl.Max, nil
}
