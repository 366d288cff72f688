// Package gateway is airlock's MCP server: what agents connect to. It
// exposes the tools that manifests cover, named "<server>__<tool>", with the
// upstream's schemas and annotations unchanged, maps each MCP session to an
// AgentTask workflow and turns each tools/call into an Update on it.
//
// The gateway holds no durable state of its own: tasks live in Temporal, so
// any gateway replica can serve any task and a restarted gateway serves the
// same tasks again.
package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/metrics"
	"github.com/airlock-run/airlock/internal/pin"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/internal/relay"
	"github.com/airlock-run/airlock/internal/upstream"
	"github.com/airlock-run/airlock/manifests"
)

// Wire names seen by MCP clients.
const (
	// HeaderTask names the task an HTTP client attaches to (reattach after a
	// crash, or the task of a stateless client).
	HeaderTask = "Airlock-Task"
	// MetaTask and MetaCall are the _meta keys on results (and MetaTask on
	// the initialize result) naming the task and the call.
	MetaTask = "airlock.dev/task"
	MetaCall = "airlock.dev/call"
	// MetaIdempotencyKey is the _meta key a client sets on tools/call to
	// make retries of the same call run the tool once.
	MetaIdempotencyKey = upstream.MetaIdempotencyKey
)

var taskIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

// Options configure a Gateway.
type Options struct {
	Temporal  client.Client
	TaskQueue string // default api.DefaultTaskQueue
	Manifests []*manifests.Manifest
	// Upstreams supplies tool definitions and availability.
	Upstreams *upstream.Pool
	// ExposeUncovered exposes upstream tools no manifest declares.
	ExposeUncovered bool
	// Pins blocks the tools whose upstream definition changed since it was
	// pinned, covered and (with ExposeUncovered) uncovered alike (nil: no
	// pinning).
	Pins *pin.Store
	// Policy, when set, hides from tools/list the tools a principal may not
	// call (allowlist, permissions, data level); the worker still judges
	// every call.
	Policy *policy.Policy
	// Directory authenticates HTTP callers by API key. Nil runs the
	// gateway open, every caller being Principal with every grant: only
	// for tests and embedding, never what the CLI does.
	Directory *identity.Directory
	// Local is the principal of sessions without HTTP headers (stdio).
	Local *identity.Principal
	// Principal names the caller when Directory is nil.
	Principal string
	// Limits are the defaults of new tasks; Deadline is taken relative to
	// the task's start (DeadlineAfter).
	MaxCalls      int
	DeadlineAfter time.Duration
	IdleTimeout   time.Duration
	// TaskRateLimits and Budget are every new task's rate limits and
	// default budget (task.rate_limits, task.budget); the principal's
	// roles add theirs (issue 16 §3).
	TaskRateLimits []api.RateLimit
	Budget         int
	// ContinueAsNewAfter is api.Limits.ContinueAsNewAfter of new tasks
	// (0: the workflow's default).
	ContinueAsNewAfter int
	// RollbackOnDeny rolls a task back when one of its calls is denied;
	// RollbackNotify is the approver group told when a rollback fails.
	RollbackOnDeny bool
	RollbackNotify string
	// InlineWait bounds how long one tools/call waits for its result before
	// answering that the call is pending (default 50s, under the 60s that
	// common MCP clients wait); airlock_await collects it later.
	InlineWait time.Duration
	// ProgressEvery is the interval of progress notifications while a call
	// waits (default 10s), sent when the client gave a progress token.
	ProgressEvery time.Duration
	// SessionIdle closes an HTTP session that has had no request for this
	// long (default DefaultSessionIdle); MaxSessionsPerPrincipal caps a
	// principal's open sessions (default DefaultMaxSessionsPerPrincipal).
	// See session.go.
	SessionIdle             time.Duration
	MaxSessionsPerPrincipal int
	// SessionKey signs the Mcp-Session-Id of HTTP sessions so that any
	// replica sharing it serves any session (replica.go); it should have
	// at least MinSessionKeyBytes (config.SessionKey enforces that). Empty:
	// a random key of this process, so that sessions work with this
	// replica only.
	SessionKey []byte
	Logger     zerolog.Logger
	Version    string
	// Audit receives a line for each HTTP caller refused (nil: none).
	Audit *auditstream.Log
	// Tracer, when set, makes a span of every MCP request, which the
	// Temporal client's tracing interceptor carries into the task (see
	// trace.go). Nil: no tracing, no middleware.
	Tracer trace.TracerProvider
	// Catalog is CatalogFull (default: tools/list shows every tool the
	// caller may call) or CatalogSearch (it shows the built-in tools and
	// airlock_find_tools / airlock_call_tool instead; catalog.go).
	Catalog string
	// PageSize bounds one tools/list (and resources, prompts) page; longer
	// lists are paginated with cursors (default the SDK's, 1000).
	PageSize int
	// Approvals, when set, offers airlock_approvals_list and
	// airlock_approvals_decide to principals in an approver group
	// (approvals.go).
	Approvals Approvals
	// Relay, shared with the worker's activities when both run in this
	// process, carries what an upstream sends during a call (progress, log
	// messages, sampling, elicitation) to the client that made the call
	// (relay.go). Nil: none of it reaches the client.
	Relay *relay.Hub
	// ProgressPoll is how often, without a Relay, a waiting call's
	// heartbeats are read for upstream progress (default
	// DefaultProgressPoll; relay.go).
	ProgressPoll time.Duration

	// State is the size limit and schema of new tasks' task-scoped state
	// (nil: the default limit, no schema; state.go).
	State *api.StateConfig
	// AskTimeout bounds how long an upstream's sampling or elicitation
	// request waits for a 2026-07-28 client's answer, which comes with
	// the client's next tools/call (default DefaultAskTimeout; mrtr.go).
	AskTimeout time.Duration
}

