package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock/internal/redact"
	"github.com/airlock-run/airlock/manifests"
)

const scanUsage = `Usage:
  airlock manifests scan [--config airlock.yaml] [--out FILE] SERVER
  airlock manifests scan --name NAME --command "npx -y @scope/server@1.2.3" [--out FILE]
  airlock manifests scan --name NAME --url https://host/mcp [--out FILE]

Connects to an upstream MCP server (an upstream of the configuration, or
the command or URL given), lists its tools and writes a manifest skeleton
for it (to stdout, or FILE). The skeleton validates, but every value in it
is a guess from the tool annotations the server chose; review each
"# REVIEW:" line before adding the file to the configuration's manifests.

How annotations map (MCP's defaults apply to missing hints):
  readOnlyHint: true          side_effects [read], risk low, idempotent
  destructiveHint: false      side_effects [write], risk medium
  destructiveHint: true or
  missing (the MCP default)   side_effects [write, delete], risk high, and an
                              approval by group "CHANGE-ME"
  idempotentHint              idempotent
  openWorldHint: true         adds side effect send
  arguments path, paths, source, destination become path_args
  data_access_level is always internal: raise it where the data is sensitive
`

func runScan(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("airlock manifests scan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := fs.String("config", defaultConfig, "configuration `file` naming SERVER's manifest")
	dataDir := fs.String("data-dir", "", "data `dir`ectory for ${AIRLOCK_DATA_DIR} in the configuration's manifests (default: data_dir in the config, else .airlock)")
	out := fs.String("out", "", "write the skeleton to this `file` instead of stdout")
	force := fs.Bool("force", false, "with --out: replace an existing file")
	command := fs.String("command", "", "launch the upstream with this `command line` (stdio), e.g. \"npx -y @modelcontextprotocol/server-memory\"")
	url := fs.String("url", "", "reach the upstream at this streamable HTTP `URL`")
	name := fs.String("name", "", "server `name` for the skeleton (required with --command and --url)")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the upstream to connect")
	fs.Usage = func() { fmt.Fprint(stderr, scanUsage+"\nFlags:\n"); fs.PrintDefaults() }
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return parseExit(err)
	}
	usage := func(msg string) int {
		fmt.Fprintf(stderr, "airlock manifests scan: %s\n%s", msg, scanUsage)
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "airlock manifests scan: %v\n", err)
		return 1
	}
	switch {
	case len(pos) > 1:
		return usage(fmt.Sprintf("name one upstream (got %d arguments)", len(pos)))
	case len(pos) == 1 && (*command != "" || *url != ""):
		return usage("give either a SERVER of the configuration or --command/--url, not both")
	case len(pos) == 0 && *command == "" && *url == "":
		return usage("name a SERVER of the configuration, or give --command or --url with --name")
	case *command != "" && *url != "":
		return usage("give --command or --url, not both")
	case len(pos) == 0 && *name == "":
		return usage("--name is required with --command and --url: it names the server in the manifest and the exposed tools (<name>__<tool>)")
	}
	if *name != "" {
		if err := checkServerName(*name); err != nil {
			return fail(err)
		}
	}
	if *out != "" && !*force {
		if _, err := os.Stat(*out); err == nil {
			return fail(fmt.Errorf("--out %s exists; pass --force to replace it, or name a new file", *out))
		}
	}

	var (
		connect manifests.Server // expanded, to connect with
		write   manifests.Server // as the manifest should say it
		source  string
		log     = zerolog.New(zerolog.ConsoleWriter{Out: stderr, TimeFormat: time.TimeOnly}).Level(zerolog.ErrorLevel)
	)
	if len(pos) == 1 {
		e, err := load(commonFlags{config: *cfg, dataDir: *dataDir, logLevel: "error", logFormat: "console"}, stderr)
		if err != nil {
			return fail(err)
		}
		if connect, err = configServer(e, pos[0]); err != nil {
			return fail(err)
		}
		for _, m := range e.snap.Manifests {
			if m.Server.Name == pos[0] {
				write = m.Server
				source = fmt.Sprintf("upstream %s of %s (%s)", pos[0], e.cfgPath, m.File)
			}
		}
		if *name != "" {
			connect.Name, write.Name = *name, *name
		}
		log = e.log
	} else {
		write.Name = *name
		if *command != "" {
			argv, err := splitCommand(*command)
			if err != nil {
				return fail(fmt.Errorf("--command: %w", err))
			}
			write.Stdio = &manifests.StdioServer{Command: argv[0], Args: argv[1:]}
			source = "command " + *command
		} else {
			write.HTTP = &manifests.HTTPServer{URL: *url}
			source = "URL " + *url
		}
		connect = write
		if connect.Stdio != nil {
			c := *connect.Stdio
			c.Dir, _ = os.Getwd()
			connect.Stdio = &c
		}
	}

	tools, closePool, err := listUpstream(connect, *timeout, log)
	if err != nil {
		return fail(err)
	}
	closePool()
	if len(tools) == 0 {
		return fail(fmt.Errorf("upstream %s offers no tools; there is nothing to declare", connect.Name))
	}
	text, st := skeleton(write, source, tools, time.Now())
	if st.declared == 0 {
		return fail(fmt.Errorf("upstream %s offers %d tool(s), none with a name airlock can expose (see the SKIPPED notes):\n%s", connect.Name, len(tools), text))
	}
	// The skeleton must load as it is: check it as `manifests validate` would.
	file := *out
	if file == "" {
		file = write.Name + ".yaml"
	}
	m, err := manifests.Parse(file, []byte(text))
	if err == nil {
		if ps := m.Validate(); len(ps) > 0 {
			err = manifests.Problems(ps)
		}
	}
	if err != nil {
		return fail(fmt.Errorf("the skeleton does not validate, which is a bug in airlock manifests scan; please report it with this output:\n%v\n%s", err, text))
	}

	if *out == "" {
		fmt.Fprint(stdout, text)
	} else if err := writeFileAtomic(*out, []byte(text)); err != nil {
		return fail(err)
	}
	where := "the skeleton"
	if *out != "" {
		where = *out
	}
	fmt.Fprintf(stderr, "%d tool(s) declared (%d skipped) for upstream %s; review every \"# REVIEW:\" line in %s, then add the file to manifests in the configuration and run airlock manifests validate\n",
		st.declared, st.skipped, write.Name, where)
	return 0
}

