package manifests

// The manifest skeleton: what `airlock manifests scan` writes for an
// upstream from the tool list it offers, for a person to review.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/airlock-run/airlock/internal/redact"
)

// UpstreamTool is what an upstream says about one of its tools (an entry
// of MCP's tools/list), as far as a skeleton reads it. The command that
// lists the tools fills it in; this package does not speak MCP.
type UpstreamTool struct {
	Name        string
	Description string
	Annotations *ToolHints // nil: the server gave none
	InputSchema any        // the JSON Schema of the arguments
	// Meta is the tool's _meta; what it declares under MetaRisk and
	// MetaRecovery (as airlock lists its tools) pre-fills the skeleton.
	Meta map[string]any
}

// ToolHints are MCP's tool annotations, named as MCP names them; nil
// pointers are hints the server left unset (MCP's defaults apply).
type ToolHints struct {
	ReadOnlyHint    bool
	DestructiveHint *bool
	IdempotentHint  bool
	OpenWorldHint   *bool
}

// bareYAML is a scalar that YAML reads as a string without quotes.
var bareYAML = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// pathArgNames are argument names taken for filesystem paths.
var pathArgNames = map[string]bool{"path": true, "paths": true, "source": true, "destination": true}

// SkeletonStats counts the tools a skeleton declares and those it skips
// (names a manifest cannot declare).
type SkeletonStats struct{ Declared, Skipped int }

// toolGuess is what the annotations suggest about one tool.
type toolGuess struct {
	sideEffects []SideEffect
	level       DataLevel
	risk        Risk
	idempotent  bool
	openWorld   bool // openWorldHint: true (open_world: its results are untrusted)
	approval    bool
	quorum      int  // 0: the default, 1
	declared    bool // risk and the rest are what the tool declares (MetaRisk)
	pathArgs    []string
	why         []string // comments on the side effects and risk
	// capture and compensation are what the tool declares (MetaRecovery),
	// when the manifest can hold them; recoveryWhy says why, or why not.
	capture, compensation *Call
	recoveryWhy           []string
}

// guessTool maps a tool's annotations to manifest values, conservatively:
// a missing hint takes MCP's default (destructive, open world).
func guessTool(t *UpstreamTool) toolGuess {
	a := t.Annotations
	if a == nil {
		a = &ToolHints{}
	}
	g := toolGuess{level: DataInternal}
	switch {
	case a.ReadOnlyHint:
		g.sideEffects = []SideEffect{SideEffectRead}
		g.risk, g.idempotent = RiskLow, true
		g.why = append(g.why, "readOnlyHint: true, so it only reads.")
	case a.DestructiveHint != nil && !*a.DestructiveHint:
		g.sideEffects = []SideEffect{SideEffectWrite}
		g.risk, g.idempotent = RiskMedium, a.IdempotentHint
		g.why = append(g.why, "destructiveHint: false, so it writes but only adds.")
	default:
		g.sideEffects = []SideEffect{SideEffectWrite, SideEffectDelete}
		g.risk, g.idempotent, g.approval = RiskHigh, a.IdempotentHint, true
		if a.DestructiveHint == nil {
			g.why = append(g.why, "REVIEW: no destructiveHint, and MCP's default is destructive: may delete or overwrite, so high risk with approval. Lower it if it cannot destroy anything.")
		} else {
			g.why = append(g.why, "REVIEW: destructiveHint: true: may delete or overwrite, so high risk with approval.")
		}
	}
	switch {
	case a.OpenWorldHint != nil && *a.OpenWorldHint:
		g.sideEffects = append(g.sideEffects, SideEffectSend)
		g.openWorld = true
		if g.risk == RiskLow {
			g.risk = RiskMedium
		}
		g.why = append(g.why, "REVIEW: openWorldHint: true: it reaches outside systems (the web, other services) and its arguments may leave: side effect send.")
	case a.OpenWorldHint == nil:
		g.why = append(g.why, "REVIEW: no openWorldHint (MCP's default is open world): add send if it reaches the web or other services.")
	}
	g.pathArgs = pathArgs(t.InputSchema)
	g.applyDeclaredRisk(t.Meta, t.Annotations != nil) // skeletonmeta.go
	return g
}