// Gateway is the MCP server in front of the upstreams.
type Gateway struct {
	opts Options
	open *identity.Principal // the caller when opts.Directory is nil
	// sessionKey signs session IDs (replica.go).
	sessionKey []byte
	server     *mcp.Server
	log        zerolog.Logger

	// running remembers tasks known to be running, whose calls can skip
	// the start half of Update-with-Start, with the run that last
	// answered: an Update naming its run spares the server a database
	// read of the current run per call. When that run has ended (continued
	// as new, or the task ended) the server answers NotFound, unless the
	// run itself holds the call's Update, and the call falls back to
	// Update-with-Start, which finds the current run.
	running sync.Map // task ID -> run ID ("" when not known)
	// owners remembers who owns each task described here (owner.go).
	owners owners
	// refused holds the go-sdk IDs of sessions whose initialize was
	// refused, until their answer is written without them (replica.go).
	refused sync.Map // go-sdk session ID -> struct{}
	// cancels counts each session's notifications/cancelled (relay.go).
	cancels sync.Map // *mcp.ServerSession -> *cancelMark
	// asks holds the upstream requests waiting for a 2026-07-28 client's
	// answer (mrtr.go).
	asks sync.Map // ask ID -> *ask

	mu        sync.Mutex
	tools     map[string]*toolEntry // exposed name -> entry
	sessions  map[*mcp.ServerSession]*session
	live      map[string]*mcp.ServerSession // go-sdk session ID -> bound HTTP session of this replica
	stdioTask string                        // task of connection-bound sessions without HTTP headers

	res resourceState // upstream resources and prompts (resources.go)

	// reloaded holds what a reloaded configuration changes (reload.go).
	reloaded atomic.Pointer[Live]
}

type toolEntry struct {
	exposed  string
	server   string
	upstream string
	decl     *manifests.Tool // nil for uncovered tools
	def      *mcp.Tool       // what tools/list shows
	avail    string          // "" when callable, else why not
	blocked  bool            // the pin store blocks it (avail says why)
}

type session struct {
	taskID    string
	client    string
	principal string
	named     bool      // its client chose the task's ID (taskRef.named)
	last      time.Time // the last request began or ended
	inflight  int       // requests being handled
}

// New builds a gateway; call Refresh (or let the pool's OnToolsChanged call
// it) to publish tools.
func New(opts Options) *Gateway {
	if opts.TaskQueue == "" {
		opts.TaskQueue = api.DefaultTaskQueue
	}
	if opts.InlineWait <= 0 {
		opts.InlineWait = 50 * time.Second
	}
	if opts.Principal == "" {
		opts.Principal = "local"
	}
	open := &identity.Principal{Name: opts.Principal, Permissions: []string{"*"}, DataLevel: manifests.DataRestricted, AllowTools: []string{"*"}}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	g := &Gateway{
		opts:     opts,
		open:     open,
		log:      opts.Logger.With().Str("component", "gateway").Logger(),
		tools:    map[string]*toolEntry{},
		sessions: map[*mcp.ServerSession]*session{},
		live:     map[string]*mcp.ServerSession{},
	}
	g.reloaded.Store(liveOf(opts))
	g.sessionKey = opts.SessionKey
	if len(g.sessionKey) == 0 {
		g.sessionKey = []byte(NewSessionKey())
	}
	g.server = mcp.NewServer(&mcp.Implementation{Name: "airlock", Title: "airlock", Version: opts.Version}, &mcp.ServerOptions{
		Instructions: "Tools are served through airlock: every call is checked, recorded and may need a person's approval. " +
			"Results carry _meta \"" + MetaTask + "\" (your task ID; send it in the " + HeaderTask + " header to reattach) and \"" + MetaCall + "\".",
		Logger: slog.New(zerolog.NewSlogHandler(g.log)),
		// Pending calls as MCP Tasks (tasks.go); logging: upstream log
		// messages of a call are relayed, filtered at the level the client
		// set (relay.go).
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}, Logging: &mcp.LoggingCapabilities{},
			Extensions: map[string]any{ExtTasks: map[string]any{}}},
		// Resource subscriptions are forwarded upstream (resources.go).
		SubscribeHandler: g.subscribe, UnsubscribeHandler: g.unsubscribe,
		// completion/complete goes to the upstream owning the prompt or
		// template (resources.go); declaring it makes the SDK announce the
		// completions capability.
		CompletionHandler: g.complete,
		// The task of a session opened without Airlock-Task is derived
		// from this ID, and both go into the signed session ID (replica.go).
		GetSessionID: newRawSessionID,
		// Long lists are paginated with cursors (0: the SDK's 1000).
		PageSize: opts.PageSize,
	})
	g.server.AddReceivingMiddleware(g.sessionMiddleware)
	g.server.AddReceivingMiddleware(g.tasksMiddleware)  // tasks.go
	g.server.AddReceivingMiddleware(g.cancelMiddleware) // notifications/cancelled of calls in flight (relay.go)
	g.addBuiltins()
	g.addRollbackTool()
	g.addApprovalTools()
	g.addCatalogTools()
	g.addStateTools()                                     // state.go
	g.server.AddReceivingMiddleware(g.resourceMiddleware) // filters resource and prompt lists by data level
	if opts.Tracer != nil {
		g.server.AddReceivingMiddleware(g.traceMiddleware) // added last: outermost (trace.go)
	}
	g.Refresh()
	return g
}

// Server is the MCP server, for in-memory and stdio transports.
func (g *Gateway) Server() *mcp.Server { return g.server }

// Handler serves MCP over streamable HTTP. Serve it with an
// httplimit.Server (as cmd/airlock does): it answers a request without a
// valid key before reading its body, and net/http alone would then wait
// for that body, at the client's pace, before closing the connection.
func (g *Gateway) Handler() http.Handler {
	h := g.mcpHandler()
	if g.opts.Directory != nil {
		return g.observeRefusals(Edge(g.opts.Directory, h))
	}
	return h
}

