package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/sys"

	"github.com/airlock-run/airlock/internal/wasmmem"
)

// instance is one guest, instantiated for a call's shape (everything of a
// Call but its Stdin) and started on its own goroutine (guest), which runs
// _start and, inside it, the host functions. It serves exactly one call and
// is never reused.
//
// Until it is handed its call the guest runs only what does not depend on
// one: the Go runtime's start, package initialisation, argv and the
// environment (both part of the shape). Its first use of anything a call
// gives or keeps — stdin, stdout, stderr, a file system, the wall clock —
// waits for the call (await); the guest is then "parked". So a warm
// instance (see pool) has done, ahead of the call, exactly what a fresh
// one would do first, and nothing that another call could see or that
// could see another call: its memory, globals, open files and environment
// are its own from instantiation on.
type instance struct {
	m      *Module
	sh     *shape
	pool   *pool // the pool it was taken from, if any
	mod    api.Module
	mem    *wasmmem.Allocator
	cs     *callState
	mounts []*rootFS
	ctx    context.Context
	cancel context.CancelCauseFunc

	calls   chan *callIO  // the call handed to it; at most one is sent
	parked  chan struct{} // closed when the guest first waits for its call
	exited  chan struct{} // closed when _start has returned and the module is closed
	exitErr error         // written before exited is closed

	// restored: a reactor's instance made from its shape's snapshot
	// (see reactor.go), which does not run _initialize.
	restored bool

	// The guest's goroutine's alone (the host functions run on it).
	io      *callIO
	didPark bool
}

// callIO is what a call gives its instance: its stdin, and the buffers
// that keep its stdout and stderr.
type callIO struct {
	stdin          *bytes.Reader
	stdout, stderr *capWriter
}

// Causes of an instance's cancellation, to tell its call why it stopped.
var (
	errCauseTimeout = errors.New("call timed out")
	errCauseLimit   = errors.New("call hit a limit")
	errCauseStop    = errors.New("instance discarded")
)

