// Package upstream keeps one long-lived MCP client session per upstream
// server (a stdio child process or a streamable HTTP endpoint) and calls
// tools over it.
//
// A [Pool] connects every server in the background, reconnects with
// exponential backoff when a session ends, remembers the last known tool
// list of each server, and classifies every failed call by what is known
// about its outcome: [ErrNotSent] (never reached the upstream, retrying is
// safe), [ErrRejected] (the upstream refused it with a protocol error) or
// [ErrOutcomeUnknown] (it may or may not have run). An HTTP upstream's
// call stream that ends before the call's response is resumed with
// Last-Event-ID, never re-sent (resume.go).
//
// The package imports the manifests types, the MCP SDK and internal/tracing
// (a call carries its caller's trace context to the upstream, trace.go)
// only; it knows nothing about Temporal, policy or the downstream MCP
// server.
package upstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/manifests"
)

// Connection states reported in [Status.State].
const (
	StateConnecting  = "connecting"
	StateConnected   = "connected"
	StateUnavailable = "unavailable"
	StateStopped     = "stopped"
)

const (
	defaultMinBackoff     = 500 * time.Millisecond
	defaultMaxBackoff     = 30 * time.Second
	defaultConnectTimeout = 30 * time.Second

	// stableUptime is how long a session must have stayed up for its end to
	// reset the backoff; a server that dies right after the handshake keeps
	// backing off like one that never starts.
	stableUptime = 30 * time.Second

	// terminateDuration is how long a stdio child gets to exit after its
	// stdin is closed (and again after SIGTERM) before it is killed.
	terminateDuration = 2 * time.Second

	// maxCallWait bounds how long CallTool waits for a server that is not
	// connected.
	maxCallWait = 5 * time.Second

	// refreshTimeout bounds one re-listing of tools after list_changed.
	refreshTimeout = 30 * time.Second
)

// Options configures a [Pool]. The zero value is usable.
type Options struct {
	// Logger receives connection events, and the stderr lines of stdio
	// servers at debug level. Nil disables logging.
	Logger *zerolog.Logger

	// ClientInfo is sent to upstreams in the MCP handshake (default
	// {Name: "airlock", Version: "dev"}).
	ClientInfo *mcp.Implementation

	// OnToolsChanged is called, from a pool goroutine, after a server's tool
	// list was first listed and whenever it changes afterwards (list_changed
	// notification or a reconnect that lists different tools). Read the new
	// list with [Pool.Status]. It runs on the server's supervisor, so it
	// should return quickly.
	OnToolsChanged func(server string)

	// OnResourcesChanged is called, from a pool goroutine, when a server's
	// resources, resource templates or prompts change (including their first
	// listing, when the server offers any). Read them with [Pool.Catalog].
	// It should return quickly.
	OnResourcesChanged func(server string)

	// OnResourceUpdated is called when a server reports that a subscribed
	// resource changed (notifications/resources/updated; see
	// [Pool.Subscribe]). It runs on the session's notification handler and
	// must not block.
	OnResourceUpdated func(server, uri string)

	// Native connects to the in-process server of a wasm server
	// (manifests.Server.WASM), returning the client's end of an in-memory
	// transport; see internal/sandbox/toolserver. Without it wasm servers stay
	// unavailable.
	Native func(ctx context.Context, server string) (mcp.Transport, error)

	// Sandbox runs stdio servers in bubblewrap unless their manifest says
	// "sandbox: off" (see ProbeSandbox). Nil runs every stdio server as a
	// plain child process; airlock's commands always set it.
	Sandbox *Sandbox

	// Audit receives the egress refusals of sandboxed servers (nil: not
	// written; they are logged and counted either way).
	Audit *auditstream.Log

	// MinBackoff and MaxBackoff bound the delay between connection attempts
	// (defaults 500ms and 30s).
	MinBackoff, MaxBackoff time.Duration
}

