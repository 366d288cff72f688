// Package toolserver serves airlock's native tools: the tools of wasm servers
// (manifests with server.wasm), each a WebAssembly module run by
// internal/sandbox. Every wasm server becomes an in-process MCP server that
// the upstream pool connects to over in-memory transports, so native tools
// are listed, pinned, judged, approved, captured, compensated and recorded
// exactly like the tools of any other upstream.
//
// Protocol of a module: the call's JSON arguments on stdin; on stdout
// either a CallToolResult JSON object (with a content list) or plain text;
// a non-zero exit is an isError result carrying stderr. A module that hits
// its time, memory, output, open-file or mount limit gives an isError
// result saying which, and naming the manifest field that sets it.
//
// A module that cannot be loaded (its file unreadable, its sha256 not the
// pinned one, not a WASI command) makes only its own tools unavailable:
// they are still listed, their description and _meta
// (upstream.MetaUnavailable) saying why, and a call to one is an isError
// result with the reason; Options.Report hears the whole error for the
// log. The server's other tools are served.
//
// This package may import manifests, internal/sandbox, internal/upstream
// (for the _meta key) and the MCP SDK. It does not log: failures are
// results, errors or reports.
package toolserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/internal/sandbox"
	"github.com/airlock-run/airlock/internal/upstream"
	"github.com/airlock-run/airlock/manifests"
)

// Servers holds one in-process MCP server per wasm manifest.
type Servers struct {
	servers map[string]*lazyServer
}

// lazyServer compiles its modules on first use: the pool connects in the
// background, so a cold compile (about a second per module) does not hold
// up start-up, and the tools appear when ready.
type lazyServer struct {
	once  sync.Once
	build func() (*mcp.Server, error)
	srv   *mcp.Server
	err   error
}

// tool is one native tool, resolved and loaded.
type tool struct {
	name   string
	decl   *manifests.Tool
	wasm   manifests.WASMTool // resolved paths
	module *sandbox.Module    // nil when unavailable
	env    map[string]string
	// unavailable says, for the agent, why the module could not be
	// loaded; "" when it was.
	unavailable string
	// load, when set, loads module at the tool's first call (a module
	// Options.Compiled vouches for); loadOnce runs it once.
	load     func() (*sandbox.Module, error)
	loadOnce sync.Once
	loadErr  string          // why the first call's load failed
	report   func(err error) // Options.Report for this tool
}

// Options are what New needs besides the sandbox and the manifests.
type Options struct {
	// Vars are airlock's own ${VAR}s (AIRLOCK_DATA_DIR,
	// AIRLOCK_CONFIG_DIR) for module paths and mounts.
	Vars map[string]string
	// Getenv supplies the values of each tool's env allowlist; nil reads
	// none.
	Getenv func(string) string
	// Report, when set, hears once of each tool that cannot be served and
	// why, with the manifest and the paths: from New for a module that
	// cannot be read or does not match its sha256, from the server's
	// first connection for one that does not compile.
	Report func(server, tool string, err error)
	// Compiled, when set, says whether the sandbox's compilation cache
	// holds a module (by its pinned SHA-256) that compiled and loaded
	// before: such a module is loaded at its tool's first call, not when
	// the pool connects, so that a process whose native tools are not
	// called does not hold their machine code (~14 MiB a module).
	// Others load at connection, where a module that does not compile
	// is found and listed as unavailable. Loaded is told of each module
	// that loaded, to remember it.
	Compiled func(sha256 string) bool
	Loaded   func(sha256 string)
}