// ServeStdio serves one MCP session over t (stdin/stdout for Claude
// Desktop), attached to taskID, or to a new task if taskID is empty.
func (g *Gateway) ServeStdio(ctx context.Context, t mcp.Transport, taskID string) error {
	if taskID != "" {
		pr, err := g.principalFor(nil)
		if err != nil {
			return err
		}
		if !taskIDAllowed(taskID, pr.Name) {
			return badTaskID("--task", taskID)
		}
		if err := api.ClaimTaskID(taskID, pr.Name); err != nil {
			return fmt.Errorf("--task: %w", err)
		}
		if err := g.checkReattach(ctx, taskID, pr.Name); err != nil {
			return err
		}
	}
	g.mu.Lock()
	g.stdioTask = taskID
	g.mu.Unlock()
	ss, err := g.server.Connect(ctx, t, nil)
	if err != nil {
		return err
	}
	err = ss.Wait()
	g.forget(ss)
	return err
}

// sessionMiddleware binds MCP sessions to tasks at initialize and forgets
// them when they end.
func (g *Gateway) sessionMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
		defer g.track(req)() // a session's use, for the cap (session.go)
		if method == "tools/list" {
			// The pool reports tool list changes only, not an upstream
			// failing (or recovering) with the same tools: republish so the
			// list shows each tool's current availability and reason.
			g.Refresh()
			res, err := next(ctx, method, req)
			if lr, ok := res.(*mcp.ListToolsResult); ok && err == nil {
				lr.Tools = g.catalogList(g.visibleTools(req.GetExtra(), lr.Tools))
			}
			return res, err
		}
		ir, ok := req.(*mcp.ServerRequest[*mcp.InitializeParams])
		if !ok {
			return next(ctx, method, req)
		}
		defer func() {
			if err != nil && ir.Session != nil && ir.Session.ID() != "" {
				// The go-sdk has given the refused session an ID: the
				// answer must not carry it, signed (replica.go).
				g.refused.Store(ir.Session.ID(), struct{}{})
			}
		}()
		pr, err := g.principalFor(ir.Extra)
		if err != nil {
			return nil, err
		}
		taskID := ""
		if ir.Extra != nil && ir.Extra.Header != nil {
			taskID = strings.TrimSpace(ir.Extra.Header.Get(HeaderTask))
		}
		if taskID != "" {
			if !taskIDAllowed(taskID, pr.Name) {
				return nil, badTaskID("header "+HeaderTask, taskID)
			}
			if err := api.ClaimTaskID(taskID, pr.Name); err != nil {
				return nil, fmt.Errorf("header %s: %w", HeaderTask, err)
			}
			if err := g.checkReattach(ctx, taskID, pr.Name); err != nil {
				return nil, err
			}
		}
		clientName := ""
		if ir.Params != nil && ir.Params.ClientInfo != nil {
			clientName = ir.Params.ClientInfo.Name + " " + ir.Params.ClientInfo.Version
		}
		named := taskID != "" && taskID != api.DefaultTaskID(pr.Name)
		g.mu.Lock()
		s, exists := g.sessions[ir.Session]
		if !exists {
			if err := g.makeRoomLocked(ir.Session, pr.Name); err != nil {
				g.mu.Unlock()
				return nil, err
			}
			if taskID == "" && ir.Extra != nil && ir.Extra.Header != nil && ir.Session != nil && ir.Session.ID() != "" {
				// The signed session ID names this task (replica.go).
				taskID = sessionTaskID(ir.Session.ID())
			}
			if taskID == "" {
				taskID = g.newSessionTaskLocked(ir.Extra)
				named = taskID == g.stdioTask
			}
			s = g.bindLocked(ir.Session, taskID, pr.Name)
			s.named = named
		} else if taskID != "" {
			s.taskID, s.named = taskID, named
		}
		s.principal = pr.Name
		s.client = strings.TrimSpace(clientName)
		id := s.taskID
		g.mu.Unlock()

		res, err = next(ctx, method, req)
		if r, ok := res.(*mcp.InitializeResult); ok && err == nil {
			if r.Meta == nil {
				r.Meta = mcp.Meta{}
			}
			r.Meta[MetaTask] = id
		}
		g.log.Info().Str("task", id).Str("client", clientName).Msg("session attached")
		return res, err
	}
}

// visibleTools keeps the tools the caller may call.
func (g *Gateway) visibleTools(extra *mcp.RequestExtra, tools []*mcp.Tool) []*mcp.Tool {
	live := g.cur()
	if live.Policy == nil {
		return tools
	}
	pr, err := g.principalFor(extra)
	if err != nil {
		return nil
	}
	ppr := policy.Principal{Name: pr.Name, Roles: pr.Roles, Permissions: pr.Permissions, DataLevel: pr.DataLevel, SlackUserID: pr.SlackUserID}
	task := policy.Task{AllowTools: pr.AllowTools}
	g.mu.Lock()
	defer g.mu.Unlock()
	out := tools[:0:0]
	for _, t := range tools {
		if t.Name == ToolStatus || t.Name == ToolAwait || t.Name == ToolRollback || t.Name == ToolFindTools || t.Name == ToolCallTool || isStateTool(t.Name) {
			out = append(out, t)
			continue
		}
		if t.Name == ToolApprovalsList || t.Name == ToolApprovalsDecide {
			if g.approvalToolVisible(pr.Name) {
				out = append(out, t)
			}
			continue
		}
		e, ok := g.tools[t.Name]
		if !ok {
			continue
		}
		if live.Policy.Visible(ppr, task, policy.Tool{Name: e.exposed, Server: e.server, Upstream: e.upstream, Decl: e.decl}) {
			out = append(out, t)
		}
	}
	return out
}

