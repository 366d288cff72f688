// Package loadgen puts load on MCP servers over streamable HTTP: N
// concurrent client sessions calling one tool with the same arguments, for a
// duration or a number of calls, recording every call's latency. Given two
// targets (airlock and the upstream behind it) it measures them in
// alternating rounds over sessions held open, so both see the same machine
// and Compare can say what going through airlock costs. `airlock bench` and
// the integration benchmarks drive it.
//
// Every session is its own MCP session: through airlock, its own task.
//
// loadgen is a leaf: it imports the standard library and the go-sdk's mcp
// package only.
package loadgen

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The bounds of one run, so a mistyped flag cannot load a server for a day
// or fill memory with samples (8 bytes a call).
const (
	MaxCalls    = 1_000_000 // calls per target
	MaxDuration = time.Hour // measuring time per target
	MaxSessions = 1000      // sessions per target
	MaxRounds   = 100       // rounds of alternation
	maxErrors   = 5         // distinct error messages kept per target
	maxMessage  = 300       // bytes of one error message kept
	connectWait = 30 * time.Second
)

// Target is one MCP server to load.
type Target struct {
	// Name labels the target in results ("airlock", "direct").
	Name string
	// URL is the server's streamable HTTP endpoint.
	URL string
	// Tool is the tool to call, as this server names it.
	Tool string
	// Header is sent with every request (Authorization: Bearer <key>).
	Header http.Header
	// Open, when set, makes this a target that is not an MCP endpoint
	// (the bare Temporal floor): it opens n sessions of its own, and each
	// Call of one is a call, measured like an MCP call (an error is a
	// transport error). URL and Tool then only label it.
	Open func(ctx context.Context, n int) ([]Caller, error)
}

// Caller is one session of a target with Open: Call makes one call (back
// to back, never concurrently); Close ends the session.
type Caller interface {
	Call(ctx context.Context) error
	Close() error
}

// Options say how to load the targets. Duration and Calls are per target;
// when both are set the first one reached ends the run.
type Options struct {
	// Args are the tool's arguments, a JSON object (nil: {}).
	Args json.RawMessage
	// Sessions is the number of concurrent sessions per target (default 1).
	Sessions int
	// Duration is how long each target is measured.
	Duration time.Duration
	// Calls is how many calls each target is measured over.
	Calls int
	// Warmup is how many calls each session makes before measuring (not
	// counted). A warm-up call that fails fails the run: the target is
	// misconfigured, and every measured call would fail the same way.
	Warmup int
	// Rounds splits the measuring into this many rounds; in each, every
	// target is measured in turn for its share of Duration or Calls
	// (default 1: the targets one after the other).
	Rounds int
	// IdempotencyKeyMeta, when set, is the _meta key under which every call
	// (warm-up included) carries a key unique to it.
	IdempotencyKeyMeta string
	// CallTimeout bounds one call (default 60s); a call that times out is
	// a transport error.
	CallTimeout time.Duration
	// HTTPClient carries the requests (default: one with a connection pool
	// sized for the sessions; http.DefaultClient keeps only 2 idle
	// connections per host, which would make load tests measure TCP
	// set-up).
	HTTPClient *http.Client
	// OnResult, when set, sees every result, warm-up included, from the
	// sessions' goroutines (target and session are indexes).
	OnResult func(target, session int, res *mcp.CallToolResult)
	// ProcessCPU, when set, reads the CPU this process has used (user +
	// system; testenv.ProcessCPU). Only meaningful when the targets run
	// in the load client's own process (benchmarks): it is read around
	// each round, and each Result's CPUPerCall is its rounds' CPU over
	// its answered calls, which a loaded machine slows but does not
	// inflate the way it does latency.
	ProcessCPU func() time.Duration
}

// Check reports what is wrong with the targets and options (every problem
// at once), as Open would, without connecting.
func Check(targets []Target, o Options) error { return o.check(targets) }

