// Package manifests defines what a tool is to airlock: the manifest schema,
// its loader and validator, and the example manifests under examples/.
//
// A manifest file describes one upstream (where the tools live: a stdio
// command or a streamable HTTP URL) and the tools of that upstream that
// airlock exposes, each with its side effects, data access level, required
// permissions, risk and approval rule, timeout, retry policy, idempotency,
// heartbeat timeout, redaction, pre-image capture and compensation, and the
// resource locks its calls take (locks.go). Optional resources and
// prompts blocks pass the upstream's resources and prompts through, to
// principals cleared for the block's data access level.
//
// Loading is two steps, as in caddy: decode (Parse; strict YAML, so unknown
// fields and durations without a unit are errors) and then Validate, which
// collects every problem with its file, line and field path. Load and
// LoadFiles do both; LoadFiles also checks manifests against each other.
// Defaults live in the Effective* methods rather than being written into the
// values, so a loaded manifest still says what its file said.
//
// This package is a leaf: it reads files and returns values and errors. It
// never logs and imports only gopkg.in/yaml.v3, internal/expr (to compile
// the CEL of captures and compensations when validating), internal/redact
// (to escape what a scanned upstream says in the skeleton) and the standard
// library (never Temporal, MCP or the services). internal/config uses its
// YAML decoder for airlock.yaml, and plans for plan files.
package manifests

import (
	"encoding/json"
	"time"
)

// Manifest is one manifest file: one upstream server and its tools.
type Manifest struct {
	// File is the path the manifest was loaded from (set by the loader).
	File string `yaml:"-" json:"-"`

	// Lines locates each field in File, so that Validate can report lines
	// (set by the loader; nil for a manifest built in code).
	Lines Lines `yaml:"-" json:"-"`

	// Server names the upstream and says how to reach it.
	Server Server `yaml:"server" json:"server"`

	// Tools maps the upstream's tool name to its declaration. Tools the
	// upstream offers but that are not listed here are not exposed unless the
	// configuration says so (fail closed).
	Tools map[string]*Tool `yaml:"tools" json:"tools"`

	// Resources, when set, exposes the upstream's resources and resource
	// templates (URIs unchanged) to principals cleared for its data access
	// level. Absent, the upstream's resources are not exposed (fail closed).
	Resources *Passthrough `yaml:"resources,omitempty" json:"resources,omitempty"`

	// Prompts, when set, exposes the upstream's prompts, named like tools
	// (server.prefix + the upstream's name, by default "<server>__<prompt>"),
	// to principals cleared for its data access level.
	// Absent, the upstream's prompts are not exposed (fail closed).
	Prompts *Passthrough `yaml:"prompts,omitempty" json:"prompts,omitempty"`

	// GuardDefault is airlock.yaml's guard.results.secrets, for tools
	// that declare no guard (set by internal/config; SecretsInResults).
	GuardDefault GuardAction `yaml:"-" json:"-"`
	// PersonalDataDefault is airlock.yaml's guard.results.personal_data,
	// likewise (PersonalDataInResults).
	PersonalDataDefault GuardAction `yaml:"-" json:"-"`
	// InjectionDefault is airlock.yaml's guard.results.injection, likewise
	// (InjectionInResults).
	InjectionDefault GuardAction `yaml:"-" json:"-"`
	// DescriptionInjectionDefault is airlock.yaml's
	// guard.descriptions.injection, likewise (InjectionInDescriptions).
	DescriptionInjectionDefault GuardAction `yaml:"-" json:"-"`
	// ArgumentGuard is airlock.yaml's guard.arguments, for tools that
	// declare none (set by internal/config; SecretsInArguments).
	ArgumentGuard GuardDefaults `yaml:"-" json:"-"`
	// RoleGuards are airlock.yaml's roles' guard blocks, by role name
	// (set by internal/config): they tighten what the tool and the
	// configuration say for the calls of principals holding the role
	// (ResultGuardFor, ArgumentGuardFor).
	RoleGuards map[string]*Guard `yaml:"-" json:"-"`
}

