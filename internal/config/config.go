// Package config loads airlock's configuration file (airlock.yaml) and the
// manifest files it names, and validates them together into one snapshot
// (Load). It also implements `airlock manifests validate` (ValidateCommand),
// which needs both.
//
// It reads files only; it never logs and never dials anything. It imports
// packages manifests and policy (to compile the rules at load), api (for
// the bounds the workflows set, such as api.MaxTaskCalls), internal/signkey
// (to check audit.signing_key_file at load) and the standard library.
package config

import (
	"path/filepath"

	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/manifests"
)

// Config is the airlock configuration file.
type Config struct {
	// File is the path the configuration was loaded from (set by the loader).
	File string `yaml:"-"`

	// DataDir holds the embedded Temporal database and other local state.
	// Relative paths are relative to the current directory. Default ".airlock".
	DataDir string `yaml:"data_dir,omitempty"`
	// Blobs is the URL of the blob store where workers keep large captured
	// pre-images and compensations, out of the workflow histories:
	// file:///dir, s3://bucket?region=R (&endpoint=URL&use_path_style=true
	// for S3-compatible servers, &prefix=P/) or mem://. Every worker must
	// use the same store. Default: blobs_dir as a file URL.
	Blobs string `yaml:"blobs,omitempty"`
	// BlobsDir is the older way to name a file store: the same as blobs:
	// file:///<absolute dir> (default <data_dir>/blobs).
	BlobsDir string `yaml:"blobs_dir,omitempty"`

	// Listen is the gateway's HTTP address. Default "127.0.0.1:7400".
	Listen string `yaml:"listen,omitempty"`
	// HTTP bounds what clients may hold on the gateway's listener (and
	// airlock approver's).
	HTTP HTTP `yaml:"http,omitempty"`

	// Manifests lists manifest files or globs, relative to the config file.
	Manifests []string `yaml:"manifests"`

	// ExposeUncovered exposes upstream tools that no manifest declares, with
	// conservative defaults (write side effects, high risk, not idempotent).
	// Default false: fail closed.
	ExposeUncovered bool `yaml:"expose_uncovered,omitempty"`
	// Catalog is how tools/list shows the tools: "full" (default: every
	// tool the caller may call) or "search" (a few meta-tools,
	// airlock_find_tools and airlock_call_tool, for catalogs of hundreds).
	Catalog string `yaml:"catalog,omitempty"`

	// PinsFile is where the pinned hashes of upstream tool definitions are
	// kept (see package pin and `airlock manifests pin`). Relative paths
	// are relative to this file. Default "<data_dir>/pins.json".
	PinsFile string `yaml:"pins_file,omitempty"`

	Temporal Temporal `yaml:"temporal,omitempty"`
	Task     Task     `yaml:"task,omitempty"`
	// Gateway configures the MCP gateway's HTTP sessions.
	Gateway Gateway `yaml:"gateway,omitempty"`

	// Principals are the identities that may call tools. HTTP callers
	// present an API key (Authorization: Bearer KEY, or X-API-Key: KEY);
	// the configuration stores only its SHA-256.
	Principals []Principal `yaml:"principals,omitempty"`
	// PrincipalsFromTokens accepts OAuth 2.1 access tokens beside the API
	// keys (see tokens.go): the gateway becomes a resource server of the
	// issuers named there.
	PrincipalsFromTokens *Tokens `yaml:"principals_from_tokens,omitempty"`
	// LocalPrincipal names the principal of stdio sessions (Claude
	// Desktop). Required for --stdio when principals are configured.
	LocalPrincipal string `yaml:"local_principal,omitempty"`
	// Roles grant permissions, a data access level, a tool allowlist and
	// task limits.
	Roles map[string]*Role `yaml:"roles,omitempty"`
	// Policy holds the rules every call is checked against.
	Policy Policy `yaml:"policy,omitempty"`

	// ApproverGroups name who may approve calls that need approval (the
	// manifests' approval.group and rules' group refer to these).
	ApproverGroups map[string]*ApproverGroup `yaml:"approver_groups,omitempty"`

	// ApprovalChannels are further ways to ask approvers, beside Slack and
	// the local page: a webhook posts each request as signed JSON and
	// takes signed decisions back (bridges to Teams, PagerDuty, e-mail).
	ApprovalChannels []ApprovalChannel `yaml:"approval_channels,omitempty"`

	// Approvals configures how people are asked and how long agents wait.
	Approvals Approvals `yaml:"approvals,omitempty"`
	// Slack connects approvals to a Slack app. Secrets are named by the
	// environment variables that hold them, never written here.
	Slack *Slack `yaml:"slack,omitempty"`

	// Audit configures the audit stream (one JSON line per decision point).
	Audit Audit `yaml:"audit,omitempty"`
	// Guard is the content guard of every tool whose manifest declares
	// none: what the worker does with secrets in tool results (redact,
	// block, off; manifests.Guard). Omitted: off.
	Guard *manifests.Guard `yaml:"guard,omitempty"`
	// ExternalPolicy asks an external policy decision point (OpenID
	// AuthZEN 1.0) about each call as well (external.go); off by default.
	ExternalPolicy *ExternalPolicy `yaml:"external_policy,omitempty"`

	// Telemetry configures OpenTelemetry tracing (telemetry.go); off by
	// default.
	Telemetry Telemetry `yaml:"telemetry,omitempty"`

	// Programs configures code mode, airlock_run_program (programs.go).
	Programs Programs `yaml:"programs,omitempty"`
}

