package config

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/manifests"
)

// Defaults for fields airlock.yaml may omit.
const (
	DefaultDataDir     = ".airlock"
	DefaultListen      = "127.0.0.1:7400"
	DefaultNamespace   = "default"
	DefaultTaskQueue   = "airlock"
	DefaultMaxCalls    = 1000
	DefaultDeadline    = 24 * time.Hour
	DefaultIdleTimeout = time.Hour
	DefaultAskTimeout  = 5 * time.Minute

	// HTTP limits (package httplimit has the same defaults).
	DefaultHTTPReadHeaderTimeout       = 10 * time.Second
	DefaultHTTPReadTimeout             = 30 * time.Second
	DefaultHTTPIdleTimeout             = 2 * time.Minute
	DefaultHTTPMaxHeaderBytes          = 64 << 10
	DefaultHTTPMaxUnauthenticatedBody  = 256 << 10
	DefaultHTTPMaxUnauthenticatedConns = 1024
	// DefaultSessionIdleTimeout and DefaultMaxSessionsPerPrincipal are
	// gateway.DefaultSessionIdle and gateway.DefaultMaxSessionsPerPrincipal.
	DefaultSessionIdleTimeout      = 30 * time.Minute
	DefaultMaxSessionsPerPrincipal = 100
	// DefaultTaskConcurrency and DefaultTaskBacklog are
	// gateway.DefaultTaskConcurrency and gateway.DefaultTaskBacklog.
	DefaultTaskConcurrency = 32
	DefaultTaskBacklog     = 256
	// DefaultPrincipalShare is gateway.DefaultPrincipalShare.
	DefaultPrincipalShare = 1
	// MaxTaskConcurrency is the most gateway.task_concurrency may be:
	// Temporal refuses Updates past its history.maxInFlightUpdates, which
	// the embedded server sets to 64 (internal/devserver).
	MaxTaskConcurrency = 64
	// MaxTaskBacklog bounds gateway.task_backlog: each waiting call holds
	// a request open in the gateway.
	MaxTaskBacklog = 100_000
)

// Load reads the configuration at path, applies defaults, and loads and
// validates every manifest it names. Manifest patterns are relative to the
// configuration file's directory. The error, if any, is manifests.Problems:
// every problem of the configuration and of all manifests together, each as
// "file:line: field: what is wrong and how to fix it".
func Load(path string) (*Snapshot, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, manifests.Problems{manifests.ReadProblem(path, err)}
	}
	cfg := &Config{}
	lines, decoded := manifests.DecodeYAML(path, data, cfg)
	if lines == nil {
		return nil, manifests.Problems(decoded) // malformed YAML: nothing to go on
	}
	cfg.File = path
	applyDefaults(cfg, lines)

	// Carry on past decode problems with what could be decoded, so that one
	// run reports the manifests' problems too.
	problems := append(manifests.Problems(decoded), manifests.WithoutDecoded(cfg.validate(lines), decoded)...)
	files, globProblems := resolveManifests(cfg, lines)
	problems = append(problems, globProblems...)
	sort.SliceStable(problems, func(i, j int) bool { return problems[i].Line < problems[j].Line })

	ms, err := manifests.LoadFiles(files)
	if err != nil {
		var mps manifests.Problems
		if !errors.As(err, &mps) {
			return nil, err
		}
		problems = append(problems, mps...)
	}
	if len(problems) > 0 {
		return nil, problems
	}
	pol, pps := compilePolicy(cfg, lines)
	if len(pps) > 0 {
		return nil, pps
	}
	sort.SliceStable(ms, func(i, j int) bool { return ms[i].Server.Name < ms[j].Server.Name })
	cfg.applyGuard(ms) // guard.go
	// The recorded policy version changes with the manifests too (a reload
	// may change only them; version.go).
	pol = pol.Covering(manifestsDigest(ms))
	return &Snapshot{Config: cfg, Manifests: ms, Policy: pol}, nil
}