// check validates the options against the bounds and fills in defaults.
func (o *Options) check(targets []Target) error {
	var errs []error
	if len(targets) == 0 {
		errs = append(errs, errors.New("no target"))
	}
	for _, t := range targets {
		if t.Open == nil && (t.URL == "" || t.Tool == "") {
			errs = append(errs, fmt.Errorf("target %q: URL and tool are required", t.Name))
		}
	}
	if o.Sessions == 0 {
		o.Sessions = 1
	}
	if o.Rounds == 0 {
		o.Rounds = 1
	}
	if o.CallTimeout == 0 {
		o.CallTimeout = 60 * time.Second
	}
	if len(o.Args) == 0 {
		o.Args = json.RawMessage(`{}`)
	}
	var obj map[string]any
	if err := json.Unmarshal(o.Args, &obj); err != nil || obj == nil {
		errs = append(errs, fmt.Errorf("arguments %s: want a JSON object", o.Args))
	}
	switch {
	case o.Sessions < 1 || o.Sessions > MaxSessions:
		errs = append(errs, fmt.Errorf("sessions %d: want 1-%d", o.Sessions, MaxSessions))
	case o.Duration < 0 || o.Duration > MaxDuration:
		errs = append(errs, fmt.Errorf("duration %s: want at most %s", o.Duration, MaxDuration))
	case o.Calls < 0 || o.Calls > MaxCalls:
		errs = append(errs, fmt.Errorf("calls %d: want at most %d", o.Calls, MaxCalls))
	case o.Duration == 0 && o.Calls == 0:
		errs = append(errs, errors.New("give a duration or a number of calls"))
	case o.Warmup < 0 || o.Warmup > MaxCalls/o.Sessions:
		errs = append(errs, fmt.Errorf("warm-up %d: want 0-%d calls per session", o.Warmup, MaxCalls/o.Sessions))
	case o.Rounds < 1 || o.Rounds > MaxRounds:
		errs = append(errs, fmt.Errorf("rounds %d: want 1-%d", o.Rounds, MaxRounds))
	case o.CallTimeout < 0:
		errs = append(errs, fmt.Errorf("call timeout %s: want a positive duration", o.CallTimeout))
	}
	if o.Calls > 0 && o.Rounds > o.Calls {
		o.Rounds = o.Calls // a round of no calls measures nothing
	}
	return errors.Join(errs...)
}

// Bench is a load run: sessions open to every target, ready to measure.
type Bench struct {
	opts    Options
	targets []*target
	keys    string // prefix of the idempotency keys, unique to the run
}

type target struct {
	Target
	sessions []*session
	res      *Result
	errMu    sync.Mutex
}

type session struct {
	cs   *mcp.ClientSession // nil for a target with Open
	c    Caller             // for a target with Open
	seq  int
	dead bool // its connection is gone: it makes no more calls
}

// Open connects o.Sessions sessions to each target, checks that the tool
// is listed, and makes the warm-up calls. Close the Bench when done.
func Open(ctx context.Context, targets []Target, o Options) (*Bench, error) {
	if err := o.check(targets); err != nil {
		return nil, err
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			MaxIdleConns:        0,
			MaxIdleConnsPerHost: 2*o.Sessions + 4, // a POST and the standalone GET stream per session
			IdleConnTimeout:     90 * time.Second,
		}}
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	b := &Bench{opts: o, keys: "bench-" + hex.EncodeToString(rnd[:])}
	for i, t := range targets {
		bt := &target{Target: t, res: &Result{Target: t.Name, URL: t.URL, Tool: t.Tool, Sessions: o.Sessions}}
		b.targets = append(b.targets, bt)
		if err := b.connect(ctx, bt); err != nil {
			b.Close()
			return nil, err
		}
		if err := b.warmup(ctx, i, bt); err != nil {
			b.Close()
			return nil, err
		}
	}
	return b, nil
}

// connect opens the target's sessions, a few at a time.
func (b *Bench) connect(ctx context.Context, t *target) error {
	if t.Open != nil {
		return b.open(ctx, t)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "airlock-bench", Version: "1"}, nil)
	t.sessions = make([]*session, b.opts.Sessions)
	errs := make([]error, len(t.sessions))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range t.sessions {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, connectWait)
			defer cancel()
			hc := b.opts.HTTPClient
			if len(t.Header) > 0 {
				hc = &http.Client{Transport: headerRT{header: t.Header, next: transport(hc)}, Timeout: hc.Timeout}
			}
			// Each session its own task: protocol 2025-11-25 (a
			// 2026-07-28 client without Airlock-Task would get a task
			// per call, gateway.unnamed_calls).
			cs, err := c.Connect(cctx, &mcp.StreamableClientTransport{Endpoint: t.URL, HTTPClient: hc}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
			if err != nil {
				errs[i] = fmt.Errorf("connecting to %s: %w", t.URL, err)
				return
			}
			t.sessions[i] = &session{cs: cs}
		})
	}
	wg.Wait()
	if err := distinct(errs); err != nil {
		return err
	}
	return checkTool(ctx, t)
}

