package sandbox

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	"github.com/tetratelabs/wazero/sys"
)

// rootFS is the file system a Mount gives the guest: wazero's sys.FS over an
// *os.Root.
//
// wazero's own dir mounts join paths by string concatenation, so a symlink
// inside the mount is followed on the host wherever it points (its docs say
// a mount is not a jail). *os.Root resolves every path component beneath the
// directory and refuses any symlink or ".." that would leave it, for reads
// and writes alike, so both mount kinds go through this one type; read-only
// mounts refuse every change with EROFS before touching the host.
//
// It also enforces the call's limits: every file it opens counts against
// the call's open files, and on a read-write mount every change that adds
// an entry or bytes is checked against the mount's quota, with the quota's
// lock held from the check to the change so that concurrent calls sharing
// the directory cannot both take the last of it.
type rootFS struct {
	experimentalsys.UnimplementedFS
	host     string
	root     *os.Root // opened when the call starts
	readOnly bool
	call     *callState
	guest    string // where the guest sees it, for errors
	// quota and its limits; read-write mounts only.
	quota              *quota
	maxBytes, maxFiles int64
}

// errLimit is the errno of an operation refused for a limit. EDQUOT,
// ENOSPC and EMFILE would say more, but wazero's errno set has none of
// them and would turn them into EIO anyway; the call's result names the
// limit (callState.fail).
const errLimit = experimentalsys.EIO

// refuse records that the guest hit the mount's file quota (files) or its
// byte quota, stopping the call, and returns the errno for the operation.
func (r *rootFS) refuse(files bool) experimentalsys.Errno {
	limit := r.maxBytes
	if files {
		limit = r.maxFiles
	}
	r.call.fail(&QuotaError{Mount: r.guest, Files: files, Limit: limit})
	return errLimit
}

// lockQuota locks the mount's quota, if it has one, and returns the
// unlock.
func (r *rootFS) lockQuota() func() {
	if r.quota == nil {
		return func() {}
	}
	r.quota.mu.Lock()
	return r.quota.mu.Unlock
}

var _ experimentalsys.FS = (*rootFS)(nil)

// rel turns the path wazero hands over (already cleaned and checked with
// fs.ValidPath, possibly with a trailing slash) into one *os.Root accepts.
// Paths are relative to the mount; a "../" that survives wazero's check is
// refused by the Root.
func rel(p string) string {
	if p == "" || p == "/" {
		return "."
	}
	return p
}

func (r *rootFS) OpenFile(p string, flag experimentalsys.Oflag, perm fs.FileMode) (experimentalsys.File, experimentalsys.Errno) {
	name := rel(p)
	writes := flag&(experimentalsys.O_WRONLY|experimentalsys.O_RDWR) != 0 ||
		flag&(experimentalsys.O_CREAT|experimentalsys.O_TRUNC|experimentalsys.O_APPEND) != 0
	if writes && flag&experimentalsys.O_DIRECTORY != 0 {
		return nil, experimentalsys.EISDIR
	}
	if writes && r.readOnly {
		return nil, experimentalsys.EROFS
	}
	if flag&experimentalsys.O_NOFOLLOW != 0 {
		if fi, err := r.root.Lstat(name); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return nil, experimentalsys.ELOOP
		}
	}
	if !r.call.acquire() {
		return nil, errLimit
	}
	f, e := r.open(name, flag, perm)
	if e != 0 {
		r.call.release()
		return nil, e
	}
	return f, 0
}