// compilePolicy compiles the configuration's rules once, reporting each
// rule that does not compile at its line, with its name and the CEL error.
func compilePolicy(c *Config, lines manifests.Lines) (*policy.Policy, manifests.Problems) {
	pc := policy.Config{MaxArgBytes: c.Policy.MaxArgBytes, File: c.File}
	if len(c.Policy.RiskDefaults) > 0 {
		pc.RiskDefaults = map[manifests.Risk]api.Effect{}
		for r, e := range c.Policy.RiskDefaults {
			pc.RiskDefaults[r] = api.Effect(e)
		}
	}
	for _, r := range c.Policy.Rules {
		pc.Rules = append(pc.Rules, policy.Rule{Name: r.Name, When: r.When, Effect: api.Effect(r.Effect), Group: r.Group, Quorum: r.Quorum, Reason: r.Reason})
	}
	p, err := policy.Compile(pc)
	if err == nil {
		return p, nil
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var ps manifests.Problems
	for _, e := range errs {
		var re *policy.RuleError
		if errors.As(e, &re) {
			field := fmt.Sprintf("policy.rules[%d].when", re.Index)
			ps = append(ps, manifests.Problem{File: c.File, Line: lines.Line(field), Field: field,
				Msg: fmt.Sprintf("rule %q: %v; fix the CEL expression (variables: principal, tool, args, task)", re.Name, re.Err)})
			continue
		}
		ps = append(ps, manifests.Problem{File: c.File, Line: lines.Line("policy"), Field: "policy", Msg: strings.TrimPrefix(e.Error(), c.File+": ")})
	}
	return nil, ps
}

// applyDefaults fills fields that the file leaves out. A field written with
// a zero value ("max_calls: 0") is kept, so that validation reports it
// instead of silently replacing it.
func applyDefaults(c *Config, lines manifests.Lines) {
	str := func(p string, f *string, def string) {
		if *f == "" && !lines.Has(p) {
			*f = def
		}
	}
	str("data_dir", &c.DataDir, DefaultDataDir)
	str("listen", &c.Listen, DefaultListen)
	str("temporal.namespace", &c.Temporal.Namespace, DefaultNamespace)
	str("temporal.task_queue", &c.Temporal.TaskQueue, DefaultTaskQueue)
	if c.Task.MaxCalls == 0 && !lines.Has("task.max_calls") {
		c.Task.MaxCalls = DefaultMaxCalls
	}
	dur := func(p string, f *manifests.Duration, def time.Duration) {
		if *f == 0 && !lines.Has(p) {
			*f = manifests.Duration(def)
		}
	}
	dur("task.deadline", &c.Task.Deadline, DefaultDeadline)
	dur("task.idle_timeout", &c.Task.IdleTimeout, DefaultIdleTimeout)
	dur("task.ask_timeout", &c.Task.AskTimeout, DefaultAskTimeout)
	dur("http.read_header_timeout", &c.HTTP.ReadHeaderTimeout, DefaultHTTPReadHeaderTimeout)
	dur("http.read_timeout", &c.HTTP.ReadTimeout, DefaultHTTPReadTimeout)
	dur("http.idle_timeout", &c.HTTP.IdleTimeout, DefaultHTTPIdleTimeout)
	size := func(p string, f *manifests.ByteSize, def int64) {
		if *f == 0 && !lines.Has(p) {
			*f = manifests.ByteSize(def)
		}
	}
	size("http.max_header_bytes", &c.HTTP.MaxHeaderBytes, DefaultHTTPMaxHeaderBytes)
	size("http.max_unauthenticated_body", &c.HTTP.MaxUnauthenticatedBody, DefaultHTTPMaxUnauthenticatedBody)
	if c.HTTP.MaxUnauthenticatedConns == 0 && !lines.Has("http.max_unauthenticated_conns") {
		c.HTTP.MaxUnauthenticatedConns = DefaultHTTPMaxUnauthenticatedConns
	}
	dur("gateway.session_idle_timeout", &c.Gateway.SessionIdleTimeout, DefaultSessionIdleTimeout)
	if c.Gateway.MaxSessionsPerPrincipal == 0 && !lines.Has("gateway.max_sessions_per_principal") {
		c.Gateway.MaxSessionsPerPrincipal = DefaultMaxSessionsPerPrincipal
	}
	if c.Gateway.TaskConcurrency == 0 && !lines.Has("gateway.task_concurrency") {
		c.Gateway.TaskConcurrency = DefaultTaskConcurrency
	}
	if c.Gateway.TaskBacklog == 0 && !lines.Has("gateway.task_backlog") {
		c.Gateway.TaskBacklog = DefaultTaskBacklog
	}
	if c.Gateway.PrincipalShare == 0 && !lines.Has("gateway.principal_share") {
		c.Gateway.PrincipalShare = DefaultPrincipalShare
	}
	if c.Gateway.SessionKeyEnv == "" && !lines.Has("gateway.session_key_env") {
		c.Gateway.SessionKeyEnv = DefaultSessionKeyEnv
	}
	if c.Gateway.UnnamedCalls == "" && !lines.Has("gateway.unnamed_calls") {
		c.Gateway.UnnamedCalls = UnnamedNewTask
	}
	applySlackDefaults(c)
}

type validator struct {
	file     string
	lines    manifests.Lines
	problems manifests.Problems
}

func (v *validator) add(path, format string, args ...any) {
	v.problems = append(v.problems, manifests.Problem{File: v.file, Line: v.lines.Line(path), Field: path, Msg: fmt.Sprintf(format, args...)})
}

func (c *Config) validate(lines manifests.Lines) manifests.Problems {
	v := &validator{file: c.File, lines: lines}
	if strings.TrimSpace(c.DataDir) == "" {
		v.add("data_dir", "is empty; omit it for the default %q or name a directory", DefaultDataDir)
	}
	v.hostPort("listen", c.Listen, `"127.0.0.1:7400" (":7400" listens on every interface)`)
	if c.Temporal.Address != "" {
		v.hostPort("temporal.address", c.Temporal.Address, `"temporal.example.com:7233", or omit it to use the embedded dev server`)
	}
	if c.Temporal.Namespace == "" {
		v.add("temporal.namespace", "is empty; omit it for %q", DefaultNamespace)
	}
	if c.Temporal.TaskQueue == "" {
		v.add("temporal.task_queue", "is empty; omit it for %q", DefaultTaskQueue)
	}
	if c.Task.MaxCalls < 1 {
		v.add("task.max_calls", "must be at least 1, got %d; it caps the tool calls of one task (default %d)", c.Task.MaxCalls, DefaultMaxCalls)
	}
	if c.Task.MaxCalls > api.MaxTaskCalls {
		v.add("task.max_calls", "is %d, more than the %d calls one task can remember to keep retries from running twice; split the work into more tasks", c.Task.MaxCalls, api.MaxTaskCalls)
	}
	if c.Task.Deadline <= 0 {
		v.add("task.deadline", `must be positive, got %s; write how long a task may run, e.g. "24h"`, c.Task.Deadline)
	}
	if c.Task.IdleTimeout <= 0 {
		v.add("task.idle_timeout", `must be positive, got %s; write how long a task may wait for its agent, e.g. "1h"`, c.Task.IdleTimeout)
	}
	if c.Task.AskTimeout <= 0 {
		v.add("task.ask_timeout", `must be positive, got %s; write how long an upstream's sampling or elicitation request waits for the client's answer, e.g. "5m"`, c.Task.AskTimeout)
	}
	if c.Gateway.SessionIdleTimeout <= 0 {
		v.add("gateway.session_idle_timeout", `must be positive, got %s; write how long an unused MCP session stays open, e.g. "30m"`, c.Gateway.SessionIdleTimeout)
	}
	if c.Gateway.MaxSessionsPerPrincipal < 1 {
		v.add("gateway.max_sessions_per_principal", "must be at least 1, got %d; it caps the open MCP sessions of one principal (default %d)", c.Gateway.MaxSessionsPerPrincipal, DefaultMaxSessionsPerPrincipal)
	}
	if u := c.Gateway.UnnamedCalls; u != UnnamedNewTask && u != UnnamedPrincipalTask {
		v.add("gateway.unnamed_calls", "%q is not one of %s (each request that names no task starts its own; default) or %s (all of a principal's such requests share <principal>-default)", u, UnnamedNewTask, UnnamedPrincipalTask)
	}
	if n := c.Gateway.TaskConcurrency; n < 1 || n > MaxTaskConcurrency {
		v.add("gateway.task_concurrency", "must be 1-%d, got %d; it is how many calls the gateway sends one task at once (default %d), and must stay under the Temporal server's history.maxInFlightUpdates (deploy/README.md)", MaxTaskConcurrency, n, DefaultTaskConcurrency)
	}
	if n := c.Gateway.TaskBacklog; n < 1 || n > MaxTaskBacklog {
		v.add("gateway.task_backlog", "must be 1-%d, got %d; it is how many calls wait their turn in one task before a call is answered that the task is busy (default %d)", MaxTaskBacklog, n, DefaultTaskBacklog)
	}
	if n := c.Gateway.PrincipalShare; n < 0 || n > MaxTaskConcurrency {
		v.add("gateway.principal_share", "must be 0-%d, got %d; it is how many calls a principal keeps in flight at least while other principals have calls (default %d; 0: no bound)", MaxTaskConcurrency, n, DefaultPrincipalShare)
	}
	if !envName.MatchString(c.Gateway.SessionKeyEnv) {
		v.add("gateway.session_key_env", "%q is not an environment variable name; use letters, digits and _ (default %s), and put the key itself in that variable", c.Gateway.SessionKeyEnv, DefaultSessionKeyEnv)
	}
	if lines.Has("gateway.session_key_file") && strings.TrimSpace(c.Gateway.SessionKeyFile) == "" {
		v.add("gateway.session_key_file", "is empty; omit it for <data_dir>/session.key or name a file (relative to this configuration file)")
	}
	if lines.Has("pins_file") && strings.TrimSpace(c.PinsFile) == "" {
		v.add("pins_file", "is empty; omit it for <data_dir>/pins.json or name a file (relative to this configuration file)")
	}
	if lines.Has("audit.log") && strings.TrimSpace(c.Audit.Log) == "" {
		v.add("audit.log", "is empty; omit it for <data_dir>/audit.jsonl, or write stdout, stderr, off or a file (relative to this configuration file)")
	}
	c.validateAuditKey(v, lines) // auditkey.go
	if len(c.Manifests) == 0 {
		v.add("manifests", `is required; list manifest files or globs relative to this file, e.g. ["manifests/*.yaml"]`)
	}
	c.validateHTTP(v)
	c.validateBlobs(v)
	c.validateIdentity(v)
	c.validateTokens(v)
	c.validateSlack(v)
	c.validateTelemetry(v)
	c.validateState(v)    // state.go
	c.validatePrograms(v) // programs.go
	c.validateGuard(v)    // guard.go
	c.validateExternal(v) // external.go
	c.validateLimits(v, slices.Sorted(maps.Keys(c.Roles)))
	return v.problems
}

func (c *Config) validateHTTP(v *validator) {
	h := c.HTTP
	if h.ReadHeaderTimeout <= 0 {
		v.add("http.read_header_timeout", `must be positive, got %s; write how long a client may take to send a request's headers, e.g. "10s" (the default)`, h.ReadHeaderTimeout)
	}
	if h.ReadTimeout <= 0 {
		v.add("http.read_timeout", `must be positive, got %s; write how long a client may take to send a whole request, e.g. "30s" (the default); it does not limit streamed answers`, h.ReadTimeout)
	} else if h.ReadHeaderTimeout > 0 && h.ReadTimeout < h.ReadHeaderTimeout {
		v.add("http.read_timeout", "%s is less than http.read_header_timeout (%s): it bounds the headers and the body together; make it at least as long", h.ReadTimeout, h.ReadHeaderTimeout)
	}
	if h.IdleTimeout <= 0 {
		v.add("http.idle_timeout", `must be positive, got %s; write how long an idle connection stays open, e.g. "2m" (the default)`, h.IdleTimeout)
	}
	if h.MaxHeaderBytes < 4<<10 {
		v.add("http.max_header_bytes", `must be at least 4KiB, got %s; write e.g. "64KiB" (the default)`, h.MaxHeaderBytes)
	} else if h.MaxHeaderBytes > 1<<30 {
		v.add("http.max_header_bytes", "%s is more than 1GiB; lower it (headers carry keys and session IDs, not data)", h.MaxHeaderBytes)
	}
	if h.MaxUnauthenticatedBody < 1<<10 {
		v.add("http.max_unauthenticated_body", `must be at least 1KiB, got %s: the approvals page's login and Slack's clicks send bodies before airlock knows the caller; write e.g. "256KiB" (the default)`, h.MaxUnauthenticatedBody)
	}
	if h.MaxUnauthenticatedConns < 1 {
		v.add("http.max_unauthenticated_conns", "must be at least 1, got %d; it caps the connections that have not sent a valid API key (default %d)", h.MaxUnauthenticatedConns, DefaultHTTPMaxUnauthenticatedConns)
	}
}

var (
	principalName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)
	sha256Hex     = regexp.MustCompile(`^[0-9a-f]{64}$`)
	effects       = map[string]bool{"allow": true, "deny": true, "require_approval": true}
)

