package manifests

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/airlock-run/airlock/internal/expr"
)

// Valid values, in the order messages list them.
var (
	sideEffects = []SideEffect{SideEffectNone, SideEffectRead, SideEffectWrite, SideEffectDelete, SideEffectSend, SideEffectPay, SideEffectExec}
	dataLevels  = []DataLevel{DataPublic, DataInternal, DataConfidential, DataSensitive, DataRestricted}
	risks       = []Risk{RiskLow, RiskMedium, RiskHigh, RiskCritical}
)

var (
	serverNameRE  = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,30}$`)
	toolNameRE    = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	exposedNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	prefixRE      = regexp.MustCompile(`^[a-zA-Z0-9_-]{0,63}$`)
	varRefRE      = regexp.MustCompile(`\$\{[^}]*\}`)
)

// MaxToolTimeout is the longest a single attempt of a tool call may run.
const MaxToolTimeout = 24 * time.Hour

// Validate checks the manifest's values and returns every problem found, in
// file order (nil if none). It does not look at other manifests; ValidateAll
// does.
func (m *Manifest) Validate() []Problem {
	if m == nil {
		return []Problem{{Msg: "no manifest"}}
	}
	v := &validator{file: m.File, lines: m.Lines}
	v.server(m.Server)
	v.tools(m)
	v.passthrough("resources", m.Resources, "resources")
	v.passthrough("prompts", m.Prompts, "prompts")
	if len(m.Server.PathRoots) == 0 {
		for _, name := range slices.Sorted(maps.Keys(m.Tools)) {
			if t := m.Tools[name]; t != nil && len(t.PathArgs) > 0 {
				v.add("server.path_roots", "is required because tools.%s declares path_args: list the directories its paths must stay inside, e.g. [\"${AIRLOCK_DATA_DIR}/sandbox\"]", name)
				break
			}
		}
	}
	// Missing fields are reported at their parent's line, so sort to read
	// top to bottom. Stable: problems on one line keep the order of checks.
	sortByLine(v.problems)
	return v.problems
}

// ValidateAll validates each manifest and then checks them against each
// other: server names and exposed tool names (server.prefix + tool) must be
// unique across files.
func ValidateAll(ms []*Manifest) []Problem {
	var ps []Problem
	for _, m := range ms {
		ps = append(ps, m.Validate()...)
	}
	return append(ps, crossProblems(ms)...)
}

func crossProblems(ms []*Manifest) []Problem {
	var ps []Problem
	servers := map[string]*Manifest{}
	exposed := map[string]exposedBy{}
	for _, m := range ms {
		if m == nil {
			continue
		}
		name := m.Server.Name
		if name == "" {
			continue // reported as missing already
		}
		if first, dup := servers[name]; dup {
			ps = append(ps, Problem{File: m.File, Line: m.Lines.Line("server.name"), Field: "server.name",
				Msg: fmt.Sprintf("server %q is also declared in %s; server names must be unique across manifests, rename one or merge the files", name, where(first, "server.name"))})
			continue // its tools would all collide too; one problem is enough
		}
		servers[name] = m
		// With prefixes (server.prefix, "" included) two servers can expose
		// the same name; the gateway would show only one of them.
		for _, tool := range slices.Sorted(maps.Keys(m.Tools)) {
			en := m.Exposed(tool)
			if first, dup := exposed[en]; dup {
				p := "tools." + tool
				ps = append(ps, Problem{File: m.File, Line: m.Lines.Line(p), Field: p,
					Msg: fmt.Sprintf("exposed name %q is also exposed by server %q (%s); exposed names must be unique across manifests, so set a different server.prefix in one of them (here %q, there %q)",
						en, first.m.Server.Name, where(first.m, "tools."+first.tool), m.Server.ExposedPrefix(), first.m.Server.ExposedPrefix())})
				continue
			}
			exposed[en] = exposedBy{m, tool}
		}
	}
	return ps
}

// exposedBy is the manifest and tool that first exposed a name.
type exposedBy struct {
	m    *Manifest
	tool string
}

// where names a file and line for a message about another manifest.
func where(m *Manifest, path string) string {
	file := m.File
	if file == "" {
		file = "another manifest"
	}
	if n := m.Lines.Line(path); n > 0 {
		return fmt.Sprintf("%s:%d", file, n)
	}
	return file
}

type validator struct {
	file     string
	lines    Lines
	problems []Problem
}

func (v *validator) add(path, format string, args ...any) {
	v.addAt(path, path, format, args...)
}

// addAt reports a problem on field path at the line of linePath, e.g. a bad
// list element reported on the list's field at the element's line.
func (v *validator) addAt(path, linePath, format string, args ...any) {
	v.problems = append(v.problems, Problem{File: v.file, Line: v.lines.Line(linePath), Field: path, Msg: fmt.Sprintf(format, args...)})
}

// set reports whether a duration was given: non-zero, or written explicitly
// as zero (which is then an error rather than "use the default").
func (v *validator) set(path string, d Duration) bool { return d != 0 || v.lines.Has(path) }

func (v *validator) server(s Server) {
	switch {
	case s.Name == "":
		v.add("server.name", `is required; name the upstream, e.g. "filesystem" (lowercase letters, digits, '-' and '_')`)
	default:
		if !serverNameRE.MatchString(s.Name) {
			v.add("server.name", "%q is not a valid server name; start with a lowercase letter, then up to 30 lowercase letters, digits, '-' or '_'", s.Name)
		}
		if strings.Contains(s.Name, "__") {
			v.add("server.name", `%q contains "__", which separates server and tool in exposed names; use a single '_' or '-'`, s.Name)
		}
	}

	if s.ProtocolVersion != "" && !slices.Contains(ProtocolVersions, s.ProtocolVersion) {
		v.add("server.protocol_version", "%q is not an MCP revision airlock speaks; use one of %s, or omit it for the newest", s.ProtocolVersion, strings.Join(ProtocolVersions, ", "))
	}
	if s.Prefix != nil && !prefixRE.MatchString(*s.Prefix) {
		v.add("server.prefix", `%q is not a valid prefix; exposed names may only have letters, digits, '_' and '-' (common MCP clients reject others), so use up to 63 of those, e.g. "fs_", or "" for the upstream's names unchanged`, *s.Prefix)
	}

	// "stdio:" with nothing under it decodes to nil; count it as chosen so
	// the message is about the missing command, not a missing transport.
	hasStdio := s.Stdio != nil || v.lines.Has("server.stdio")
	hasHTTP := s.HTTP != nil || v.lines.Has("server.http")
	hasWASM := s.WASM != nil || v.lines.Has("server.wasm")
	n := 0
	for _, b := range []bool{hasStdio, hasHTTP, hasWASM} {
		if b {
			n++
		}
	}
	switch {
	case hasStdio && hasHTTP && !hasWASM:
		v.add("server", "both stdio and http are set; keep the one the upstream speaks")
	case n > 1:
		v.add("server", "more than one of stdio, http and wasm is set; keep the one that says where the tools run")
	case n == 0:
		v.add("server", "no transport; set stdio (a command to launch), http (a streamable HTTP URL) or wasm: {} (tools are WebAssembly modules in airlock's sandbox)")
	}
	if hasStdio && (s.Stdio == nil || s.Stdio.Command == "") {
		v.add("server.stdio.command", "is required; name the program to launch, e.g. npx")
	}
	if hasHTTP {
		u := ""
		if s.HTTP != nil {
			u = s.HTTP.URL
		}
		v.httpURL(u)
		if s.HTTP != nil {
			v.clientCredentials(s.HTTP)
			v.tokenExchange(s.HTTP)
		}
	}
	for i, r := range s.PathRoots {
		at := fmt.Sprintf("server.path_roots[%d]", i)
		switch {
		case strings.TrimSpace(r) == "":
			v.add(at, "is empty; name a directory, e.g. \"${AIRLOCK_DATA_DIR}/sandbox\"")
		case !RootIsAbsolute(r):
			v.add(at, "%q is a relative path, and policy denies every call whose paths must lie under a relative root (the upstream resolves paths against a working directory airlock cannot know); write an absolute path, e.g. %q or %q", r, "/srv/"+relExample(r), "${AIRLOCK_DATA_DIR}/"+relExample(r))
		}
	}
	v.sandbox(s)
	if v.set("server.connect_timeout", s.ConnectTimeout) && s.ConnectTimeout <= 0 {
		v.add("server.connect_timeout", "must be positive, got %s; omit it for the default %s", s.ConnectTimeout, DefaultConnectTimeout)
	}
}