// visibleTo reports whether pr may call e: what visibleTools lists for it
// (the state tools always).
func (g *Gateway) visibleTo(pr *identity.Principal, e *toolEntry) bool {
	live := g.cur()
	if live.Policy == nil || isStateTool(e.exposed) {
		return true
	}
	ppr := policy.Principal{Name: pr.Name, Roles: pr.Roles, Permissions: pr.Permissions, DataLevel: pr.DataLevel, SlackUserID: pr.SlackUserID}
	return live.Policy.Visible(ppr, policy.Task{AllowTools: pr.AllowTools}, policy.Tool{Name: e.exposed, Server: e.server, Upstream: e.upstream, Decl: e.decl})
}

// unknownTool is the MCP SDK's answer to a tools/call of a name it does
// not have (mcp.Server.callTool), word for word.
func unknownTool(name string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown tool %q", name)}
}

// principalFor returns the caller of a request: for HTTP the principal
// the edge authenticated (edge.go), for stdio (no headers) the local
// principal.
func (g *Gateway) principalFor(extra *mcp.RequestExtra) (*identity.Principal, error) {
	if g.opts.Directory == nil {
		return g.open, nil
	}
	if p, ok := extraPrincipal(extra); ok {
		return p, nil
	}
	if extra == nil || extra.Header == nil {
		local := g.cur().Local
		if local == nil {
			return nil, errors.New("no local principal for this stdio session: set local_principal in the configuration")
		}
		return local, nil
	}
	return nil, errors.New("this HTTP request did not pass the gateway's edge, which authenticates callers: serve Gateway.Handler, or wrap the MCP handler in gateway.Edge")
}

func (g *Gateway) forget(ss *mcp.ServerSession) {
	g.mu.Lock()
	g.forgetLocked(ss)
	g.mu.Unlock()
}

func (g *Gateway) forgetLocked(ss *mcp.ServerSession) {
	delete(g.sessions, ss)
	if ss != nil && g.live[ss.ID()] == ss {
		delete(g.live, ss.ID())
	}
}

// checkReattach refuses to attach to a task of another principal
// (authorizeTask), or to one of the caller's that has ended.
func (g *Gateway) checkReattach(ctx context.Context, taskID, principal string) error {
	exists, err := g.authorizeTask(ctx, taskID, principal)
	if err != nil || !exists {
		return err // not exists: a new task with the client's chosen ID
	}
	desc, err := g.opts.Temporal.DescribeWorkflowExecution(ctx, taskID, "")
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return nil // known here as the caller's, yet not found: nothing has ended
	case err != nil:
		return fmt.Errorf("looking up task %s: %w", taskID, err)
	}
	if st := desc.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING &&
		st != enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
		return fmt.Errorf("task %s has ended (%s); connect without the %s header to start a new task", taskID, strings.ToLower(st.String()), HeaderTask)
	}
	return nil
}

// taskOwner reads the AirlockPrincipal search attribute.
func taskOwner(sa *commonpb.SearchAttributes) string {
	p, ok := sa.GetIndexedFields()[api.SAPrincipal.GetName()]
	if !ok {
		return ""
	}
	var owner string
	_ = converter.GetDefaultDataConverter().FromPayload(p, &owner)
	return owner
}

// taskRef is the task a request acts on, once authorizeTask has let it.
type taskRef struct {
	id, client string
	// exists: the task exists (and is the caller's); else it does not
	// exist yet, and there is nothing of it to read.
	exists bool
	// named: its client chose the ID (Airlock-Task), so that another
	// client may name it too; a call creates such a task first
	// (claimTask).
	named bool
}

// taskFor returns the task of the session making req, once the caller is
// known to own it (authorizeTask):
//   - the task bound to the session (at initialize, or at its first call);
//   - for stateless HTTP requests (no session of their own), the task the
//     signed session ID names, or the Airlock-Task header (not one
//     reserved for another principal, see api.ClaimTaskID), else the
//     principal's default task api.DefaultTaskID ("<principal>-default");
//   - for a connection without HTTP headers (stdio, in-memory) that skipped
//     initialize (protocol 2026-07-28), a task bound to the connection now.
func (g *Gateway) taskFor(ctx context.Context, req *mcp.CallToolRequest, principal string) (taskRef, error) {
	t, err := g.resolveTask(req, principal)
	if err != nil {
		return taskRef{}, err
	}
	if t.exists, err = g.authorizeTask(ctx, t.id, principal); err != nil {
		return taskRef{}, err
	}
	return t, nil
}

// resolveTask names the task of req (see taskFor), not yet authorized.
func (g *Gateway) resolveTask(req *mcp.CallToolRequest, principal string) (taskRef, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s, ok := g.sessions[req.Session]; ok {
		if s.principal != "" {
			if err := ownSession(s.principal, principal); err != nil {
				return taskRef{}, err
			}
		}
		return taskRef{id: s.taskID, client: s.client, named: s.named}, nil
	}
	if req.Extra != nil && req.Extra.Header != nil {
		// A session made on another replica (or before a restart, or
		// closed since): its signed ID names its task and principal.
		if sid := req.Extra.Header.Get(headerSessionID); sid != "" {
			t, err := g.ownedSession(sid, principal)
			if err != nil {
				return taskRef{}, err
			}
			if !taskIDAllowed(t.task, principal) {
				return taskRef{}, badTaskID("header "+HeaderTask, t.task)
			}
			if err := api.ClaimTaskID(t.task, principal); err != nil {
				return taskRef{}, fmt.Errorf("header %s: %w", HeaderTask, err)
			}
			return taskRef{id: t.task, named: t.task != sessionTaskID(t.raw)}, nil
		}
		if h := strings.TrimSpace(req.Extra.Header.Get(HeaderTask)); h != "" {
			if !taskIDAllowed(h, principal) {
				return taskRef{}, badTaskID("header "+HeaderTask, h)
			}
			if err := api.ClaimTaskID(h, principal); err != nil {
				return taskRef{}, fmt.Errorf("header %s: %w", HeaderTask, err)
			}
			return taskRef{id: h, named: h != api.DefaultTaskID(principal)}, nil
		}
		return taskRef{id: api.DefaultTaskID(principal)}, nil
	}
	s := g.bindLocked(req.Session, g.newSessionTaskLocked(nil), principal)
	s.named = g.stdioTask != "" && s.taskID == g.stdioTask
	return taskRef{id: s.taskID, client: s.client, named: s.named}, nil
}