func (c *Config) validateIdentity(v *validator) {
	names := c.validatePrincipals(v)
	c.validateRoles(v)
	c.validateApproverGroups(v, names)
	v.approvalChannels(c)
	c.validateModes(v)
	c.validatePolicy(v)
}

// validatePrincipals checks principals and local_principal, and returns
// the principals' names.
func (c *Config) validatePrincipals(v *validator) map[string]bool {
	names := map[string]bool{}
	keys := map[string]string{}
	for i, p := range c.Principals {
		at := fmt.Sprintf("principals[%d]", i)
		if !principalName.MatchString(p.Name) {
			v.add(at+".name", "%q is not a principal name: use letters, digits and . _ @ - (at most 64)", p.Name)
		} else if names[p.Name] {
			v.add(at+".name", "%q is declared twice; principal names must be unique", p.Name)
		}
		names[p.Name] = true
		if len(p.Roles) == 0 {
			v.add(at+".roles", "is empty; give %s at least one role from roles", p.Name)
		}
		for j, r := range p.Roles {
			if _, ok := c.Roles[r]; !ok {
				v.add(fmt.Sprintf("%s.roles[%d]", at, j), "role %q is not defined; add it under roles or fix the name (defined: %s)", r, strings.Join(slices.Sorted(maps.Keys(c.Roles)), ", "))
			}
		}
		for j, k := range p.APIKeySHA256 {
			kp := fmt.Sprintf("%s.api_key_sha256[%d]", at, j)
			if !sha256Hex.MatchString(k) {
				v.add(kp, "is not a lowercase hex SHA-256 (64 characters); store the hash, never the key: `airlock keys new` prints both")
				continue
			}
			if other, dup := keys[k]; dup {
				v.add(kp, "the same key hash is also given to %s; every key must identify one principal", other)
			}
			keys[k] = p.Name
		}
	}
	if c.LocalPrincipal != "" && !names[c.LocalPrincipal] {
		v.add("local_principal", "%q is not one of principals; name the principal stdio sessions run as", c.LocalPrincipal)
	}
	return names
}