// New checks every module of the wasm manifests among ms against its
// SHA-256 and prepares their servers, which compile the modules when first
// connected. A module that is missing or does not match makes only its
// own tools unavailable (see the package doc); New reports it and goes on.
func New(ctx context.Context, sb *sandbox.Sandbox, ms []*manifests.Manifest, o Options) (*Servers, error) {
	if o.Getenv == nil {
		o.Getenv = func(string) string { return "" }
	}
	report := func(server, tool string, err error) {
		if o.Report != nil {
			o.Report(server, tool, err)
		}
	}
	n := &Servers{servers: map[string]*lazyServer{}}
	for _, m := range ms {
		if m.Server.WASM == nil {
			continue
		}
		names := make([]string, 0, len(m.Tools))
		for name := range m.Tools {
			names = append(names, name)
		}
		sort.Strings(names)
		var tools []*tool
		for _, name := range names {
			decl := m.Tools[name]
			if decl.WASM == nil {
				continue // the manifest validator reports it
			}
			t := &tool{name: name, decl: decl, wasm: decl.WASM.Resolve(filepath.Dir(m.File), o.Vars), env: map[string]string{}}
			for _, e := range t.wasm.Env {
				t.env[e] = o.Getenv(e)
			}
			if err := verify(t.wasm.Module, t.wasm.SHA256); err != nil {
				t.unavailable = unavailableReason(err)
				report(m.Server.Name, name, fmt.Errorf("%s: tools.%s.wasm: %w", m.File, name, err))
			}
			tools = append(tools, t)
		}
		server, file := m.Server.Name, m.File
		n.servers[server] = &lazyServer{build: func() (*mcp.Server, error) {
			srv := mcp.NewServer(&mcp.Implementation{Name: "airlock-native-" + server, Version: "1"}, nil)
			for _, t := range tools {
				if t.unavailable == "" {
					load := func() (*sandbox.Module, error) {
						mod, err := sb.Load(context.WithoutCancel(ctx), t.wasm.Module, t.wasm.SHA256)
						if err == nil && o.Loaded != nil {
							o.Loaded(t.wasm.SHA256)
						}
						return mod, err
					}
					if o.Compiled != nil && o.Compiled(t.wasm.SHA256) {
						t.load = load
					} else {
						mod, err := load()
						if errors.Is(err, sandbox.ErrClosed) {
							return nil, fmt.Errorf("native server %s: %w", server, err)
						}
						if err != nil {
							t.unavailable = unavailableReason(err)
							report(server, t.name, fmt.Errorf("%s: tools.%s.wasm: %w", file, t.name, err))
						}
						t.module = mod
					}
				}
				t.report = func(err error) { report(server, t.name, fmt.Errorf("%s: tools.%s.wasm: %w", file, t.name, err)) }
				srv.AddTool(t.mcpTool(), t.handle)
			}
			return srv, nil
		}}
	}
	return n, nil
}

// errMismatch is verify's mismatch, to tell it apart for the agent.
var errMismatch = errors.New("does not match its sha256")

// verify checks a module file against its pinned SHA-256 without compiling
// it (the sandbox checks again when it loads it).
func verify(path, want string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading the module: %w", err)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != strings.ToLower(strings.TrimSpace(want)) {
		return fmt.Errorf("%s %w: expected %s, actual %s; review the module, then update sha256", path, errMismatch, want, got)
	}
	return nil
}

// unavailableReason says why a module could not be loaded, for agents:
// without host paths or hashes, which the operator's log has.
func unavailableReason(err error) string {
	switch {
	case errors.Is(err, errMismatch) || errors.Is(err, sandbox.ErrMismatch):
		return "its module does not match the sha256 pinned in its manifest"
	case errors.Is(err, sandbox.ErrInvalidModule):
		return "its module is not a WASI command module airlock can run"
	case errors.Is(err, fs.ErrNotExist):
		return "its module file does not exist"
	default:
		return "its module could not be loaded"
	}
}

// Has reports whether server is a native server.
func (n *Servers) Has(server string) bool {
	_, ok := n.servers[server]
	return ok
}

// Transport connects a new in-memory session to the native server (its
// modules compiled on the first call) and returns the client's end, for
// the upstream pool.
func (n *Servers) Transport(ctx context.Context, server string) (mcp.Transport, error) {
	ls, ok := n.servers[server]
	if !ok {
		return nil, fmt.Errorf("no wasm server %q is configured", server)
	}
	ls.once.Do(func() { ls.srv, ls.err = ls.build() })
	if ls.err != nil {
		return nil, ls.err
	}
	ct, st := mcp.NewInMemoryTransports()
	if _, err := ls.srv.Connect(ctx, st, nil); err != nil {
		return nil, fmt.Errorf("starting native server %s: %w", server, err)
	}
	return ct, nil
}

func (t *tool) mcpTool() *mcp.Tool {
	ann := &mcp.ToolAnnotations{IdempotentHint: t.decl.Idempotent, OpenWorldHint: ptr(false)}
	readOnly, destructive := true, false
	for _, se := range t.decl.SideEffects {
		switch se {
		case manifests.SideEffectNone, manifests.SideEffectRead:
		case manifests.SideEffectDelete:
			readOnly, destructive = false, true
		default:
			readOnly = false
		}
	}
	ann.ReadOnlyHint = readOnly
	if !readOnly {
		ann.DestructiveHint = ptr(destructive)
	}
	def := &mcp.Tool{Name: t.name, Description: t.decl.Description, InputSchema: t.wasm.InputSchema, Annotations: ann}
	if t.unavailable != "" {
		def.Description = fmt.Sprintf("[unavailable: %s] %s", t.unavailable, t.decl.Description)
		def.Meta = mcp.Meta{upstream.MetaUnavailable: t.unavailable}
	}
	return def
}

func ptr[T any](v T) *T { return &v }