// newSessionTaskLocked picks the task of a new connection-bound session.
func (g *Gateway) newSessionTaskLocked(extra *mcp.RequestExtra) string {
	if (extra == nil || extra.Header == nil) && g.stdioTask != "" {
		return g.stdioTask
	}
	return newTaskID()
}

// bindLocked binds a session to a task until the session ends.
func (g *Gateway) bindLocked(ss *mcp.ServerSession, taskID, principal string) *session {
	s := &session{taskID: taskID, principal: principal, last: time.Now()}
	g.sessions[ss] = s
	if ss != nil && ss.ID() != "" {
		g.live[ss.ID()] = ss
	}
	if ss != nil {
		go func() { _ = ss.Wait(); g.forget(ss) }()
	}
	return s
}

func newTaskID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "task-" + hex.EncodeToString(b[:])
}

func newCallID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "call-" + hex.EncodeToString(b[:])
}

// Refresh republishes the tool list from the manifests and the upstreams'
// current state. Clients are notified of changes (tools/list_changed).
func (g *Gateway) Refresh() {
	g.refreshResources() // resources, templates and prompts (resources.go)
	want := g.buildEntries()
	g.mu.Lock()
	defer g.mu.Unlock()
	var remove []string
	for name := range g.tools {
		if _, ok := want[name]; !ok {
			remove = append(remove, name)
		}
	}
	if len(remove) > 0 {
		sort.Strings(remove)
		g.server.RemoveTools(remove...)
	}
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		e := want[name]
		if old, ok := g.tools[name]; ok && sameTool(old, e) {
			// Same definition: clients need not hear of it, but a reloaded
			// manifest may have changed the declaration behind it (its
			// handler looks the entry up by name).
			g.tools[name] = e
			continue
		}
		if err := g.addTool(e); err != nil {
			g.log.Error().Err(err).Str("tool", name).Msg("tool not published")
			continue
		}
		g.tools[name] = e
	}
}

// addTool registers one tool; the SDK panics on schemas it cannot take,
// which must not bring the gateway down.
func (g *Gateway) addTool(e *toolEntry) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("upstream %s offers tool %s with a definition the MCP SDK refuses: %v", e.server, e.upstream, r)
		}
	}()
	g.server.AddTool(e.def, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return g.call(ctx, g.entry(e), req)
	})
	return nil
}

func sameTool(a, b *toolEntry) bool {
	if a.avail != b.avail || a.server != b.server || a.upstream != b.upstream {
		return false
	}
	ja, _ := json.Marshal(a.def)
	jb, _ := json.Marshal(b.def)
	return string(ja) == string(jb)
}

// buildEntries computes the tool list: every manifest tool, with the
// upstream's definition when it is known, or a placeholder that says why it
// is unavailable.
func (g *Gateway) buildEntries() map[string]*toolEntry {
	out := map[string]*toolEntry{}
	live := g.cur()
	for _, m := range live.Manifests {
		var st upstream.Status
		if g.opts.Upstreams != nil {
			st = g.opts.Upstreams.Status(m.Server.Name)
		}
		offered := map[string]*mcp.Tool{}
		for _, t := range st.Tools {
			offered[t.Name] = t
		}
		for name, decl := range m.Tools {
			e := &toolEntry{exposed: m.Exposed(name), server: m.Server.Name, upstream: name, decl: decl}
			// Pinning: a changed definition is not shown (it may carry a
			// prompt injection); a placeholder says why, and calls fail.
			if t, ok := offered[name]; ok && g.pinBlocked(m, e, t) {
				out[e.exposed] = e
				continue
			}
			if t, ok := offered[name]; ok {
				def := *t
				def.Name = e.exposed
				if decl.Description != "" {
					def.Description = decl.Description
				}
				e.def = &def
				if st.State != upstream.StateConnected {
					e.avail = unavailableReason(m.Server.Name, st)
				}
				// A wasm server lists a tool whose module failed to load,
				// saying why; its other tools work.
				if reason, _ := t.Meta[upstream.MetaUnavailable].(string); reason != "" && m.Server.WASM != nil {
					e.avail = reason
					def.Description = fmt.Sprintf("[unavailable: %s] %s", reason, decl.Description)
				}
			} else {
				if len(st.Tools) > 0 {
					e.avail = fmt.Sprintf("upstream %s does not offer a tool named %q; check %s", m.Server.Name, name, m.File)
				} else {
					e.avail = unavailableReason(m.Server.Name, st)
				}
				e.def = &mcp.Tool{
					Name:        e.exposed,
					Description: fmt.Sprintf("[unavailable: %s] %s", e.avail, decl.Description),
					InputSchema: map[string]any{"type": "object"},
				}
			}
			out[e.exposed] = e
		}
		if live.ExposeUncovered {
			for name, t := range offered {
				exposed := m.Exposed(name)
				if _, ok := out[exposed]; ok {
					continue
				}
				e := &toolEntry{exposed: exposed, server: m.Server.Name, upstream: name}
				// An uncovered tool is pinned like a covered one: its
				// definition goes to the agent just the same.
				if !g.pinBlocked(m, e, t) {
					def := *t
					def.Name = exposed
					e.def = &def
				}
				out[exposed] = e
			}
		}
	}
	return out
}

