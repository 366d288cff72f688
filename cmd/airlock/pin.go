package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock/internal/pin"
	"github.com/airlock-run/airlock/internal/redact"
	"github.com/airlock-run/airlock/internal/upstream"
	"github.com/airlock-run/airlock/manifests"
)

const pinLong = `Connects to the upstream SERVER of the configuration, shows each of its
tools as unchanged, new or CHANGED (with a diff of the definition against
its pin), and pins the current definitions: every tool, or only TOOL.

airlock pins the definition (name, title, description, schemas,
annotations, icons and _meta: everything an agent is shown) of every
upstream tool the first time it sees it, whether a manifest covers it or
expose_uncovered shows it. A tool whose definition changes afterwards is
blocked (listed as unavailable, calls refused) until you review the change
here and accept it. A running airlock picks up the new pins without a
restart.

In the diff, every character outside printable ASCII is shown by its code
point (\uXXXX), so a look-alike letter or an invisible character cannot
pass for an unchanged one.

Pins made by an airlock that did not pin icons and _meta still hold for
tools without them; a tool that has them shows as CHANGED (the rest of
its definition unchanged) and is blocked until pinned again here.

The pins are kept in pins_file of the configuration (relative to it), else
<data dir>/pins.json.`

func pinCommand() *Command {
	return &Command{Name: "pin", Usage: "[--config airlock.yaml] [--data-dir DIR] SERVER [TOOL]",
		Short: "show how an upstream's tool definitions differ from their pins, and accept them",
		Long:  pinLong, Flags: bind(pinFlags, runPin)}
}

type pinOptions struct {
	config, dataDir string
	timeout         time.Duration
}

func pinFlags(fs *flag.FlagSet, o *pinOptions) {
	fs.StringVar(&o.config, "config", defaultConfig, "configuration `file` naming the upstream's manifest")
	fs.StringVar(&o.dataDir, "data-dir", "", "local state `dir`ectory holding pins.json (default: data_dir in the config, else .airlock)")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "how long to wait for the upstream to connect (at least its connect_timeout)")
}

// openPins opens the pins store of a serving command.
func openPins(e *env) (*pin.Store, error) {
	s, err := pin.Open(e.snap.Config.PinsPath(e.dataDir))
	if err != nil {
		return nil, err
	}
	s.SetLogger(e.log)
	return s, nil
}

func runPin(c *Call, o *pinOptions) int {
	if len(c.Args) < 1 || len(c.Args) > 2 {
		fmt.Fprintf(c.Stderr, "%s: name one upstream, and optionally one of its tools (got %d arguments)\n", c.Name, len(c.Args))
		c.Flags.Usage()
		return 2
	}
	server, only := c.Args[0], ""
	if len(c.Args) == 2 {
		only = c.Args[1]
	}
	e, err := load(commonFlags{config: o.config, dataDir: o.dataDir, logLevel: "error", logFormat: "console"}, c.Stderr)
	if err != nil {
		return c.fail(err)
	}
	srv, err := configServer(e, server)
	if err != nil {
		return c.fail(err)
	}
	if srv.WASM != nil {
		return c.fail(fmt.Errorf("%s is a wasm server: its tools are pinned by the sha256 of their modules in the manifest, not here; after reviewing a new module, update its sha256", server))
	}
	store, err := openPins(e)
	if err != nil {
		return c.fail(err)
	}
	tools, pool, err := listUpstreamPool(srv, o.timeout, e.log)
	if err != nil {
		return c.fail(err)
	}
	defer pool.Close()
	// The UI resources (MCP Apps) the tools point at are pinned with them,
	// under their URIs (internal/pin/uiresource.go).
	uis, err := readUIResources(pool, server, tools, o.timeout)
	if err != nil {
		return c.fail(err)
	}
	tools = append(tools, uis...)
	if err := reviewPins(c.Stdout, store, server, tools, only, coveredTools(e, server)); err != nil {
		return c.fail(err)
	}
	changed, err := store.Pin(server, tools, only)
	if err != nil {
		return c.fail(err)
	}
	if len(changed) == 0 {
		fmt.Fprintf(c.Stdout, "nothing to pin: %s already pins these definitions\n", store.Path())
		return 0
	}
	fmt.Fprintf(c.Stdout, "pinned %d tool(s) of %s in %s: %s\n", len(changed), server, store.Path(), strings.Join(changed, ", "))
	fmt.Fprintln(c.Stdout, "a running airlock uses them from its next tool list or call")
	return 0
}

// coveredTools are the tools of server that a manifest declares.
func coveredTools(e *env, server string) map[string]bool {
	covered := map[string]bool{}
	for _, m := range e.snap.Manifests {
		if m.Server.Name == server {
			for name := range m.Tools {
				covered[name] = true
			}
		}
	}
	return covered
}