// open opens the sessions of a target with Open.
func (b *Bench) open(ctx context.Context, t *target) error {
	cs, err := t.Open(ctx, b.opts.Sessions)
	if err == nil && len(cs) != b.opts.Sessions {
		err = fmt.Errorf("opened %d sessions, want %d", len(cs), b.opts.Sessions)
	}
	if err != nil {
		for _, c := range cs {
			_ = c.Close()
		}
		return fmt.Errorf("opening %s: %w", t.Name, err)
	}
	t.sessions = make([]*session, len(cs))
	for i, c := range cs {
		t.sessions[i] = &session{c: c}
	}
	return nil
}

// checkTool fails when the target does not list the tool, naming the tools
// it has that end like it (airlock exposes "<server>__<tool>").
func checkTool(ctx context.Context, t *target) error {
	lctx, cancel := context.WithTimeout(ctx, connectWait)
	defer cancel()
	var names, like []string
	for tool, err := range t.sessions[0].cs.Tools(lctx, nil) {
		if err != nil {
			return nil // listing is not what we measure; the calls will tell
		}
		if tool.Name == t.Tool {
			return nil
		}
		names = append(names, tool.Name)
		if strings.HasSuffix(tool.Name, "__"+t.Tool) || strings.HasSuffix(t.Tool, "__"+tool.Name) {
			like = append(like, tool.Name)
		}
	}
	if len(like) > 0 {
		return fmt.Errorf("%s has no tool %q; did you mean %s?", t.URL, t.Tool, strings.Join(like, " or "))
	}
	return fmt.Errorf("%s has no tool %q (it has %d: %s)", t.URL, t.Tool, len(names), abbreviate(names, 8))
}

func abbreviate(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:n], ", ") + ", …"
}

// warmup makes each session's warm-up calls, the sessions in parallel.
func (b *Bench) warmup(ctx context.Context, ti int, t *target) error {
	if b.opts.Warmup == 0 {
		return nil
	}
	errs := make([]error, len(t.sessions))
	var wg sync.WaitGroup
	for si, s := range t.sessions {
		wg.Go(func() {
			for range b.opts.Warmup {
				res, err := b.call(ctx, ti, t, si, s)
				switch {
				case err != nil:
					errs[si] = fmt.Errorf("warm-up call of %s on %s: %w", t.Tool, t.URL, err)
					return
				case res.IsError:
					errs[si] = fmt.Errorf("warm-up call of %s on %s answered isError: %s (set the warm-up to 0 to measure it anyway)", t.Tool, t.URL, resultText(res))
					return
				}
			}
		})
	}
	wg.Wait()
	return distinct(errs)
}

// distinct joins the sessions' errors, each message once: 32 sessions
// refused the same way are one problem.
func distinct(errs []error) error {
	var out []error
	seen := map[string]bool{}
	for _, err := range errs {
		if err != nil && !seen[err.Error()] {
			seen[err.Error()] = true
			out = append(out, err)
		}
	}
	return errors.Join(out...)
}

// call makes one call on session si of target t.
func (b *Bench) call(ctx context.Context, ti int, t *target, si int, s *session) (*mcp.CallToolResult, error) {
	if s.c != nil {
		cctx, cancel := context.WithTimeout(ctx, b.opts.CallTimeout)
		defer cancel()
		if err := s.c.Call(cctx); err != nil {
			return nil, err
		}
		return &mcp.CallToolResult{}, nil
	}
	p := &mcp.CallToolParams{Name: t.Tool, Arguments: b.opts.Args}
	if b.opts.IdempotencyKeyMeta != "" {
		s.seq++
		p.Meta = mcp.Meta{b.opts.IdempotencyKeyMeta: fmt.Sprintf("%s-%d-%d-%d", b.keys, ti, si, s.seq)}
	}
	cctx, cancel := context.WithTimeout(ctx, b.opts.CallTimeout)
	defer cancel()
	res, err := s.cs.CallTool(cctx, p)
	if err == nil && b.opts.OnResult != nil {
		b.opts.OnResult(ti, si, res)
	}
	return res, err
}

// Run measures every target, round by round, and returns their results in
// the order of the targets. Call it once. When ctx is cancelled (Ctrl-C) it stops at
// once and returns what was measured, Interrupted set; calls cut short are
// counted as Cancelled, not as errors.
func (b *Bench) Run(ctx context.Context) []*Result {
	o := b.opts
	for r := 0; r < o.Rounds && ctx.Err() == nil; r++ {
		for ti, t := range b.targets {
			if ctx.Err() != nil {
				break
			}
			b.round(ctx, ti, t, share(o.Calls, o.Rounds, r), shareDur(o.Duration, o.Rounds))
		}
	}
	out := make([]*Result, len(b.targets))
	for i, t := range b.targets {
		t.res.Interrupted = ctx.Err() != nil
		t.res.finish()
		out[i] = t.res
	}
	return out
}

