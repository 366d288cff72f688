package sandbox

import (
	"encoding/json"
	"path"
	"sync"
	"time"
)

// shape is everything of a Call but its Stdin, with the defaults applied:
// what an instance is started with before it is handed a call. Calls of
// one shape (a native tool's calls) share a pool.
type shape struct {
	key    string // the module's hash and the rest, canonically
	args   []string
	env    map[string]string
	mounts []Mount
	lim    Limits
	pages  uint32
}

func (m *Module) shapeOf(c Call, lim Limits) *shape {
	sh := &shape{args: c.Args, env: c.Env, mounts: c.Mounts, lim: lim, pages: pagesFor(lim.MemoryBytes)}
	mounts := make([]Mount, len(c.Mounts))
	for i, mt := range c.Mounts {
		mt.GuestPath = path.Clean(mt.GuestPath)
		mounts[i] = mt
	}
	// encoding/json sorts map keys: the key does not depend on the order
	// of c.Env.
	b, _ := json.Marshal(struct {
		Module []byte
		Args   []string
		Env    map[string]string
		Mounts []Mount
		Limits Limits
	}{m.hash[:], c.Args, c.Env, mounts, lim})
	sh.key = string(b)
	return sh
}

// pool keeps instances of one shape started and parked at their first use
// of a call, so that a call pays neither for instantiation nor for the
// guest's own start (for a Go guest, its runtime and package
// initialisation: milliseconds). Its filler starts the next instance as
// soon as one is taken. An instance serves one call: the pool never takes
// one back.
type pool struct {
	sh *shape
	// ready holds up to warm parked instances.
	ready chan *instance
	// refill holds a token per instance the filler is to start: warm at
	// first, then one each time a call that took a warm instance ends.
	// Refilling after the call, not when it takes its instance, keeps
	// the next instance's start (milliseconds of CPU) from competing
	// with the call it would only be ready for afterwards.
	refill chan struct{}

	mu       sync.Mutex
	starting *instance // the filler's, until it parks or a call claims it
}

// DefaultWarm is how many instances each call shape keeps ready when
// Options.Warm is zero.
const DefaultWarm = 2

// maxPools bounds the shapes that get a pool: each holds its instances
// (their memory, as much as their start touched) for as long as the
// Sandbox lives, and shapes come from configuration (one per native
// tool), so a few are expected; a call of yet another shape starts a
// cold instance.
const maxPools = 32

// poolFor returns the pool of sh, if it has one, or with create, a new
// one and its filler, unless pools are off or maxPools shapes have one.
func (m *Module) poolFor(sh *shape, create bool) *pool {
	s := m.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.warm <= 0 {
		return nil
	}
	if p, ok := s.pools[sh.key]; ok {
		return p
	}
	if !create || len(s.pools) >= maxPools {
		return nil
	}
	p := &pool{sh: sh, ready: make(chan *instance, s.warm), refill: make(chan struct{}, s.warm)}
	for range s.warm {
		p.refill <- struct{}{}
	}
	s.pools[sh.key] = p
	s.wg.Add(1)
	go m.fill(p)
	return p
}

// warmMemoryBytes is the most memory an instance may have grown to by the
// time it parks and still be kept warm. A Go guest parks with about 3 MiB;
// one that does its work before reading its input (a memory bomb does)
// would hold all it took for as long as it waited, so its tool gets no
// pool.
const warmMemoryBytes = 16 << 20

// fill keeps p full until Close, starting an instance per refill token.
// An instance that fails to start, does not park within the call's
// timeout or parks holding more than warmMemoryBytes stops it (calls then
// start their own, and report what goes wrong), rather than spinning or
// hoarding. While it waits for an instance to park, a call that finds
// ready empty may claim that instance rather than start one more (see
// take).
func (m *Module) fill(p *pool) {
	s := m.s
	defer s.wg.Done()
	for {
		select {
		case <-p.refill:
		case <-s.ctx.Done():
			return
		}
		inst, err := m.start(p.sh)
		if err != nil {
			return
		}
		p.mu.Lock()
		p.starting = inst
		p.mu.Unlock()
		warm := time.NewTimer(p.sh.lim.Timeout)
		var timedOut bool
		// A guest that exits before its first use of a call is handed
		// out all the same: it would have done so in the call.
		select {
		case <-inst.parked:
		case <-inst.exited:
		case <-warm.C:
			timedOut = true
		case <-s.ctx.Done():
		}
		warm.Stop()
		p.mu.Lock()
		claimed := p.starting != inst
		p.starting = nil
		p.mu.Unlock()
		switch {
		case s.ctx.Err() != nil:
			inst.stop() // a no-op for a claimed one: Close stops it too
			return
		case claimed:
			continue // its call gives the token back when it ends
		case timedOut || inst.parkedMemory() > warmMemoryBytes:
			inst.stop()
			return
		}
		// Never blocks: there are never more than warm instances
		// between the tokens, ready, the filler and the calls that took
		// them.
		p.ready <- inst
	}
}

// take returns an instance of sh: a warm one if its pool has one, else the
// one its filler is starting, else a new one. The first call of a shape
// that starts makes its pool.
func (m *Module) take(sh *shape) (*instance, error) {
	p := m.poolFor(sh, false)
	if p != nil {
		var inst *instance
		select {
		case inst = <-p.ready:
		default:
			// Partway started already: sooner than a new one, and no
			// second start competing with the first for the CPU.
			p.mu.Lock()
			inst, p.starting = p.starting, nil
			p.mu.Unlock()
		}
		if inst != nil {
			m.s.warmCalls.Add(1)
			inst.pool = p
			return inst, nil
		}
	}
	m.s.coldCalls.Add(1)
	inst, err := m.start(sh)
	if err == nil && p == nil {
		m.poolFor(sh, true)
	}
	return inst, err
}

// done tells the pool an instance taken from it has served its call: the
// filler may start the next.
func (p *pool) done() {
	select {
	case p.refill <- struct{}{}:
	default:
	}
}

// Stats says how calls found their instances.
type Stats struct {
	// WarmCalls took an instance a pool had started for them (parked, or
	// still starting); ColdCalls started their own (the first of a shape,
	// a burst past its pool, a shape without one).
	WarmCalls, ColdCalls int64
	// Instances are started and not yet released: warm ones, running
	// ones, and ones a filler is starting.
	Instances int
	// Pools is how many call shapes have one, and Ready how many parked
	// instances they hold in all.
	Pools, Ready int
	// Snapshots is how many call shapes of reactors have one (see
	// reactor.go); each holds a descriptor (its memfd, on Linux).
	Snapshots int
}

// Stats returns the sandbox's counts so far.
func (s *Sandbox) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{WarmCalls: s.warmCalls.Load(), ColdCalls: s.coldCalls.Load(), Instances: s.instances, Pools: len(s.pools), Snapshots: len(s.snapshots)}
	for _, p := range s.pools {
		st.Ready += len(p.ready)
	}
	return st
}