// validateRoles checks every role's level, tool globs, permissions and
// task limits.
func (c *Config) validateRoles(v *validator) {
	for _, name := range slices.Sorted(maps.Keys(c.Roles)) {
		r := c.Roles[name]
		at := "roles." + name
		if r == nil {
			v.add(at, "is empty; give the role permissions, data_access_level and tools")
			continue
		}
		if r.DataAccessLevel != "" && !validLevel(r.DataAccessLevel) {
			v.add(at+".data_access_level", "%q is not a data access level; use one of public, internal, confidential, sensitive, restricted", r.DataAccessLevel)
		}
		for j, g := range r.Tools {
			if _, err := path.Match(g, ""); err != nil || strings.TrimSpace(g) == "" {
				v.add(fmt.Sprintf("%s.tools[%d]", at, j), "%q is not a valid glob; write e.g. \"filesystem__read_*\" or \"memory__*\"", g)
			}
		}
		for j, p := range r.Permissions {
			if strings.TrimSpace(p) == "" {
				v.add(fmt.Sprintf("%s.permissions[%d]", at, j), "is empty; remove it or name a permission such as \"filesystem.read\"")
			}
		}
		if r.MaxCalls < 0 {
			v.add(at+".max_calls", "must not be negative; omit it for the task default")
		}
		if r.MaxCalls > api.MaxTaskCalls {
			v.add(at+".max_calls", "is %d, more than the %d calls one task can remember to keep retries from running twice", r.MaxCalls, api.MaxTaskCalls)
		}
		if r.Deadline < 0 {
			v.add(at+".deadline", "must not be negative; omit it for the task default")
		}
		c.validateRoleGuard(v, at, r.Guard) // guard.go
	}
}