// reviewPins prints, for each tool (or only one), how its current
// definition compares with its pin.
func reviewPins(w io.Writer, store *pin.Store, server string, tools []*mcp.Tool, only string, covered map[string]bool) error {
	sorted := append([]*mcp.Tool(nil), tools...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	fmt.Fprintf(w, "upstream %s offers %d tool(s); pins: %s\n", server, len(sorted), store.Path())
	for _, t := range sorted {
		if only != "" && t.Name != only {
			continue
		}
		def, err := pin.Canonical(t)
		if err != nil {
			return fmt.Errorf("upstream %s: %w", server, err)
		}
		note := ""
		if covered != nil && !covered[t.Name] {
			note = "  (no manifest declares it: not exposed)"
		}
		old, ok := store.Lookup(server, t.Name)
		switch {
		case !ok:
			fmt.Fprintf(w, "  new        %s%s\n", redact.VisibleLine(t.Name), note)
		case old.SHA256 == pin.Hash(t):
			fmt.Fprintf(w, "  unchanged  %s%s\n", redact.VisibleLine(t.Name), note)
		default:
			what := "definition"
			if f := pin.ChangedFields(old.Definition, def); len(f) > 0 {
				what = strings.Join(f, ", ")
			}
			fmt.Fprintf(w, "  CHANGED    %s%s (changed: %s; pinned %s by %s)\n", redact.VisibleLine(t.Name), note, what,
				old.PinnedAt.Local().Format(time.DateTime), orUnknown(old.By))
			if pin.Legacy(old, t) {
				fmt.Fprintln(w, "      (only its icons and _meta differ: its pin does not cover them, because the upstream added them since or an earlier airlock did not pin them; review them below)")
			}
			if len(old.Definition) == 0 {
				fmt.Fprintln(w, "      (the pins file kept only the old hash, not the old definition: no diff)")
				continue
			}
			diff := pin.Diff(old.Definition, def)
			for _, line := range strings.Split(strings.TrimRight(diff, "\n"), "\n") {
				fmt.Fprintf(w, "      %s\n", redact.VisibleLine(line))
			}
			if strings.Contains(diff, `\u`) || strings.Contains(diff, `\U`) {
				fmt.Fprintln(w, "      (\\uXXXX is a character outside printable ASCII, by its code point: look for letters from other scripts and invisible characters)")
			}
		}
	}
	return nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// configServer returns the (variable-expanded) upstream named server.
func configServer(e *env, server string) (manifests.Server, error) {
	var names []string
	for _, s := range e.servers {
		if s.Name == server {
			return s, nil
		}
		names = append(names, s.Name)
	}
	return manifests.Server{}, fmt.Errorf("%s has no upstream named %q (it has: %s); name one of them, or add its manifest to manifests",
		e.cfgPath, server, strings.Join(names, ", "))
}

// readUIResources reads the UI resources server's tools point at, as the
// definitions they are pinned by (pin.UIResource).
func readUIResources(pool *upstream.Pool, server string, tools []*mcp.Tool, timeout time.Duration) ([]*mcp.Tool, error) {
	var out []*mcp.Tool
	for _, uri := range pin.UIResourceURIs(tools) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		res, err := pool.ReadResource(ctx, server, uri)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("upstream %s: reading UI resource %s (a tool's _meta points at it): %w", server, uri, err)
		}
		out = append(out, pin.UIResource(uri, res.Contents))
	}
	return out, nil
}

// listUpstreamPool is listUpstream, returning the connected pool (Close
// it) for further requests.
func listUpstreamPool(srv manifests.Server, timeout time.Duration, log zerolog.Logger) ([]*mcp.Tool, *upstream.Pool, error) {
	var pool *upstream.Pool
	tools, _, err := listUpstreamWith(srv, timeout, log, &pool)
	if err != nil {
		return nil, nil, err
	}
	return tools, pool, nil
}

// listUpstream connects to one upstream and returns its tools; call
// closePool when done. It gives up after timeout (or the server's
// connect_timeout, if longer), or after three failed attempts, with the
// upstream's last status reason.
func listUpstream(srv manifests.Server, timeout time.Duration, log zerolog.Logger) (tools []*mcp.Tool, closePool func(), err error) {
	return listUpstreamWith(srv, timeout, log, nil)
}

func listUpstreamWith(srv manifests.Server, timeout time.Duration, log zerolog.Logger, keep **upstream.Pool) (tools []*mcp.Tool, closePool func(), err error) {
	if ct := srv.EffectiveConnectTimeout(); ct > timeout {
		timeout = ct
	}
	pool := upstream.New([]manifests.Server{srv}, upstream.Options{
		Logger:     &log,
		ClientInfo: &mcp.Implementation{Name: "airlock", Version: version},
		MinBackoff: 500 * time.Millisecond, MaxBackoff: 2 * time.Second,
		// Listing runs the server's package too: sandboxed like serving.
		Sandbox: probeSandbox(nil, log),
	})
	pool.Start(context.Background())
	closePool = func() { _ = pool.Close() }
	if keep != nil {
		*keep = pool
	}
	deadline := time.Now().Add(timeout)
	for {
		st := pool.Status(srv.Name)
		if st.State == upstream.StateConnected {
			return st.Tools, closePool, nil
		}
		if st.Attempts >= 3 || time.Now().After(deadline) {
			closePool()
			reason := st.Reason
			if reason == "" {
				reason = "still " + st.State
			}
			what := fmt.Sprintf("within %s", timeout)
			if st.Attempts >= 3 {
				what = fmt.Sprintf("after %d attempts", st.Attempts)
			}
			return nil, nil, fmt.Errorf("upstream %s did not connect %s: %s; check its command or URL (and --timeout for a slow start)", srv.Name, what, reason)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