// pinBlocked checks t, the upstream's definition of e, against its pin.
// When it changed since it was pinned, it makes e a blocked placeholder
// (the reason, the manifest's description if any, an empty schema; nothing
// of the new definition) and reports true. Tools of wasm servers are pinned
// by the sha256 of their modules in the manifest instead.
func (g *Gateway) pinBlocked(m *manifests.Manifest, e *toolEntry, t *mcp.Tool) bool {
	if g.opts.Pins == nil || m.Server.WASM != nil {
		return false
	}
	r := g.opts.Pins.Inspect(m.Server.Name, t)
	if r.Verdict != pin.Changed {
		return false
	}
	if r.Transition {
		g.log.Warn().Str("server", m.Server.Name).Str("tool", e.upstream).Bool("covered", e.decl != nil).Msg(r.Reason)
	}
	desc := "[unavailable: " + r.Reason + "]"
	if e.decl != nil && e.decl.Description != "" {
		desc += " " + e.decl.Description
	}
	e.avail, e.blocked = r.Reason, true
	e.def = &mcp.Tool{Name: e.exposed, Description: desc, InputSchema: map[string]any{"type": "object"}}
	return true
}

func unavailableReason(server string, st upstream.Status) string {
	if st.Reason != "" {
		return fmt.Sprintf("upstream %s is %s: %s", server, st.State, st.Reason)
	}
	if st.State == "" {
		return fmt.Sprintf("upstream %s is not connected yet", server)
	}
	return fmt.Sprintf("upstream %s is %s", server, st.State)
}