// pathArgs lists the top-level arguments with a path-like name.
func pathArgs(schema any) []string {
	b, err := json.Marshal(schema)
	if err != nil {
		return nil
	}
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if json.Unmarshal(b, &s) != nil {
		return nil
	}
	var out []string
	for name := range s.Properties {
		if pathArgNames[name] {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Skeleton writes a manifest for srv declaring tools, as `airlock manifests
// scan` prints it: every value a guess from the tools' annotations, with
// "# REVIEW:" comments on what a person must check. source says where the
// tools came from (a comment in the header).
func Skeleton(srv Server, source string, tools []*UpstreamTool, now time.Time) (string, SkeletonStats) {
	sorted := append([]*UpstreamTool(nil), tools...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })

	var names []string // the tools the skeleton declares
	for _, t := range sorted {
		if unexposable(srv.Name, t.Name) == "" {
			names = append(names, t.Name)
		}
	}
	var body bytes.Buffer
	var st SkeletonStats
	needRoots := false
	for _, t := range sorted {
		if reason := unexposable(srv.Name, t.Name); reason != "" {
			fmt.Fprintf(&body, "  # SKIPPED %s: %s\n\n", yamlString(redact.VisibleLine(t.Name)), reason)
			st.Skipped++
			continue
		}
		st.Declared++
		needRoots = skeletonTool(&body, srv.Name, t, names) || needRoots
	}

	var b bytes.Buffer
	skeletonHeader(&b, srv.Name, source, len(tools), now)
	skeletonServer(&b, srv, needRoots)
	b.WriteString("\ntools:\n")
	b.Write(body.Bytes())
	return strings.TrimRight(b.String(), "\n") + "\n", st
}

// skeletonTool writes one tool's entry and reports whether it has path
// arguments (which need the server's path_roots).
func skeletonTool(body *bytes.Buffer, server string, t *UpstreamTool, names []string) (paths bool) {
	g := guessTool(t)
	g.capture, g.compensation, g.recoveryWhy = declaredRecovery(t.Meta, names) // skeletonmeta.go
	comment(body, "  ", descriptionOf(t))
	comment(body, "  ", "annotations: "+annotationsOf(t.Annotations))
	fmt.Fprintf(body, "  %s:\n", yamlString(t.Name))
	for _, w := range g.why {
		comment(body, "    ", w)
	}
	ses := make([]string, len(g.sideEffects))
	for i, se := range g.sideEffects {
		ses[i] = string(se)
	}
	fmt.Fprintf(body, "    side_effects: [%s]\n", strings.Join(ses, ", "))
	if g.level == DataInternal {
		comment(body, "    ", "REVIEW: a guess; raise it for confidential data, or lower it to public.")
	}
	fmt.Fprintf(body, "    data_access_level: %s\n", g.level)
	comment(body, "    ", fmt.Sprintf("required_permissions: [%s.%s]", server, permissionVerb(g)))
	fmt.Fprintf(body, "    risk: %s\n", g.risk)
	if g.approval {
		comment(body, "    ", "REVIEW: name the approver group instead of CHANGE-ME.")
		fmt.Fprintf(body, "    approval:\n      group: CHANGE-ME\n")
		if g.quorum > 1 {
			fmt.Fprintf(body, "      quorum: %d\n", g.quorum)
		}
	}
	if !g.sideEffectsReadOnly() {
		if g.declared {
			comment(body, "    ", "idempotent as the server declares it (only idempotent calls are re-run after a crash).")
		} else if g.idempotent {
			comment(body, "    ", "idempotentHint: true (only idempotent calls are re-run after a crash).")
		} else {
			comment(body, "    ", "REVIEW: no idempotentHint: set true only if a second run with the same arguments changes nothing more.")
		}
	}
	fmt.Fprintf(body, "    idempotent: %t\n", g.idempotent)
	if g.openWorld {
		comment(body, "    ", "openWorldHint: true: what it returns comes from outside (the web, other people), so a call marks its task untrusted (task.untrusted).")
		fmt.Fprintf(body, "    open_world: true\n")
	}
	if len(g.pathArgs) > 0 {
		comment(body, "    ", "REVIEW: these arguments look like filesystem paths; policy keeps them inside server.path_roots. Remove any that are not paths.")
		fmt.Fprintf(body, "    path_args: [%s]\n", strings.Join(g.pathArgs, ", "))
	}
	for _, w := range g.recoveryWhy {
		comment(body, "    ", w)
	}
	if g.capture != nil {
		writeCall(body, "    ", "capture", g.capture)
	}
	if g.compensation != nil {
		writeCall(body, "    ", "compensation", g.compensation)
	}
	body.WriteString("\n")
	return len(g.pathArgs) > 0
}

// skeletonHeader writes the comment that opens a skeleton.
func skeletonHeader(b *bytes.Buffer, server, source string, tools int, now time.Time) {
	fmt.Fprintf(b, "# Manifest skeleton for upstream %s, written by `airlock manifests scan`\n", server)
	comment(b, "", fmt.Sprintf("on %s from the %d tool(s) of %s.", now.UTC().Format(time.DateOnly), tools, redact.VisibleLine(source)))
	b.WriteString("#\n")
	b.WriteString("# Every value is a guess from the tool annotations (or the risk and recovery\n")
	b.WriteString("# metadata) the server chose, and a server can say anything about itself.\n")
	b.WriteString("# Review each \"# REVIEW:\" line, then\n")
	b.WriteString("# add this file to manifests in airlock.yaml. Tools left out are not exposed.\n")
	b.WriteString("# The descriptions below are the server's words, shown for review only.\n")
	b.WriteString("# An upstream may not ask the client's model (sampling) or user (elicitation)\n")
	b.WriteString("# during a call unless the tool says `sampling: allow` / `elicitation: allow`.\n\n")
}

// skeletonServer writes the server block; needRoots asks for a path_roots
// placeholder when the server has none.
func skeletonServer(b *bytes.Buffer, srv Server, needRoots bool) {
	b.WriteString("server:\n")
	fmt.Fprintf(b, "  name: %s\n", yamlString(srv.Name))
	if s := srv.Stdio; s != nil {
		skeletonStdio(b, s)
	}
	if h := srv.HTTP; h != nil {
		b.WriteString("  http:\n")
		fmt.Fprintf(b, "    url: %s\n", yamlString(h.URL))
		if len(h.Headers) > 0 {
			b.WriteString("    headers:\n")
			for _, k := range slices.Sorted(maps.Keys(h.Headers)) {
				fmt.Fprintf(b, "      %s: %s\n", yamlString(k), yamlString(h.Headers[k]))
			}
		}
	}
	if srv.ConnectTimeout > 0 {
		fmt.Fprintf(b, "  connect_timeout: %s\n", srv.ConnectTimeout)
	}
	switch {
	case len(srv.PathRoots) > 0:
		fmt.Fprintf(b, "  path_roots: %s\n", yamlList(srv.PathRoots))
	case needRoots:
		comment(b, "  ", "REVIEW: the directories the path arguments must stay inside, e.g. \"${AIRLOCK_DATA_DIR}/sandbox\"; until you change it, every call with a path is refused.")
		b.WriteString("  path_roots: [\"/CHANGE-ME\"]\n")
	}
}

func skeletonStdio(b *bytes.Buffer, s *StdioServer) {
	b.WriteString("  stdio:\n")
	fmt.Fprintf(b, "    command: %s\n", yamlString(s.Command))
	if len(s.Args) > 0 {
		fmt.Fprintf(b, "    args: %s\n", yamlList(s.Args))
	}
	if isPackageRunner(s.Command) && !mentionsVersion(s.Args) {
		comment(b, "    ", "REVIEW: pin the package version (e.g. pkg@1.2.3) so that the tools stay the ones declared here.")
	}
	if len(s.Env) > 0 {
		b.WriteString("    env:\n")
		for _, k := range slices.Sorted(maps.Keys(s.Env)) {
			fmt.Fprintf(b, "      %s: %s\n", yamlString(k), yamlString(s.Env[k]))
		}
	}
	if s.Dir != "" {
		fmt.Fprintf(b, "    dir: %s\n", yamlString(s.Dir))
	} else {
		comment(b, "    ", "REVIEW: the command runs in this file's directory; set dir if relative paths above need another one.")
	}
}

func (g toolGuess) sideEffectsReadOnly() bool {
	return len(g.sideEffects) == 1 && g.sideEffects[0] == SideEffectRead
}

func permissionVerb(g toolGuess) string {
	for _, se := range g.sideEffects {
		if se == SideEffectDelete {
			return "delete"
		}
	}
	for _, se := range g.sideEffects {
		if se == SideEffectWrite || se == SideEffectSend {
			return "write"
		}
	}
	return "read"
}

// unexposable says why a tool cannot be declared, or "".
func unexposable(server, tool string) string {
	en := DefaultPrefix(server) + tool // a skeleton sets no prefix
	switch {
	case !toolNameRE.MatchString(tool):
		return "the name is not 1 to 64 letters, digits, '_', '.' or '-', so a manifest cannot declare it"
	case !exposedNameRE.MatchString(en):
		return fmt.Sprintf("the exposed name %q would have characters common MCP clients reject", en)
	case len(en) > 64:
		return fmt.Sprintf("the exposed name %q would be longer than the 64 characters common MCP clients accept; use a shorter --name", en)
	}
	return ""
}

func descriptionOf(t *UpstreamTool) string {
	d := strings.TrimSpace(t.Description)
	if d == "" {
		return t.Name + ": (no description)"
	}
	lines := strings.Split(d, "\n")
	const maxLines = 15
	if len(lines) > maxLines {
		lines = append(lines[:maxLines], fmt.Sprintf("(%d more lines)", len(lines)-maxLines))
	}
	return t.Name + ": " + strings.Join(lines, "\n")
}

func annotationsOf(a *ToolHints) string {
	if a == nil {
		return "none"
	}
	parts := []string{fmt.Sprintf("readOnlyHint=%t", a.ReadOnlyHint)}
	opt := func(name string, v *bool) {
		if v == nil {
			parts = append(parts, name+"=unset")
		} else {
			parts = append(parts, fmt.Sprintf("%s=%t", name, *v))
		}
	}
	opt("destructiveHint", a.DestructiveHint)
	parts = append(parts, fmt.Sprintf("idempotentHint=%t", a.IdempotentHint))
	opt("openWorldHint", a.OpenWorldHint)
	return strings.Join(parts, " ")
}

// comment writes text as YAML comment lines, wrapped at about 78 columns,
// with characters a terminal would hide escaped.
func comment(b *bytes.Buffer, indent, text string) {
	for _, para := range strings.Split(text, "\n") {
		line := indent + "#"
		words := strings.Fields(redact.VisibleLine(strings.TrimSpace(para)))
		if len(words) == 0 {
			b.WriteString(line + "\n")
			continue
		}
		for _, w := range words {
			if len(line) > len(indent)+2 && len(line)+1+len(w) > 78 {
				b.WriteString(line + "\n")
				line = indent + "#  "
			}
			line += " " + w
		}
		b.WriteString(line + "\n")
	}
}

// yamlString writes s as a YAML scalar: bare when that is unambiguous,
// else a double-quoted string (JSON's escapes are YAML's).
func yamlString(s string) string {
	switch strings.ToLower(s) {
	case "true", "false", "yes", "no", "on", "off", "y", "n", "null", "~":
	default:
		if bareYAML.MatchString(s) {
			return s
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimRight(buf.String(), "\n")
}

func yamlList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = yamlString(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func isPackageRunner(command string) bool {
	switch filepath.Base(command) {
	case "npx", "uvx", "pipx", "bunx", "pnpx":
		return true
	}
	return false
}

// mentionsVersion reports whether a package argument carries a version
// ("pkg@1.2.3", "@scope/pkg@1.2.3", "pkg==1.2.3").
func mentionsVersion(args []string) bool {
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			continue
		}
		if strings.Contains(strings.TrimPrefix(a, "@"), "@") || strings.Contains(a, "==") {
			return true
		}
	}
	return false
}

// ValidServerName reports whether name can name a server in a manifest.
func ValidServerName(name string) bool {
	return serverNameRE.MatchString(name) && !strings.Contains(name, "__")
}
