// Package gateway is airlock's MCP server: what agents connect to. It
// exposes the tools that manifests cover, named "<server>__<tool>", with the
// upstream's schemas and annotations unchanged, maps each MCP session to an
// AgentTask workflow and turns each tools/call into an Update on it.
//
// The gateway holds no durable state of its own: tasks live in Temporal, so
// any gateway replica can serve any task and a restarted gateway serves the
// same tasks again.
//
// Files:
//
//   - gateway.go: Options, Gateway, New, Handler.
//   - edge.go: the HTTP edge, which authenticates each request once and
//     carries its principal (principalFor); rpcbody.go, rpcjson.go: the
//     edge's strict read of a POST body.
//   - sessions.go: sessions bound to tasks and principals, their signed
//     IDs, the one check of who owns one (ownedSession), their limits;
//     replica.go: the router that lets any replica serve any session;
//     observe.go: metrics and audit of refused requests.
//   - call.go: a tools/call's way to its task and back; args.go: its
//     arguments; limits.go: rate limits and budgets; history.go: a result
//     read from a run's history; relay.go: what an upstream sends during a
//     call; mrtr.go: sampling and elicitation for 2026-07-28 clients;
//     mcptasks.go: pending calls as MCP Tasks.
//   - tasklookup.go: which task a request acts on; owner.go: who may touch
//     it (authorizeTask).
//   - tools.go: the tool list (changed pinned definitions blocked) and who
//     sees which tool; descriptions.go: definitions inspected for
//     prompt-injection markers as served; catalog.go: the search
//     catalog's meta-tools.
//   - programs.go: airlock_run_program (code mode); programnames.go: the
//     tools as a program's module.function; programstubs.go: their stubs.
//   - pending.go, rollback.go, state.go, approvals.go: the built-in tools.
//   - resources.go: upstream resources, templates and prompts;
//     subscriptions.go: resource subscriptions.
//   - reload.go: what a reloaded configuration changes; trace.go: spans.
package gateway