// Status is a snapshot of one upstream connection.
type Status struct {
	Server string
	// State is one of StateConnecting, StateConnected, StateUnavailable or
	// StateStopped.
	State string
	// Reason says why the server is not connected (the last failure); it is
	// empty while connected.
	Reason string
	// Since is when State was entered.
	Since time.Time
	// Tools are the last known tool definitions; they are kept while the
	// server reconnects. Treat them as read-only.
	Tools []*mcp.Tool
	// Attempts counts the connection attempts that failed since the last
	// successful connection.
	Attempts int
	// NextRetry is when the next connection attempt starts (zero unless
	// State is StateUnavailable).
	NextRetry time.Time
}

// Pool holds one supervised MCP client session per upstream server. It is
// safe for concurrent use.
type Pool struct {
	opts Options
	log  zerolog.Logger
	// set is the servers in force; Apply replaces it (reconcile.go).
	set atomic.Pointer[members]

	mu      sync.Mutex
	started bool
	closed  bool
	ctx     context.Context // the supervisors' parent, once started
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	// retired are upstreams that Apply removed: they finish their calls
	// in flight, then stop; Close finishes them too.
	retired []*upstream
}

// New returns a pool for servers. Server values must already be
// variable-expanded. Nothing connects until [Pool.Start].
func New(servers []manifests.Server, opts Options) *Pool {
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = defaultMinBackoff
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = defaultMaxBackoff
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = opts.MinBackoff
	}
	if opts.ClientInfo == nil {
		opts.ClientInfo = &mcp.Implementation{Name: "airlock", Version: "dev"}
	}
	log := zerolog.Nop()
	if opts.Logger != nil {
		log = *opts.Logger
	}
	p := &Pool{opts: opts, log: log}
	m := &members{byName: make(map[string]*upstream)}
	for _, s := range servers {
		if _, dup := m.byName[s.Name]; dup {
			log.Error().Str("server", s.Name).Msg("duplicate upstream name ignored")
			continue
		}
		u := newUpstream(p, s)
		m.order = append(m.order, u)
		m.byName[s.Name] = u
	}
	p.set.Store(m)
	return p
}

// Start connects every server in the background and returns immediately:
// a server that is down or slow never delays the others or the caller.
// The supervisors run until ctx is done or [Pool.Close] is called. Calling
// Start again, or after Close, does nothing.
func (p *Pool) Start(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started || p.closed {
		return
	}
	p.started = true
	p.ctx, p.cancel = context.WithCancel(ctx)
	for _, u := range p.list() {
		p.launchLocked(u)
	}
}

// Close stops the supervisors, cancels calls in flight (they fail with
// ErrOutcomeUnknown), closes every session and waits until every stdio
// child has exited and been reaped. It returns errors from closing
// sessions other than the children's exit statuses.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	cancel := p.cancel
	p.mu.Unlock()

	if cancel != nil {
		cancel()
	}
	p.wg.Wait()
	var errs []error
	p.mu.Lock()
	all := append(p.list(), p.retired...)
	p.mu.Unlock()
	for _, u := range all {
		u.setStopped() // for a pool that was never started
		if err := u.finish(); err != nil {
			errs = append(errs, fmt.Errorf("closing upstream %s: %w", u.name, err))
		}
	}
	return errors.Join(errs...)
}

// Status returns the state of server. An unknown server is reported as
// unavailable.
func (p *Pool) Status(server string) Status {
	u := p.get(server)
	if u == nil {
		return Status{Server: server, State: StateUnavailable, Reason: "no upstream with this name is configured"}
	}
	return u.status()
}

// Statuses returns the state of every server, in configuration order.
func (p *Pool) Statuses() []Status {
	order := p.list()
	out := make([]Status, 0, len(order))
	for _, u := range order {
		out = append(out, u.status())
	}
	return out
}

func (p *Pool) isStarted() (started, closed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.started, p.closed
}

func (u *upstream) status() Status {
	u.mu.Lock()
	defer u.mu.Unlock()
	st := u.st
	st.Tools = slices.Clone(st.Tools)
	return st
}