// RootIsAbsolute reports whether a path root, as written in a manifest,
// names an absolute directory: an absolute path, or one that starts with a
// ${VAR} reference (airlock's ${AIRLOCK_DATA_DIR} and ${AIRLOCK_CONFIG_DIR}
// are absolute; an environment variable must hold an absolute path, which
// only the expanded value can show). "~" is not expanded, so "~/data" is
// relative.
func RootIsAbsolute(root string) bool {
	return filepath.IsAbs(root) || strings.HasPrefix(root, "${")
}

// relExample is a relative root made presentable for the "write e.g."
// part of a message: "./data/" becomes "data", "~/x" becomes "x".
func relExample(root string) string {
	r := filepath.ToSlash(filepath.Clean(strings.TrimPrefix(strings.TrimPrefix(root, "~"), "/")))
	if r == "." || r == ".." || strings.HasPrefix(r, "../") {
		return "sandbox"
	}
	return r
}

func (v *validator) httpURL(raw string) {
	const path = "server.http.url"
	if raw == "" {
		v.add(path, `is required; write the upstream's MCP endpoint, e.g. "https://mcp.example.com/mcp"`)
		return
	}
	// A URL that is one variable is only known at connect time. Otherwise
	// check the shape with placeholder values: "https://${HOST}:${PORT}/mcp"
	// is fine.
	if strings.HasPrefix(raw, "${") {
		return
	}
	u, err := url.Parse(varRefRE.ReplaceAllString(raw, "1")) // "1" fits a host and a port
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		v.add(path, `%q is not an http(s) URL; write e.g. "https://mcp.example.com/mcp"`, raw)
	}
}

