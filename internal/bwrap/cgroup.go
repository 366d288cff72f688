package bwrap

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// cgroupKind is which cgroup interface the sandbox can use.
type cgroupKind int

const (
	// noCgroup: only rlimits bound the server. The case for an
	// unprivileged airlock, and for cgroup v2 without a delegated subtree
	// (creating one under airlock's own cgroup would need airlock to move
	// itself into a leaf first; see RATIONALE.md).
	noCgroup cgroupKind = iota
	// cgroupV1: the pids and memory hierarchies, writable (airlock is
	// root, or they were delegated).
	cgroupV1
)

// cgroupParent is the directory airlock's server cgroups are made in,
// under each v1 hierarchy.
const cgroupParent = "airlock-stdio"

// findCgroups reports whether per-server cgroups can be made: v1 pids and
// memory hierarchies under root, writable by this process.
func findCgroups() (cgroupKind, string) {
	const root = "/sys/fs/cgroup"
	for _, c := range []string{"pids", "memory"} {
		dir := filepath.Join(root, c, cgroupParent)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return noCgroup, ""
		}
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
			return noCgroup, ""
		}
	}
	return cgroupV1, root
}

// serverCgroup is one server's cgroups; procs are the files its first
// process writes its PID into.
type serverCgroup struct {
	dirs  []string
	procs []string
}

// newCgroup makes the server's pids and memory cgroups, or nil when the
// host has none to give.
func (h *Host) newCgroup(s Spec) (*serverCgroup, error) {
	if h.cgroup != cgroupV1 {
		return nil, nil
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := s.Name + "-" + hex.EncodeToString(b[:])
	cg := &serverCgroup{}
	limits := []struct{ ctrl, file, value string }{
		{"pids", "pids.max", strconv.Itoa(s.Processes)},
		{"memory", "memory.limit_in_bytes", strconv.FormatInt(s.Memory, 10)},
	}
	for _, l := range limits {
		dir := filepath.Join(h.cgroupRoot, l.ctrl, cgroupParent, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			cg.remove()
			return nil, fmt.Errorf("creating the sandbox's cgroup: %w", err)
		}
		cg.dirs = append(cg.dirs, dir)
		if err := os.WriteFile(filepath.Join(dir, l.file), []byte(l.value), 0o644); err != nil {
			cg.remove()
			return nil, fmt.Errorf("setting %s of the sandbox's cgroup: %w", l.file, err)
		}
		cg.procs = append(cg.procs, filepath.Join(dir, "cgroup.procs"))
	}
	// Swap would let the memory limit be exceeded on hosts with swap; the
	// file is missing when the kernel does not account swap.
	if len(cg.dirs) == 2 {
		_ = os.WriteFile(filepath.Join(cg.dirs[1], "memory.memsw.limit_in_bytes"), []byte(strconv.FormatInt(s.Memory, 10)), 0o644)
	}
	return cg, nil
}

// remove deletes the cgroups; called once the server has exited (a cgroup
// with processes cannot be removed, and is then left for the next
// start-up to find empty).
func (cg *serverCgroup) remove() {
	for _, d := range cg.dirs {
		_ = os.Remove(d)
	}
}
