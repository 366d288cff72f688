package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
	"golang.org/x/oauth2"

	"github.com/airlock-run/airlock/manifests"
)

// upstream is one server and its supervisor's state.
type upstream struct {
	name   string
	cfg    manifests.Server
	pool   *Pool
	log    zerolog.Logger
	client *mcp.Client
	// httpClient is shared by the sessions of an HTTP server (nil for stdio).
	httpClient *http.Client
	transport  *http.Transport
	// actor is airlock's own token for actor_token (nil: not asked for).
	actor oauth2.TokenSource

	// failures drives the backoff; only the supervisor goroutine uses it.
	failures int

	mu sync.Mutex
	st Status
	// current is the session being set up or in use; sess is set only while
	// it is connected and usable for calls.
	current *session
	sess    *session
	// changed is closed and replaced on every state change.
	changed  chan struct{}
	closeErr error

	cat catalog // resources, prompts and subscriptions (resources.go)

	calls inflight // calls in flight and their hooks (hooks.go)

	// stop ends this upstream's supervisor alone (Pool.Apply removing it);
	// done is closed when the supervisor has returned (reconcile.go).
	stop context.CancelFunc
	done chan struct{}
}

// session is one MCP client session and what the supervisor needs to end it.
type session struct {
	cs *mcp.ClientSession
	// ctx is cancelled when the session ends or is abandoned.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// calls is cancelled, failing the calls in flight, only when we abandon
	// a live session (pool closed, session broken). A session that ended by
	// itself has no calls in flight, and a call racing the end must see the
	// SDK's "connection closed" (not sent) rather than a cancellation
	// (outcome unknown).
	calls      context.Context
	abortCalls context.CancelCauseFunc
	refresh    chan struct{}
	isHTTP     bool

	// stdio only
	pid    int
	cmd    *exec.Cmd
	stderr *stderrTail
	// release frees what the sandbox made for this process (its cgroup);
	// nil when it runs unsandboxed.
	release func()

	mu     sync.Mutex
	broken string // why a caller gave up on the session, if it did
}

func newUpstream(p *Pool, s manifests.Server) *upstream {
	u := &upstream{
		name:    s.Name,
		cfg:     s,
		pool:    p,
		log:     p.log.With().Str("server", s.Name).Logger(),
		changed: make(chan struct{}),
	}
	u.st = Status{Server: s.Name, State: StateConnecting, Since: time.Now()}
	u.client = mcp.NewClient(p.opts.ClientInfo, &mcp.ClientOptions{
		// Roots: the manifest's path_roots, declared only when it has
		// some (roots.go).
		// Sampling and elicitation are declared so that an upstream may ask
		// during a call; the gateway forwards the request to the client that
		// made the call when the tool's manifest allows it (hooks.go).
		Capabilities: rootsCaps(&mcp.ClientCapabilities{
			Sampling:    &mcp.SamplingCapabilities{},
			Elicitation: &mcp.ElicitationCapabilities{Form: &mcp.FormElicitationCapabilities{}},
		}, s),
		CreateMessageHandler:        u.sample,
		ElicitationHandler:          u.elicit,
		ProgressNotificationHandler: u.progress,
		LoggingMessageHandler:       u.logMessage,
		ToolListChangedHandler:      u.toolListChanged,
		ResourceListChangedHandler:  u.resourceListChanged,
		PromptListChangedHandler:    u.promptListChanged,
		ResourceUpdatedHandler:      u.resourceUpdated,
	})
	addRoots(u.client, s)
	u.client.AddReceivingMiddleware(u.ackMiddleware, u.elicitMiddleware)
	if s.HTTP != nil {
		base := http.DefaultTransport.(*http.Transport).Clone()
		u.transport = base
		var rt http.RoundTripper = base
		if s.HTTP.OAuth != nil {
			rt = clientCredentials(s.HTTP.OAuth, base)
		}
		// A call's own bearer (exchange.go) goes to base directly: the
		// client-credentials transport would replace it with airlock's.
		u.httpClient = &http.Client{Transport: &resumeTransport{base: &headerTransport{base: rt, direct: base, headers: s.HTTP.Headers}}} // resume.go
		u.actor = actorSource(s)
	}
	return u
}

