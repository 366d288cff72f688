package reload

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/airlock-run/airlock/internal/metrics"
)

// version is what the tests reload: the text of the files, or a problem.
type version struct{ text string }

// files is a tiny configuration: main.conf names the others by glob
// (conf.d/*.part); a line "bad" anywhere is a problem.
type files struct {
	dir   string
	loads atomic.Int32
}

func (f *files) load() (*version, error) {
	f.loads.Add(1)
	parts, _ := filepath.Glob(filepath.Join(f.dir, "conf.d", "*.part"))
	var b strings.Builder
	var problems []error
	for _, p := range append([]string{filepath.Join(f.dir, "main.conf")}, parts...) {
		data, err := os.ReadFile(p)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		if strings.Contains(string(data), "bad") {
			problems = append(problems, errors.New(p+":1: bad: problem"))
		}
		b.Write(data)
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	return &version{text: b.String()}, nil
}

func (f *files) watch(*version) []string {
	return []string{filepath.Join(f.dir, "main.conf"), filepath.Join(f.dir, "conf.d", "*.part")}
}

func newFiles(t *testing.T) *files {
	t.Helper()
	f := &files{dir: t.TempDir()}
	if err := os.MkdirAll(filepath.Join(f.dir, "conf.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(f.dir, "main.conf"), "a;")
	return f
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// start loads the first version and runs the reloader until the test ends;
// applied receives each new version as it is applied.
func start(t *testing.T, f *files, debounce time.Duration) (*Reloader[version], chan os.Signal, chan string) {
	t.Helper()
	first, err := f.load()
	if err != nil {
		t.Fatal(err)
	}
	applied := make(chan string, 16)
	r := New(first, Options[version]{Load: f.load, Watch: f.watch, Debounce: debounce,
		Apply: func(prev, next *version) { applied <- next.text }})
	sig := make(chan os.Signal, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx, sig) }()
	t.Cleanup(func() { cancel(); <-done })
	<-r.Watching()
	return r, sig, applied
}

func next(t *testing.T, applied chan string) string {
	t.Helper()
	select {
	case v := <-applied:
		return v
	case <-time.After(30 * time.Second):
		t.Fatal("no reload within 30s")
		return ""
	}
}

func TestReloadKeepsRunningVersionOnError(t *testing.T) {
	f := newFiles(t)
	first, _ := f.load()
	var applied []string
	r := New(first, Options[version]{Load: f.load, Apply: func(_, n *version) { applied = append(applied, n.text) }})
	okBefore := testutil.ToFloat64(metrics.ConfigReloads.WithLabelValues(metrics.ReloadOK))
	errBefore := testutil.ToFloat64(metrics.ConfigReloads.WithLabelValues(metrics.ReloadError))

	write(t, filepath.Join(f.dir, "conf.d", "x.part"), "bad;")
	err := r.Reload("test")
	if err == nil || !strings.Contains(err.Error(), "x.part:1: bad") {
		t.Fatalf("Reload of a bad file: err %v, want the file's problem", err)
	}
	if got := r.Current().text; got != "a;" || r.Generation() != 0 || len(applied) != 0 {
		t.Fatalf("after a bad reload: current %q gen %d applied %v, want the first version kept and nothing applied", got, r.Generation(), applied)
	}
	if d := testutil.ToFloat64(metrics.ConfigReloads.WithLabelValues(metrics.ReloadError)) - errBefore; d != 1 {
		t.Fatalf("error reloads counted %v, want 1", d)
	}

	write(t, filepath.Join(f.dir, "conf.d", "x.part"), "b;")
	if err := r.Reload("test"); err != nil {
		t.Fatal(err)
	}
	if got := r.Current().text; got != "a;b;" || r.Generation() != 1 || len(applied) != 1 || applied[0] != "a;b;" {
		t.Fatalf("after a good reload: current %q gen %d applied %v", got, r.Generation(), applied)
	}
	if d := testutil.ToFloat64(metrics.ConfigReloads.WithLabelValues(metrics.ReloadOK)) - okBefore; d != 1 {
		t.Fatalf("ok reloads counted %v, want 1", d)
	}
}

// A panicking loader is a failed reload, not a dead process.
func TestReloadSurvivesPanickingLoader(t *testing.T) {
	r := New(&version{text: "v1"}, Options[version]{Load: func() (*version, error) { panic("boom") }})
	if err := r.Reload("test"); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("err %v, want the panic as an error", err)
	}
	if r.Current().text != "v1" {
		t.Fatal("the running version was replaced")
	}
}

// Readers racing reloads always see one whole version (run with -race).
func TestCurrentIsAtomic(t *testing.T) {
	type pair struct{ a, b int }
	n := 0
	r := New(&pair{}, Options[pair]{Load: func() (*pair, error) { n++; return &pair{n, n}, nil }})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if p := r.Current(); p.a != p.b {
					t.Errorf("torn version %+v", *p)
					return
				}
			}
		}()
	}
	for range 200 {
		_ = r.Reload("test")
	}
	close(stop)
	wg.Wait()
	if r.Current().a != 200 {
		t.Fatalf("current %+v after 200 reloads", *r.Current())
	}
}

