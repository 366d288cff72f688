package sandbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// openFDs is how many descriptors the process has open (-1 where /proc
// does not say).
func openFDs() int {
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(es)
}

// TestOpenFileLimit: guests opening a directory in a loop without closing
// it are stopped at their limit of open files, with ErrOpenFiles naming
// it, hold no descriptor afterwards, and calls running beside them that
// open files of the same mount succeed.
func TestOpenFileLimit(t *testing.T) {
	base := mountTree(t)
	mounts := []Mount{{HostDir: filepath.Join(base, "ro"), GuestPath: "/data", ReadOnly: true}}
	m := guest(t)
	before := openFDs()

	tests := []struct {
		name  string
		limit int // Limits.OpenFiles; 0 is the default
		want  string
	}{
		{name: "default limit", want: fmt.Sprintf("%d files open at once", DefaultOpenFiles)},
		{name: "limit of 5", limit: 5, want: "5 files open at once"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Go(func() {
					if i%2 == 0 {
						r, err := m.Run(context.Background(), Call{Args: []string{"fdbomb", "/data"}, Mounts: mounts, Limits: Limits{OpenFiles: tt.limit}})
						if !errors.Is(err, ErrOpenFiles) || !strings.Contains(err.Error(), tt.want) {
							t.Errorf("bomb %d: err = %v, want %v saying %q (stdout %q)", i, err, ErrOpenFiles, tt.want, r.Stdout)
						}
						return
					}
					r, err := m.Run(context.Background(), Call{Args: []string{"cat", "/data/hello.txt"}, Mounts: mounts, Limits: Limits{OpenFiles: tt.limit}})
					if err != nil || r.ExitCode != 0 || string(r.Stdout) != "hi" {
						t.Errorf("call %d beside the bombs: %q, exit %d, %v (stderr %q)", i, r.Stdout, r.ExitCode, err, r.Stderr)
					}
				})
			}
			wg.Wait()
		})
	}
	// A reactor's call shapes keep a snapshot each, with a descriptor;
	// the guests keep none.
	if after, snaps := openFDs(), m.s.Stats().Snapshots; before >= 0 && after > before+2+snaps {
		t.Errorf("the process had %d descriptors open before the bombs and %d after (%d of them snapshots)", before, after, snaps)
	}
}

// dirUsage is what dir holds: the sizes of its regular files and its
// entries.
func dirUsage(t *testing.T, dir string) (size int64, entries int) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		entries++
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			size += fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return size, entries
}