// open opens a file for OpenFile, which has counted it, and accounts for
// a file it creates or truncates.
func (r *rootFS) open(name string, flag experimentalsys.Oflag, perm fs.FileMode) (experimentalsys.File, experimentalsys.Errno) {
	var created bool
	var truncated int64 // the size a truncating open discards
	if r.quota != nil && flag&(experimentalsys.O_CREAT|experimentalsys.O_TRUNC) != 0 {
		defer r.lockQuota()()
		// Stat, not Lstat: creating through a dangling symlink creates
		// its target.
		fi, err := r.root.Stat(name)
		switch {
		case err == nil:
			if flag&experimentalsys.O_TRUNC != 0 && fi.Mode().IsRegular() {
				truncated = fi.Size()
			}
		case errors.Is(err, fs.ErrNotExist) && flag&experimentalsys.O_CREAT != 0:
			if !r.quota.addFile(r.maxFiles) {
				return nil, r.refuse(true)
			}
			created = true
		}
	}
	o := &opener{root: r.root, flag: osFlag(flag), perm: perm}
	f, e := (&sysfs.AdaptFS{FS: o}).OpenFile(name, flag, perm)
	if e != 0 {
		if o.err != nil {
			e = errno(o.err)
		}
		if created {
			r.quota.files--
		}
		return nil, e
	}
	if truncated > 0 {
		r.quota.adjust(-truncated)
	}
	file := &rootFile{File: f, fs: r, o: o, name: name, flag: flag}
	// wazero's adapter neither checks O_DIRECTORY nor keeps a trailing
	// slash, both of which mean "must be a directory".
	if flag&experimentalsys.O_DIRECTORY != 0 || strings.HasSuffix(name, "/") {
		if isDir, e := f.IsDir(); e != 0 || !isDir {
			_ = f.Close()
			if e == 0 {
				e = experimentalsys.ENOTDIR
			}
			return nil, e
		}
	}
	return file, 0
}

// opener is the fs.FS behind one guest open. wazero's AdaptFS turns an
// fs.FS into its sys.FS, and its file type implements reads, writes, seeks
// and directory listing over an *os.File, but it only ever calls Open(name),
// which loses the open flags; so each OpenFile gets an opener holding them.
// AdaptFS calls Open again to rewind a directory; that reopens through the
// Root too, without the create/truncate flags.
type opener struct {
	root *os.Root
	flag int
	perm fs.FileMode
	f    *os.File // what Open returned last
	err  error    // what Open failed with last, for a precise errno
}

func (o *opener) Open(name string) (fs.File, error) {
	f, err := o.root.OpenFile(name, o.flag, o.perm)
	if err != nil {
		o.err = err
		return nil, err
	}
	o.flag &^= os.O_CREATE | os.O_TRUNC | os.O_EXCL
	o.f = f
	return f, nil
}

// osFlag converts wazero's open flags to os.OpenFile's. O_DIRECTORY and
// O_NOFOLLOW are checked by OpenFile itself; O_NONBLOCK has no meaning for
// regular files.
func osFlag(flag experimentalsys.Oflag) int {
	var f int
	switch flag & (experimentalsys.O_RDONLY | experimentalsys.O_RDWR | experimentalsys.O_WRONLY) {
	case experimentalsys.O_RDWR:
		f = os.O_RDWR
	case experimentalsys.O_WRONLY:
		f = os.O_WRONLY
	default:
		f = os.O_RDONLY
	}
	if flag&experimentalsys.O_APPEND != 0 {
		f |= os.O_APPEND
	}
	if flag&experimentalsys.O_CREAT != 0 {
		f |= os.O_CREATE
	}
	if flag&experimentalsys.O_EXCL != 0 {
		f |= os.O_EXCL
	}
	if flag&(experimentalsys.O_SYNC|experimentalsys.O_DSYNC|experimentalsys.O_RSYNC) != 0 {
		f |= os.O_SYNC
	}
	if flag&experimentalsys.O_TRUNC != 0 {
		f |= os.O_TRUNC
	}
	return f
}

// errno maps a host error to the errno the guest sees. *os.Root reports an
// escape with an unexported error that is not a syscall.Errno, which wazero
// would turn into EIO; the guest gets EPERM instead, the same errno wazero
// returns for a "../" path it rejects itself.
func errno(err error) experimentalsys.Errno {
	e := experimentalsys.UnwrapOSError(err)
	if e == experimentalsys.EIO {
		var se syscall.Errno
		if !errors.As(err, &se) {
			return experimentalsys.EPERM
		}
	}
	return e
}

func (r *rootFS) Lstat(p string) (sys.Stat_t, experimentalsys.Errno) {
	fi, err := r.root.Lstat(rel(p))
	if err != nil {
		return sys.Stat_t{}, errno(err)
	}
	return sys.NewStat_t(fi), 0
}