// HTTP bounds requests and connections on airlock's HTTP listeners, above
// all those of clients that have not authenticated (see package httplimit).
// Responses are not bounded in time: MCP sessions keep streams open.
type HTTP struct {
	// ReadHeaderTimeout bounds reading a request's headers (default 10s).
	ReadHeaderTimeout manifests.Duration `yaml:"read_header_timeout,omitempty"`
	// ReadTimeout bounds reading a whole request, headers and body
	// (default 30s).
	ReadTimeout manifests.Duration `yaml:"read_timeout,omitempty"`
	// IdleTimeout closes a kept-alive connection without a new request
	// (default 2m).
	IdleTimeout manifests.Duration `yaml:"idle_timeout,omitempty"`
	// MaxHeaderBytes bounds a request's headers (default 64KiB).
	MaxHeaderBytes manifests.ByteSize `yaml:"max_header_bytes,omitempty"`
	// MaxUnauthenticatedBody bounds the body of a request without a valid
	// API key (default 256KiB): the approvals page's forms and Slack's
	// clicks fit; an MCP request without a key is refused (401) unread.
	MaxUnauthenticatedBody manifests.ByteSize `yaml:"max_unauthenticated_body,omitempty"`
	// MaxUnauthenticatedConns bounds the connections that have not sent a
	// request with a valid API key (default 1024); past it the oldest is
	// closed for each new one. Authenticated connections are not counted.
	MaxUnauthenticatedConns int `yaml:"max_unauthenticated_conns,omitempty"`
}

// Audit configures the audit stream (package auditlog).
type Audit struct {
	// Log is where the lines go: "stdout", "stderr", "off", or a file
	// (relative to this configuration file), appended to. Default
	// "<data_dir>/audit.jsonl".
	Log string `yaml:"log,omitempty"`
	// SigningKeyFile is an Ed25519 private key (PEM, PKCS #8; airlock
	// audit keygen writes one), relative to this configuration file, that
	// signs each record of airlock audit export --format sep-3004. The
	// file must be readable by its owner only. Unset: exports are not
	// signed.
	SigningKeyFile string `yaml:"signing_key_file,omitempty"`
}