// TestMountQuotas: guests that try to fill a read-write mount are stopped
// at its byte or file quota with a *QuotaError naming it, and the
// directory holds no more than the quota afterwards.
func TestMountQuotas(t *testing.T) {
	if testing.Short() {
		t.Skip("writes tens of MiB")
	}
	tests := []struct {
		name     string
		args     []string
		maxBytes int64
		maxFiles int
		prefill  func(t *testing.T, dir string) // before the call, on the host
		want     *QuotaError                    // nil: the call succeeds
	}{
		{name: "1 GiB written, default quota", args: []string{"fill", "/data"},
			want: &QuotaError{Mount: "/data", Limit: DefaultMountBytes}},
		{name: "1 GiB written, 4 MiB quota", args: []string{"fill", "/data"}, maxBytes: 4 << 20,
			want: &QuotaError{Mount: "/data", Limit: 4 << 20}},
		{name: "a byte written at 1 GiB", args: []string{"sparse", "/data"},
			want: &QuotaError{Mount: "/data", Limit: DefaultMountBytes}},
		{name: "a file truncated up to 1 GiB", args: []string{"stretch", "/data"},
			want: &QuotaError{Mount: "/data", Limit: DefaultMountBytes}},
		{name: "20,000 files, default quota", args: []string{"files", "/data"},
			want: &QuotaError{Mount: "/data", Files: true, Limit: DefaultMountFiles}},
		{name: "20,000 files, quota of 50", args: []string{"files", "/data"}, maxFiles: 50,
			want: &QuotaError{Mount: "/data", Files: true, Limit: 50}},
		{
			name: "what the mount held before counts", args: []string{"fill", "/data"}, maxBytes: 4 << 20,
			prefill: func(t *testing.T, dir string) {
				if err := os.WriteFile(filepath.Join(dir, "old"), make([]byte, 3<<20), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			want: &QuotaError{Mount: "/data", Limit: 4 << 20},
		},
		{
			name: "a mount already over its file quota takes no more bytes", args: []string{"write", "/data/hello.txt"}, maxFiles: 5,
			prefill: func(t *testing.T, dir string) {
				for i := range 10 {
					if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(i)), nil, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			},
			want: &QuotaError{Mount: "/data", Files: true, Limit: 5},
		},
		{name: "writing within the quota", args: []string{"write", "/data/new.txt"}, maxBytes: 64, maxFiles: 2},
		{
			name: "a mount at its file quota still takes a file replaced", args: []string{"write", "/data/1"}, maxFiles: 2,
			prefill: func(t *testing.T, dir string) {
				for i := range 2 {
					if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(i)), []byte("old"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			},
		},
	}
	m := guest(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.prefill != nil {
				tt.prefill(t, dir)
			}
			r, err := m.Run(context.Background(), Call{
				Args: tt.args, Stdin: []byte("hello"),
				Mounts: []Mount{{HostDir: dir, GuestPath: "/data", MaxBytes: tt.maxBytes, MaxFiles: tt.maxFiles}},
			})
			t.Logf("err %v, stdout %q", err, r.Stdout)
			var qe *QuotaError
			switch {
			case tt.want == nil && (err != nil || r.ExitCode != 0):
				t.Fatalf("err = %v, exit %d, stderr %q", err, r.ExitCode, r.Stderr)
			case tt.want != nil && (!errors.As(err, &qe) || !errors.Is(err, ErrQuota)):
				t.Fatalf("err = %v, want a *QuotaError", err)
			case tt.want != nil && *qe != *tt.want:
				t.Errorf("quota error %+v, want %+v", *qe, *tt.want)
			}
			maxBytes, maxFiles := cmpOr(tt.maxBytes, DefaultMountBytes), cmpOr(tt.maxFiles, DefaultMountFiles)
			size, entries := dirUsage(t, dir)
			if size > maxBytes || tt.prefill == nil && entries > maxFiles {
				t.Errorf("the mount holds %d bytes in %d entries; its quota is %d bytes, %d entries", size, entries, maxBytes, maxFiles)
			}
		})
	}
}

func cmpOr[T int | int64](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// TestMountQuotaShared: calls filling the same directory at once share
// its quota, so together they stay within it.
func TestMountQuotaShared(t *testing.T) {
	if testing.Short() {
		t.Skip("writes several MiB")
	}
	dir := t.TempDir()
	m := guest(t)
	const quota = 8 << 20
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			_, err := m.Run(context.Background(), Call{Args: []string{"fill", "/data"},
				Mounts: []Mount{{HostDir: dir, GuestPath: "/data", MaxBytes: quota}}})
			if !errors.Is(err, ErrQuota) {
				t.Errorf("fill %d: err = %v, want %v", i, err, ErrQuota)
			}
		})
	}
	wg.Wait()
	if size, entries := dirUsage(t, dir); size > quota || entries != 4 {
		t.Errorf("the mount holds %d bytes in %d files; want at most %d bytes in 4", size, entries, quota)
	}
}

// TestMountQuotaCredits: what a call removes, truncates or replaces is
// given back during the call, so a tool that rewrites its files is not
// stopped by its own history.
func TestMountQuotaCredits(t *testing.T) {
	dir := t.TempDir()
	// churn writes 200 KiB and makes 500 entries in all, never more than
	// 2 KiB and two entries at once.
	r, err := guest(t).Run(context.Background(), Call{Args: []string{"churn", "/data"},
		Mounts: []Mount{{HostDir: dir, GuestPath: "/data", MaxBytes: 2 << 10, MaxFiles: 2}}})
	if err != nil || r.ExitCode != 0 || string(r.Stdout) != "churn: ok\n" {
		t.Fatalf("churn: %v, exit %d, stdout %q, stderr %q", err, r.ExitCode, r.Stdout, r.Stderr)
	}
}