// call runs one tools/call through the task's workflow.
func (g *Gateway) call(ctx context.Context, e *toolEntry, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if e.blocked { // unless `airlock manifests pin` accepted it since the list was built
		g.Refresh()
		g.mu.Lock()
		cur := g.tools[e.exposed]
		g.mu.Unlock()
		if cur == nil || cur.blocked {
			return errorResult("", "", e.avail), nil
		}
		e = cur
	}
	pr, err := g.principalFor(req.Extra)
	if err != nil {
		return errorResult("", "", err.Error()), nil
	}
	if !g.visibleTo(pr, e) {
		// A tool the caller may not call answers as one that does not
		// exist (the SDK's own answer), so names cannot be probed.
		g.log.Info().Str("principal", pr.Name).Str("tool", e.exposed).Msg("call refused: the tool is not one the principal may call")
		return nil, unknownTool(req.Params.Name)
	}
	if d := g.opts.Directory; d != nil {
		// The step-up check on the tool dispatched, whichever way it was
		// named (a direct call, airlock_call_tool); the HTTP edge made the
		// same check on the body (identity.Directory.ScopeError).
		if err := d.ScopeError(pr, e.exposed); err != nil {
			g.log.Info().Str("principal", pr.Name).Str("tool", e.exposed).Err(err).Msg("call refused: insufficient scope")
			metrics.AuthFailures.WithLabelValues(strconv.Itoa(http.StatusForbidden)).Inc()
			g.opts.Audit.AuthFailed(auditstream.AuthFailure{Status: http.StatusForbidden, Channel: "mcp", Principal: pr.Name, Reason: err.Error(), Method: http.MethodPost})
			return errorResult("", "", err.Error()+". Nothing ran"), nil
		}
	}
	tref, err := g.taskFor(ctx, req, pr.Name)
	if err != nil {
		return errorResult("", "", err.Error()), nil
	}
	taskID, clientName := tref.id, tref.client
	// A 2026-07-28 client answering an input-required result resumes the
	// call that asked (mrtr.go).
	resume, err := g.resumeState(req, taskID, pr.Name)
	if err != nil {
		return errorResult(taskID, "", err.Error()), nil
	}
	callID := ""
	if resume != nil {
		callID = resume.Call
	} else if req.Params.Meta != nil {
		if k, ok := req.Params.Meta[MetaIdempotencyKey].(string); ok && k != "" {
			if len(k) > 200 {
				return errorResult(taskID, "", "_meta."+MetaIdempotencyKey+" is longer than 200 characters; use a shorter unique key"), nil
			}
			callID = "k-" + k
		}
	}
	if callID == "" {
		callID = newCallID()
	}
	traceCall(ctx, taskID, callID, pr.Name)
	args, err := callArguments(e.exposed, req.Params.Arguments)
	if err != nil {
		log := g.log.With().Str("task", taskID).Str("call", callID).Str("tool", e.exposed).Logger()
		log.Warn().Err(err).Msg("call refused: arguments")
		return errorResult(taskID, callID, err.Error()), nil
	}
	// Arguments too large for the task's history must never reach its
	// workflow. (Below that, the policy's max_arg_bytes denies them, and
	// the denial is recorded with the task.)
	if limit := api.MaxArgumentBytes; len(args) > limit {
		return errorResult(taskID, callID, fmt.Sprintf("denied: the arguments of %s are %d bytes, more than the %d a task can record; nothing ran. Send less, e.g. a path instead of the content.", e.exposed, len(args), limit)), nil
	}
	log := g.log.With().Str("task", taskID).Str("call", callID).Str("tool", e.exposed).Logger()

	creq := api.CallRequest{
		CallID: callID, Tool: e.exposed, Server: e.server, UpstreamTool: e.upstream,
		Arguments: args, Spec: api.SpecFor(e.decl), Principal: pr.Name,
		ProgressToken: req.Params.GetProgressToken(),
	}
	live := g.cur()
	in := api.TaskInput{
		TaskID: taskID, Principal: pr.Name, Client: clientName,
		Identity: &api.Identity{Name: pr.Name, Roles: pr.Roles, Permissions: pr.Permissions,
			DataLevel: string(pr.DataLevel), SlackUserID: pr.SlackUserID, AllowTools: pr.AllowTools},
		Limits:         api.Limits{MaxCalls: live.MaxCalls, IdleTimeout: live.IdleTimeout, ContinueAsNewAfter: g.opts.ContinueAsNewAfter},
		RollbackOnDeny: live.RollbackOnDeny, RollbackNotify: live.RollbackNotify,
		State: live.State, // task-state
	}
	if pr.MaxCalls > 0 {
		in.Limits.MaxCalls = pr.MaxCalls
	}
	in.Quota = taskQuota(live, pr) // limits.go
	deadline := live.DeadlineAfter
	if pr.Deadline > 0 {
		deadline = pr.Deadline
	}
	if deadline > 0 {
		in.Limits.Deadline = time.Now().Add(deadline).UTC()
	}
	startOpts := client.StartWorkflowOptions{
		ID:                       taskID,
		TaskQueue:                g.opts.TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			api.SAPrincipal.ValueSet(pr.Name), api.SAStatus.ValueSet(api.StateRunning)),
	}

	if !tref.exists && tref.named {
		// Another client may name this task too: create it before
		// sending the call (owner.go).
		if err := g.claimTask(ctx, startOpts, in); err != nil {
			return errorResult(taskID, "", err.Error()), nil
		}
	}

	wctx, cancel := context.WithTimeout(ctx, g.inlineWait(ctx)) // tasks.go
	defer cancel()
	sink, unrelay := g.relayCall(ctx, req, taskID, callID, true)
	defer unrelay()
	if resume != nil {
		sink.answered = resume.Asks
	}
	stopProgress := g.progress(ctx, req, taskID, callID, sink.upstreamProgress.Load)
	defer stopProgress()
	defer g.heartbeatProgress(ctx, req, taskID, callID, sink)()
	if resume != nil {
		if err := g.deliverAnswers(req, resume); err != nil {
			return errorResult(taskID, callID, err.Error()), nil
		}
	}
	ictx, finishAsks := watchAsks(wctx, sink) // mrtr.go
	var res api.CallResult
	drained := false // an attempt was turned away: the task is moving to a new run
	moved := false   // an attempt waited past pinnedAttempt and the call was sent again
	for {
		var h client.WorkflowUpdateHandle
		uo := client.UpdateWorkflowOptions{
			UpdateID: callID, WorkflowID: taskID, UpdateName: api.UpdateCallTool,
			Args: []any{creq}, WaitForStage: client.WorkflowUpdateStageCompleted,
		}
		if run, ok := g.running.Load(taskID); ok {
			uo.RunID, _ = run.(string)
			// An attempt pinned to a run is bounded: an Update admitted
			// while that run continues as new is aborted with a retryable
			// error, which the SDK retries against the same (now closed)
			// run until its context ends. Past the bound the call is sent
			// again unpinned, to whichever run is current; the same
			// Update ID joins the call if it was accepted.
			actx, acancel := context.WithTimeout(ictx, pinnedAttempt)
			h, err = g.opts.Temporal.UpdateWorkflow(actx, uo)
			if err == nil {
				err = h.Get(actx, &res)
			}
			// Ran out of time (gRPC's own timer may report it a moment
			// before actx is marked done), not the whole wait: ictx goes on.
			stalled := err != nil && ictx.Err() == nil && waitedOut(actx, err)
			acancel()
			var nf *serviceerror.NotFound
			if errors.As(err, &nf) || stalled {
				// Ended (or never existed here), or the pinned attempt
				// ran out: let Update-with-Start decide, which reports
				// an ended task clearly.
				g.running.CompareAndDelete(taskID, run)
				moved = moved || stalled
				continue
			}
		} else {
			// A fresh start operation each time: one may be used only once.
			startOp := g.opts.Temporal.NewWithStartWorkflowOperation(startOpts, api.AgentTaskName, in)
			h, err = g.opts.Temporal.UpdateWithStartWorkflow(ictx, client.UpdateWithStartWorkflowOptions{
				StartWorkflowOperation: startOp, UpdateOptions: uo,
			})
			if err == nil {
				g.running.Store(taskID, h.RunID())
				err = h.Get(ictx, &res)
			}
		}
		// The task is rolling over to a new run: the same Update ID goes
		// to the new run.
		if rejectedAs(err, api.ErrTypeContinuingAsNew) != nil {
			drained = true
		}
		if rejectedAs(err, api.ErrTypeContinuingAsNew) != nil && ictx.Err() == nil {
			select {
			case <-time.After(50 * time.Millisecond):
				continue
			case <-ictx.Done():
			}
		}
		break
	}
	if asks := finishAsks(); len(asks) > 0 {
		log.Info().Int("requests", len(asks)).Msg("call asks the client for input (input-required)")
		return g.inputRequired(taskID, callID, pr.Name, req.Params.Name, asks), nil
	}
	if err != nil {
		// The inline wait may also run out during an attempt rather than
		// between two: if the task knows nothing of the call, it did not
		// start either.
		if drained && waitedOut(wctx, err) && ctx.Err() == nil && !g.callKnown(ctx, taskID, callID) {
			err = temporal.NewApplicationError("the task is moving to its next run", api.ErrTypeContinuingAsNew)
		}
		if rejectedAs(err, api.ErrTypeContinuingAsNew) != nil && ctx.Err() == nil {
			// The inline wait ran out while every attempt was turned
			// away: the call never started, so it is not "running".
			log.Info().Msg("call not started: the task is still moving to its next run")
			metrics.Calls.WithLabelValues(e.exposed, OutcomeError).Inc()
			return errorResult(taskID, "", g.notStartedDraining(ctx, taskID, e.exposed, callID)), nil
		}
		if waitedOut(wctx, err) && ctx.Err() == nil {
			log.Info().Msg("call pending past the inline wait")
			metrics.Calls.WithLabelValues(e.exposed, OutcomePending).Inc()
			return g.pendingResult(ctx, taskID, callID, e.exposed), nil
		}
		log.Warn().Err(err).Msg("call not completed")
		metrics.Calls.WithLabelValues(e.exposed, OutcomeError).Inc()
		return errorResult(taskID, callID, g.explain(ctx, wctx, taskID, callID, e.exposed, err)), nil
	}
	if r := res.Repeat; moved && r != nil && !r.Held && r.RunID != "" {
		// This send waited in a run that has continued as new since, and
		// the call ran there (through this send or a concurrent one of
		// the same key); the run that answered no longer holds the
		// result, that run's history does. A plain retry is answered by
		// the task as it is (README: what "never runs twice" covers).
		if full, ok := g.resultInRun(ctx, taskID, r.RunID, callID); ok {
			full.Repeat = &api.Repeat{Run: r.Run, RunID: r.RunID, Held: true}
			res = full
		}
	}
	log.Info().Str("outcome", string(res.Outcome)).Int("attempts", res.Attempts).Msg("call finished")
	metrics.Calls.WithLabelValues(e.exposed, string(res.Outcome)).Inc()
	countRefusal(res) // limits.go
	return toMCP(taskID, res), nil
}