// AuditLog is the audit stream's destination: "stdout", "stderr", "off",
// or a file path (audit.log relative to the configuration file's
// directory, else audit.jsonl in dataDir, the effective data directory).
func (c *Config) AuditLog(dataDir string) string {
	switch l := c.Audit.Log; {
	case l == "":
		return filepath.Join(dataDir, "audit.jsonl")
	case l == "stdout" || l == "stderr" || l == "off" || filepath.IsAbs(l) || c.File == "":
		return l
	default:
		return filepath.Join(filepath.Dir(c.File), l)
	}
}

// Approvals configures the approval paths.
type Approvals struct {
	// Notify lists where requests are announced: "slack", "local" (the CLI
	// and the gateway's /approvals page; always available). Default: slack
	// when a slack block is present, else local.
	Notify []string `yaml:"notify,omitempty"`
	// InlineWait bounds how long one tools/call waits for an approval
	// before answering that it is pending (default 50s: under the 60s
	// common MCP clients wait). The call goes on; airlock_await collects it.
	InlineWait manifests.Duration `yaml:"inline_wait,omitempty"`
}

// Slack is the Slack app airlock posts approval requests with.
type Slack struct {
	// BotTokenEnv names the environment variable holding the bot token
	// (xoxb-…). Default SLACK_BOT_TOKEN.
	BotTokenEnv string `yaml:"bot_token_env,omitempty"`
	// SigningSecretEnv names the variable holding the signing secret that
	// interaction requests are checked with. Default SLACK_SIGNING_SECRET.
	SigningSecretEnv string `yaml:"signing_secret_env,omitempty"`
	// AppTokenEnv names the variable holding the app-level token (xapp-…)
	// for Socket Mode. Default SLACK_APP_TOKEN.
	AppTokenEnv string `yaml:"app_token_env,omitempty"`
	// Mode is "http" (Slack posts interactions to InteractionsPath on the
	// gateway's listener; needs a public URL) or "socket" (Socket Mode; no
	// public URL). Default http.
	Mode string `yaml:"mode,omitempty"`
	// InteractionsPath is the HTTP path of the interaction endpoint.
	// Default /slack/interactions.
	InteractionsPath string `yaml:"interactions_path,omitempty"`
	// APIURL overrides Slack's Web API base URL (tests, proxies). Must end
	// with "/".
	APIURL string `yaml:"api_url,omitempty"`
}

// ApproverGroup is a set of principals who decide on approval requests.
type ApproverGroup struct {
	// Members are principal names.
	Members []string `yaml:"members"`
	// SlackChannel is where requests for this group are posted (a channel
	// ID such as C0123ABCD). Without it, requests are decided locally.
	SlackChannel string `yaml:"slack_channel,omitempty"`
}

// GroupMembers returns each approver group's members.
func (c *Config) GroupMembers() map[string][]string {
	out := map[string][]string{}
	for name, g := range c.ApproverGroups {
		if g != nil {
			out[name] = append([]string(nil), g.Members...)
		}
	}
	return out
}

// ApprovalChannel is one approval_channels entry.
type ApprovalChannel struct {
	// Name identifies the channel in logs, message references and the
	// decisions it sends back.
	Name string `yaml:"name"`
	// Kind is "webhook" (the only kind; Slack has its own slack block).
	Kind string `yaml:"kind"`
	// URL is where requests are posted (https, or http to a loopback
	// address).
	URL string `yaml:"url"`
	// SecretEnv names the environment variable holding the shared secret
	// that signs both directions (HMAC-SHA256 over timestamp and body).
	SecretEnv string `yaml:"secret_env"`
	// Groups limits the channel to these approver groups (default: all).
	Groups []string `yaml:"groups,omitempty"`
}

// ApprovalChannelWebhook is the kind of a webhook approval channel.
const ApprovalChannelWebhook = "webhook"

// Principal is one caller identity.
type Principal struct {
	Name  string   `yaml:"name"`
	Roles []string `yaml:"roles"`
	// APIKeySHA256 lists the hex SHA-256 of each API key of this principal
	// (`airlock keys new` makes a key and prints its hash).
	APIKeySHA256 []string `yaml:"api_key_sha256,omitempty"`
	// SlackUserID identifies the principal as an approver.
	SlackUserID string `yaml:"slack_user_id,omitempty"`
}

