package upstream

import (
	"context"
	"reflect"
	"time"

	"github.com/airlock-run/airlock/manifests"
)

// members is the set of servers in force: replaced whole by Apply, read
// without a lock by every call.
type members struct {
	order  []*upstream
	byName map[string]*upstream
}

func (p *Pool) get(server string) *upstream { return p.set.Load().byName[server] }

func (p *Pool) list() []*upstream { return p.set.Load().order }

// DefaultDrain bounds how long Apply lets a removed server finish its
// calls in flight before it is stopped (which fails what is left with
// ErrOutcomeUnknown).
const DefaultDrain = 5 * time.Minute

// Changes says what Apply did.
type Changes struct {
	// Added are servers that were not configured (they connect in the
	// background, and OnToolsChanged reports their tools); Removed are
	// servers no longer configured (they take no new call, finish the ones
	// in flight, then stop); Replaced are servers whose configuration
	// changed (the old connection drains as a removed one does while a new
	// one connects under the same name).
	Added, Removed, Replaced []string
}

// Empty reports whether Apply changed nothing.
func (c Changes) Empty() bool { return len(c.Added)+len(c.Removed)+len(c.Replaced) == 0 }

// Apply makes servers (variable-expanded, as for New) the pool's servers,
// for a reloaded configuration. A server whose configuration is unchanged
// keeps its connection. From the moment Apply returns, a call to a server
// that is no longer configured fails with ErrNotSent ("unknown upstream"),
// while calls already running on it finish (for up to drain; <= 0 means
// DefaultDrain) before its connection closes and, for stdio, its process
// ends. Close stops draining servers too.
func (p *Pool) Apply(servers []manifests.Server, drain time.Duration) Changes {
	if drain <= 0 {
		drain = DefaultDrain
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.set.Load()
	next := &members{byName: make(map[string]*upstream, len(servers))}
	var ch Changes
	var start, retire []*upstream
	for _, s := range servers {
		if _, dup := next.byName[s.Name]; dup {
			p.log.Error().Str("server", s.Name).Msg("duplicate upstream name ignored")
			continue
		}
		u := old.byName[s.Name]
		switch {
		case u == nil:
			ch.Added = append(ch.Added, s.Name)
			u = p.adopt(newUpstream(p, s), old)
			start = append(start, u)
		case !reflect.DeepEqual(u.cfg, s):
			ch.Replaced = append(ch.Replaced, s.Name)
			retire = append(retire, u)
			u = p.adopt(newUpstream(p, s), old)
			start = append(start, u)
		}
		next.order = append(next.order, u)
		next.byName[s.Name] = u
	}
	for _, u := range old.order {
		if next.byName[u.name] == nil {
			ch.Removed = append(ch.Removed, u.name)
			retire = append(retire, u)
		}
	}
	p.set.Store(next)
	if p.closed {
		return ch
	}
	if p.started {
		for _, u := range start {
			p.launchLocked(u)
		}
	}
	for _, u := range retire {
		p.retired = append(p.retired, u)
		if p.started {
			go p.drain(u, drain)
		}
	}
	if len(ch.Removed) > 0 && p.opts.OnToolsChanged != nil {
		// The removed servers' tools are gone: consumers republish.
		for _, name := range ch.Removed {
			go p.opts.OnToolsChanged(name)
		}
	}
	return ch
}

// adopt gives a new upstream the resource watchers the pool's consumers
// registered on the others (WatchResources).
func (p *Pool) adopt(u *upstream, from *members) *upstream {
	for _, o := range from.order {
		o.cat.mu.Lock()
		if len(o.cat.watchers) > 0 {
			u.cat.watchers = make(map[int]ResourceWatcher, len(o.cat.watchers))
			for id, w := range o.cat.watchers {
				u.cat.watchers[id] = w
			}
			u.cat.nextID = o.cat.nextID
			o.cat.mu.Unlock()
			return u
		}
		o.cat.mu.Unlock()
	}
	return u
}

// launchLocked starts u's supervisor under the pool's context (p.mu held,
// pool started).
func (p *Pool) launchLocked(u *upstream) {
	ctx, cancel := context.WithCancel(p.ctx)
	u.stop, u.done = cancel, make(chan struct{})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(u.done)
		defer u.setStopped()
		u.run(ctx)
	}()
}

// drain waits until u has no call in flight (or for at most d), then stops
// its supervisor, which closes its session.
func (p *Pool) drain(u *upstream, d time.Duration) {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for u.calls.count() > 0 && time.Now().Before(deadline) {
		select {
		case <-tick.C:
		case <-u.done: // the pool closed
			return
		}
	}
	if n := u.calls.count(); n > 0 {
		p.log.Warn().Str("server", u.name).Int("calls", n).Dur("drain", d).Msg("removed upstream still had calls in flight at the end of its drain; stopping it")
	} else {
		p.log.Info().Str("server", u.name).Msg("removed upstream drained; stopping it")
	}
	u.stop()
	<-u.done
	if err := u.finish(); err != nil {
		p.log.Debug().Err(err).Str("server", u.name).Msg("closing removed upstream")
	}
}

// count is the number of calls in flight.
func (f *inflight) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}