// pinnedAttempt bounds one attempt of a call sent to the task's last
// known run (see the call loop): past it the call is sent again to the
// current run. Calls that take longer only lose the saving of naming the run.
// A variable for tests.
var pinnedAttempt = 5 * time.Second

// waitedOut reports whether err means the inline wait ran out (the SDK may
// report its own "timeout waiting for update" just before our deadline).
func waitedOut(wctx context.Context, err error) bool {
	var upd *client.WorkflowUpdateServiceTimeoutOrCanceledError
	if wctx.Err() != nil || errors.As(err, &upd) {
		return true
	}
	// gRPC reports the deadline from its own timer, which may fire a moment
	// before the context's marks it done.
	d, ok := wctx.Deadline()
	if !ok || time.Until(d) > 100*time.Millisecond {
		return false
	}
	var dl *serviceerror.DeadlineExceeded
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &dl) || status.Code(err) == codes.DeadlineExceeded
}

// explain turns a failure to get a call's result into words the model (and
// the person behind it) can act on.
func (g *Gateway) explain(ctx, wctx context.Context, taskID, callID, tool string, err error) string {
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case errors.As(err, &started):
		return fmt.Sprintf("task %s has ended; reconnect without the %s header to start a new task", taskID, HeaderTask)
	case ctx.Err() != nil:
		return fmt.Sprintf("the call %s was abandoned by the client; it may still run in task %s", callID, taskID)
	case wctx.Err() != nil:
		return fmt.Sprintf("%s is still running in task %s after %s (call %s). Call the tool again with _meta {%q: %q} to collect its result without running it twice.",
			tool, taskID, g.opts.InlineWait, callID, MetaIdempotencyKey, strings.TrimPrefix(callID, "k-"))
	}
	if fin := rejectedAs(err, api.ErrTypeFinishing); fin != nil {
		return fin.Message()
	}
	return fmt.Sprintf("airlock could not run %s in task %s: %v", tool, taskID, err)
}

// callKnown reports whether task has call in flight, waiting for approval
// or finished (it was admitted by some run).
func (g *Gateway) callKnown(ctx context.Context, task, call string) bool {
	if g.pendingApproval(ctx, task, call) != nil {
		return true
	}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if v, err := g.opts.Temporal.QueryWorkflow(qctx, task, "", api.QueryStatus); err == nil {
		var st api.Status
		if v.Get(&st) == nil && slices.Contains(st.InFlight, call) {
			return true
		}
	}
	_, done := g.finishedCall(ctx, task, call, time.Second)
	return done
}

// notStartedDraining explains a call turned away for as long as the
// inline wait because its task is moving to a new run (continue-as-new),
// which waits for the calls in flight to finish, such as one waiting for
// approval.
func (g *Gateway) notStartedDraining(ctx context.Context, taskID, tool, callID string) string {
	holding := "the calls in flight to finish"
	for _, a := range g.approvals(ctx, taskID) {
		if a.State == api.ApprovalPending {
			holding = fmt.Sprintf("the calls in flight to finish, among them %s (call %s), which waits for approval by %q (request %s)", a.Tool, a.CallID, a.Group, a.ID)
			break
		}
	}
	return fmt.Sprintf("%s has not run: task %s is moving to a new run, which waits for %s. Call the tool again with _meta {%q: %q} once that is done: it runs once.",
		tool, taskID, holding, MetaIdempotencyKey, strings.TrimPrefix(callID, "k-"))
}

// rejectedAs returns the application error of type errType with which the
// task's call_tool validator rejected an Update, or nil.
func rejectedAs(err error, errType string) *temporal.ApplicationError {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == errType {
		return appErr
	}
	return nil
}

// toMCP renders a workflow call result as an MCP tool result.
func toMCP(taskID string, res api.CallResult) *mcp.CallToolResult {
	switch res.Outcome {
	case api.OutcomeOK, api.OutcomeToolError:
		var r mcp.CallToolResult
		if err := json.Unmarshal(res.Result, &r); err != nil {
			return errorResult(taskID, res.CallID, fmt.Sprintf("airlock could not decode the result of %s: %v", res.Tool, err))
		}
		if r.Meta == nil {
			r.Meta = mcp.Meta{}
		}
		r.Meta[MetaTask] = taskID
		r.Meta[MetaCall] = res.CallID
		if r.Content == nil {
			r.Content = []mcp.Content{}
		}
		return &r
	}
	r := errorResult(taskID, res.CallID, res.Reason)
	limitMeta(r, res.Limit) // limits.go
	return r
}

func errorResult(taskID, callID, msg string) *mcp.CallToolResult {
	r := &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}, Meta: mcp.Meta{}}
	if taskID != "" {
		r.Meta[MetaTask] = taskID
	}
	if callID != "" {
		r.Meta[MetaCall] = callID
	}
	return r
}

// ToolNames lists the exposed names of the upstream tools the gateway
// knows (available or not), for validating plans against them.
func (g *Gateway) ToolNames() map[string]bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]bool, len(g.tools))
	for name := range g.tools {
		out[name] = true
	}
	return out
}