func (r *rootFS) Stat(p string) (sys.Stat_t, experimentalsys.Errno) {
	fi, err := r.root.Stat(rel(p))
	if err != nil {
		return sys.Stat_t{}, errno(err)
	}
	return sys.NewStat_t(fi), 0
}

func (r *rootFS) Readlink(p string) (string, experimentalsys.Errno) {
	dst, err := r.root.Readlink(rel(p))
	if err != nil {
		return "", errno(err)
	}
	return dst, 0
}

func (r *rootFS) Mkdir(p string, perm fs.FileMode) experimentalsys.Errno {
	if r.readOnly {
		return experimentalsys.EROFS
	}
	return r.addEntry(p, func() experimentalsys.Errno {
		e := errno(r.root.Mkdir(rel(p), perm))
		if e == experimentalsys.ENOTDIR {
			e = experimentalsys.ENOENT // what wazero's own DirFS reports
		}
		return e
	})
}

// addEntry runs op, which adds the entry p to the mount if it succeeds,
// within the mount's file quota. At the quota, an op bound to fail because
// p exists fails with its own errno (EEXIST), not the quota's.
func (r *rootFS) addEntry(p string, op func() experimentalsys.Errno) experimentalsys.Errno {
	if r.quota == nil {
		return op()
	}
	defer r.lockQuota()()
	if !r.quota.addFile(r.maxFiles) {
		if _, err := r.root.Lstat(rel(p)); err == nil {
			return op()
		}
		return r.refuse(true)
	}
	e := op()
	if e != 0 {
		r.quota.files--
	}
	return e
}

func (r *rootFS) Chmod(p string, perm fs.FileMode) experimentalsys.Errno {
	if r.readOnly {
		return experimentalsys.EROFS
	}
	return errno(r.root.Chmod(rel(p), perm))
}

// Rename onto an existing entry removes that entry, and its bytes if it
// was a file's last link.
func (r *rootFS) Rename(from, to string) experimentalsys.Errno {
	if r.readOnly {
		return experimentalsys.EROFS
	}
	defer r.lockQuota()()
	var replaced *sys.Stat_t
	if r.quota != nil {
		src, err1 := r.root.Lstat(rel(from))
		dst, err2 := r.root.Lstat(rel(to))
		if err1 == nil && err2 == nil && !os.SameFile(src, dst) {
			st := sys.NewStat_t(dst)
			replaced = &st
		}
	}
	e := errno(r.root.Rename(rel(from), rel(to)))
	if e == 0 && replaced != nil {
		r.quota.removeFile(*replaced)
	}
	return e
}

// Rmdir and Unlink both map to Root.Remove, which takes either kind, so the
// kind is checked first to give the errno POSIX would.
func (r *rootFS) Rmdir(p string) experimentalsys.Errno {
	return r.remove(p, true)
}

func (r *rootFS) Unlink(p string) experimentalsys.Errno {
	return r.remove(p, false)
}

func (r *rootFS) remove(p string, dir bool) experimentalsys.Errno {
	if r.readOnly {
		return experimentalsys.EROFS
	}
	defer r.lockQuota()()
	fi, err := r.root.Lstat(rel(p))
	switch {
	case err != nil:
		return errno(err)
	case dir && !fi.IsDir():
		return experimentalsys.ENOTDIR
	case !dir && fi.IsDir():
		return experimentalsys.EISDIR
	}
	e := errno(r.root.Remove(rel(p)))
	if e == 0 && r.quota != nil {
		r.quota.removeFile(sys.NewStat_t(fi))
	}
	return e
}

// Link adds an entry but no bytes: the file's are counted once.
func (r *rootFS) Link(oldPath, newPath string) experimentalsys.Errno {
	if r.readOnly {
		return experimentalsys.EROFS
	}
	return r.addEntry(newPath, func() experimentalsys.Errno {
		return errno(r.root.Link(rel(oldPath), rel(newPath)))
	})
}