// validateApproverGroups checks that every group has members, all of them
// principals.
func (c *Config) validateApproverGroups(v *validator, names map[string]bool) {
	for _, name := range slices.Sorted(maps.Keys(c.ApproverGroups)) {
		g := c.ApproverGroups[name]
		at := "approver_groups." + name
		if g == nil || len(g.Members) == 0 {
			v.add(at+".members", "is empty; list the principals who may approve, or remove the group")
			continue
		}
		for j, m := range g.Members {
			if !names[m] {
				v.add(fmt.Sprintf("%s.members[%d]", at, j), "%q is not one of principals; approvers must be principals (their slack_user_id maps Slack clicks to them)", m)
			}
		}
	}
}

// validateModes checks the catalog mode, the gateway's page size and the
// task's rollback_notify group.
func (c *Config) validateModes(v *validator) {
	switch c.Catalog {
	case "", "full", "search":
	default:
		v.add("catalog", "%q is not a catalog mode; use full (every tool in tools/list) or search (airlock_find_tools and airlock_call_tool)", c.Catalog)
	}
	if c.Gateway.PageSize < 0 || c.Gateway.PageSize > 10000 {
		v.add("gateway.page_size", "%d: use 1 to 10000, or omit it for 1000", c.Gateway.PageSize)
	}
	if g := c.Task.RollbackNotify; g != "" && c.ApproverGroups[g] == nil {
		v.add("task.rollback_notify", "%q is not one of approver_groups (%s); name a group, or remove it", g, strings.Join(slices.Sorted(maps.Keys(c.ApproverGroups)), ", "))
	}
}

