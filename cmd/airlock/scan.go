package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

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
	text, st := manifests.Skeleton(write, source, tools, time.Now())
	if st.Declared == 0 {
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
		st.Declared, st.Skipped, write.Name, where)
	return 0
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
