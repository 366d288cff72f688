package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental/sysfs"

	"github.com/airlock-run/airlock/internal/wasmmem"
)

// Mount exposes a host directory to the guest.
type Mount struct {
	HostDir   string // must exist and be a directory
	GuestPath string // absolute, e.g. "/data"
	ReadOnly  bool
	// Quotas of a read-write mount, for everything in the directory, not
	// only what this call adds: MaxBytes of regular files (a file with
	// several names counted once) and MaxFiles entries (files,
	// directories, links) below it. Zero takes the defaults; read-only
	// mounts ignore them. A change past either fails and stops the call
	// with a *QuotaError.
	MaxBytes int64 // default 64 MiB
	MaxFiles int   // default 1000
}

// Limits bound one call. Zero fields take the defaults.
type Limits struct {
	MemoryBytes int64         // guest memory cap (rounded up to 64 KiB pages; default 64 MiB)
	Timeout     time.Duration // default 30s; enforced by context cancellation
	OutputBytes int           // stdout cap (default 1 MiB); stderr is capped too (e.g. 64 KiB, truncated, not an error)
	// OpenFiles caps the files and directories the guest has open at once
	// in its mounts (default 64; stdin, stdout and stderr not counted).
	// Opening one more fails and stops the call with ErrOpenFiles.
	OpenFiles int
}

// Defaults for zero Limits and Mount fields, and the fixed stderr cap.
const (
	DefaultMemoryBytes = 64 << 20
	DefaultTimeout     = 30 * time.Second
	DefaultOutputBytes = 1 << 20
	DefaultOpenFiles   = 64
	DefaultMountBytes  = 64 << 20
	DefaultMountFiles  = 1000
	// StderrBytes is how much stderr a call keeps. Stderr is diagnostics,
	// so more is dropped silently rather than failing the call.
	StderrBytes = 64 << 10
)

const (
	pageSize = wasmmem.PageSize
	maxPages = wasmmem.MaxPages
)

// Call is one invocation of a module.
type Call struct {
	Args   []string          // argv after the program name
	Stdin  []byte            // the tool's JSON arguments
	Env    map[string]string // exactly these variables, nothing inherited
	Mounts []Mount
	Limits Limits
}

// Result is what a call produced. A non-zero ExitCode is the tool's own
// failure, not an error of Run.
type Result struct {
	Stdout, Stderr []byte
	ExitCode       int
	// Duration is from when the call was handed its instance (when its
	// timeout starts counting) to the guest's end.
	Duration time.Duration
}

// Errors Run returns, wrapped with detail; test them with errors.Is. Result
// holds whatever output the guest produced before it was stopped.
var (
	// ErrTimeout: the call ran past Limits.Timeout and was stopped.
	ErrTimeout = errors.New("timed out")
	// ErrMemoryLimit: the guest needed more memory than Limits.MemoryBytes.
	ErrMemoryLimit = errors.New("memory limit exceeded")
	// ErrOutputLimit: the guest wrote more than Limits.OutputBytes to
	// stdout and was stopped.
	ErrOutputLimit = errors.New("output limit exceeded")
	// ErrTrap: the guest crashed in a way the wasm engine caught (an
	// unreachable instruction, an out-of-bounds access) instead of exiting.
	ErrTrap = errors.New("trapped")
	// ErrOpenFiles: the guest tried to have more than Limits.OpenFiles
	// files open at once and was stopped.
	ErrOpenFiles = errors.New("open file limit reached")
	// ErrQuota: the guest tried to put more in a read-write mount than its
	// quota allows and was stopped; errors.As gives the *QuotaError.
	ErrQuota = errors.New("mount quota exceeded")
)

// QuotaError says which quota of which mount a call hit.
type QuotaError struct {
	Mount string // the guest path
	Files bool   // the entry count (Mount.MaxFiles), not the bytes (Mount.MaxBytes)
	Limit int64
}

func (e *QuotaError) Error() string {
	if e.Files {
		return fmt.Sprintf("%s: mount %s may hold at most %d files", ErrQuota, e.Mount, e.Limit)
	}
	return fmt.Sprintf("%s: mount %s may hold at most %s", ErrQuota, e.Mount, mib(e.Limit))
}

func (e *QuotaError) Unwrap() error { return ErrQuota }

func (l Limits) withDefaults() (Limits, error) {
	if l.MemoryBytes < 0 || l.Timeout < 0 || l.OutputBytes < 0 || l.OpenFiles < 0 {
		return l, fmt.Errorf("negative limit in %+v", l)
	}
	if l.MemoryBytes > maxPages*pageSize {
		return l, fmt.Errorf("memory limit %d bytes is over the 4 GiB a wasm32 guest can address", l.MemoryBytes)
	}
	if l.MemoryBytes == 0 {
		l.MemoryBytes = DefaultMemoryBytes
	}
	if l.Timeout == 0 {
		l.Timeout = DefaultTimeout
	}
	if l.OutputBytes == 0 {
		l.OutputBytes = DefaultOutputBytes
	}
	if l.OpenFiles == 0 {
		l.OpenFiles = DefaultOpenFiles
	}
	return l, nil
}

// pagesFor is the call's limit in wasm pages for a byte limit, 0 meaning
// the default.
func pagesFor(memoryBytes int64) uint32 {
	if memoryBytes == 0 {
		memoryBytes = DefaultMemoryBytes
	}
	return uint32((memoryBytes + pageSize - 1) / pageSize)
}