// run is the supervisor loop: connect, serve until the session ends,
// back off, repeat until ctx is done.
func (u *upstream) run(ctx context.Context) {
	if reason := u.configError(); reason != "" {
		u.log.Error().Str("reason", reason).Msg("upstream misconfigured")
		u.setState(func(st *Status) {
			st.State, st.Reason, st.Attempts = StateUnavailable, reason, 1
		})
		<-ctx.Done()
		return
	}
	switch mode, reason := u.sandboxMode(); mode {
	case sandboxRefused:
		u.log.Error().Str("reason", reason).Msg("upstream not started")
		u.setState(func(st *Status) {
			st.State, st.Reason, st.Attempts = StateUnavailable, reason, 1
		})
		<-ctx.Done()
		return
	case sandboxOn:
		u.log.Info().Msg("stdio server sandboxed (bubblewrap)")
	default:
		if reason != "" {
			u.log.Warn().Str("reason", reason).Msg("stdio server NOT sandboxed; install bubblewrap, or write sandbox: off in its manifest to accept this")
		}
	}
	for {
		u.setState(func(st *Status) {
			st.State, st.NextRetry = StateConnecting, time.Time{}
		})
		s, tools, err := u.connect(ctx)
		if ctx.Err() != nil {
			if s != nil {
				u.serve(ctx, s) // closes it
			}
			return
		}
		if err != nil {
			delay := u.nextDelay()
			u.log.Warn().Str("reason", err.Error()).Dur("retry_in", delay).Msg("upstream connection failed")
			u.setState(func(st *Status) {
				st.State, st.Reason = StateUnavailable, err.Error()
				st.Attempts++
				st.NextRetry = time.Now().Add(delay)
			})
			if !sleep(ctx, delay) {
				return
			}
			continue
		}

		up := time.Now()
		changed := u.setConnected(s, tools)
		u.log.Info().Int("tools", len(tools)).Str("protocol", protocolVersion(s.cs)).Msg("upstream connected")
		if changed {
			u.toolsChanged()
		}
		refreshDone := make(chan struct{})
		go func() {
			defer close(refreshDone)
			u.refreshLoop(s)
		}()
		catalogDone := make(chan struct{})
		go func() { defer close(catalogDone); u.catalogLoop(s) }()
		reason := u.serve(ctx, s)
		<-refreshDone
		<-catalogDone
		if ctx.Err() != nil {
			return
		}
		if time.Since(up) >= stableUptime {
			u.failures = 0
		}
		delay := u.nextDelay()
		u.log.Warn().Str("reason", reason).Dur("retry_in", delay).Msg("upstream disconnected")
		u.setState(func(st *Status) {
			st.State, st.Reason = StateUnavailable, reason
			st.NextRetry = time.Now().Add(delay)
		})
		if !sleep(ctx, delay) {
			return
		}
	}
}

func (u *upstream) configError() string {
	switch {
	case u.cfg.WASM != nil && (u.cfg.Stdio != nil || u.cfg.HTTP != nil):
		return "wasm and stdio or http configured"
	case u.cfg.WASM != nil:
		return ""
	case u.cfg.Stdio == nil && u.cfg.HTTP == nil:
		return "no stdio command or http url configured"
	case u.cfg.Stdio != nil && u.cfg.HTTP != nil:
		return "both stdio and http configured"
	case u.cfg.Stdio != nil && u.cfg.Stdio.Command == "":
		return "empty stdio command"
	case u.cfg.HTTP != nil && u.cfg.HTTP.URL == "":
		return "empty http url"
	case u.cfg.ExchangesTokens() && os.Getenv(u.cfg.HTTP.Auth.TokenExchange.ClientSecretEnv) == "":
		return "server.http.auth.token_exchange.client_secret_env: the environment variable " + u.cfg.HTTP.Auth.TokenExchange.ClientSecretEnv + " is not set; set it to the client secret"
	case u.cfg.UsesUserOAuth() && os.Getenv(u.cfg.HTTP.Auth.UserOAuth.ClientSecretEnv) == "":
		return "server.http.auth.user_oauth.client_secret_env: the environment variable " + u.cfg.HTTP.Auth.UserOAuth.ClientSecretEnv + " is not set; set it to the client secret"
	case oauthConfigError(u.cfg.HTTP) != "":
		return oauthConfigError(u.cfg.HTTP)
	}
	return ""
}