import (
	"crypto/ecdh"
	"log/slog"
	"net/http"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/consent"
	"github.com/airlock-run/airlock/internal/identity"
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
	// See sessions.go.
	SessionIdle             time.Duration
	MaxSessionsPerPrincipal int
	// TaskConcurrency is how many Updates (tool calls, programs) the
	// gateway sends one task at once (default DefaultTaskConcurrency);
	// TaskBacklog how many more wait their turn, in arrival order, before
	// a call is answered that the task is busy (default
	// DefaultTaskBacklog). See admission.go.
	TaskConcurrency, TaskBacklog int
	// PrincipalShare is how many calls (tool calls, programs) one
	// principal may have in flight at this gateway while other
	// principals have calls (default DefaultPrincipalShare; negative:
	// no such bound). A principal alone is bounded only per task. See
	// fairness.go.
	PrincipalShare int
	// SubjectKey is the worker's public subject key: a call to an
	// upstream that acts as the user (server.http.auth.token_exchange)
	// carries the caller's access token sealed to it (internal/exchange).
	// Nil: such calls are refused before they start.
	SubjectKey *ecdh.PublicKey
	// Consent is the user consent flow of upstreams with
	// server.http.auth.user_oauth (useroauth.go). Nil: such calls are
	// refused before they start.
	Consent *consent.Flow
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
	// SharedUnnamedTask puts the stateless requests of a principal that
	// name no task in one task, <principal>-default (gateway.unnamed_calls:
	// principal_task). False (default): each starts a task of its own
	// (tasklookup.go).
	SharedUnnamedTask bool
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
	// Programs, when set, offers airlock_run_program (code mode, issue 27;
	// programs.go).
	Programs *ProgramOptions
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
	// heldResult is the key of held results, derived from sessionKey once
	// (guard.go heldKey).
	heldResultOnce sync.Once
	heldResult     *ecdh.PrivateKey
	heldResultErr  error
	server         *mcp.Server
	log            zerolog.Logger

	// consentWaits are the sessions sent to consent, by elicitation ID
	// (useroauth.go).
	consentWaits consentWaits

	// running remembers tasks known to be running, whose calls can skip
	// the start half of Update-with-Start, with the run that last
	// answered: an Update naming its run spares the server a database
	// read of the current run per call. When that run has ended (continued
	// as new, or the task ended) the server answers NotFound, unless the
	// run itself holds the call's Update, and the call falls back to
	// Update-with-Start, which finds the current run.
	running sync.Map // task ID -> run ID ("" when not known)
	// admission queues each task's Updates past TaskConcurrency
	// (admission.go).
	admission *taskQueues
	// fairness bounds each principal's calls in flight while others
	// have calls (fairness.go).
	fairness *principalGate
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
	// histories bounds the history reads answering retries (history.go).
	histories chan struct{}
	// held remembers the grants the provider holds for a sign-in
	// (subject.go, offline: true).
	held heldGrants

	mu        sync.Mutex
	tools     map[string]*toolEntry // exposed name -> entry
	sessions  map[*mcp.ServerSession]*session
	live      map[string]*mcp.ServerSession // go-sdk session ID -> bound HTTP session of this replica
	stdioTask string                        // task of connection-bound sessions without HTTP headers

	res resourceState // upstream resources and prompts (resources.go)

	// reloaded holds what a reloaded configuration changes (reload.go).
	reloaded atomic.Pointer[Live]
	// described caches the listing's metadata (toolmeta.go).
	described describedCache
	// notes remembers the definitions' findings logged (descriptions.go).
	notes descriptionNotes
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
	if opts.TaskConcurrency <= 0 {
		opts.TaskConcurrency = DefaultTaskConcurrency
	}
	if opts.TaskBacklog <= 0 {
		opts.TaskBacklog = DefaultTaskBacklog
	}
	if opts.PrincipalShare == 0 {
		opts.PrincipalShare = DefaultPrincipalShare
	}
	open := &identity.Principal{Name: opts.Principal, Permissions: []string{"*"}, DataLevel: manifests.DataRestricted, AllowTools: []string{"*"}}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	g := &Gateway{
		opts:      opts,
		admission: newTaskQueues(opts.TaskConcurrency, opts.TaskBacklog),
		fairness:  newPrincipalGate(opts.PrincipalShare, DefaultPrincipalBacklog),
		open:      open,
		log:       opts.Logger.With().Str("component", "gateway").Logger(),
		tools:     map[string]*toolEntry{},
		sessions:  map[*mcp.ServerSession]*session{},
		live:      map[string]*mcp.ServerSession{},
		histories: make(chan struct{}, historyReaders),
	}
	g.reloaded.Store(liveOf(opts))
	g.sessionKey = opts.SessionKey
	if len(g.sessionKey) == 0 {
		g.sessionKey = []byte(NewSessionKey())
	}
	g.server = mcp.NewServer(&mcp.Implementation{Name: "airlock", Title: "airlock", Version: opts.Version}, &mcp.ServerOptions{
		Instructions: "Tools are served through airlock: every call is checked, recorded and may need a person's approval. " +
			"Results carry _meta \"" + MetaTask + "\" (your task ID; send it back in the " + HeaderTask + " header or in a request's _meta \"" + MetaTask + "\" to stay in that task) and \"" + MetaCall + "\".",
		Logger: slog.New(zerolog.NewSlogHandler(g.log)),
		// Pending calls as MCP Tasks (mcptasks.go); logging: upstream log
		// messages of a call are relayed, filtered at the level the client
		// set (relay.go).
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}, Logging: &mcp.LoggingCapabilities{},
			// and the approval extensions on them (toolapproval.go).
			Extensions: map[string]any{ExtTasks: map[string]any{}, ExtToolApproval: map[string]any{}, ExtAuthorization: map[string]any{}}},
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
	g.server.AddReceivingMiddleware(g.tasksMiddleware)  // mcptasks.go
	g.server.AddReceivingMiddleware(g.cancelMiddleware) // notifications/cancelled of calls in flight (relay.go)
	g.addBuiltins()
	g.addRollbackTool()
	g.addApprovalTools()
	g.addCatalogTools()
	g.addProgramTool()                                    // programs.go
	g.addStateTools()                                     // state.go
	g.watchConsent()                                      // useroauth.go
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