// start instantiates the module for sh and starts its guest, which runs
// until its first use of the call and waits there (or exits, or is
// stopped). The error is one of the call's shape (a bad mount) or an
// infrastructure failure.
func (m *Module) start(sh *shape) (*instance, error) {
	s := m.s
	s.mu.Lock()
	if s.closed || s.rt == nil {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	r := s.rt
	s.wg.Add(1)
	s.instances++
	s.mu.Unlock()
	var sn *snapshot
	if m.reactor != nil {
		sn = m.snapshotOf(sh)
	}
	inst := &instance{
		m:        m,
		sh:       sh,
		restored: sn != nil,
		mem:      wasmmem.New(uint64(sh.pages) * pageSize),
		cs:       &callState{maxOpen: sh.lim.OpenFiles},
		calls:    make(chan *callIO, 1),
		parked:   make(chan struct{}),
		exited:   make(chan struct{}),
	}
	if sn != nil {
		inst.mem = wasmmem.NewFromImage(uint64(sh.pages)*pageSize, sn.image)
	}
	inst.ctx, inst.cancel = context.WithCancelCause(s.ctx)
	inst.cs.stop = func() { inst.cancel(errCauseLimit) }
	fail := func(err error) (*instance, error) {
		inst.cancel(errCauseStop)
		inst.release()
		return nil, err
	}
	fsc, mounts, err := mountAll(sh.mounts, inst)
	inst.mounts = mounts
	if err != nil {
		return fail(err)
	}
	mc := wazero.NewModuleConfig().
		WithName(""). // names must be unique per runtime; "" lets instances run concurrently
		// _start runs on the guest's goroutine, not in InstantiateModule.
		WithStartFunctions().
		WithArgs(append([]string{m.name}, sh.args...)...).
		WithStdin(gateReader{inst}).
		WithStdout(gateWriter{inst, false}).
		WithStderr(gateWriter{inst, true}).
		WithFSConfig(fsc).
		// wazero's defaults are fake clocks, a no-op sleep and a
		// deterministic random source; tools expect the real ones. The
		// wall clock waits for the call, so that a time read before it is
		// the call's, not the time the instance was warmed up; the
		// monotonic clock only measures intervals.
		WithWalltime(func() (int64, int32) {
			inst.await()
			t := time.Now()
			return t.Unix(), int32(t.Nanosecond())
		}, sys.ClockResolution(time.Microsecond.Nanoseconds())).
		WithSysNanotime().
		// wazero's own real sleep (WithSysNanosleep) blocks the host
		// goroutine for the whole duration, so a guest sleeping for an hour
		// would outlive its timeout; this one wakes when the call ends.
		WithNanosleep(func(ns int64) {
			t := time.NewTimer(time.Duration(ns))
			defer t.Stop()
			select {
			case <-t.C:
			case <-inst.ctx.Done():
			}
		}).
		WithRandSource(rand.Reader)
	for _, k := range slices.Sorted(maps.Keys(sh.env)) {
		mc = mc.WithEnv(k, sh.env[k])
	}
	mod, err := r.InstantiateModule(experimental.WithMemoryAllocator(inst.ctx, inst.mem), m.cm, mc)
	if err != nil {
		if s.isClosed() {
			err = ErrClosed
		}
		return fail(fmt.Errorf("instantiate: %w", err))
	}
	inst.mod = mod
	switch {
	case sn != nil:
		err = inst.restore(sn)
	case m.reactor != nil:
		err = inst.writeData()
	}
	if err != nil {
		_ = mod.Close(context.Background())
		return fail(fmt.Errorf("instantiate: %w", err))
	}
	go inst.guest()
	return inst, nil
}

// guest runs _start to its end and releases the instance.
func (inst *instance) guest() {
	var err error
	if inst.m.reactor != nil {
		err = inst.runReactor()
	} else {
		_, err = inst.mod.ExportedFunction("_start").Call(inst.ctx)
	}
	if exit, ok := err.(*sys.ExitError); ok && exit.ExitCode() == 0 {
		err = nil // proc_exit(0), which is how a Go guest's main returns
	}
	inst.exitErr = err
	_ = inst.mod.Close(context.Background())
	// The call's result is complete: it need not wait for the memory
	// to be unmapped (a few hundred µs), which Close still waits for.
	close(inst.exited)
	inst.release()
}

// release gives back what start took, once the guest has returned (the
// memory is unmapped under it).
func (inst *instance) release() {
	inst.mem.Release()
	s := inst.m.s
	s.mu.Lock()
	s.instances--
	s.mu.Unlock()
	s.wg.Done()
}

// parkedMemory is the size of the guest's memory; call it only once the
// guest has parked (it does not grow while parked).
func (inst *instance) parkedMemory() uint64 {
	select {
	case <-inst.parked:
	default:
		return 0
	}
	select {
	case <-inst.exited:
		return 0
	default:
	}
	if mem := inst.mod.Memory(); mem != nil {
		return uint64(mem.Size())
	}
	return 0
}

// stop ends the guest, wherever it is; its goroutine releases it. It
// returns at once.
func (inst *instance) stop() { inst.cancel(errCauseStop) }

// await returns once the instance has its call, waiting for it the first
// time; false when the instance was stopped first. The guest's goroutine
// alone calls it.
func (inst *instance) await() bool {
	if inst.io != nil {
		return true
	}
	if !inst.didPark {
		inst.didPark = true
		close(inst.parked)
	}
	select {
	case inst.io = <-inst.calls:
		return true
	case <-inst.ctx.Done():
		return false
	}
}

// gateReader is the guest's stdin: the call's, once it has one.
type gateReader struct{ inst *instance }

func (g gateReader) Read(p []byte) (int, error) {
	if !g.inst.await() {
		return 0, errStopped
	}
	return g.inst.io.stdin.Read(p)
}

// gateWriter is the guest's stdout or stderr: the call's, once it has one.
type gateWriter struct {
	inst   *instance
	stderr bool
}

func (g gateWriter) Write(p []byte) (int, error) {
	if !g.inst.await() {
		return 0, errStopped
	}
	if g.stderr {
		return g.inst.io.stderr.Write(p)
	}
	return g.inst.io.stdout.Write(p)
}

var errStopped = errors.New("stopped")

// run hands the instance its call and waits for the guest to finish. The
// call's limits count from here: its timeout, its output caps and, for
// read-write mounts, the quotas. The mounts' directories are opened now,
// as they are now, and their quotas taken, as a fresh instance would.
func (inst *instance) run(ctx context.Context, stdin []byte) (Result, error) {
	m, lim := inst.m, inst.sh.lim
	if inst.pool != nil {
		defer inst.pool.done()
	}
	var quotas []*quota
	defer func() {
		for _, r := range inst.mounts {
			if r.root != nil {
				_ = r.root.Close()
			}
		}
		for _, q := range quotas {
			m.s.releaseQuota(q)
		}
	}()
	for _, r := range inst.mounts {
		root, err := os.OpenRoot(r.host)
		var fi os.FileInfo
		if err == nil {
			r.root = root
			fi, err = root.Stat(".")
		}
		if err != nil {
			inst.stop()
			<-inst.exited
			return Result{}, fmt.Errorf("sandbox: %s: mount host dir %s: %w", m.name, r.host, err)
		}
		if !r.readOnly {
			r.quota = m.s.acquireQuota(root, fi, r.maxFiles)
			quotas = append(quotas, r.quota)
		}
	}
	io := &callIO{
		stdin:  bytes.NewReader(stdin),
		stdout: &capWriter{max: lim.OutputBytes, onFull: func() { inst.cancel(errCauseLimit) }},
		stderr: &capWriter{max: StderrBytes, watch: []byte("out of memory")},
	}
	start := time.Now()
	timer := time.AfterFunc(lim.Timeout, func() { inst.cancel(errCauseTimeout) })
	defer timer.Stop()
	stopCaller := context.AfterFunc(ctx, func() { inst.cancel(context.Cause(ctx)) })
	defer stopCaller()
	// Sent before the guest reads anything of the call: the quotas above
	// are in place when it gets there.
	inst.calls <- io
	<-inst.exited
	res := Result{Duration: time.Since(start), Stdout: io.stdout.buf, Stderr: io.stderr.buf}
	err := inst.exitErr

	var exit *sys.ExitError
	switch hit := inst.cs.limitHit(); {
	// First, because the guest may exit on its own after its write failed.
	case io.stdout.full:
		return res, fmt.Errorf("sandbox: %s: %w: stdout over %d bytes", m.name, ErrOutputLimit, lim.OutputBytes)
	case hit != nil:
		return res, fmt.Errorf("sandbox: %s: %w", m.name, hit)
	case err == nil:
		return res, nil
	case ctx.Err() != nil:
		return res, fmt.Errorf("sandbox: %s: %w", m.name, ctx.Err())
	case errors.Is(context.Cause(inst.ctx), errCauseTimeout):
		return res, fmt.Errorf("sandbox: %s: %w after %v", m.name, ErrTimeout, lim.Timeout)
	case m.s.isClosed():
		return res, fmt.Errorf("sandbox: %s: %w", m.name, ErrClosed)
	case errors.As(err, &exit):
		res.ExitCode = int(exit.ExitCode())
		// A Go guest whose memory.grow is refused dies with "fatal error:
		// out of memory" and exit code 2; other runtimes print similar.
		if res.ExitCode != 0 && io.stderr.seen {
			return res, fmt.Errorf("sandbox: %s: %w: limit %s", m.name, ErrMemoryLimit, mib(lim.MemoryBytes))
		}
		return res, nil
	case io.stderr.seen:
		// A reactor's runtime aborts (a trap) where a command's exits.
		return res, fmt.Errorf("sandbox: %s: %w: limit %s", m.name, ErrMemoryLimit, mib(lim.MemoryBytes))
	default:
		return res, fmt.Errorf("sandbox: %s: %w: %v", m.name, ErrTrap, err)
	}
}

// gatedFS is a mount as the guest sees it: every operation waits for the
// instance's call first (see instance.await).
type gatedFS struct {
	experimentalsys.FS
	inst *instance
}

func (g gatedFS) OpenFile(p string, flag experimentalsys.Oflag, perm os.FileMode) (experimentalsys.File, experimentalsys.Errno) {
	if g.inst.io == nil && p == "." && flag == experimentalsys.O_RDONLY {
		// wazero opening the preopen to list it, in the guest's start.
		return &parkDir{File: experimentalsys.UnimplementedFile{}, g: g}, 0
	}
	if !g.inst.await() {
		return nil, experimentalsys.EIO
	}
	return g.FS.OpenFile(p, flag, perm)
}

func (g gatedFS) Lstat(p string) (sys.Stat_t, experimentalsys.Errno) {
	if !g.inst.await() {
		return sys.Stat_t{}, experimentalsys.EIO
	}
	return g.FS.Lstat(p)
}

func (g gatedFS) Stat(p string) (sys.Stat_t, experimentalsys.Errno) {
	if !g.inst.await() {
		return sys.Stat_t{}, experimentalsys.EIO
	}
	return g.FS.Stat(p)
}

func (g gatedFS) Readlink(p string) (string, experimentalsys.Errno) {
	if !g.inst.await() {
		return "", experimentalsys.EIO
	}
	return g.FS.Readlink(p)
}

func (g gatedFS) gate(op func() experimentalsys.Errno) experimentalsys.Errno {
	if !g.inst.await() {
		return experimentalsys.EIO
	}
	return op()
}

func (g gatedFS) Mkdir(p string, perm os.FileMode) experimentalsys.Errno {
	return g.gate(func() experimentalsys.Errno { return g.FS.Mkdir(p, perm) })
}

func (g gatedFS) Chmod(p string, perm os.FileMode) experimentalsys.Errno {
	return g.gate(func() experimentalsys.Errno { return g.FS.Chmod(p, perm) })
}

func (g gatedFS) Rename(from, to string) experimentalsys.Errno {
	return g.gate(func() experimentalsys.Errno { return g.FS.Rename(from, to) })
}

func (g gatedFS) Rmdir(p string) experimentalsys.Errno {
	return g.gate(func() experimentalsys.Errno { return g.FS.Rmdir(p) })
}

func (g gatedFS) Unlink(p string) experimentalsys.Errno {
	return g.gate(func() experimentalsys.Errno { return g.FS.Unlink(p) })
}

func (g gatedFS) Link(oldPath, newPath string) experimentalsys.Errno {
	return g.gate(func() experimentalsys.Errno { return g.FS.Link(oldPath, newPath) })
}

func (g gatedFS) Symlink(oldPath, linkName string) experimentalsys.Errno {
	return g.gate(func() experimentalsys.Errno { return g.FS.Symlink(oldPath, linkName) })
}

func (g gatedFS) Utimens(p string, atim, mtim int64) experimentalsys.Errno {
	return g.gate(func() experimentalsys.Errno { return g.FS.Utimens(p, atim, mtim) })
}

// parkDir is a mount's directory as the guest's start finds it: wazero
// opens each preopen to tell the guest it is a directory (Go's syscall
// package lists them in its init), which says nothing of the call. Any
// other use waits for the call and opens the directory then.
type parkDir struct {
	// The directory once opened, for Seek, the one method not declared
	// here (go vet wants io.Seeker's signature for any Seek): wazero
	// calls it only to rewind a directory already read, and fd_seek
	// refuses directories.
	experimentalsys.File
	g gatedFS

	mu     sync.Mutex // the guest uses it; wazero may close it from another goroutine
	f      experimentalsys.File
	closed bool
}

var _ experimentalsys.File = (*parkDir)(nil)

func (d *parkDir) file() (experimentalsys.File, experimentalsys.Errno) {
	d.mu.Lock()
	f, closed := d.f, d.closed
	d.mu.Unlock()
	switch {
	case f != nil:
		return f, 0
	case closed:
		return nil, experimentalsys.EBADF
	case !d.g.inst.await():
		return nil, experimentalsys.EIO
	}
	f, e := d.g.FS.OpenFile(".", experimentalsys.O_RDONLY, 0)
	if e != 0 {
		return nil, e
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		_ = f.Close()
		return nil, experimentalsys.EBADF
	}
	d.f, d.File = f, f
	return f, 0
}

func (d *parkDir) Close() experimentalsys.Errno {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	if d.f != nil {
		return d.f.Close()
	}
	return 0
}

func (d *parkDir) IsDir() (bool, experimentalsys.Errno) { return true, 0 }
func (d *parkDir) IsAppend() bool                       { return false }

func (d *parkDir) Dev() (uint64, experimentalsys.Errno) {
	f, e := d.file()
	if e != 0 {
		return 0, e
	}
	return f.Dev()
}

func (d *parkDir) Ino() (sys.Inode, experimentalsys.Errno) {
	f, e := d.file()
	if e != 0 {
		return 0, e
	}
	return f.Ino()
}

func (d *parkDir) Stat() (sys.Stat_t, experimentalsys.Errno) {
	f, e := d.file()
	if e != 0 {
		return sys.Stat_t{}, e
	}
	return f.Stat()
}

func (d *parkDir) Readdir(n int) ([]experimentalsys.Dirent, experimentalsys.Errno) {
	f, e := d.file()
	if e != 0 {
		return nil, e
	}
	return f.Readdir(n)
}

func (d *parkDir) Read(buf []byte) (int, experimentalsys.Errno) {
	f, e := d.file()
	if e != 0 {
		return 0, e
	}
	return f.Read(buf)
}

func (d *parkDir) Pread(buf []byte, off int64) (int, experimentalsys.Errno) {
	f, e := d.file()
	if e != 0 {
		return 0, e
	}
	return f.Pread(buf, off)
}

func (d *parkDir) Write(buf []byte) (int, experimentalsys.Errno) {
	f, e := d.file()
	if e != 0 {
		return 0, e
	}
	return f.Write(buf)
}

func (d *parkDir) Pwrite(buf []byte, off int64) (int, experimentalsys.Errno) {
	f, e := d.file()
	if e != 0 {
		return 0, e
	}
	return f.Pwrite(buf, off)
}

func (d *parkDir) op(do func(experimentalsys.File) experimentalsys.Errno) experimentalsys.Errno {
	f, e := d.file()
	if e != 0 {
		return e
	}
	return do(f)
}

func (d *parkDir) SetAppend(enable bool) experimentalsys.Errno {
	return d.op(func(f experimentalsys.File) experimentalsys.Errno { return f.SetAppend(enable) })
}

func (d *parkDir) Truncate(size int64) experimentalsys.Errno {
	return d.op(func(f experimentalsys.File) experimentalsys.Errno { return f.Truncate(size) })
}

func (d *parkDir) Sync() experimentalsys.Errno {
	return d.op(func(f experimentalsys.File) experimentalsys.Errno { return f.Sync() })
}

func (d *parkDir) Datasync() experimentalsys.Errno {
	return d.op(func(f experimentalsys.File) experimentalsys.Errno { return f.Datasync() })
}

func (d *parkDir) Utimens(atim, mtim int64) experimentalsys.Errno {
	return d.op(func(f experimentalsys.File) experimentalsys.Errno { return f.Utimens(atim, mtim) })
}