// connect opens a session and lists its tools. The returned error is the
// status reason, written for an operator.
func (u *upstream) connect(ctx context.Context) (*session, []*mcp.Tool, error) {
	timeout := u.cfg.ConnectTimeout.D()
	if timeout <= 0 {
		timeout = defaultConnectTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	s := &session{refresh: make(chan struct{}, 1)}
	var t mcp.Transport
	switch {
	case u.cfg.WASM != nil:
		if u.pool.opts.Native == nil {
			return nil, nil, errors.New("it is a wasm server, and this process runs no sandbox for native tools")
		}
		nt, err := u.pool.opts.Native(cctx, u.name)
		if err != nil {
			return nil, nil, err
		}
		t = nt
	case u.cfg.Stdio != nil:
		st, err := u.stdioTransport(s)
		if err != nil {
			return nil, nil, err
		}
		t = st
	default:
		s.isHTTP = true
		// One SSE reconnect attempt only: when the standalone stream breaks
		// for good, the session should fail soon so that the supervisor
		// reconnects with a fresh session instead of the SDK retrying for
		// ~10s on a server that is gone.
		t = &mcp.StreamableClientTransport{Endpoint: u.cfg.HTTP.URL, HTTPClient: u.httpClient, MaxRetries: 1}
	}

	var copts *mcp.ClientSessionOptions
	if v := u.cfg.ProtocolVersion; v != "" {
		copts = &mcp.ClientSessionOptions{ProtocolVersion: v}
	}
	cs, err := u.client.Connect(cctx, t, copts)
	if s.cmd != nil && s.cmd.Process != nil {
		s.pid = s.cmd.Process.Pid
	}
	if err != nil {
		// The SDK closed the session (and reaped the child) already.
		s.cleanup()
		return nil, nil, errors.New(s.describeConnectError(ctx, err, timeout))
	}
	s.cs = cs
	s.ctx, s.cancel = context.WithCancelCause(ctx)
	s.calls, s.abortCalls = context.WithCancelCause(context.WithoutCancel(ctx))
	u.mu.Lock()
	u.current = s
	u.mu.Unlock()

	tools, err := listTools(cctx, cs)
	if err != nil {
		s.abort(errors.New("listing tools failed"))
		_ = cs.Close()
		s.cleanup()
		u.mu.Lock()
		u.current = nil
		u.mu.Unlock()
		return nil, nil, fmt.Errorf("listing tools: %s", s.describeConnectError(ctx, err, timeout))
	}
	u.setLogLevel(cctx, cs)
	return s, tools, nil
}

// serve waits until the session ends, is abandoned, or ctx is done, then
// tears it down. It returns why the session ended.
func (u *upstream) serve(ctx context.Context, s *session) string {
	waitErr := make(chan error, 1)
	go func() { waitErr <- s.cs.Wait() }()
	var err error
	select {
	case err = <-waitErr:
		s.cancel(errors.New("session ended"))
		// Close also releases what Wait does not (the subscriptions/listen
		// goroutine).
		_ = s.cs.Close()
	case <-s.ctx.Done():
		// The pool closed, or a caller found the session broken (markBroken
		// aborted it). Aborting first fails the calls in flight, which Close
		// would otherwise wait for.
		if ctx.Err() != nil {
			s.abort(errors.New("pool closed"))
		}
		closeErr := s.cs.Close()
		if ctx.Err() != nil {
			u.noteCloseErr(s, closeErr)
		}
		err = <-waitErr
	}
	s.cleanup()
	u.mu.Lock()
	if u.current == s {
		u.current = nil
	}
	if u.sess == s {
		u.sess = nil
	}
	u.mu.Unlock()
	return s.endReason(err)
}

// noteCloseErr keeps errors worth returning from Pool.Close: a stdio child
// that could not be stopped. Exit statuses are expected (we closed its
// stdin), and an HTTP session's failed DELETE only means the server is gone.
func (u *upstream) noteCloseErr(s *session, err error) {
	var exitErr *exec.ExitError
	if err == nil || errors.As(err, &exitErr) || s.isHTTP {
		if err != nil {
			u.log.Debug().Err(err).Msg("closing upstream session")
		}
		return
	}
	u.mu.Lock()
	u.closeErr = errors.Join(u.closeErr, err)
	u.mu.Unlock()
}

// finish releases what outlives sessions; called once the supervisor is gone.
func (u *upstream) finish() error {
	if u.transport != nil {
		u.transport.CloseIdleConnections()
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.closeErr
}

func (u *upstream) nextDelay() time.Duration {
	u.failures++
	lo, hi := u.pool.opts.MinBackoff, u.pool.opts.MaxBackoff
	d := lo
	for i := 1; i < u.failures && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	// Equal jitter: half fixed so retries never bunch at zero, half random so
	// servers restarted together do not reconnect in lockstep.
	half := d / 2
	return half + rand.N(d-half+1)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// setState applies f to the status under the lock, stamps Since when the
// state changes, and wakes waiters.
func (u *upstream) setState(f func(*Status)) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.setStateLocked(f)
}

func (u *upstream) setStateLocked(f func(*Status)) {
	old := u.st.State
	f(&u.st)
	if u.st.State != old {
		u.st.Since = time.Now()
	}
	if u.st.State != StateConnected {
		u.sess = nil
	}
	close(u.changed)
	u.changed = make(chan struct{})
}

// setConnected publishes s and reports whether the tool list changed.
func (u *upstream) setConnected(s *session, tools []*mcp.Tool) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	changed := u.st.Tools == nil || !sameTools(u.st.Tools, tools)
	u.setStateLocked(func(st *Status) {
		st.State, st.Reason, st.Attempts, st.NextRetry = StateConnected, "", 0, time.Time{}
		st.Tools = tools
	})
	u.sess = s
	return changed
}

func (u *upstream) setStopped() {
	u.setState(func(st *Status) {
		st.State, st.Reason, st.NextRetry = StateStopped, "pool closed", time.Time{}
	})
}

// markBroken takes s out of service after a call showed the connection is
// unusable; the supervisor sees the session end and reconnects.
func (u *upstream) markBroken(s *session, reason string) {
	s.mu.Lock()
	first := s.broken == ""
	if first {
		s.broken = reason
	}
	s.mu.Unlock()
	if !first {
		return
	}
	u.mu.Lock()
	if u.sess == s {
		u.setStateLocked(func(st *Status) {
			st.State, st.Reason = StateConnecting, reason
		})
	}
	u.mu.Unlock()
	u.log.Warn().Str("reason", reason).Msg("upstream session broken; reconnecting")
	s.abort(errors.New("session broken: " + reason)) // wakes the supervisor, which closes it
}

func (u *upstream) toolListChanged(_ context.Context, req *mcp.ToolListChangedRequest) {
	u.mu.Lock()
	s := u.current
	u.mu.Unlock()
	if s == nil || s.cs != req.Session {
		return
	}
	// Never list from inside the notification handler: it runs on the
	// session's handler queue.
	select {
	case s.refresh <- struct{}{}:
	default:
	}
}

func (u *upstream) refreshLoop(s *session) {
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.refresh:
		}
		ctx, cancel := context.WithTimeout(s.ctx, refreshTimeout)
		tools, err := listTools(ctx, s.cs)
		cancel()
		if err != nil {
			if s.ctx.Err() == nil {
				u.log.Warn().Err(err).Msg("re-listing tools after list_changed failed")
			}
			continue
		}
		u.mu.Lock()
		changed := u.current == s && !sameTools(u.st.Tools, tools)
		if changed {
			u.st.Tools = tools
		}
		u.mu.Unlock()
		if changed {
			u.log.Info().Int("tools", len(tools)).Msg("upstream tool list changed")
			u.toolsChanged()
		}
	}
}