// share is round r's part of n split into rounds (the first rounds take the
// remainder); 0 for no bound.
func share(n, rounds, r int) int {
	if n == 0 {
		return 0
	}
	s := n / rounds
	if r < n%rounds {
		s++
	}
	return s
}

func shareDur(d time.Duration, rounds int) time.Duration { return d / time.Duration(rounds) }

// round measures target t for up to calls calls and up to d (0: no bound),
// all its live sessions calling back to back. Calls in flight when the time
// is up finish and count.
func (b *Bench) round(ctx context.Context, ti int, t *target, calls int, d time.Duration) {
	var claimed atomic.Int64
	start := time.Now()
	deadline := start.Add(d)
	if calls == 0 {
		// Samples stay bounded whatever the duration.
		t.errMu.Lock()
		calls = MaxCalls - len(t.res.samples) - t.res.TransportErrors
		t.errMu.Unlock()
	}
	samples := make([][]time.Duration, len(t.sessions))
	var cpu0 time.Duration
	if b.opts.ProcessCPU != nil {
		cpu0 = b.opts.ProcessCPU()
	}
	var wg sync.WaitGroup
	for si, s := range t.sessions {
		if s.dead {
			continue
		}
		wg.Go(func() {
			for ctx.Err() == nil && (d == 0 || time.Now().Before(deadline)) && claimed.Add(1) <= int64(calls) {
				t0 := time.Now()
				res, err := b.call(ctx, ti, t, si, s)
				lat := time.Since(t0)
				if err != nil && ctx.Err() != nil {
					t.count(func(r *Result) { r.Cancelled++ })
					return
				}
				if err != nil {
					t.fail("transport", err.Error(), func(r *Result) { r.TransportErrors++ })
					if errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, mcp.ErrSessionMissing) {
						s.dead = true
						t.count(func(r *Result) { r.SessionsLost++ })
						return
					}
					continue
				}
				samples[si] = append(samples[si], lat)
				if res.IsError {
					t.fail("isError", resultText(res), func(r *Result) { r.ToolErrors++ })
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	var cpu time.Duration
	if b.opts.ProcessCPU != nil {
		cpu = b.opts.ProcessCPU() - cpu0
	}
	t.errMu.Lock()
	defer t.errMu.Unlock()
	t.res.elapsed += elapsed
	t.res.cpu += cpu
	for _, s := range samples {
		t.res.samples = append(t.res.samples, s...)
	}
}

// count changes the target's counts under its lock.
func (t *target) count(f func(*Result)) {
	t.errMu.Lock()
	defer t.errMu.Unlock()
	f(t.res)
}

// fail counts an error and keeps its message if it is one of the first
// few distinct ones.
func (t *target) fail(kind, msg string, f func(*Result)) {
	if len(msg) > maxMessage {
		msg = msg[:maxMessage] + "…"
	}
	t.errMu.Lock()
	defer t.errMu.Unlock()
	f(t.res)
	for i := range t.res.Errors {
		if e := &t.res.Errors[i]; e.Kind == kind && e.Message == msg {
			e.Count++
			return
		}
	}
	if len(t.res.Errors) < maxErrors {
		t.res.Errors = append(t.res.Errors, ErrorSample{Kind: kind, Message: msg, Count: 1})
	}
}

// Close closes every session.
func (b *Bench) Close() {
	for _, t := range b.targets {
		for _, s := range t.sessions {
			switch {
			case s == nil:
			case s.c != nil:
				_ = s.c.Close()
			default:
				_ = s.cs.Close()
			}
		}
	}
}

// Run opens the targets, measures them and closes them: Open, Bench.Run,
// Close.
func Run(ctx context.Context, targets []Target, o Options) ([]*Result, error) {
	b, err := Open(ctx, targets, o)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	return b.Run(ctx), nil
}

// resultText is the text of a result's text content.
func resultText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, " ")
}

type headerRT struct {
	header http.Header
	next   http.RoundTripper
}

func (h headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.header {
		r.Header[k] = v
	}
	return h.next.RoundTrip(r)
}

func transport(c *http.Client) http.RoundTripper {
	if c.Transport != nil {
		return c.Transport
	}
	return http.DefaultTransport
}