// validatePolicy checks the policy's argument limit, risk defaults and
// rules.
func (c *Config) validatePolicy(v *validator) {
	if c.Policy.MaxArgBytes < 0 {
		v.add("policy.max_arg_bytes", "must not be negative; omit it for the default 262144")
	} else if c.Policy.MaxArgBytes > policy.MaxArgBytesLimit {
		v.add("policy.max_arg_bytes", "%d is more than %d: a call's arguments are kept in its task's history, where they must fit; lower it", c.Policy.MaxArgBytes, policy.MaxArgBytesLimit)
	}
	for risk, eff := range c.Policy.RiskDefaults {
		at := "policy.risk_defaults." + string(risk)
		switch risk {
		case manifests.RiskLow, manifests.RiskMedium, manifests.RiskHigh, manifests.RiskCritical:
		default:
			v.add(at, "%q is not a risk tier; use low, medium, high or critical", risk)
		}
		if !effects[eff] {
			v.add(at, "%q is not an effect; use allow, deny or require_approval", eff)
		}
	}
	rules := map[string]bool{}
	for i, r := range c.Policy.Rules {
		at := fmt.Sprintf("policy.rules[%d]", i)
		if strings.TrimSpace(r.Name) == "" {
			v.add(at+".name", "is required; name the rule so decisions can cite it")
		} else if rules[r.Name] {
			v.add(at+".name", "%q is used by an earlier rule; rule names must be unique", r.Name)
		}
		rules[r.Name] = true
		if strings.TrimSpace(r.When) == "" {
			v.add(at+".when", "is required; write a CEL condition, e.g. tool.risk == \"high\"")
		}
		if !effects[r.Effect] {
			v.add(at+".effect", "%q is not an effect; use allow, deny or require_approval", r.Effect)
		}
		if r.Quorum < 0 {
			v.add(at+".quorum", "must be at least 1; omit it for 1")
		}
	}
}

func validLevel(l manifests.DataLevel) bool {
	switch l {
	case manifests.DataPublic, manifests.DataInternal, manifests.DataConfidential, manifests.DataSensitive, manifests.DataRestricted:
		return true
	}
	return false
}

func (v *validator) hostPort(path, addr, example string) {
	// An empty host (":7400") means every interface, which is allowed.
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		v.add(path, "%q is not host:port; write e.g. %s", addr, example)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		v.add(path, "%q has no valid port number (0 to 65535); write e.g. %s", addr, example)
	}
}

// resolveManifests expands the manifest patterns against the directory of
// the configuration file, so that airlock behaves the same whatever the
// current directory. Files matched by several patterns are loaded once.
func resolveManifests(c *Config, lines manifests.Lines) ([]string, manifests.Problems) {
	v := &validator{file: c.File, lines: lines}
	dir := filepath.Dir(c.File)
	seen := map[string]bool{}
	var files []string
	for i, pat := range c.Manifests {
		p := fmt.Sprintf("manifests[%d]", i)
		if strings.TrimSpace(pat) == "" {
			v.add(p, "is empty; write a manifest file or glob, or remove the entry")
			continue
		}
		full := pat
		if !filepath.IsAbs(full) {
			full = filepath.Join(dir, full)
		}
		matches, err := filepath.Glob(full)
		if err != nil {
			v.add(p, "%q is not a valid glob (%v); fix the pattern", pat, err)
			continue
		}
		n := 0
		for _, m := range matches {
			if fi, err := os.Stat(m); err != nil || fi.IsDir() {
				continue
			}
			n++
			if !seen[m] {
				seen[m] = true
				files = append(files, m)
			}
		}
		if n == 0 {
			v.add(p, "%q matches no file (looked for %s); fix the pattern, which is relative to the configuration file, or remove it", pat, full)
		}
	}
	return files, v.problems
}
