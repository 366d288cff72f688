package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	"github.com/tetratelabs/wazero/sys"
)

// Mount exposes a host directory to the guest.
type Mount struct {
	HostDir   string // must exist and be a directory
	GuestPath string // absolute, e.g. "/data"
	ReadOnly  bool
}

// Limits bound one call. Zero fields take the defaults.
type Limits struct {
	MemoryBytes int64         // guest memory cap (rounded up to 64 KiB pages; default 64 MiB)
	Timeout     time.Duration // default 30s; enforced by context cancellation
	OutputBytes int           // stdout cap (default 1 MiB); stderr is capped too (e.g. 64 KiB, truncated, not an error)
}

// Defaults for zero Limits fields, and the fixed stderr cap.
const (
	DefaultMemoryBytes = 64 << 20
	DefaultTimeout     = 30 * time.Second
	DefaultOutputBytes = 1 << 20
	// StderrBytes is how much stderr a call keeps. Stderr is diagnostics,
	// so more is dropped silently rather than failing the call.
	StderrBytes = 64 << 10
)

const (
	pageSize = 64 << 10
	maxPages = 1 << 16 // wasm32 addresses 4 GiB at most
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
	// Duration is instantiation plus run, timed from when the timeout
	// starts counting.
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
)

func (l Limits) withDefaults() (Limits, error) {
	if l.MemoryBytes < 0 || l.Timeout < 0 || l.OutputBytes < 0 {
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
	return l, nil
}

// pagesFor is the wazero page limit for a byte limit, 0 meaning the default.
func pagesFor(memoryBytes int64) uint32 {
	if memoryBytes == 0 {
		memoryBytes = DefaultMemoryBytes
	}
	return uint32((memoryBytes + pageSize - 1) / pageSize)
}

// Run instantiates the module afresh and runs it to completion.
//
// It returns an error for a bad Call, for ErrTimeout, ErrMemoryLimit,
// ErrOutputLimit and ErrTrap, and when ctx is cancelled (then the error
// wraps ctx.Err(), not ErrTimeout, so callers can tell their own
// cancellation from the tool's time limit).
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
	fsc, closeMounts, err := mountAll(c.Mounts)
	if err != nil {
		return Result{}, fmt.Errorf("sandbox: %s: %w", m.name, err)
	}
	defer closeMounts()

	pages := pagesFor(lim.MemoryBytes)
	r, cm, err := m.s.compile(ctx, m, pages)
	if err != nil {
		// wazero refuses at compile time a module whose declared memory is
		// already over the limit (unless the caller gave up first).
		if m.overLimit(pages) && !errors.Is(err, ctx.Err()) {
			return Result{}, fmt.Errorf("sandbox: %s: %w: module needs more than %s: %v",
				m.name, ErrMemoryLimit, mib(lim.MemoryBytes), err)
		}
		return Result{}, fmt.Errorf("sandbox: %s: %w", m.name, err)
	}

	// Timed from here, so that Duration is never less than the time the
	// guest was allowed when it hits its timeout.
	start := time.Now()
	runCtx, cancel := context.WithTimeout(ctx, lim.Timeout)
	defer cancel()
	stdout := &capWriter{max: lim.OutputBytes, onFull: cancel}
	stderr := &capWriter{max: StderrBytes, watch: []byte("out of memory")}

	mc := wazero.NewModuleConfig().
		WithName(""). // names must be unique per runtime; "" lets instances run concurrently
		WithArgs(append([]string{m.name}, c.Args...)...).
		WithStdin(bytes.NewReader(c.Stdin)).
		WithStdout(stdout).
		WithStderr(stderr).
		WithFSConfig(fsc).
		// wazero's defaults are fake clocks, a no-op sleep and a
		// deterministic random source; tools expect the real ones.
		WithSysWalltime().
		WithSysNanotime().
		// wazero's own real sleep (WithSysNanosleep) blocks the host
		// goroutine for the whole duration, so a guest sleeping for an hour
		// would outlive its timeout; this one wakes when the call ends.
		WithNanosleep(func(ns int64) {
			t := time.NewTimer(time.Duration(ns))
			defer t.Stop()
			select {
			case <-t.C:
			case <-runCtx.Done():
			}
		}).
		WithRandSource(rand.Reader)
	for _, k := range slices.Sorted(maps.Keys(c.Env)) {
		mc = mc.WithEnv(k, c.Env[k])
	}

	mod, err := r.InstantiateModule(runCtx, cm, mc)
	res := Result{Duration: time.Since(start)}
	if mod != nil {
		_ = mod.Close(ctx)
	}
	res.Stdout, res.Stderr = stdout.buf, stderr.buf

	var exit *sys.ExitError
	switch {
	// First, because the guest may exit on its own after its write failed.
	case stdout.full:
		return res, fmt.Errorf("sandbox: %s: %w: stdout over %d bytes", m.name, ErrOutputLimit, lim.OutputBytes)
	case err == nil:
		return res, nil
	case ctx.Err() != nil:
		return res, fmt.Errorf("sandbox: %s: %w", m.name, ctx.Err())
	case errors.Is(runCtx.Err(), context.DeadlineExceeded):
		return res, fmt.Errorf("sandbox: %s: %w after %v", m.name, ErrTimeout, lim.Timeout)
	case m.s.isClosed():
		return res, fmt.Errorf("sandbox: %s: %w", m.name, ErrClosed)
	case errors.As(err, &exit):
		res.ExitCode = int(exit.ExitCode())
		// A Go guest whose memory.grow is refused dies with "fatal error:
		// out of memory" and exit code 2; other runtimes print similar.
		if res.ExitCode != 0 && stderr.seen {
			return res, fmt.Errorf("sandbox: %s: %w: limit %s", m.name, ErrMemoryLimit, mib(lim.MemoryBytes))
		}
		return res, nil
	default:
		return res, fmt.Errorf("sandbox: %s: %w: %v", m.name, ErrTrap, err)
	}
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

// mountAll validates the mounts and opens each host directory as an
// *os.Root. The returned func closes them; call it once the guest is done.
func mountAll(mounts []Mount) (wazero.FSConfig, func(), error) {
	var roots []*os.Root
	closeAll := func() {
		for _, r := range roots {
			_ = r.Close()
		}
	}
	fsc := wazero.NewFSConfig()
	seen := map[string]bool{}
	for _, mt := range mounts {
		gp := mt.GuestPath
		if !path.IsAbs(gp) {
			closeAll()
			return nil, nil, fmt.Errorf("mount %s: guest path %q is not absolute", mt.HostDir, gp)
		}
		gp = path.Clean(gp)
		if seen[gp] {
			closeAll()
			return nil, nil, fmt.Errorf("mount %s: guest path %s mounted twice", mt.HostDir, gp)
		}
		seen[gp] = true
		fi, err := os.Stat(mt.HostDir)
		if err == nil && !fi.IsDir() {
			err = errors.New("not a directory")
		}
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("mount host dir %s: %w", mt.HostDir, err)
		}
		root, err := os.OpenRoot(mt.HostDir)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("mount host dir %s: %w", mt.HostDir, err)
		}
		roots = append(roots, root)
		fsc = fsc.(sysfs.FSConfig).WithSysFSMount(&rootFS{root: root, readOnly: mt.ReadOnly}, gp)
	}
	// Added last so the mounts keep the first descriptors (3, 4, ...).
	if !seen["/"] {
		fsc = fsc.(sysfs.FSConfig).WithSysFSMount(newEmptyRoot(), "/")
	}
	return fsc, closeAll, nil
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