func (t *tool) handle(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if t.unavailable != "" {
		return toolError("%s is unavailable: %s. The operator's log has the details; this server's other tools are not affected.", t.name, t.unavailable), nil
	}
	if t.load != nil {
		t.loadOnce.Do(func() {
			mod, err := t.load()
			if err != nil {
				t.loadErr = unavailableReason(err)
				t.report(err)
				return
			}
			t.module = mod
		})
		if t.loadErr != "" {
			return toolError("%s is unavailable: %s. The operator's log has the details; this server's other tools are not affected.", t.name, t.loadErr), nil
		}
	}
	args := []byte(req.Params.Arguments)
	if len(bytes.TrimSpace(args)) == 0 {
		args = []byte("{}")
	}
	call := sandbox.Call{Args: t.wasm.Args, Stdin: args, Env: t.env, Limits: sandbox.Limits{
		MemoryBytes: int64(t.wasm.EffectiveMemoryLimit()),
		Timeout:     t.decl.EffectiveTimeout(),
		OutputBytes: int(t.wasm.EffectiveOutputLimit()),
		OpenFiles:   t.wasm.EffectiveMaxOpenFiles(),
	}}
	for _, m := range t.wasm.Mounts {
		call.Mounts = append(call.Mounts, sandbox.Mount{HostDir: m.Host, GuestPath: m.Guest, ReadOnly: m.ReadOnly(),
			MaxBytes: int64(m.EffectiveMaxBytes()), MaxFiles: m.EffectiveMaxFiles()})
	}
	res, err := t.module.Run(ctx, call)
	var quota *sandbox.QuotaError
	switch {
	case errors.Is(err, sandbox.ErrTimeout):
		return toolError("%s was stopped at its time limit of %s; nothing it did after that point was kept. Try a smaller input.", t.name, call.Limits.Timeout), nil
	case errors.Is(err, sandbox.ErrMemoryLimit):
		return toolError("%s ran out of memory at its limit of %s. Try a smaller input.", t.name, t.wasm.EffectiveMemoryLimit()), nil
	case errors.Is(err, sandbox.ErrOutputLimit):
		return toolError("%s produced more than its output limit of %s, so its result was dropped. Ask for less (a narrower query or a smaller input).", t.name, t.wasm.EffectiveOutputLimit()), nil
	case errors.Is(err, sandbox.ErrOpenFiles):
		return toolError("%s hit its limit of %d open files (max_open_files) and was stopped.", t.name, call.Limits.OpenFiles), nil
	case errors.As(err, &quota) && quota.Files:
		return toolError("%s hit the limit of %d files in its mount %s (max_files) and was stopped; what it wrote until then was kept. Remove files there, or ask the operator to raise the limit.", t.name, quota.Limit, quota.Mount), nil
	case errors.As(err, &quota):
		return toolError("%s hit the limit of %s in its mount %s (max_bytes) and was stopped; what it wrote until then was kept. Remove files there, or ask the operator to raise the limit.", t.name, manifests.ByteSize(quota.Limit), quota.Mount), nil
	case err != nil:
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return toolError("%s could not run: %v", t.name, err), nil
	case res.ExitCode != 0:
		msg := strings.TrimSpace(string(res.Stderr))
		if msg == "" {
			msg = fmt.Sprintf("%s failed (exit code %d) without saying why", t.name, res.ExitCode)
		}
		return toolError("%s", msg), nil
	}
	return parseOutput(res.Stdout), nil
}

// parseOutput reads a module's stdout: a CallToolResult when it is one (a
// JSON object with a content list), else the text as it is.
func parseOutput(out []byte) *mcp.CallToolResult {
	trimmed := bytes.TrimSpace(out)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		var probe struct {
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(trimmed, &probe) == nil && len(probe.Content) > 0 && probe.Content[0] == '[' {
			var r mcp.CallToolResult
			if err := json.Unmarshal(trimmed, &r); err == nil {
				return &r
			}
		}
	}
	text := string(out)
	if !utf8.ValidString(text) {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

func toolError(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

// MkdirMounts creates the host directories of read-write mounts that do
// not exist yet (a fresh data dir), so the first call does not fail.
func MkdirMounts(ms []*manifests.Manifest, vars map[string]string) error {
	for _, m := range ms {
		for _, t := range m.Tools {
			if t.WASM == nil {
				continue
			}
			for _, mt := range t.WASM.Resolve(filepath.Dir(m.File), vars).Mounts {
				if mt.ReadOnly() {
					continue
				}
				if err := os.MkdirAll(mt.Host, 0o700); err != nil {
					return fmt.Errorf("%s: creating the host directory of mount %s: %w", m.File, mt.Guest, err)
				}
			}
		}
	}
	return nil
}
