// Package reload swaps a running process's configuration without a
// restart. A [Reloader] holds the current version, fully built and
// validated, behind an atomic pointer that every request reads; on SIGHUP,
// or when one of the version's files changes on disk (fsnotify, debounced),
// it builds the next version from the files and, only if that succeeded,
// replaces the current one. A version that fails to build never replaces
// the running one: its problems are logged and counted
// (airlock_config_reload_total{result="error"}).
//
// The package knows nothing of what a version holds: cmd/airlock builds it
// (configuration, manifests, compiled policy, principals, approver groups)
// with the same loader and checkers as at start and as `airlock manifests
// validate`. It imports fsnotify, zerolog and internal/metrics only.
package reload

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock/internal/metrics"
)

// DefaultDebounce is how long the files must stay quiet after a change
// before a reload starts: editors write a file in several steps (truncate
// and write, or write a temporary file and rename it over), and a
// deployment tool may change several files at once.
const DefaultDebounce = 250 * time.Millisecond

// Options configure a [Reloader]. Load is required.
type Options[T any] struct {
	// Load builds the next version from the files, validating everything
	// it holds. An error keeps the running version; it should name every
	// problem (file:line: field: problem), and a manifests.Problems is
	// logged one problem per line.
	Load func() (*T, error)
	// Apply, when set, is called after a new version replaced the old one
	// (the switch has happened: readers already see next), to bring what
	// outlives a version in line with it (connect new upstreams, publish
	// the tool list). Calls are serialized.
	Apply func(prev, next *T)
	// Watch lists what to watch for a version: files, or globs whose
	// directory part has no wildcard. Their directories are watched, so a
	// file an editor replaces by renaming a new one over it, or a new
	// file matching a glob, is seen.
	Watch func(*T) []string
	// Debounce is how long changes must stop before a reload (default
	// DefaultDebounce).
	Debounce time.Duration
	// Logger receives what each reload did (default: none).
	Logger *zerolog.Logger
}

// Reloader holds the current version of a configuration and replaces it.
type Reloader[T any] struct {
	cur  atomic.Pointer[T]
	opts Options[T]
	log  zerolog.Logger

	mu    sync.Mutex // serializes reloads
	gen   atomic.Uint64
	ready chan struct{} // closed once Run watches the files
	once  sync.Once

	// watcher is Run's file watcher (nil before Run, or without one) and
	// patterns what it matches events against. A reload moves the watch to
	// the new version's files before it applies the version, so that a
	// change made as soon as the version is seen (an edit of a symlink's
	// new target) is never missed.
	watcher  atomic.Pointer[fsnotify.Watcher]
	patterns atomic.Pointer[[]string]
}

// New holds initial (already loaded and validated) as the current version.
func New[T any](initial *T, o Options[T]) *Reloader[T] {
	if o.Debounce <= 0 {
		o.Debounce = DefaultDebounce
	}
	r := &Reloader[T]{opts: o, log: zerolog.Nop(), ready: make(chan struct{})}
	if o.Logger != nil {
		r.log = *o.Logger
	}
	r.cur.Store(initial)
	return r
}

// Current is the version in force. Read it once per request or call and use
// that value throughout, so that one request never sees two versions.
func (r *Reloader[T]) Current() *T { return r.cur.Load() }

// Watching is closed once Run watches the files (or found it cannot):
// a change made after it is seen.
func (r *Reloader[T]) Watching() <-chan struct{} { return r.ready }

func (r *Reloader[T]) markReady() { r.once.Do(func() { close(r.ready) }) }

// Generation counts the versions that replaced the first one (0: none yet).
func (r *Reloader[T]) Generation() uint64 { return r.gen.Load() }

// Reload builds the next version and, if that succeeded, makes it current
// and applies it. On error the running version stays and the error is
// returned (and logged, and counted). why says what asked for the reload,
// for the log.
func (r *Reloader[T]) Reload(why string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	next, err := r.load()
	if err != nil {
		// The running version's files are watched again: a symlink may
		// point to a new (bad) target, whose fix must be seen.
		if w := r.watcher.Load(); w != nil {
			r.rewatch(w)
		}
		metrics.ConfigReloads.WithLabelValues(metrics.ReloadError).Inc()
		ev := r.log.Error().Str("trigger", why)
		var each interface{ Unwrap() []error }
		if errors.As(err, &each) && len(each.Unwrap()) > 0 {
			for _, p := range each.Unwrap() {
				r.log.Error().Str("trigger", why).Msg("reload: " + p.Error())
			}
			ev = ev.Int("problems", len(each.Unwrap()))
		} else {
			ev = ev.Err(err)
		}
		ev.Msg("configuration NOT reloaded: the running version is kept; fix the problems above and save again (or send SIGHUP)")
		return err
	}
	prev := r.cur.Swap(next)
	r.gen.Add(1)
	if w := r.watcher.Load(); w != nil {
		r.rewatch(w)
	}
	metrics.ConfigReloads.WithLabelValues(metrics.ReloadOK).Inc()
	if r.opts.Apply != nil {
		r.opts.Apply(prev, next)
	}
	r.log.Info().Str("trigger", why).Uint64("generation", r.gen.Load()).Msg("configuration reloaded")
	return nil
}