func (v *validator) tools(m *Manifest) {
	if len(m.Tools) == 0 {
		// A manifest may expose only resources or prompts.
		if m.Resources == nil && m.Prompts == nil && !v.lines.Has("resources") && !v.lines.Has("prompts") {
			v.add("tools", "no tools declared; declare each upstream tool to expose (tools not listed are not exposed)")
		}
		return
	}
	names := slices.Sorted(maps.Keys(m.Tools))
	// The exposed name is checked only when its prefix is valid, so one
	// mistake makes one problem.
	prefixOK := prefixRE.MatchString(m.Server.ExposedPrefix())
	if m.Server.Prefix == nil {
		prefixOK = serverNameRE.MatchString(m.Server.Name) && !strings.Contains(m.Server.Name, "__")
	}
	for _, name := range names {
		v.tool(m, name, names, prefixOK)
	}
}

func (v *validator) tool(m *Manifest, name string, names []string, prefixOK bool) {
	p := "tools." + name
	if !toolNameRE.MatchString(name) {
		v.add(p, "%q is not a valid tool name; use the upstream's name for it: 1 to 64 letters, digits, '_', '.' or '-'", name)
	} else if prefixOK {
		en := m.Exposed(name)
		switch {
		case len(en) > 64:
			v.add(p, "exposed name %q is %d characters; common MCP clients (Claude, OpenAI) reject tool names longer than 64, so shorten the server name or set a shorter server.prefix", en, len(en))
		case !exposedNameRE.MatchString(en):
			v.add(p, "exposed name %q has characters other than letters, digits, '_' and '-', which common MCP clients (Claude, OpenAI) reject; remove the tool from the manifest", en)
		}
	}

	t := m.Tools[name]
	if t == nil {
		v.add(p, "is empty; declare at least side_effects, data_access_level and risk")
		return
	}
	v.sideEffects(p, t.SideEffects)
	oneOf(v, p+".data_access_level", t.DataAccessLevel, "data access level", dataLevels)
	oneOf(v, p+".risk", t.Risk, "risk tier", risks)
	v.nonEmpty(p+".required_permissions", t.RequiredPermissions, `a permission name such as "filesystem.write"`)
	v.approval(p+".approval", t.Approval)
	for _, f := range []struct {
		name string
		val  Permit
	}{{"sampling", t.Sampling}, {"elicitation", t.Elicitation}} {
		if f.val != "" && f.val != PermitAllow && f.val != PermitDeny {
			v.add(p+"."+f.name, "%q is not a permit; use allow or deny (default deny)", f.val)
		}
	}

	if tp := p + ".timeout"; v.set(tp, t.Timeout) {
		switch {
		case t.Timeout <= 0:
			v.add(tp, "must be positive, got %s; omit it for the default %s", t.Timeout, DefaultToolTimeout)
		case t.Timeout.D() > MaxToolTimeout:
			v.add(tp, "%s is longer than 24h, the most one attempt may run; lower it", t.Timeout)
		}
	}
	if hp := p + ".heartbeat_timeout"; v.set(hp, t.HeartbeatTimeout) {
		switch hb := t.HeartbeatTimeout.D(); {
		case hb < MinHeartbeatTimeout:
			v.add(hp, "must be at least %s, got %s; omit it for the default (a third of the timeout, between %s and %s)", MinHeartbeatTimeout, t.HeartbeatTimeout, DefaultHeartbeatTimeoutMin, DefaultHeartbeatTimeoutMax)
		case hb >= t.EffectiveTimeout():
			v.add(hp, "%s is not shorter than the timeout (%s), which notices a dead worker as soon; lower it or remove it", t.HeartbeatTimeout, t.EffectiveTimeout())
		}
	}
	if cp := p + ".cost"; t.Cost < 0 || t.Cost > MaxToolCost || (t.Cost == 0 && v.lines.Has(cp)) {
		v.add(cp, "must be a whole number from 1 to %d, got %d; it is what one call counts against its task's budget (omit it for 1)", MaxToolCost, t.Cost)
	}
	v.retry(p+".retry", t.Retry)
	v.nonEmpty(p+".redact", t.Redact, `an argument path such as "content" or "auth.token"`)
	v.nonEmpty(p+".path_args", t.PathArgs, `an argument name such as "path"`)
	v.guard(p+".guard", t.Guard) // guard.go
	v.wasmTool(m, p, t)
	v.capture(p+".capture", t.Capture, names)
	v.compensation(p+".compensation", t.Compensation, names, t.Capture != nil || v.lines.Has(p+".capture"))
	v.locks(p, t) // locks.go
}