// Passthrough declares that a kind of upstream content other than tools
// (resources, prompts) passes through the gateway, and who may see it.
type Passthrough struct {
	// DataAccessLevel is the least level a principal needs to list, read,
	// get or subscribe to what the block covers.
	DataAccessLevel DataLevel `yaml:"data_access_level" json:"data_access_level"`
}

// Server says where the tools of a manifest live. Exactly one of Stdio and
// HTTP is set.
type Server struct {
	// Name is the upstream's name. Lowercase letters, digits, '-' and '_'.
	Name string `yaml:"name" json:"name"`

	// Prefix is put before each of the upstream's tool and prompt names to
	// make the name the gateway exposes. Absent, it is "<name>__"; the
	// empty string exposes the upstream's names unchanged, so a client sees
	// the server as it would directly (names must still be unique across
	// manifests; ValidateAll checks). See ExposedPrefix and Names.
	Prefix *string `yaml:"prefix,omitempty" json:"prefix,omitempty"`

	Stdio *StdioServer `yaml:"stdio,omitempty" json:"stdio,omitempty"`
	HTTP  *HTTPServer  `yaml:"http,omitempty" json:"http,omitempty"`
	// WASM makes the server airlock's own sandbox: each tool is a
	// WebAssembly module (see WASMTool). Write "wasm: {}".
	WASM *WASMServer `yaml:"wasm,omitempty" json:"wasm,omitempty"`

	// ConnectTimeout bounds one connection attempt (default 30s, see
	// EffectiveConnectTimeout).
	ConnectTimeout Duration `yaml:"connect_timeout,omitempty" json:"connect_timeout,omitempty"`

	// PathRoots are the directories the tools' path_args must stay inside
	// (after resolving "..", and symlinks). ${VAR} expands as in stdio.
	// Required when any tool declares path_args.
	PathRoots []string `yaml:"path_roots,omitempty" json:"path_roots,omitempty"`

	// ProtocolVersion is the MCP revision airlock offers this upstream when
	// it connects (one of ProtocolVersions; default: the newest the MCP SDK
	// speaks, and the upstream may answer with an older one). Set
	// "2025-11-25" for an upstream whose tools ask for sampling or
	// elicitation with a request during the call: on 2026-07-28 a server
	// may not send one (it returns an input-required result instead).
	ProtocolVersion string `yaml:"protocol_version,omitempty" json:"protocol_version,omitempty"`

	// Sandbox confines a stdio server: "off", "on", or a mapping (see
	// Sandbox). Absent, the server is sandboxed where the host can.
	Sandbox *Sandbox `yaml:"sandbox,omitempty" json:"sandbox,omitempty"`
}

// ProtocolVersions are the MCP revisions server.protocol_version may name.
var ProtocolVersions = []string{"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"}

// StdioServer launches the upstream as a child process speaking MCP over
// stdin/stdout. Command, args, env values and dir may reference ${VAR}: the
// variables airlock defines (AIRLOCK_DATA_DIR, AIRLOCK_CONFIG_DIR), then the
// environment (see Server.Expand).
type StdioServer struct {
	Command string            `yaml:"command" json:"command"`
	Args    []string          `yaml:"args,omitempty" json:"args,omitempty"`
	Env     map[string]string `yaml:"env,omitempty" json:"env,omitempty"`
	// Dir is the working directory (default: the manifest's directory).
	Dir string `yaml:"dir,omitempty" json:"dir,omitempty"`
}

// HTTPServer reaches the upstream over MCP streamable HTTP. The URL and
// header values may reference ${VAR} like StdioServer, which keeps tokens out
// of the manifest ("Authorization: Bearer ${GITHUB_TOKEN}").
type HTTPServer struct {
	URL     string            `yaml:"url" json:"url"`
	Headers map[string]string `yaml:"headers,omitempty" json:"headers,omitempty"`
	// OAuth makes airlock obtain and refresh an access token for the
	// upstream itself (client credentials; see oauth.go). Callers' tokens
	// are never passed through.
	OAuth *ClientCredentials `yaml:"oauth,omitempty" json:"oauth,omitempty"`
	// Auth makes each tool call reach the upstream as the calling user
	// (RFC 8693 token exchange; see tokenexchange.go).
	Auth *UpstreamAuth `yaml:"auth,omitempty" json:"auth,omitempty"`
}

