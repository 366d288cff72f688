//go:build unix

package upstream

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// setProcAttrs puts the child in its own process group, so that closing
// the pool can also kill the processes it started (npx → node, shell
// wrappers) and a terminal's Ctrl-C reaches airlock only.
func setProcAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killProcessGroup kills whatever is left in the child's process group
// after the child itself was reaped.
func killProcessGroup(pid int) {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}

// processExited reports whether p has exited and been reaped. Unlike
// reading cmd.ProcessState it is safe while another goroutine waits.
func processExited(p *os.Process) bool {
	return errors.Is(p.Signal(syscall.Signal(0)), os.ErrProcessDone)
}