func (v *validator) sideEffects(toolPath string, ses []SideEffect) {
	p := toolPath + ".side_effects"
	if len(ses) == 0 {
		v.add(p, "is required; list what the tool does, one or more of %s", list(sideEffects))
		return
	}
	seen := map[SideEffect]bool{}
	for i, se := range ses {
		at := fmt.Sprintf("%s[%d]", p, i)
		switch {
		case !slices.Contains(sideEffects, se):
			v.addAt(p, at, "%q is not a side effect; use one of %s", se, list(sideEffects))
		case seen[se]:
			v.addAt(p, at, "%q is listed twice; list it once", se)
		}
		seen[se] = true
	}
	if seen[SideEffectNone] && len(seen) > 1 {
		v.add(p, `"none" cannot be combined with other side effects; remove "none" or the others`)
	}
}

func list[T ~string](vals []T) string {
	s := make([]string, len(vals))
	for i, x := range vals {
		s[i] = string(x)
	}
	return strings.Join(s, ", ")
}

// oneOf checks a required enumerated field.
func oneOf[T ~string](v *validator, path string, val T, what string, allowed []T) {
	switch {
	case val == "":
		v.add(path, "is required; use one of %s", list(allowed))
	case !slices.Contains(allowed, val):
		v.add(path, "%q is not a %s; use one of %s", val, what, list(allowed))
	}
}