// Role is a named set of grants. A principal's grants are the union of its
// roles'; its data access level is the highest; its task limits are the
// largest its roles give (or the task defaults).
type Role struct {
	Permissions     []string            `yaml:"permissions,omitempty"`
	DataAccessLevel manifests.DataLevel `yaml:"data_access_level,omitempty"`
	// Tools are globs over exposed tool names ("filesystem__read_*").
	Tools    []string           `yaml:"tools,omitempty"`
	MaxCalls int                `yaml:"max_calls,omitempty"`
	Deadline manifests.Duration `yaml:"deadline,omitempty"`

	// Rate limits and budget (issue 16 §3; limits.go). RateLimits bound
	// the calls of the role's principals, per principal (default), per
	// role or per task; Budget is the cost units one task of the role may
	// spend (the largest its roles give, else task.budget).
	RateLimits []RateLimit `yaml:"rate_limits,omitempty"`
	Budget     int         `yaml:"budget,omitempty"`

	// Guard tightens the content guard (issue 30 §1) for the calls of the
	// role's principals: guard.arguments and guard.results as in a
	// manifest's tool or airlock.yaml's guard. The action in force is the
	// strictest of the tool's setting (else airlock.yaml's guard) and the
	// settings of each role the principal holds (off < annotate <
	// require_approval < redact < block), so a role never loosens the
	// guard (manifests.ResultGuardFor).
	Guard *manifests.Guard `yaml:"guard,omitempty"`
}

// Policy configures the decision every call goes through.
type Policy struct {
	// MaxArgBytes caps the size of a call's arguments (default 262144).
	MaxArgBytes int `yaml:"max_arg_bytes,omitempty"`
	// RiskDefaults maps a risk tier to the effect when no rule matches
	// (default: low and medium allow; high and critical require approval).
	RiskDefaults map[manifests.Risk]string `yaml:"risk_defaults,omitempty"`
	// Rules are checked in order; the first whose `when` is true decides.
	Rules []Rule `yaml:"rules,omitempty"`
}

// Rule is one policy rule: a CEL condition over principal, tool, args and
// task, and what happens when it holds.
type Rule struct {
	Name   string `yaml:"name"`
	When   string `yaml:"when"`
	Effect string `yaml:"effect"` // allow, deny, require_approval
	Group  string `yaml:"group,omitempty"`
	Quorum int    `yaml:"quorum,omitempty"`
	Reason string `yaml:"reason,omitempty"`
}

// Temporal says which Temporal to use. An empty Address means the embedded
// dev server (only `airlock dev` runs it).
type Temporal struct {
	Address   string `yaml:"address,omitempty"`
	Namespace string `yaml:"namespace,omitempty"`  // default "default"
	TaskQueue string `yaml:"task_queue,omitempty"` // default "airlock"
	// UIURL is the Temporal Web UI's base URL (e.g.
	// "https://temporal.example.com"); Slack messages link to each task's
	// page there. airlock dev defaults it to its embedded UI.
	UIURL string `yaml:"ui_url,omitempty"`
}