// load runs Load, turning a panic into an error: a bad file must never
// bring the process down.
func (r *Reloader[T]) load() (next *T, err error) {
	defer func() {
		if p := recover(); p != nil {
			next, err = nil, fmt.Errorf("loading the configuration failed: %v", p)
		}
	}()
	next, err = r.opts.Load()
	if err == nil && next == nil {
		err = errors.New("loading the configuration gave nothing")
	}
	return next, err
}

// Run reloads on every value from signals (SIGHUP, as the caller
// subscribed it) and when a watched file changes, until ctx is done. The
// watched set follows the current version (a new manifest glob is watched
// after the reload that introduced it). It returns an error only if no
// file watcher can be made at all; then SIGHUP still works.
func (r *Reloader[T]) Run(ctx context.Context, signals <-chan os.Signal) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		r.log.Warn().Err(err).Msg("cannot watch the configuration files; reload with SIGHUP")
		r.markReady()
		r.signalsOnly(ctx, signals)
		return fmt.Errorf("watching configuration files: %w", err)
	}
	defer w.Close()
	r.mu.Lock()
	r.rewatch(w)
	r.watcher.Store(w)
	r.mu.Unlock()
	defer r.watcher.Store(nil)
	r.markReady()

	var timer *time.Timer
	var fire <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return nil
		case s, ok := <-signals:
			if !ok {
				signals = nil
				continue
			}
			_ = r.Reload("signal " + s.String())
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if !matches(*r.patterns.Load(), ev.Name) {
				continue
			}
			// Debounce: every change restarts the wait.
			if timer == nil {
				timer = time.NewTimer(r.opts.Debounce)
			} else {
				timer.Reset(r.opts.Debounce)
			}
			fire = timer.C
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			r.log.Warn().Err(err).Msg("watching the configuration files")
		case <-fire:
			fire = nil
			_ = r.Reload("file changed")
		}
	}
}

func (r *Reloader[T]) signalsOnly(ctx context.Context, signals <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case s, ok := <-signals:
			if !ok {
				<-ctx.Done()
				return
			}
			_ = r.Reload("signal " + s.String())
		}
	}
}

// rewatch brings the watch in line with the current version; r.mu held.
func (r *Reloader[T]) rewatch(w *fsnotify.Watcher) {
	var old []string
	if p := r.patterns.Load(); p != nil {
		old = *p
	}
	pats := r.watch(w, old)
	r.patterns.Store(&pats)
}

// watch brings the watcher's directories in line with the current
// version's files and returns the patterns (absolute, cleaned) to match
// events against.
func (r *Reloader[T]) watch(w *fsnotify.Watcher, old []string) []string {
	var pats []string
	if r.opts.Watch != nil {
		for _, p := range r.opts.Watch(r.Current()) {
			if abs, err := filepath.Abs(p); err == nil {
				pats = append(pats, filepath.Clean(abs))
			}
		}
	}
	pats = append(pats, symlinkTargets(pats)...)
	slices.Sort(pats)
	pats = slices.Compact(pats)
	if slices.Equal(pats, old) {
		return old
	}
	want := map[string]bool{}
	for _, p := range pats {
		dir := filepath.Dir(p)
		if hasMeta(dir) {
			r.log.Warn().Str("pattern", p).Msg("a directory with wildcards cannot be watched; files it matches reload on SIGHUP only")
			continue
		}
		want[dir] = true
	}
	for _, d := range w.WatchList() {
		if !want[d] {
			_ = w.Remove(d)
		}
	}
	for d := range want {
		if err := w.Add(d); err != nil {
			r.log.Warn().Err(err).Str("dir", d).Msg("cannot watch a configuration directory; changes there reload on SIGHUP only")
		}
	}
	return pats
}

// symlinkTargets is where the patterns' files resolve to when they are
// symlinks (a glob's: each file it matches now). An edit in place of a
// link's target changes only the target, in the target's directory: the
// event names the target, never the link. The set is taken again after
// every reload, so a link pointed elsewhere (an event on the link itself)
// moves the watch to its new target.
func symlinkTargets(pats []string) []string {
	var out []string
	for _, p := range pats {
		files := []string{p}
		if hasMeta(p) {
			files, _ = filepath.Glob(p)
		}
		for _, f := range files {
			if t, err := filepath.EvalSymlinks(f); err == nil && t != f {
				if abs, err := filepath.Abs(t); err == nil {
					out = append(out, filepath.Clean(abs))
				}
			}
		}
	}
	return out
}

// matches reports whether a changed file is one of the patterns'.
func matches(patterns []string, name string) bool {
	name = filepath.Clean(name)
	for _, p := range patterns {
		if p == name {
			return true
		}
		// A Kubernetes ConfigMap or Secret volume updates its files by
		// swapping the "..data" symlink they point through: the event
		// names that, not the file.
		if filepath.Base(name) == k8sData && filepath.Dir(name) == filepath.Dir(p) {
			return true
		}
		if ok, err := filepath.Match(p, name); err == nil && ok {
			return true
		}
	}
	return false
}

// k8sData is the symlink the kubelet swaps to update a volume's files.
const k8sData = "..data"

func hasMeta(p string) bool { return strings.ContainsAny(p, "*?[") }