func (v *validator) nonEmpty(path string, entries []string, example string) {
	for i, e := range entries {
		if strings.TrimSpace(e) == "" {
			v.add(fmt.Sprintf("%s[%d]", path, i), "is empty; write %s or remove the entry", example)
		}
	}
}

func (v *validator) approval(p string, a *Approval) {
	if a == nil {
		if v.lines.Has(p) {
			v.add(p, `is empty; set at least group (who approves), or remove approval`)
		}
		return
	}
	if strings.TrimSpace(a.Group) == "" {
		v.add(p+".group", `is required when approval is set; name the approver group, e.g. "ops"`)
	}
	if a.Quorum < 0 || (a.Quorum == 0 && v.lines.Has(p+".quorum")) {
		v.add(p+".quorum", "must be at least 1, got %d; it is how many members of the group must approve", a.Quorum)
	}
	switch a.OnTimeout {
	case "", "deny", "approve":
	default:
		v.add(p+".on_timeout", "%q is not a timeout outcome; use deny (the default) or approve", a.OnTimeout)
	}
	timeoutOK := true
	if tp := p + ".timeout"; v.set(tp, a.Timeout) && a.Timeout <= 0 {
		v.add(tp, `must be positive, got %s; write how long to wait for a decision, e.g. "1h"`, a.Timeout)
		timeoutOK = false
	}
	ep := p + ".escalate_after"
	switch {
	case v.set(ep, a.EscalateAfter) && a.EscalateAfter <= 0:
		v.add(ep, `must be positive, got %s; write how long to wait before escalating, e.g. "15m"`, a.EscalateAfter)
	case timeoutOK && a.Timeout > 0 && a.EscalateAfter >= a.Timeout:
		v.add(ep, "%s is not shorter than approval.timeout (%s), so the escalation would never happen; lower it or raise the timeout", a.EscalateAfter, a.Timeout)
	}
	v.grants(p, a)
}

func (v *validator) retry(p string, r *Retry) {
	if r == nil {
		return // "retry:" alone means the defaults
	}
	if r.MaxAttempts < 0 {
		v.add(p+".max_attempts", "must be 0 or more, got %d; 1 means no retries, 0 or omitted means the default %d", r.MaxAttempts, defaultRetry.MaxAttempts)
	}
	if bp := p + ".backoff"; (r.Backoff != 0 || v.lines.Has(bp)) && r.Backoff < 1 {
		v.add(bp, "must be at least 1 (1 keeps the interval constant), got %g", r.Backoff)
	}
	if r.InitialInterval < 0 {
		v.add(p+".initial_interval", "must not be negative, got %s; omit it for the default %s", r.InitialInterval, defaultRetry.InitialInterval)
	}
	if r.MaxInterval < 0 {
		v.add(p+".max_interval", "must not be negative, got %s; omit it for the default %s", r.MaxInterval, defaultRetry.MaxInterval)
	}
	if r.InitialInterval > 0 && r.MaxInterval > 0 && r.MaxInterval < r.InitialInterval {
		v.add(p+".max_interval", "%s is shorter than initial_interval (%s); raise it or lower initial_interval", r.MaxInterval, r.InitialInterval)
	}
	v.nonEmpty(p+".non_retryable", r.NonRetryable, "an error type")
}

func (v *validator) capture(p string, c *Call, names []string) {
	if !v.call(p, c, names, expr.Capture, true) {
		return
	}
	if c.Else != nil || v.lines.Has(p+".else") {
		v.add(p+".else", "applies only to a compensation; a capture whose when is false is not made, and before is null, so remove else")
	}
}

// maxElse bounds an else chain, which YAML cannot make cyclic but a
// manifest built in code could.
const maxElse = 16