// Run runs the module to completion in an instance no other call has
// used: a warm one from the pool of the call's shape, or a new one.
//
// It returns an error for a bad Call, for ErrTimeout, ErrMemoryLimit,
// ErrOutputLimit, ErrOpenFiles, ErrQuota and ErrTrap, and when ctx is
// cancelled (then the error wraps ctx.Err(), not ErrTimeout, so callers can
// tell their own cancellation from the tool's time limit).
func (m *Module) Run(ctx context.Context, c Call) (Result, error) {
	lim, err := c.Limits.withDefaults()
	if err != nil {
		return Result{}, fmt.Errorf("sandbox: %s: %w", m.name, err)
	}
	for k, v := range c.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.Contains(v, "\x00") {
			return Result{}, fmt.Errorf("sandbox: %s: invalid environment variable %q", m.name, k)
		}
	}
	for _, a := range c.Args {
		if strings.Contains(a, "\x00") {
			return Result{}, fmt.Errorf("sandbox: %s: argument %q contains NUL", m.name, a)
		}
	}
	pages := pagesFor(lim.MemoryBytes)
	if m.minPages > pages {
		return Result{}, fmt.Errorf("sandbox: %s: %w: module needs more than %s: it declares %d pages of initial memory",
			m.name, ErrMemoryLimit, mib(lim.MemoryBytes), m.minPages)
	}
	inst, err := m.take(m.shapeOf(c, lim))
	if err != nil {
		return Result{}, fmt.Errorf("sandbox: %s: %w", m.name, err)
	}
	return inst.run(ctx, c.Stdin)
}

func mib(b int64) string {
	if b%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", b>>20)
	}
	return fmt.Sprintf("%d bytes", b)
}

func (s *Sandbox) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// mountAll validates the mounts and makes inst's guest file systems of
// them. Each host directory is opened as an *os.Root, and a read-write
// mount's quota taken, when the call starts (instance.run): the guest
// cannot use a mount before, and a warm instance holds no descriptor.
func mountAll(mounts []Mount, inst *instance) (wazero.FSConfig, []*rootFS, error) {
	var roots []*rootFS
	fsc := wazero.NewFSConfig()
	seen := map[string]bool{}
	for _, mt := range mounts {
		gp := mt.GuestPath
		if !path.IsAbs(gp) {
			return nil, roots, fmt.Errorf("mount %s: guest path %q is not absolute", mt.HostDir, gp)
		}
		gp = path.Clean(gp)
		if seen[gp] {
			return nil, roots, fmt.Errorf("mount %s: guest path %s mounted twice", mt.HostDir, gp)
		}
		seen[gp] = true
		if mt.MaxBytes < 0 || mt.MaxFiles < 0 {
			return nil, roots, fmt.Errorf("mount %s: negative quota", mt.HostDir)
		}
		fi, err := os.Stat(mt.HostDir)
		if err == nil && !fi.IsDir() {
			err = errors.New("not a directory")
		}
		if err != nil {
			return nil, roots, fmt.Errorf("mount host dir %s: %w", mt.HostDir, err)
		}
		rfs := &rootFS{host: mt.HostDir, readOnly: mt.ReadOnly, call: inst.cs, guest: gp}
		if !mt.ReadOnly {
			rfs.maxBytes, rfs.maxFiles = int64(mt.MaxBytes), int64(mt.MaxFiles)
			if rfs.maxBytes == 0 {
				rfs.maxBytes = DefaultMountBytes
			}
			if rfs.maxFiles == 0 {
				rfs.maxFiles = DefaultMountFiles
			}
		}
		roots = append(roots, rfs)
		fsc = fsc.(sysfs.FSConfig).WithSysFSMount(gatedFS{FS: rfs, inst: inst}, gp)
	}
	// Added last so the mounts keep the first descriptors (3, 4, ...).
	if !seen["/"] {
		fsc = fsc.(sysfs.FSConfig).WithSysFSMount(gatedFS{FS: newEmptyRoot(inst.cs), inst: inst}, "/")
	}
	return fsc, roots, nil
}

// capWriter keeps at most max bytes. Past that it either fails the write and
// calls onFull (stdout: the guest is stopped, not buffered without bound) or,
// with no onFull, drops the rest silently (stderr).
//
// It also notes whether watch appeared anywhere in the stream, including
// the dropped part. wazero calls it from the guest's single thread only.
type capWriter struct {
	buf    []byte
	max    int
	full   bool
	onFull func()

	watch []byte
	seen  bool
	tail  []byte // the last len(watch)-1 bytes, to match across writes
}

var errFull = errors.New("output limit reached")

func (w *capWriter) Write(p []byte) (int, error) {
	w.look(p)
	if room := w.max - len(w.buf); len(p) > room {
		w.buf = append(w.buf, p[:room]...)
		if w.onFull != nil {
			w.full = true
			w.onFull()
			return room, errFull
		}
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}

func (w *capWriter) look(p []byte) {
	if len(w.watch) == 0 || w.seen {
		return
	}
	joined := append(w.tail, p...)
	if bytes.Contains(joined, w.watch) {
		w.seen = true
		return
	}
	keep := min(len(w.watch)-1, len(joined))
	w.tail = append(w.tail[:0], joined[len(joined)-keep:]...)
}