var scanServerName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,30}$`)

func checkServerName(name string) error {
	if !scanServerName.MatchString(name) || strings.Contains(name, "__") {
		return fmt.Errorf("--name %q is not a server name: start with a lowercase letter, then up to 30 lowercase letters, digits, '-' or '_' (no \"__\")", name)
	}
	return nil
}

// splitCommand splits a command line like a POSIX shell does for words:
// whitespace separates, single quotes keep everything, double quotes and
// backslashes escape. No expansions.
func splitCommand(s string) ([]string, error) {
	var (
		words []string
		cur   strings.Builder
		in    bool // inside a word
		quote rune
	)
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote == '\'':
			if r == '\'' {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case quote == '"':
			switch {
			case r == '"':
				quote = 0
			case r == '\\' && i+1 < len(rs) && strings.ContainsRune(`"\$`+"`", rs[i+1]):
				i++
				cur.WriteRune(rs[i])
			default:
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == '\\' && i+1 < len(rs):
			i++
			cur.WriteRune(rs[i])
			in = true
		case r == ' ' || r == '\t' || r == '\n':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("%q has an unterminated %c quote", s, quote)
	}
	if in {
		words = append(words, cur.String())
	}
	if len(words) == 0 {
		return nil, fmt.Errorf("is empty; write the command that starts the server, e.g. \"npx -y @modelcontextprotocol/server-memory\"")
	}
	return words, nil
}

func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("--out %s: %w", path, err)
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("--out %s: writing it: %w", path, err)
	}
	return nil
}

// --- the skeleton ------------------------------------------------------------

// Names the manifest accepts (see manifests/validate.go).
var (
	scanToolName    = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	scanExposedName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	bareYAML        = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)
)

// pathArgNames are argument names taken for filesystem paths.
var pathArgNames = map[string]bool{"path": true, "paths": true, "source": true, "destination": true}

type scanStats struct{ declared, skipped int }

// toolGuess is what the annotations suggest about one tool.
type toolGuess struct {
	sideEffects []manifests.SideEffect
	risk        manifests.Risk
	idempotent  bool
	approval    bool
	pathArgs    []string
	why         []string // comments on the side effects and risk
}

// guessTool maps a tool's annotations to manifest values, conservatively:
// a missing hint takes MCP's default (destructive, open world).
func guessTool(t *mcp.Tool) toolGuess {
	a := t.Annotations
	if a == nil {
		a = &mcp.ToolAnnotations{}
	}
	var g toolGuess
	switch {
	case a.ReadOnlyHint:
		g.sideEffects = []manifests.SideEffect{manifests.SideEffectRead}
		g.risk, g.idempotent = manifests.RiskLow, true
		g.why = append(g.why, "readOnlyHint: true, so it only reads.")
	case a.DestructiveHint != nil && !*a.DestructiveHint:
		g.sideEffects = []manifests.SideEffect{manifests.SideEffectWrite}
		g.risk, g.idempotent = manifests.RiskMedium, a.IdempotentHint
		g.why = append(g.why, "destructiveHint: false, so it writes but only adds.")
	default:
		g.sideEffects = []manifests.SideEffect{manifests.SideEffectWrite, manifests.SideEffectDelete}
		g.risk, g.idempotent, g.approval = manifests.RiskHigh, a.IdempotentHint, true
		if a.DestructiveHint == nil {
			g.why = append(g.why, "REVIEW: no destructiveHint, and MCP's default is destructive: may delete or overwrite, so high risk with approval. Lower it if it cannot destroy anything.")
		} else {
			g.why = append(g.why, "REVIEW: destructiveHint: true: may delete or overwrite, so high risk with approval.")
		}
	}
	switch {
	case a.OpenWorldHint != nil && *a.OpenWorldHint:
		g.sideEffects = append(g.sideEffects, manifests.SideEffectSend)
		if g.risk == manifests.RiskLow {
			g.risk = manifests.RiskMedium
		}
		g.why = append(g.why, "REVIEW: openWorldHint: true: it reaches outside systems (the web, other services) and its arguments may leave: side effect send.")
	case a.OpenWorldHint == nil:
		g.why = append(g.why, "REVIEW: no openWorldHint (MCP's default is open world): add send if it reaches the web or other services.")
	}
	g.pathArgs = pathArgs(t.InputSchema)
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

// skeleton writes a manifest for srv declaring tools.
func skeleton(srv manifests.Server, source string, tools []*mcp.Tool, now time.Time) (string, scanStats) {
	sorted := append([]*mcp.Tool(nil), tools...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })

	var body bytes.Buffer
	var st scanStats
	needRoots := false
	for _, t := range sorted {
		if reason := unexposable(srv.Name, t.Name); reason != "" {
			fmt.Fprintf(&body, "  # SKIPPED %s: %s\n\n", yamlString(redact.VisibleLine(t.Name)), reason)
			st.skipped++
			continue
		}
		st.declared++
		g := guessTool(t)
		comment(&body, "  ", descriptionOf(t))
		comment(&body, "  ", "annotations: "+annotationsOf(t.Annotations))
		fmt.Fprintf(&body, "  %s:\n", yamlString(t.Name))
		for _, w := range g.why {
			comment(&body, "    ", w)
		}
		ses := make([]string, len(g.sideEffects))
		for i, se := range g.sideEffects {
			ses[i] = string(se)
		}
		fmt.Fprintf(&body, "    side_effects: [%s]\n", strings.Join(ses, ", "))
		comment(&body, "    ", "REVIEW: a guess; raise it for confidential data, or lower it to public.")
		fmt.Fprintf(&body, "    data_access_level: %s\n", manifests.DataInternal)
		comment(&body, "    ", fmt.Sprintf("required_permissions: [%s.%s]", srv.Name, permissionVerb(g)))
		fmt.Fprintf(&body, "    risk: %s\n", g.risk)
		if g.approval {
			comment(&body, "    ", "REVIEW: name the approver group instead of CHANGE-ME.")
			fmt.Fprintf(&body, "    approval:\n      group: CHANGE-ME\n")
		}
		if !g.sideEffectsReadOnly() {
			if g.idempotent {
				comment(&body, "    ", "idempotentHint: true (only idempotent calls are re-run after a crash).")
			} else {
				comment(&body, "    ", "REVIEW: no idempotentHint: set true only if a second run with the same arguments changes nothing more.")
			}
		}
		fmt.Fprintf(&body, "    idempotent: %t\n", g.idempotent)
		if len(g.pathArgs) > 0 {
			needRoots = true
			comment(&body, "    ", "REVIEW: these arguments look like filesystem paths; policy keeps them inside server.path_roots. Remove any that are not paths.")
			fmt.Fprintf(&body, "    path_args: [%s]\n", strings.Join(g.pathArgs, ", "))
		}
		body.WriteString("\n")
	}

	var b bytes.Buffer
	fmt.Fprintf(&b, "# Manifest skeleton for upstream %s, written by `airlock manifests scan`\n", srv.Name)
	comment(&b, "", fmt.Sprintf("on %s from the %d tool(s) of %s.", now.UTC().Format(time.DateOnly), len(tools), redact.VisibleLine(source)))
	b.WriteString("#\n")
	b.WriteString("# Every value is a guess from the tool annotations the server chose, and a\n")
	b.WriteString("# server can say anything about itself. Review each \"# REVIEW:\" line, then\n")
	b.WriteString("# add this file to manifests in airlock.yaml. Tools left out are not exposed.\n")
	b.WriteString("# The descriptions below are the server's words, shown for review only.\n\n")
	b.WriteString("server:\n")
	fmt.Fprintf(&b, "  name: %s\n", yamlString(srv.Name))
	if s := srv.Stdio; s != nil {
		b.WriteString("  stdio:\n")
		fmt.Fprintf(&b, "    command: %s\n", yamlString(s.Command))
		if len(s.Args) > 0 {
			fmt.Fprintf(&b, "    args: %s\n", yamlList(s.Args))
		}
		if isPackageRunner(s.Command) && !mentionsVersion(s.Args) {
			comment(&b, "    ", "REVIEW: pin the package version (e.g. pkg@1.2.3) so that the tools stay the ones declared here.")
		}
		if len(s.Env) > 0 {
			b.WriteString("    env:\n")
			for _, k := range sortedKeys(s.Env) {
				fmt.Fprintf(&b, "      %s: %s\n", yamlString(k), yamlString(s.Env[k]))
			}
		}
		if s.Dir != "" {
			fmt.Fprintf(&b, "    dir: %s\n", yamlString(s.Dir))
		} else {
			comment(&b, "    ", "REVIEW: the command runs in this file's directory; set dir if relative paths above need another one.")
		}
	}
	if h := srv.HTTP; h != nil {
		b.WriteString("  http:\n")
		fmt.Fprintf(&b, "    url: %s\n", yamlString(h.URL))
		if len(h.Headers) > 0 {
			b.WriteString("    headers:\n")
			for _, k := range sortedKeys(h.Headers) {
				fmt.Fprintf(&b, "      %s: %s\n", yamlString(k), yamlString(h.Headers[k]))
			}
		}
	}
	if srv.ConnectTimeout > 0 {
		fmt.Fprintf(&b, "  connect_timeout: %s\n", srv.ConnectTimeout)
	}
	switch {
	case len(srv.PathRoots) > 0:
		fmt.Fprintf(&b, "  path_roots: %s\n", yamlList(srv.PathRoots))
	case needRoots:
		comment(&b, "  ", "REVIEW: the directories the path arguments must stay inside, e.g. \"${AIRLOCK_DATA_DIR}/sandbox\"; until you change it, every call with a path is refused.")
		b.WriteString("  path_roots: [\"/CHANGE-ME\"]\n")
	}
	b.WriteString("\ntools:\n")
	b.Write(body.Bytes())
	return strings.TrimRight(b.String(), "\n") + "\n", st
}

func (g toolGuess) sideEffectsReadOnly() bool {
	return len(g.sideEffects) == 1 && g.sideEffects[0] == manifests.SideEffectRead
}

func permissionVerb(g toolGuess) string {
	for _, se := range g.sideEffects {
		if se == manifests.SideEffectDelete {
			return "delete"
		}
	}
	for _, se := range g.sideEffects {
		if se == manifests.SideEffectWrite || se == manifests.SideEffectSend {
			return "write"
		}
	}
	return "read"
}

// unexposable says why a tool cannot be declared, or "".
func unexposable(server, tool string) string {
	en := manifests.ExposedName(server, tool)
	switch {
	case !scanToolName.MatchString(tool):
		return "the name is not 1 to 64 letters, digits, '_', '.' or '-', so a manifest cannot declare it"
	case !scanExposedName.MatchString(en):
		return fmt.Sprintf("the exposed name %q would have characters common MCP clients reject", en)
	case len(en) > 64:
		return fmt.Sprintf("the exposed name %q would be longer than the 64 characters common MCP clients accept; use a shorter --name", en)
	}
	return ""
}

func descriptionOf(t *mcp.Tool) string {
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

func annotationsOf(a *mcp.ToolAnnotations) string {
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

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
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