func (u *upstream) toolsChanged() {
	f := u.pool.opts.OnToolsChanged
	if f == nil {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			u.log.Error().Interface("panic", r).Msg("OnToolsChanged panicked")
		}
	}()
	f(u.name)
}

func listTools(ctx context.Context, cs *mcp.ClientSession) ([]*mcp.Tool, error) {
	tools := []*mcp.Tool{}
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		tools = append(tools, t)
	}
	return tools, nil
}

func sameTools(a, b []*mcp.Tool) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

func protocolVersion(cs *mcp.ClientSession) string {
	if r := cs.InitializeResult(); r != nil {
		return r.ProtocolVersion
	}
	return ""
}

// cleanup kills what is left of a stdio child's process group. The child
// itself has been reaped by the SDK when its session closed.
func (s *session) cleanup() {
	if s.pid > 0 {
		killProcessGroup(s.pid)
	}
	if s.release != nil {
		s.release()
	}
}

// abort fails the calls in flight and ends the session's context.
func (s *session) abort(cause error) {
	s.abortCalls(cause)
	s.cancel(cause)
}

func (s *session) brokenReason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.broken
}

// endReason explains why a connected session ended; waitErr is what
// ClientSession.Wait returned.
func (s *session) endReason(waitErr error) string {
	if s.isHTTP {
		// A stdio session is only marked broken once its connection is
		// already dead, so what the child left behind explains more.
		if r := s.brokenReason(); r != "" {
			return r
		}
		if waitErr == nil {
			return "connection closed by the server"
		}
		return "connection lost: " + waitErr.Error()
	}
	tail := summarizeStderr(s.stderr.String())
	var exitErr *exec.ExitError
	if waitErr == nil || errors.As(waitErr, &exitErr) {
		msg := "exited"
		if waitErr != nil {
			msg += " (" + waitErr.Error() + ")"
		}
		if tail != "" {
			msg += ": " + tail
		}
		return msg
	}
	msg := "connection failed: " + waitErr.Error()
	if tail != "" {
		msg += "; stderr: " + tail
	}
	return msg
}

// describeConnectError turns a failed handshake into an operator-facing
// reason, preferring what a dead child printed over the SDK's wording.
func (s *session) describeConnectError(ctx context.Context, err error, timeout time.Duration) string {
	msg := err.Error()
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		msg = urlErr.Error()
	}
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		msg = fmt.Sprintf("no MCP handshake within %s", timeout)
	}
	if s.cmd == nil || s.cmd.Process == nil {
		return msg // HTTP, or the command never started
	}
	tail := summarizeStderr(s.stderr.String())
	if processExited(s.cmd.Process) {
		if tail == "" {
			return "exited during the MCP handshake (" + msg + ")"
		}
		return "exited: " + tail
	}
	if tail != "" {
		msg += "; stderr: " + strings.TrimSpace(tail)
	}
	return msg
}