// wasmModule assembles a WASI command whose memory starts at minPages and
// whose _start writes "ok\n" to stdout from the top of that memory. The
// memory is exported, as WASI commands do, unless hidden.
func wasmModule(minPages uint32, hidden bool) []byte {
	uleb := func(v uint64) []byte {
		var b []byte
		for {
			c := byte(v & 0x7f)
			v >>= 7
			if v != 0 {
				b = append(b, c|0x80)
				continue
			}
			return append(b, c)
		}
	}
	sleb := func(v int64) []byte {
		var b []byte
		for {
			c := byte(v & 0x7f)
			v >>= 7
			if v == 0 && c&0x40 == 0 || v == -1 && c&0x40 != 0 {
				return append(b, c)
			}
			b = append(b, c|0x80)
		}
	}
	section := func(id byte, body ...[]byte) []byte {
		joined := bytes.Join(body, nil)
		return append(append([]byte{id}, uleb(uint64(len(joined)))...), joined...)
	}
	name := func(s string) []byte { return append(uleb(uint64(len(s))), s...) }
	i32 := func(v int64) []byte { return append([]byte{0x41}, sleb(v)...) }
	store := []byte{0x36, 2, 0} // i32.store align=4 offset=0

	top := int64(minPages)*65536 - 64 // iovec at top, data at top+16
	var code []byte
	for _, op := range [][]byte{
		i32(top), i32(top + 16), store, // iov.buf
		i32(top + 4), i32(3), store, // iov.len
		i32(top + 16), i32(0x0a6b6f), store, // "ok\n"
		i32(1), i32(top), i32(1), i32(top + 8), {0x10, 0}, {0x1a}, // fd_write(1, iov, 1, &n); drop
		{0x0b},
	} {
		code = append(code, op...)
	}
	body := append([]byte{0}, code...) // no locals
	exports := [][]byte{uleb(2), name("_start"), {0, 1}, name("memory"), {2, 0}}
	if hidden {
		exports = [][]byte{uleb(1), name("_start"), {0, 1}}
	}
	return bytes.Join([][]byte{
		{0, 'a', 's', 'm', 1, 0, 0, 0},
		section(1, uleb(2), []byte{0x60, 4, 0x7f, 0x7f, 0x7f, 0x7f, 1, 0x7f}, []byte{0x60, 0, 0}),
		section(2, uleb(1), name("wasi_snapshot_preview1"), name("fd_write"), []byte{0, 0}),
		section(3, uleb(1), uleb(1)),
		section(5, uleb(1), []byte{0}, uleb(uint64(minPages))),
		section(7, exports...),
		section(10, uleb(1), uleb(uint64(len(body))), body),
	}, nil)
}

// TestLargeInitialMemory: a module whose memory starts at 128 MiB loads
// and runs under a limit it fits, and is refused, before it runs, under
// one it does not.
func TestLargeInitialMemory(t *testing.T) {
	ctx := context.Background()
	s, err := New(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	dir := t.TempDir()
	// A memory the module does not export is checked too (wazero does not
	// report it, and would panic instantiating it over the limit).
	for _, hidden := range []bool{false, true} {
		b := wasmModule(2048, hidden) // 128 MiB
		p := filepath.Join(dir, fmt.Sprintf("big-%v.wasm", hidden))
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		m, err := s.Load(ctx, p, hex.EncodeToString(sum[:]))
		if err != nil {
			t.Fatalf("load: %v", err)
		}
		for _, limit := range []int64{128 << 20, 256 << 20} {
			r, err := m.Run(ctx, Call{Limits: Limits{MemoryBytes: limit}})
			if err != nil || r.ExitCode != 0 || string(r.Stdout) != "ok\n" {
				t.Errorf("hidden %v, under %s: %q, exit %d, %v", hidden, mib(limit), r.Stdout, r.ExitCode, err)
			}
		}
		_, err = m.Run(ctx, Call{})
		if !errors.Is(err, ErrMemoryLimit) || !strings.Contains(err.Error(), "module needs more than 64 MiB") {
			t.Errorf("hidden %v, under the default limit: err = %v, want %v saying the module needs more than 64 MiB", hidden, err, ErrMemoryLimit)
		}
	}
}

// vmRSS is the process's resident memory in bytes, from /proc.
func vmRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// TestMemoryReturned: after many guests have each filled their 64 MiB,
// four at a time, the process's resident memory comes back close to where
// it started. (Before guest memory was mapped outside the Go heap, 25
// memory bombs left it 400-500 MiB higher.)
func TestMemoryReturned(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 16 memory bombs")
	}
	if runtime.GOOS != "linux" {
		t.Skip("guest memory is mapped outside the Go heap on Linux only")
	}
	ctx := context.Background()
	m := guest(t)
	if _, err := m.Run(ctx, Call{Args: []string{"echo"}}); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	before := vmRSS(t)
	const bombs, atOnce = 16, 4
	var wg sync.WaitGroup
	sem := make(chan struct{}, atOnce)
	for i := range bombs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := m.Run(ctx, Call{Args: []string{"hog"}, Limits: Limits{Timeout: DefaultTimeout * slowdown}}); !errors.Is(err, ErrMemoryLimit) {
				t.Errorf("bomb %d: err = %v, want %v", i, err, ErrMemoryLimit)
			}
		})
	}
	wg.Wait()
	runtime.GC()
	after := vmRSS(t)
	t.Logf("resident memory: %d MiB before, %d MiB after %d memory bombs of 64 MiB", before>>20, after>>20, bombs)
	if after-before > 150<<20 {
		t.Errorf("resident memory grew by %d MiB and stayed; want under 150 MiB", (after-before)>>20)
	}
}
