package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock/manifests"
)

const scanLong = `Connects to an upstream MCP server (an upstream of the configuration, or
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
  data_access_level is internal: raise it where the data is sensitive

A server that declares risk and recovery metadata in its tools' _meta, as
airlock lists its own tools (_meta "airlock.dev/risk" and
"airlock.dev/recovery"; README.md, "Tools say what they are"), pre-fills
risk, side effects, data access level, idempotency, approval (with the
quorum) and the capture and compensation, where a manifest can hold them;
each value taken is marked, since a server can say anything about itself.`

func scanCommand() *Command {
	return &Command{Name: "scan", Usage: `[--config airlock.yaml] [--out FILE] SERVER
--name NAME --command "npx -y @scope/server@1.2.3" [--out FILE]
--name NAME --url https://host/mcp [--out FILE]`,
		Short: "list an upstream's tools and write a manifest skeleton to review",
		Long:  scanLong, Flags: bind(scanFlags, runScan)}
}

type scanOptions struct {
	config, dataDir string
	out             string
	force           bool
	command, url    string
	name            string
	timeout         time.Duration
}

func scanFlags(fs *flag.FlagSet, o *scanOptions) {
	fs.StringVar(&o.config, "config", defaultConfig, "configuration `file` naming SERVER's manifest")
	fs.StringVar(&o.dataDir, "data-dir", "", "data `dir`ectory for ${AIRLOCK_DATA_DIR} in the configuration's manifests (default: data_dir in the config, else .airlock)")
	fs.StringVar(&o.out, "out", "", "write the skeleton to this `file` instead of stdout")
	fs.BoolVar(&o.force, "force", false, "with --out: replace an existing file")
	fs.StringVar(&o.command, "command", "", "launch the upstream with this `command line` (stdio), e.g. \"npx -y @modelcontextprotocol/server-memory\"")
	fs.StringVar(&o.url, "url", "", "reach the upstream at this streamable HTTP `URL`")
	fs.StringVar(&o.name, "name", "", "server `name` for the skeleton (required with --command and --url)")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "how long to wait for the upstream to connect")
}

func runScan(c *Call, o *scanOptions) int {
	if code := o.check(c); code != 0 {
		return code
	}
	up, err := o.upstream(c)
	if err != nil {
		return c.fail(err)
	}
	tools, closePool, err := listUpstream(up.connect, o.timeout, up.log)
	if err != nil {
		return c.fail(err)
	}
	closePool()
	if len(tools) == 0 {
		return c.fail(fmt.Errorf("upstream %s offers no tools; there is nothing to declare", up.connect.Name))
	}
	text, st := manifests.Skeleton(up.write, up.source, upstreamTools(tools), time.Now())
	if st.Declared == 0 {
		return c.fail(fmt.Errorf("upstream %s offers %d tool(s), none with a name airlock can expose (see the SKIPPED notes):\n%s", up.connect.Name, len(tools), text))
	}
	if err := o.checkSkeleton(up.write.Name, text); err != nil {
		return c.fail(err)
	}
	where := "the skeleton"
	if o.out == "" {
		fmt.Fprint(c.Stdout, text)
	} else if err := writeFileAtomic(o.out, []byte(text)); err != nil {
		return c.fail(err)
	} else {
		where = o.out
	}
	fmt.Fprintf(c.Stderr, "%d tool(s) declared (%d skipped) for upstream %s; review every \"# REVIEW:\" line in %s, then add the file to manifests in the configuration and run airlock manifests validate\n",
		st.Declared, st.Skipped, up.write.Name, where)
	return 0
}

// upstreamTools is what the skeleton reads of MCP's tool list.
func upstreamTools(tools []*mcp.Tool) []*manifests.UpstreamTool {
	out := make([]*manifests.UpstreamTool, len(tools))
	for i, t := range tools {
		out[i] = &manifests.UpstreamTool{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema, Meta: t.Meta}
		if a := t.Annotations; a != nil {
			out[i].Annotations = &manifests.ToolHints{ReadOnlyHint: a.ReadOnlyHint, DestructiveHint: a.DestructiveHint,
				IdempotentHint: a.IdempotentHint, OpenWorldHint: a.OpenWorldHint}
		}
	}
	return out
}