// Symlink refuses absolute targets as wazero's DirFS does (WASI path
// resolution forbids them). A relative target that climbs out can be
// created but never followed: the Root refuses it on use.
func (r *rootFS) Symlink(oldPath, linkName string) experimentalsys.Errno {
	if r.readOnly {
		return experimentalsys.EROFS
	}
	if len(oldPath) > 0 && oldPath[0] == '/' {
		return experimentalsys.EPERM
	}
	return r.addEntry(linkName, func() experimentalsys.Errno {
		return errno(r.root.Symlink(oldPath, rel(linkName)))
	})
}

func (r *rootFS) Utimens(p string, atim, mtim int64) experimentalsys.Errno {
	if r.readOnly {
		return experimentalsys.EROFS
	}
	// A zero time.Time leaves that time unchanged, which is what
	// UTIME_OMIT asks for.
	t := func(ns int64) time.Time {
		if ns == experimentalsys.UTIME_OMIT {
			return time.Time{}
		}
		return time.Unix(0, ns)
	}
	return errno(r.root.Chtimes(rel(p), t(atim), t(mtim)))
}

// rootFile completes wazero's adapter file with what it leaves
// unimplemented for an fs.File: truncate, sync and append mode. It also
// checks what writes add against the mount's quota, and gives back its
// place among the call's open files when closed.
type rootFile struct {
	experimentalsys.File
	fs     *rootFS
	o      *opener
	name   string // relative to the Root
	flag   experimentalsys.Oflag
	closed bool
}

func (f *rootFile) Close() experimentalsys.Errno {
	if !f.closed {
		f.closed = true
		f.fs.call.release()
	}
	return f.File.Close()
}

func (f *rootFile) Write(buf []byte) (int, experimentalsys.Errno) {
	return f.write(buf, -1, f.File.Write)
}

func (f *rootFile) Pwrite(buf []byte, off int64) (int, experimentalsys.Errno) {
	return f.write(buf, off, func(b []byte) (int, experimentalsys.Errno) { return f.File.Pwrite(b, off) })
}

// write runs a write of buf at off (-1: the current offset) within the
// mount's byte quota: what it would add past the end of the file must
// fit. A seek far past the end counts the hole too, as the walk counts
// sizes, so a sparse file cannot hide bytes.
func (f *rootFile) write(buf []byte, off int64, op func([]byte) (int, experimentalsys.Errno)) (int, experimentalsys.Errno) {
	q := f.fs.quota
	if q == nil || len(buf) == 0 {
		return op(buf)
	}
	defer f.fs.lockQuota()()
	fi, err := f.o.f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return op(buf) // let the file report what is wrong
	}
	size := fi.Size()
	switch {
	case f.IsAppend(): // O_APPEND writes at the end whatever the offset
		off = size
	case off < 0:
		if off, err = f.o.f.Seek(0, io.SeekCurrent); err != nil {
			return op(buf)
		}
	}
	grows := max(0, off+int64(len(buf))-size)
	if !q.grow(grows, f.fs.maxBytes) {
		return 0, f.fs.refuse(q.full)
	}
	n, e := op(buf)
	if n < len(buf) { // give back what was not written
		q.adjust(max(0, off+int64(n)-size) - grows)
	}
	return n, e
}

func (f *rootFile) IsAppend() bool { return f.flag&experimentalsys.O_APPEND != 0 }

// SetAppend opens the file again, because an *os.File's append mode is
// fixed when it is opened.
func (f *rootFile) SetAppend(enable bool) experimentalsys.Errno {
	if enable == f.IsAppend() {
		return 0
	}
	flag := f.flag &^ (experimentalsys.O_CREAT | experimentalsys.O_TRUNC | experimentalsys.O_EXCL)
	if enable {
		flag |= experimentalsys.O_APPEND
	} else {
		flag &^= experimentalsys.O_APPEND
	}
	off, e := f.File.Seek(0, io.SeekCurrent)
	if e != 0 {
		return e
	}
	old := f.o.f
	o := &opener{root: f.o.root, flag: osFlag(flag), perm: f.o.perm}
	nf, e := (&sysfs.AdaptFS{FS: o}).OpenFile(f.name, flag, f.o.perm)
	if e != 0 {
		return e
	}
	a, err1 := old.Stat()
	b, err2 := o.f.Stat()
	if err1 != nil || err2 != nil || !os.SameFile(a, b) {
		_ = nf.Close()
		return experimentalsys.ENOENT // replaced since it was opened
	}
	if _, e := nf.Seek(off, io.SeekStart); e != 0 {
		_ = nf.Close()
		return e
	}
	_ = f.File.Close()
	f.File, f.o, f.flag = nf, o, flag
	return 0
}