func (v *validator) compensation(p string, c *Call, names []string, hasCapture bool) {
	for n := 0; ; n++ {
		if n > maxElse {
			v.add(p, "the else chain is longer than %d; shorten it", maxElse)
			return
		}
		if !v.call(p, c, names, expr.Compensation, hasCapture) {
			return
		}
		if c.Else == nil {
			return
		}
		if c.When == "" {
			v.add(p+".else", "is never used: it is made when when is false, and there is no when; add when or remove else")
			return
		}
		p, c = p+".else", c.Else
	}
}

// call checks one capture or compensation (not its else); it reports
// whether there was a call to check.
func (v *validator) call(p string, c *Call, names []string, kind expr.Kind, hasCapture bool) bool {
	if c == nil {
		if v.lines.Has(p) {
			v.add(p, "is empty; set tool (and args), or remove it")
		}
		return false
	}
	switch {
	case c.Tool == "":
		v.add(p+".tool", "is required; name a tool declared in this manifest: %s", strings.Join(names, ", "))
	case !slices.Contains(names, c.Tool):
		v.add(p+".tool", "%q is not declared in this manifest; use one of %s", c.Tool, strings.Join(names, ", "))
	}
	over := celVariables(kind)
	if wp := p + ".when"; c.When != "" || v.lines.Has(wp) {
		if strings.TrimSpace(c.When) == "" {
			v.add(wp, "is empty; write a CEL condition over %s, e.g. before != null, or remove when", over)
		} else if prg, err := expr.CompileBool(kind, c.When); err != nil {
			v.celProblem(wp, kind, err)
		} else {
			v.needsCapture(wp, prg, hasCapture)
		}
	}
	args := make([]string, 0, len(c.Args))
	for a := range c.Args {
		args = append(args, a)
	}
	sort.Strings(args)
	for _, a := range args {
		ap := p + ".args." + a
		src := c.Args[a]
		if strings.TrimSpace(src) == "" {
			v.add(ap, "expression is empty; write a CEL expression over %s, e.g. args.path", over)
			continue
		}
		prg, err := expr.Compile(kind, src)
		if err != nil {
			v.celProblem(ap, kind, err)
			continue
		}
		v.needsCapture(ap, prg, hasCapture)
	}
	return true
}

func (v *validator) needsCapture(p string, prg *expr.Program, hasCapture bool) {
	if prg.Kind() == expr.Compensation && !hasCapture && prg.Uses("before") {
		v.add(p, "uses before, but the tool has no capture; add capture or remove before")
	}
}

// celVariables lists the variables of kind for messages: "args, call and
// roots".
func celVariables(kind expr.Kind) string {
	vs := kind.Variables()
	if len(vs) < 2 {
		return strings.Join(vs, "")
	}
	return strings.Join(vs[:len(vs)-1], ", ") + " and " + vs[len(vs)-1]
}

// celProblem reports an expression that does not compile, with a hint on
// how to fix it.
func (v *validator) celProblem(p string, kind expr.Kind, err error) {
	msg := err.Error()
	var hint string
	switch {
	case errors.Is(err, expr.ErrNotBool):
		// expr.CompileBool's message says how already.
	case errors.Is(err, expr.ErrUndeclaredReference) && kind == expr.Capture:
		hint = "a capture runs before the call, so it may use only " + celVariables(kind)
	case errors.Is(err, expr.ErrUndeclaredReference):
		hint = "a " + kind.String() + " may use only " + celVariables(kind)
	case errors.Is(err, expr.ErrUndefinedField):
		hint = "call has the fields id, task, tool and slug"
	default:
		hint = "write a CEL expression over " + celVariables(kind) + " (see https://cel.dev)"
	}
	if hint != "" {
		msg += "; " + hint
	}
	v.add(p, "%s", msg)
}

// passthrough checks a resources or prompts block.
func (v *validator) passthrough(p string, b *Passthrough, what string) {
	if b == nil {
		if v.lines.Has(p) {
			v.add(p, "is empty; set data_access_level (who may see the upstream's %s), or remove %s to keep them hidden", what, p)
		}
		return
	}
	oneOf(v, p+".data_access_level", b.DataAccessLevel, "data access level", dataLevels)
}