// SideEffect classifies what a tool does to the world.
type SideEffect string

const (
	SideEffectNone   SideEffect = "none"
	SideEffectRead   SideEffect = "read"
	SideEffectWrite  SideEffect = "write"
	SideEffectDelete SideEffect = "delete"
	SideEffectSend   SideEffect = "send"
	SideEffectPay    SideEffect = "pay"
	SideEffectExec   SideEffect = "exec"
)

// DataLevel is a data access level, ordered from least to most sensitive.
type DataLevel string

const (
	DataPublic       DataLevel = "public"
	DataInternal     DataLevel = "internal"
	DataConfidential DataLevel = "confidential"
	DataSensitive    DataLevel = "sensitive"
	DataRestricted   DataLevel = "restricted"
)

// Risk is a tool's risk tier; it selects the default policy decision.
type Risk string

const (
	RiskLow      Risk = "low"
	RiskMedium   Risk = "medium"
	RiskHigh     Risk = "high"
	RiskCritical Risk = "critical"
)

// Tool is the declaration of one upstream tool.
type Tool struct {
	Description string `yaml:"description,omitempty" json:"description,omitempty"` // optional override

	SideEffects         []SideEffect `yaml:"side_effects" json:"side_effects"`
	DataAccessLevel     DataLevel    `yaml:"data_access_level" json:"data_access_level"`
	RequiredPermissions []string     `yaml:"required_permissions,omitempty" json:"required_permissions,omitempty"`
	Risk                Risk         `yaml:"risk" json:"risk"`
	Approval            *Approval    `yaml:"approval,omitempty" json:"approval,omitempty"`

	// OpenWorld says the tool's results are open-world content that
	// nobody in the organisation vouches for (a web page, an e-mail, an
	// issue's comments): a call of it marks its task untrusted (an
	// information-flow label policy rules see as task.untrusted). MCP's
	// openWorldHint says the same of a tool, and airlock manifests scan
	// writes it from there. Default false.
	OpenWorld bool `yaml:"open_world,omitempty" json:"open_world,omitempty"`

	// Timeout bounds one attempt of the call (default 60s, at most 24h; see
	// EffectiveTimeout).
	Timeout Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// HeartbeatTimeout is how long a running call may go without a
	// heartbeat from its worker before Temporal declares the worker dead
	// and the call's outcome unknown (re-run only if idempotent). It must
	// be at least 1s and shorter than Timeout. Default: a third of the
	// timeout, at least 5s and at most 10s (see EffectiveHeartbeatTimeout).
	HeartbeatTimeout Duration `yaml:"heartbeat_timeout,omitempty" json:"heartbeat_timeout,omitempty"`
	Retry            *Retry   `yaml:"retry,omitempty" json:"retry,omitempty"`

	// Idempotent says a call may safely run twice with the same arguments.
	// Only idempotent calls are re-run when the worker died mid-call; for
	// the others the outcome is reported as unknown.
	Idempotent bool `yaml:"idempotent" json:"idempotent"`

	// Cost is what one call of the tool counts against its task's budget
	// (task.budget, roles.NAME.budget): a positive whole number, default 1
	// (see EffectiveCost).
	Cost int `yaml:"cost,omitempty" json:"cost,omitempty"`

	// Redact lists argument paths (dot separated, e.g. "content" or
	// "auth.token") masked in approval messages and logs. A path through a
	// list applies to every element: "entities.observations" masks the
	// observations of each entity.
	Redact []string `yaml:"redact,omitempty" json:"redact,omitempty"`

	// Guard says what the worker does with secrets found in the tool's
	// results (guard.go); omitted: the configuration's guard.
	Guard *Guard `yaml:"guard,omitempty" json:"guard,omitempty"`

	// Sampling and Elicitation say whether the upstream may, while a call
	// of this tool runs, ask the client that made the call to sample its
	// model (sampling/createMessage) or to ask its user (elicitation/create):
	// "allow" or "deny". Default deny: the upstream gets an error saying
	// the manifest does not allow it. Allowed requests and the client's
	// answers are recorded with the call (answers masked by Redact).
	Sampling    Permit `yaml:"sampling,omitempty" json:"sampling,omitempty"`
	Elicitation Permit `yaml:"elicitation,omitempty" json:"elicitation,omitempty"`

	// PathArgs lists arguments that are filesystem paths, a string or a list
	// of strings (used by policy path confinement).
	PathArgs []string `yaml:"path_args,omitempty" json:"path_args,omitempty"`

	// Capture reads the pre-image before the call runs; its structured
	// result is before in the compensation. See Call for what its
	// expressions may use.
	Capture *Call `yaml:"capture,omitempty" json:"capture,omitempty"`
	// WASM runs the tool as a WebAssembly module in airlock's sandbox; only
	// (and always) for tools of a wasm server.
	WASM *WASMTool `yaml:"wasm,omitempty" json:"wasm,omitempty"`

	// Compensation undoes a successful call on rollback. Both name a tool
	// declared in the same manifest.
	Compensation *Call `yaml:"compensation,omitempty" json:"compensation,omitempty"`

	// Resource locks (issue 16 §4; see Lock). Locks are taken, all of
	// them and in sorted order, before the call's capture and execution,
	// and released when it ends. LockTimeout is how long a call waits for
	// them (default 30s) before it is refused naming the holder.
	Locks       []Lock   `yaml:"locks,omitempty" json:"locks,omitempty"`
	LockTimeout Duration `yaml:"lock_timeout,omitempty" json:"lock_timeout,omitempty"`
}