func (f *rootFile) Truncate(size int64) experimentalsys.Errno {
	if size < 0 {
		return experimentalsys.EINVAL
	}
	if isDir, e := f.IsDir(); e != 0 || isDir {
		if e == 0 {
			e = experimentalsys.EISDIR
		}
		return e
	}
	q := f.fs.quota
	if q == nil {
		return errno(f.o.f.Truncate(size))
	}
	defer f.fs.lockQuota()()
	fi, err := f.o.f.Stat()
	if err != nil {
		return errno(err)
	}
	delta := size - fi.Size()
	if !q.grow(delta, f.fs.maxBytes) {
		return f.fs.refuse(q.full)
	}
	e := errno(f.o.f.Truncate(size))
	if e != 0 {
		q.adjust(-delta)
	}
	return e
}

func (f *rootFile) Sync() experimentalsys.Errno {
	if _, e := f.Stat(); e != 0 { // EBADF once closed
		return e
	}
	return errno(f.o.f.Sync())
}

func (f *rootFile) Datasync() experimentalsys.Errno { return f.Sync() }

// emptyRoot is "/" when no Mount is there: an empty read-only directory.
// Without it a Go guest resolving a path outside every mount finds no
// preopen and reports EBADF ("bad file number"); with it the path plainly
// does not exist, and creating one is refused as on a read-only mount.
// Opening it counts against the call's open files like any other.
type emptyRoot struct {
	experimentalsys.FS
	call *callState
}

func newEmptyRoot(cs *callState) emptyRoot {
	return emptyRoot{FS: &sysfs.ReadFS{FS: &sysfs.AdaptFS{FS: emptyDir{}}}, call: cs}
}

func (r emptyRoot) OpenFile(p string, flag experimentalsys.Oflag, perm fs.FileMode) (experimentalsys.File, experimentalsys.Errno) {
	switch {
	case rel(p) == ".":
		if !r.call.acquire() {
			return nil, errLimit
		}
		f, e := r.FS.OpenFile(p, flag, perm)
		if e != 0 {
			r.call.release()
			return nil, e
		}
		return &countedFile{File: f, call: r.call}, 0
	case flag&experimentalsys.O_CREAT != 0:
		return nil, experimentalsys.EROFS
	default:
		return nil, experimentalsys.ENOENT
	}
}

// countedFile gives back its place among the call's open files when
// closed.
type countedFile struct {
	experimentalsys.File
	call   *callState
	closed bool
}

func (f *countedFile) Close() experimentalsys.Errno {
	if !f.closed {
		f.closed = true
		f.call.release()
	}
	return f.File.Close()
}

// emptyDir is an fs.FS holding nothing but its own empty root.
type emptyDir struct{}

func (emptyDir) Open(name string) (fs.File, error) {
	if name != "." {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return emptyDirFile{}, nil
}

type emptyDirFile struct{}

func (emptyDirFile) Stat() (fs.FileInfo, error) { return emptyDirInfo{}, nil }
func (emptyDirFile) Close() error               { return nil }
func (emptyDirFile) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: "/", Err: syscall.EISDIR}
}

func (emptyDirFile) ReadDir(n int) ([]fs.DirEntry, error) {
	if n > 0 {
		return nil, io.EOF
	}
	return nil, nil
}

type emptyDirInfo struct{}

func (emptyDirInfo) Name() string       { return "/" }
func (emptyDirInfo) Size() int64        { return 0 }
func (emptyDirInfo) Mode() fs.FileMode  { return fs.ModeDir | 0o555 }
func (emptyDirInfo) ModTime() time.Time { return time.Time{} }
func (emptyDirInfo) IsDir() bool        { return true }
func (emptyDirInfo) Sys() any           { return nil }
