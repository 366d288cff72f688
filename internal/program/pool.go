package program

// pool keeps instances of one memory cap started and parked in their
// first recv, so that a program starts without paying for instantiation
// and the Go runtime's start (milliseconds). Its filler starts the next
// instance as soon as one is taken. An instance serves one program: the
// pool never takes one back.
type pool struct {
	pages uint32
	// ready holds warm-1 parked instances; the filler holds one more
	// while it waits to put it in, so warm are ready in all.
	ready chan *instance
}

// maxPools bounds the caps that get a pool: each holds instances for good,
// and the caps come from configuration, so a few are expected; a program
// with yet another cap starts a cold instance.
const maxPools = 4

// poolLocked returns the pool of a cap, creating it and its filler on
// first use, or nil when maxPools caps have one. Callers hold r.mu, and r
// is not closed.
func (r *Runtime) poolLocked(pages uint32) *pool {
	if p, ok := r.pools[pages]; ok {
		return p
	}
	if len(r.pools) >= maxPools {
		return nil
	}
	p := &pool{pages: pages, ready: make(chan *instance, r.warm-1)}
	r.pools[pages] = p
	r.wg.Add(1)
	go r.fill(p)
	return p
}

// fill keeps p full until Close. An instance that fails to start stops
// it (Run then starts its own and reports the error), rather than
// spinning.
func (r *Runtime) fill(p *pool) {
	defer r.wg.Done()
	for {
		inst, err := r.startInstance(p.pages)
		if err != nil {
			return
		}
		// A guest that dies before its first recv is handed out all the
		// same: Run reports its death, deterministically.
		select {
		case <-inst.parked:
		case <-inst.exited:
		case <-r.ctx.Done():
			inst.stop()
			return
		}
		select {
		case p.ready <- inst:
		case <-r.ctx.Done():
			inst.stop()
			return
		}
	}
}

// take returns an instance with a cap of pages: a warm one if the pool
// has one, else a new one.
func (r *Runtime) take(pages uint32) (*instance, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, ErrClosed
	}
	p := r.poolLocked(pages)
	r.mu.Unlock()
	if p == nil {
		return r.startInstance(pages)
	}
	select {
	case inst := <-p.ready:
		return inst, nil
	default:
		return r.startInstance(pages)
	}
}