// Compensable reports whether a call of the tool can be undone on rollback:
// it declares a compensation (whose when may still decide, at rollback,
// that there is nothing to undo).
func (t *Tool) Compensable() bool { return t != nil && t.Compensation != nil }

// Permit allows or denies a server-to-client request (Tool.Sampling,
// Tool.Elicitation).
type Permit string

// Permit values; the empty Permit is PermitDeny.
const (
	PermitAllow Permit = "allow"
	PermitDeny  Permit = "deny"
)

// Allows reports whether p is PermitAllow.
func (p Permit) Allows() bool { return p == PermitAllow }

// Approval is the approval rule of a tool.
type Approval struct {
	// Group is the approver group whose members may decide.
	Group string `yaml:"group" json:"group"`
	// Quorum is how many distinct members must approve (default 1, see
	// EffectiveQuorum).
	Quorum int `yaml:"quorum,omitempty" json:"quorum,omitempty"`
	// Timeout is how long to wait for a decision before OnTimeout applies.
	Timeout Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// EscalateAfter, shorter than Timeout, is when an undecided request is
	// escalated (to EscalateTo when set).
	EscalateAfter Duration `yaml:"escalate_after,omitempty" json:"escalate_after,omitempty"`
	EscalateTo    string   `yaml:"escalate_to,omitempty" json:"escalate_to,omitempty"`
	// OnTimeout is "deny" (default) or "approve" (see EffectiveOnTimeout).
	OnTimeout string `yaml:"on_timeout,omitempty" json:"on_timeout,omitempty"`
	// Edits: may an approver change the call's arguments before approving
	// (approve with edits)? Nil means yes; false forbids it (see
	// EditsAllowed).
	Edits *bool `yaml:"edits,omitempty" json:"edits,omitempty"`

	// Approval grants. MaxGrant bounds what an approver may grant with an
	// approval (later calls of the tool without asking again); omitted:
	// every call is approved once only. GrantArgs lists argument paths
	// (dot separated, as Redact) whose values a later call must share
	// with the approved one for a grant to cover it; omitted: any
	// arguments.
	MaxGrant  *MaxGrant `yaml:"max_grant,omitempty" json:"max_grant,omitempty"`
	GrantArgs []string  `yaml:"grant_args,omitempty" json:"grant_args,omitempty"`
}

