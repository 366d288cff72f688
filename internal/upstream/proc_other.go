//go:build !unix

package upstream

import (
	"os"
	"os/exec"
)

func setProcAttrs(*exec.Cmd) {}

func killProcessGroup(int) {}

func processExited(*os.Process) bool { return false }