// check reports a mistake in the arguments before anything is started.
func (o *scanOptions) check(c *Call) int {
	usage := func(msg string) int {
		fmt.Fprintf(c.Stderr, "%s: %s\n", c.Name, msg)
		c.Flags.Usage()
		return 2
	}
	pos := c.Args
	switch {
	case len(pos) > 1:
		return usage(fmt.Sprintf("name one upstream (got %d arguments)", len(pos)))
	case len(pos) == 1 && (o.command != "" || o.url != ""):
		return usage("give either a SERVER of the configuration or --command/--url, not both")
	case len(pos) == 0 && o.command == "" && o.url == "":
		return usage("name a SERVER of the configuration, or give --command or --url with --name")
	case o.command != "" && o.url != "":
		return usage("give --command or --url, not both")
	case len(pos) == 0 && o.name == "":
		return usage("--name is required with --command and --url: it names the server in the manifest and the exposed tools (<name>__<tool>)")
	}
	if o.name != "" {
		if err := checkServerName(o.name); err != nil {
			return c.fail(err)
		}
	}
	if o.out != "" && !o.force {
		if _, err := os.Stat(o.out); err == nil {
			return c.fail(fmt.Errorf("--out %s exists; pass --force to replace it, or name a new file", o.out))
		}
	}
	return 0
}

// scanned is the upstream to scan: as to connect to it (variables
// expanded) and as the manifest should say it.
type scanned struct {
	connect, write manifests.Server
	source         string // where it came from, for the skeleton's header
	log            zerolog.Logger
}

// upstream is the SERVER of the configuration, or the one --command or
// --url give.
func (o *scanOptions) upstream(c *Call) (scanned, error) {
	up := scanned{log: zerolog.New(zerolog.ConsoleWriter{Out: c.Stderr, TimeFormat: time.TimeOnly}).Level(zerolog.ErrorLevel)}
	if len(c.Args) == 1 {
		return o.configUpstream(c, c.Args[0])
	}
	up.write.Name = o.name
	if o.command != "" {
		argv, err := splitCommand(o.command)
		if err != nil {
			return up, fmt.Errorf("--command: %w", err)
		}
		up.write.Stdio = &manifests.StdioServer{Command: argv[0], Args: argv[1:]}
		up.source = "command " + o.command
	} else {
		up.write.HTTP = &manifests.HTTPServer{URL: o.url}
		up.source = "URL " + o.url
	}
	up.connect = up.write
	if up.connect.Stdio != nil {
		s := *up.connect.Stdio
		s.Dir, _ = os.Getwd()
		up.connect.Stdio = &s
	}
	return up, nil
}

// configUpstream is the upstream named server in the configuration.
func (o *scanOptions) configUpstream(c *Call, server string) (scanned, error) {
	var up scanned
	e, err := load(commonFlags{config: o.config, dataDir: o.dataDir, logLevel: "error", logFormat: "console"}, c.Stderr)
	if err != nil {
		return up, err
	}
	if up.connect, err = configServer(e, server); err != nil {
		return up, err
	}
	for _, m := range e.snap.Manifests {
		if m.Server.Name == server {
			up.write = m.Server
			up.source = fmt.Sprintf("upstream %s of %s (%s)", server, e.cfgPath, m.File)
		}
	}
	if o.name != "" {
		up.connect.Name, up.write.Name = o.name, o.name
	}
	up.log = e.log
	return up, nil
}

// checkSkeleton checks that the skeleton loads as it is, as `manifests
// validate` would.
func (o *scanOptions) checkSkeleton(name, text string) error {
	file := o.out
	if file == "" {
		file = name + ".yaml"
	}
	m, err := manifests.Parse(file, []byte(text))
	if err == nil {
		if ps := m.Validate(); len(ps) > 0 {
			err = manifests.Problems(ps)
		}
	}
	if err != nil {
		return fmt.Errorf("the skeleton does not validate, which is a bug in airlock manifests scan; please report it with this output:\n%v\n%s", err, text)
	}
	return nil
}

func checkServerName(name string) error {
	if !manifests.ValidServerName(name) {
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