// MaxGrant is approval.max_grant: the most calls and the longest time one
// grant may cover (at least one of them), and whether a grant may cover
// the principal's other tasks (then Duration is required, so it ends).
type MaxGrant struct {
	Calls     int      `yaml:"calls,omitempty" json:"calls,omitempty"`
	Duration  Duration `yaml:"duration,omitempty" json:"duration,omitempty"`
	Principal bool     `yaml:"principal,omitempty" json:"principal,omitempty"`
}

// EditsAllowed reports whether approvers may edit the arguments of calls
// this approval covers: yes unless edits is false.
func (a *Approval) EditsAllowed() bool { return a == nil || a.Edits == nil || *a.Edits }

// Retry is a tool's activity retry policy. Zero fields take the defaults
// of EffectiveRetry: 3 attempts, 1s initial interval, backoff 2, 30s cap.
type Retry struct {
	// MaxAttempts counts the first attempt: 1 means never retry. 0 means the
	// default (3), not "unlimited" as in Temporal: an agent's tool call must
	// end.
	MaxAttempts     int      `yaml:"max_attempts,omitempty" json:"max_attempts,omitempty"`
	InitialInterval Duration `yaml:"initial_interval,omitempty" json:"initial_interval,omitempty"`
	MaxInterval     Duration `yaml:"max_interval,omitempty" json:"max_interval,omitempty"`
	Backoff         float64  `yaml:"backoff,omitempty" json:"backoff,omitempty"`
	// NonRetryable lists error types that are never retried.
	NonRetryable []string `yaml:"non_retryable,omitempty" json:"non_retryable,omitempty"`
}

// Call is a tool call computed from the context of another call: a capture
// (run before the tool, to keep what the call will change) or a
// compensation (run on rollback, to undo it). Args maps each argument to a
// CEL expression (package internal/expr) whose value, any JSON value, is
// passed as the argument. The expressions may use:
//
//	args    the original call's arguments
//	call    {id, task, tool, slug}: the original call; slug is a short,
//	        filename-safe name for it (expr.Slug), the same on every retry
//	roots   the server's path_roots, expanded
//	result  (compensation only) the call's structured result
//	before  (compensation only) the capture's structured result, or null
//	        when the capture was skipped or its tool returned an error
//	        (e.g. the file did not exist yet)
//
// A structured result is the MCP result's structuredContent, else its text
// parsed as JSON, else its text (expr.ResultValue).
//
// When, a CEL condition over the same variables, makes the call only when
// it is true. On a compensation, Else is the call to make instead when it
// is false, and may have its own when and else (a chain); without else a
// false when means there is nothing to undo. A capture has no else: a
// capture that is not made leaves before null.
type Call struct {
	Tool string            `yaml:"tool" json:"tool"`
	Args map[string]string `yaml:"args,omitempty" json:"args,omitempty"`
	When string            `yaml:"when,omitempty" json:"when,omitempty"`
	Else *Call             `yaml:"else,omitempty" json:"else,omitempty"`
}

// Duration is a time.Duration written as a Go duration string ("30s", "5m"),
// in YAML and JSON alike. A bare number is an error (see UnmarshalYAML).
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// ExposedPrefix is what the gateway puts before the upstream's tool and
// prompt names: server.prefix when set (even to ""), else "<name>__".
func (s Server) ExposedPrefix() string {
	if s.Prefix != nil {
		return *s.Prefix
	}
	return DefaultPrefix(s.Name)
}

// DefaultPrefix is the prefix of a server whose manifest sets none.
func DefaultPrefix(server string) string { return server + "__" }

// Exposed is the name under which the gateway exposes the upstream's tool
// or prompt name.
func (m *Manifest) Exposed(name string) string { return m.Server.ExposedPrefix() + name }