func TestWatchReloadsOnChangeDebounced(t *testing.T) {
	f := newFiles(t)
	// A long debounce, so that the burst below is one change whatever the
	// machine's load.
	r, _, applied := start(t, f, 2*time.Second)
	loads := f.loads.Load()
	for i := range 5 {
		write(t, filepath.Join(f.dir, "main.conf"), strings.Repeat("a", i+1)+";")
	}
	if got := next(t, applied); got != "aaaaa;" {
		t.Fatalf("reloaded %q, want the last write", got)
	}
	if d := f.loads.Load() - loads; d != 1 {
		t.Fatalf("a burst of 5 writes loaded %d times, want once", d)
	}
	if r.Generation() != 1 {
		t.Fatalf("generation %d", r.Generation())
	}
}

// An editor that writes a new file and renames it over the old one, and a
// new file that matches a watched glob, both reload.
func TestWatchRenameAndNewGlobFile(t *testing.T) {
	f := newFiles(t)
	_, _, applied := start(t, f, 50*time.Millisecond)

	tmp := filepath.Join(f.dir, ".main.conf.swp")
	write(t, tmp, "renamed;")
	if err := os.Rename(tmp, filepath.Join(f.dir, "main.conf")); err != nil {
		t.Fatal(err)
	}
	if got := next(t, applied); got != "renamed;" {
		t.Fatalf("after rename-over: %q", got)
	}

	write(t, filepath.Join(f.dir, "conf.d", "new.part"), "new;")
	if got := next(t, applied); got != "renamed;new;" {
		t.Fatalf("after a new file matching the glob: %q", got)
	}
	// A file that matches no pattern is not a reason to reload; the next
	// change that matters is.
	write(t, filepath.Join(f.dir, "conf.d", "notes.txt"), "x")
	write(t, filepath.Join(f.dir, "conf.d", "new.part"), "new2;")
	if got := next(t, applied); got != "renamed;new2;" {
		t.Fatalf("after editing the new file: %q", got)
	}
}

func TestSignalReloads(t *testing.T) {
	f := newFiles(t)
	r, sig, applied := start(t, f, time.Hour) // file events never fire in this test
	write(t, filepath.Join(f.dir, "main.conf"), "hup;")
	sig <- syscall.SIGHUP
	if got := next(t, applied); got != "hup;" {
		t.Fatalf("after SIGHUP: %q", got)
	}
	if r.Current().text != "hup;" {
		t.Fatal("current version not switched")
	}
}

// A Kubernetes ConfigMap volume: main.conf -> ..data/main.conf, and an
// update swaps the ..data symlink to a new timestamped directory.
func TestWatchConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	mk := func(version, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, version, "conf.d"), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, version, "main.conf"), text)
	}
	mk("..v1", "v1;")
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "main.conf"), filepath.Join(dir, "main.conf")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "conf.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	f := &files{dir: dir}
	_, _, applied := start(t, f, 50*time.Millisecond)

	mk("..v2", "v2;")
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink("..v2", tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if got := next(t, applied); got != "v2;" {
		t.Fatalf("after the ..data swap: %q", got)
	}
}

// A watched file that is a symlink (a manifest linked from a checkout, a
// glob's file linked in): editing its target in place reloads, and so
// does pointing the link at another file, whose edits then reload too.
func TestWatchSymlinkTargetEditedInPlace(t *testing.T) {
	f := newFiles(t)
	elsewhere := t.TempDir()
	target := filepath.Join(elsewhere, "real.part")
	write(t, target, "p1;")
	if err := os.Symlink(target, filepath.Join(f.dir, "conf.d", "linked.part")); err != nil {
		t.Fatal(err)
	}
	mainTarget := filepath.Join(elsewhere, "main.real")
	write(t, mainTarget, "m1;")
	if err := os.Remove(filepath.Join(f.dir, "main.conf")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(mainTarget, filepath.Join(f.dir, "main.conf")); err != nil {
		t.Fatal(err)
	}
	_, _, applied := start(t, f, 50*time.Millisecond)

	write(t, target, "p2;") // in place: the event is in elsewhere/, not conf.d/
	if got := next(t, applied); got != "m1;p2;" {
		t.Fatalf("after editing a glob file's target: %q", got)
	}
	write(t, mainTarget, "m2;")
	if got := next(t, applied); got != "m2;p2;" {
		t.Fatalf("after editing main.conf's target: %q", got)
	}

	other := filepath.Join(t.TempDir(), "other.real")
	write(t, other, "o1;")
	tmp := filepath.Join(f.dir, ".main.conf.tmp")
	if err := os.Symlink(other, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(f.dir, "main.conf")); err != nil {
		t.Fatal(err)
	}
	if got := next(t, applied); got != "o1;p2;" {
		t.Fatalf("after pointing main.conf elsewhere: %q", got)
	}
	write(t, other, "o2;")
	if got := next(t, applied); got != "o2;p2;" {
		t.Fatalf("after editing the new target: %q", got)
	}
}