// Task holds the default limits of an agent task.
type Task struct {
	MaxCalls    int                `yaml:"max_calls,omitempty"`    // default 1000
	Deadline    manifests.Duration `yaml:"deadline,omitempty"`     // default 24h
	IdleTimeout manifests.Duration `yaml:"idle_timeout,omitempty"` // default 1h
	// RollbackOnDeny rolls a task back when one of its calls is denied
	// (by policy or by approvers). Default false.
	RollbackOnDeny bool `yaml:"rollback_on_deny,omitempty"`
	// RollbackNotify is the approver group told when a rollback fails and
	// changes remain undone. Default: nobody (logged, and the task shows
	// rollback_failed).
	RollbackNotify string `yaml:"rollback_notify,omitempty"`
	// State configures task-scoped state (airlock_state_get/set/delete;
	// state.go).
	State TaskState `yaml:"state,omitempty"`

	// Rate limits and budget of every task (issue 16 §3; limits.go):
	// RateLimits are per task (per: task, the default here); Budget is
	// the cost units a task may spend (manifest tools' cost, default 1
	// each; 0 or omitted: no budget).
	RateLimits []RateLimit `yaml:"rate_limits,omitempty"`
	Budget     int         `yaml:"budget,omitempty"`
	// AskTimeout bounds how long an upstream's sampling or elicitation
	// request during a call waits for the client's answer (issue 14,
	// "mrtr"; also capped by the tool's timeout). Default 5m.
	AskTimeout manifests.Duration `yaml:"ask_timeout,omitempty"`
}

// Gateway configures the MCP gateway.
type Gateway struct {
	// SessionIdleTimeout closes an HTTP MCP session that has had no
	// request for this long, freeing its memory; its client's later
	// requests are still served on the signed session ID, without the
	// session's stream. Default 30m.
	SessionIdleTimeout manifests.Duration `yaml:"session_idle_timeout,omitempty"`
	// MaxSessionsPerPrincipal caps the open HTTP MCP sessions of one
	// principal: a new session over it closes the principal's least
	// recently used idle session (and is refused when all are busy).
	// Default 100.
	MaxSessionsPerPrincipal int `yaml:"max_sessions_per_principal,omitempty"`
	// TaskConcurrency is how many tool calls (and programs) the gateway
	// sends one task at once; TaskBacklog how many more wait their turn,
	// in arrival order, before a call is answered that the task is busy
	// (gateway/admission.go). Defaults 32 and 256. TaskConcurrency must
	// stay under the server's history.maxInFlightUpdates (deploy/README.md).
	TaskConcurrency int `yaml:"task_concurrency,omitempty"`
	TaskBacklog     int `yaml:"task_backlog,omitempty"`
	// PrincipalShare is, while other principals have calls at this
	// gateway, how many calls a principal may have in flight at least
	// (it may have as many as the least busy of the others asks for);
	// the rest wait their turn (gateway/fairness.go). Default 1; 0 turns
	// the bound off. A principal alone is bounded only per task.
	PrincipalShare int `yaml:"principal_share,omitempty"`
	// SessionKeyEnv names the environment variable holding the key that
	// signs MCP session IDs (default AIRLOCK_SESSION_KEY); SessionKeyFile
	// is a file holding it (relative to this file; default
	// <data_dir>/session.key, made when missing). Every gateway replica
	// behind one load balancer needs the same key. See SessionKey.
	SessionKeyEnv  string `yaml:"session_key_env,omitempty"`
	SessionKeyFile string `yaml:"session_key_file,omitempty"`
	// PageSize bounds one page of tools/list, resources/list and
	// prompts/list; longer lists are paginated with cursors. Default 1000.
	PageSize int `yaml:"page_size,omitempty"`
	// UnnamedCalls is the task of a stateless HTTP request (protocol
	// 2026-07-28, or no session) that names none (no Airlock-Task header,
	// no _meta "airlock.dev/task", no signed session ID): "new_task"
	// (default) starts a task of its own, whose ID its result's _meta
	// carries for the client to send back; "principal_task" puts every
	// such request of a principal in one task, <principal>-default, as
	// before.
	UnnamedCalls string `yaml:"unnamed_calls,omitempty"`
}

// The values of gateway.unnamed_calls.
const (
	UnnamedNewTask       = "new_task"
	UnnamedPrincipalTask = "principal_task"
)

// Snapshot is a loaded, validated configuration with its manifests.
type Snapshot struct {
	Config    *Config
	Manifests []*manifests.Manifest // sorted by server name
	// Policy is the compiled policy section.
	Policy *policy.Policy
}
