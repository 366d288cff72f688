package manifests_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/manifests"
)

// head is the start of every test manifest: a valid server on lines 1-4,
// "tools:" on line 5, so the first tool's name is on line 6.
const head = `server:
  name: fs
  stdio:
    command: npx
tools:
`

// readTool is a valid tool declaration, lines 6-9 after head.
const readTool = `  read:
    side_effects: [read]
    data_access_level: internal
    risk: low
`

// problemsOf parses and validates src as file m.yaml and returns every
// problem as its formatted string.
func problemsOf(t *testing.T, src string) []string {
	t.Helper()
	m, err := manifests.Parse("m.yaml", []byte(src))
	if err != nil {
		return errorLines(t, err)
	}
	var out []string
	for _, p := range m.Validate() {
		out = append(out, p.Error())
	}
	return out
}

func errorLines(t *testing.T, err error) []string {
	t.Helper()
	var ps manifests.Problems
	if !errors.As(err, &ps) {
		t.Fatalf("error is %T, want manifests.Problems: %v", err, err)
	}
	var out []string
	for _, p := range ps {
		out = append(out, p.Error())
	}
	return out
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{
			name: "valid",
			src:  head + readTool,
		},
		{
			name: "server name missing",
			src:  "server:\n  stdio:\n    command: npx\ntools:\n" + readTool,
			want: []string{`m.yaml:1: server.name: is required; name the upstream, e.g. "filesystem" (lowercase letters, digits, '-' and '_')`},
		},
		{
			name: "server name invalid",
			src:  strings.Replace(head, "name: fs", "name: FS", 1) + readTool,
			want: []string{`m.yaml:2: server.name: "FS" is not a valid server name; start with a lowercase letter, then up to 30 lowercase letters, digits, '-' or '_'`},
		},
		{
			name: "server name with double underscore",
			src:  strings.Replace(head, "name: fs", "name: my__fs", 1) + readTool,
			want: []string{`m.yaml:2: server.name: "my__fs" contains "__", which separates server and tool in exposed names; use a single '_' or '-'`},
		},
		{
			name: "no transport",
			src:  "server:\n  name: fs\ntools:\n" + readTool,
			want: []string{`m.yaml:1: server: no transport; set stdio (a command to launch), http (a streamable HTTP URL) or wasm: {} (tools are WebAssembly modules in airlock's sandbox)`},
		},
		{
			name: "both transports",
			src:  head[:len(head)-len("tools:\n")] + "  http:\n    url: https://x.example/mcp\ntools:\n" + readTool,
			want: []string{`m.yaml:1: server: both stdio and http are set; keep the one the upstream speaks`},
		},
		{
			name: "stdio without command",
			src:  "server:\n  name: fs\n  stdio:\n    args: [x]\ntools:\n" + readTool,
			want: []string{`m.yaml:3: server.stdio.command: is required; name the program to launch, e.g. npx`},
		},
		{
			name: "empty stdio",
			src:  "server:\n  name: fs\n  stdio:\ntools:\n" + readTool,
			want: []string{`m.yaml:3: server.stdio.command: is required; name the program to launch, e.g. npx`},
		},
		{
			name: "http url not http",
			src:  "server:\n  name: fs\n  http:\n    url: ftp://x.example/mcp\ntools:\n" + readTool,
			want: []string{`m.yaml:4: server.http.url: "ftp://x.example/mcp" is not an http(s) URL; write e.g. "https://mcp.example.com/mcp"`},
		},
		{
			name: "http url with variables",
			src:  "server:\n  name: fs\n  http:\n    url: https://${HOST}:${PORT}/mcp\n    headers:\n      Authorization: Bearer ${TOKEN}\ntools:\n" + readTool,
		},
		{
			name: "http url missing",
			src:  "server:\n  name: fs\n  http:\n    headers: {A: b}\ntools:\n" + readTool,
			want: []string{`m.yaml:3: server.http.url: is required; write the upstream's MCP endpoint, e.g. "https://mcp.example.com/mcp"`},
		},
		{
			name: "connect timeout zero",
			src:  "server:\n  name: fs\n  stdio: {command: npx}\n  connect_timeout: 0s\ntools:\n" + readTool,
			want: []string{`m.yaml:4: server.connect_timeout: must be positive, got 0s; omit it for the default 30s`},
		},
		{
			name: "no tools",
			src:  head,
			want: []string{`m.yaml:5: tools: no tools declared; declare each upstream tool to expose (tools not listed are not exposed)`},
		},
		{
			name: "tool name invalid",
			src:  head + strings.Replace(readTool, "read:", "read file:", 1),
			want: []string{`m.yaml:6: tools.read file: "read file" is not a valid tool name; use the upstream's name for it: 1 to 64 letters, digits, '_', '.' or '-'`},
		},
		{
			name: "exposed name too long",
			src:  head + strings.Replace(readTool, "read:", strings.Repeat("r", 63)+":", 1),
			want: []string{`m.yaml:6: tools.` + strings.Repeat("r", 63) + `: exposed name "fs__` + strings.Repeat("r", 63) + `" is 67 characters; common MCP clients (Claude, OpenAI) reject tool names longer than 64, so shorten the server name or set a shorter server.prefix`},
		},
		{
			name: "exposed name with dot",
			src:  head + strings.Replace(readTool, "read:", "files.read:", 1),
			want: []string{`m.yaml:6: tools.files.read: exposed name "fs__files.read" has characters other than letters, digits, '_' and '-', which common MCP clients (Claude, OpenAI) reject; remove the tool from the manifest`},
		},
		{
			name: "empty tool",
			src:  head + "  read:\n",
			want: []string{`m.yaml:6: tools.read: is empty; declare at least side_effects, data_access_level and risk`},
		},
		{
			name: "side effects missing",
			src:  head + "  read:\n    data_access_level: internal\n    risk: low\n",
			want: []string{`m.yaml:6: tools.read.side_effects: is required; list what the tool does, one or more of none, read, write, delete, send, pay, exec`},
		},
		{
			name: "side effect unknown",
			src:  head + strings.Replace(readTool, "[read]", "[read, writes]", 1),
			want: []string{`m.yaml:7: tools.read.side_effects: "writes" is not a side effect; use one of none, read, write, delete, send, pay, exec`},
		},
		{
			name: "side effect none combined",
			src:  head + strings.Replace(readTool, "[read]", "[none, read]", 1),
			want: []string{`m.yaml:7: tools.read.side_effects: "none" cannot be combined with other side effects; remove "none" or the others`},
		},
		{
			name: "side effect twice",
			src:  head + strings.Replace(readTool, "[read]", "[read, read]", 1),
			want: []string{`m.yaml:7: tools.read.side_effects: "read" is listed twice; list it once`},
		},
		{
			name: "data access level missing",
			src:  head + "  read:\n    side_effects: [read]\n    risk: low\n",
			want: []string{`m.yaml:6: tools.read.data_access_level: is required; use one of public, internal, confidential, sensitive, restricted`},
		},
		{
			name: "data access level unknown",
			src:  head + strings.Replace(readTool, "internal", "secret", 1),
			want: []string{`m.yaml:8: tools.read.data_access_level: "secret" is not a data access level; use one of public, internal, confidential, sensitive, restricted`},
		},
		{
			name: "risk missing",
			src:  head + "  read:\n    side_effects: [read]\n    data_access_level: internal\n",
			want: []string{`m.yaml:6: tools.read.risk: is required; use one of low, medium, high, critical`},
		},
		{
			name: "risk unknown",
			src:  head + strings.Replace(readTool, "risk: low", "risk: extreme", 1),
			want: []string{`m.yaml:9: tools.read.risk: "extreme" is not a risk tier; use one of low, medium, high, critical`},
		},
		{
			name: "high risk without approval is allowed",
			src:  head + strings.Replace(readTool, "risk: low", "risk: critical", 1),
		},
		{
			name: "approval without group",
			src:  head + readTool + "    approval:\n      quorum: 2\n",
			want: []string{`m.yaml:10: tools.read.approval.group: is required when approval is set; name the approver group, e.g. "ops"`},
		},
		{
			name: "approval empty",
			src:  head + readTool + "    approval:\n",
			want: []string{`m.yaml:10: tools.read.approval: is empty; set at least group (who approves), or remove approval`},
		},
		{
			name: "approval quorum zero",
			src:  head + readTool + "    approval:\n      group: ops\n      quorum: 0\n",
			want: []string{`m.yaml:12: tools.read.approval.quorum: must be at least 1, got 0; it is how many members of the group must approve`},
		},
		{
			name: "approval on_timeout unknown",
			src:  head + readTool + "    approval:\n      group: ops\n      on_timeout: reject\n",
			want: []string{`m.yaml:12: tools.read.approval.on_timeout: "reject" is not a timeout outcome; use deny (the default) or approve`},
		},
		{
			name: "approval escalation not before timeout",
			src:  head + readTool + "    approval:\n      group: ops\n      timeout: 30m\n      escalate_after: 1h\n",
			want: []string{`m.yaml:13: tools.read.approval.escalate_after: 1h0m0s is not shorter than approval.timeout (30m0s), so the escalation would never happen; lower it or raise the timeout`},
		},
		{
			name: "approval valid",
			src:  head + readTool + "    approval:\n      group: ops\n      quorum: 2\n      timeout: 1h\n      escalate_after: 15m\n      escalate_to: leads\n      on_timeout: approve\n",
		},
		{
			name: "timeout zero",
			src:  head + readTool + "    timeout: 0s\n",
			want: []string{`m.yaml:10: tools.read.timeout: must be positive, got 0s; omit it for the default 1m0s`},
		},
		{
			name: "timeout over a day",
			src:  head + readTool + "    timeout: 48h\n",
			want: []string{`m.yaml:10: tools.read.timeout: 48h0m0s is longer than 24h, the most one attempt may run; lower it`},
		},
		{
			name: "heartbeat timeout zero",
			src:  head + readTool + "    heartbeat_timeout: 0s\n",
			want: []string{`m.yaml:10: tools.read.heartbeat_timeout: must be at least 1s, got 0s; omit it for the default (a third of the timeout, between 5s and 10s)`},
		},
		{
			name: "heartbeat timeout under a second",
			src:  head + readTool + "    heartbeat_timeout: 500ms\n",
			want: []string{`m.yaml:10: tools.read.heartbeat_timeout: must be at least 1s, got 500ms; omit it for the default (a third of the timeout, between 5s and 10s)`},
		},
		{
			name: "heartbeat timeout not shorter than the timeout",
			src:  head + readTool + "    timeout: 20s\n    heartbeat_timeout: 20s\n",
			want: []string{`m.yaml:11: tools.read.heartbeat_timeout: 20s is not shorter than the timeout (20s), which notices a dead worker as soon; lower it or remove it`},
		},
		{
			name: "heartbeat timeout not shorter than the default timeout",
			src:  head + readTool + "    heartbeat_timeout: 2m\n",
			want: []string{`m.yaml:10: tools.read.heartbeat_timeout: 2m0s is not shorter than the timeout (1m0s), which notices a dead worker as soon; lower it or remove it`},
		},
		{
			name: "heartbeat timeout without a unit",
			src:  head + readTool + "    heartbeat_timeout: 30\n",
			want: []string{`m.yaml:10: tools.read.heartbeat_timeout: 30 has no unit; write a duration such as "30s" (s, m or h)`},
		},
		{
			name: "heartbeat timeout valid",
			src:  head + readTool + "    timeout: 1h\n    heartbeat_timeout: 30s\n",
		},
		{
			name: "retry values",
			src:  head + readTool + "    retry:\n      max_attempts: -1\n      backoff: 0.5\n      initial_interval: -1s\n",
			want: []string{
				`m.yaml:11: tools.read.retry.max_attempts: must be 0 or more, got -1; 1 means no retries, 0 or omitted means the default 3`,
				`m.yaml:12: tools.read.retry.backoff: must be at least 1 (1 keeps the interval constant), got 0.5`,
				`m.yaml:13: tools.read.retry.initial_interval: must not be negative, got -1s; omit it for the default 1s`,
			},
		},
		{
			name: "retry max below initial",
			src:  head + readTool + "    retry:\n      initial_interval: 10s\n      max_interval: 5s\n",
			want: []string{`m.yaml:12: tools.read.retry.max_interval: 5s is shorter than initial_interval (10s); raise it or lower initial_interval`},
		},
		{
			name: "capture names undeclared tool",
			src:  head + readTool + "    capture:\n      tool: stat\n      args: {path: args.path}\n",
			want: []string{`m.yaml:11: tools.read.capture.tool: "stat" is not declared in this manifest; use one of read`},
		},
		{
			name: "compensation without tool",
			src:  head + readTool + "    compensation:\n      args:\n        path: \"\"\n",
			want: []string{
				`m.yaml:10: tools.read.compensation.tool: is required; name a tool declared in this manifest: read`,
				`m.yaml:12: tools.read.compensation.args.path: expression is empty; write a CEL expression over args, result, before, call and roots, e.g. args.path`,
			},
		},
		{
			name: "capture uses before",
			src:  head + readTool + "    capture:\n      tool: read\n      args:\n        path: before.path\n",
			want: []string{`m.yaml:13: tools.read.capture.args.path: undeclared reference to 'before'; a capture runs before the call, so it may use only args, call and roots`},
		},
		{
			name: "capture with else",
			src:  head + readTool + "    capture:\n      tool: read\n      when: args.path != ''\n      else: {tool: read}\n",
			want: []string{`m.yaml:13: tools.read.capture.else: applies only to a compensation; a capture whose when is false is not made, and before is null, so remove else`},
		},
		{
			name: "compensation uses before without capture",
			src:  head + readTool + "    compensation:\n      tool: read\n      when: before != null\n      args:\n        path: args.path\n        content: before.content\n",
			want: []string{
				`m.yaml:12: tools.read.compensation.when: uses before, but the tool has no capture; add capture or remove before`,
				`m.yaml:15: tools.read.compensation.args.content: uses before, but the tool has no capture; add capture or remove before`,
			},
		},
		{
			name: "compensation with a misspelt call field and a syntax error",
			src:  head + readTool + "    compensation:\n      tool: read\n      args:\n        a: call.slg\n        b: args.path +\n",
			want: []string{
				`m.yaml:13: tools.read.compensation.args.a: undefined field 'slg'; call has the fields id, task, tool and slug`,
				`m.yaml:14: tools.read.compensation.args.b: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}; write a CEL expression over args, result, before, call and roots (see https://cel.dev)`,
			},
		},
		{
			name: "compensation when not bool, and empty",
			src:  head + readTool + "    compensation:\n      tool: read\n      when: args.path + 'x'\n      else:\n        tool: read\n        when: ' '\n",
			want: []string{
				`m.yaml:12: tools.read.compensation.when: the condition is of type string, not bool; compare it, e.g. before != null`,
				`m.yaml:15: tools.read.compensation.else.when: is empty; write a CEL condition over args, result, before, call and roots, e.g. before != null, or remove when`,
			},
		},
		{
			name: "else chain problems carry their path",
			src: head + readTool + `    capture: {tool: read, args: {path: args.path}}
    compensation:
      tool: read
      when: before != null
      args: {path: args.path}
      else:
        tool: move
        when: args.path.startsWith(roots[0])
        args:
          source: args.path
          destination: roots[1] + "/" + call.slug +
        else:
          tool: read
          else: {tool: read}
`,
			want: []string{
				`m.yaml:16: tools.read.compensation.else.tool: "move" is not declared in this manifest; use one of read`,
				`m.yaml:20: tools.read.compensation.else.args.destination: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}; write a CEL expression over args, result, before, call and roots (see https://cel.dev)`,
				`m.yaml:23: tools.read.compensation.else.else.else: is never used: it is made when when is false, and there is no when; add when or remove else`,
			},
		},
		{
			name: "valid compensation chain",
			src: head + readTool + `    capture: {tool: read, args: {path: args.path}}
    compensation:
      tool: read
      when: before != null
      args: {path: args.path, content: before.content}
      else:
        tool: read
        args: {source: args.path, destination: 'roots[1] + "/" + call.slug'}
`,
		},
		{
			name: "compensation names a declared tool",
			src:  head + readTool + "    compensation: {tool: read, args: {path: args.path}}\n",
		},
		{
			name: "empty redact and path_args entries",
			src:  head + readTool + "    redact: [content, \"\"]\n    path_args: [\" \"]\n    required_permissions: [\"\"]\n",
			want: []string{
				`m.yaml:1: server.path_roots: is required because tools.read declares path_args: list the directories its paths must stay inside, e.g. ["${AIRLOCK_DATA_DIR}/sandbox"]`,
				`m.yaml:10: tools.read.redact[1]: is empty; write an argument path such as "content" or "auth.token" or remove the entry`,
				`m.yaml:11: tools.read.path_args[0]: is empty; write an argument name such as "path" or remove the entry`,
				`m.yaml:12: tools.read.required_permissions[0]: is empty; write a permission name such as "filesystem.write" or remove the entry`,
			},
		},
		{
			name: "every problem at once, in file order",
			src: `server:
  name: Fs
  stdio: {}
tools:
  write:
    side_effects: [writes]
    risk: huge
    approval:
      quorum: -1
  read:
    side_effects: [read]
    data_access_level: internal
    risk: low
    compensation: {tool: nope}
`,
			want: []string{
				`m.yaml:2: server.name: "Fs" is not a valid server name; start with a lowercase letter, then up to 30 lowercase letters, digits, '-' or '_'`,
				`m.yaml:3: server.stdio.command: is required; name the program to launch, e.g. npx`,
				`m.yaml:5: tools.write.data_access_level: is required; use one of public, internal, confidential, sensitive, restricted`,
				`m.yaml:6: tools.write.side_effects: "writes" is not a side effect; use one of none, read, write, delete, send, pay, exec`,
				`m.yaml:7: tools.write.risk: "huge" is not a risk tier; use one of low, medium, high, critical`,
				`m.yaml:8: tools.write.approval.group: is required when approval is set; name the approver group, e.g. "ops"`,
				`m.yaml:9: tools.write.approval.quorum: must be at least 1, got -1; it is how many members of the group must approve`,
				`m.yaml:14: tools.read.compensation.tool: "nope" is not declared in this manifest; use one of read, write`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, problemsOf(t, tt.src)); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeProblems(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{
			name: "unknown field with suggestion",
			src:  head + readTool + "    side_effect: [read]\n",
			want: []string{`m.yaml:10: tools.read.side_effect: unknown field; did you mean "side_effects"?`},
		},
		{
			name: "unknown field lists known ones",
			src:  "server:\n  name: fs\n  command: npx\n",
			want: []string{`m.yaml:3: server.command: unknown field; known fields are name, prefix, stdio, http, wasm, connect_timeout, path_roots, protocol_version, sandbox`},
		},
		{
			name: "loader-only field is unknown in a file",
			src:  "file: x.yaml\n" + head + readTool,
			want: []string{`m.yaml:1: file: unknown field; known fields are server, tools, resources, prompts`},
		},
		{
			name: "bare number duration",
			src:  head + readTool + "    timeout: 30\n",
			want: []string{`m.yaml:10: tools.read.timeout: 30 has no unit; write a duration such as "30s" (s, m or h)`},
		},
		{
			name: "quoted number duration",
			src:  head + readTool + "    timeout: \"30\"\n",
			want: []string{`m.yaml:10: tools.read.timeout: 30 has no unit; write a duration such as "30s" (s, m or h)`},
		},
		{
			name: "garbage duration",
			src:  head + readTool + "    timeout: soon\n",
			want: []string{`m.yaml:10: tools.read.timeout: "soon" is not a duration; write a number with a unit, such as "30s", "5m" or "1h30m"`},
		},
		{
			name: "wrong kinds",
			src:  head + readTool + "    idempotent: maybe\n    side_effects: read\n    approval:\n      group: ops\n      quorum: two\n",
			want: []string{
				`m.yaml:10: tools.read.idempotent: expected true or false, got "maybe"`,
				`m.yaml:11: tools.read.side_effects: defined twice (first at line 7); keep one`,
				`m.yaml:14: tools.read.approval.quorum: expected a whole number, got "two"`,
			},
		},
		{
			name: "scalar where a list is expected",
			src:  head + strings.Replace(readTool, "[read]", "read", 1),
			want: []string{`m.yaml:7: tools.read.side_effects: expected a list, got "read"; write [read]`},
		},
		{
			name: "list where a value is expected",
			src:  head + strings.Replace(readTool, "risk: low", "risk: [low]", 1),
			want: []string{`m.yaml:9: tools.read.risk: expected a single value, got a list`},
		},
		{
			name: "syntax error",
			src:  "server:\n  name: fs\n   stdio: x\n",
			want: []string{`m.yaml:3: invalid YAML: mapping values are not allowed in this context`},
		},
		{
			name: "two documents",
			src:  head + readTool + "---\nserver: {}\n",
			want: []string{`m.yaml:10: the file holds more than one YAML document; keep one per file (remove the ---)`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := manifests.Parse("m.yaml", []byte(tt.src))
			if err == nil {
				t.Fatal("Parse succeeded, want problems")
			}
			if diff := cmp.Diff(tt.want, errorLines(t, err)); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseValues(t *testing.T) {
	src := head + readTool + `    timeout: 90s
    approval: &a
      group: ops
      escalate_after: 15m
  write:
    side_effects: [write]
    data_access_level: internal
    risk: high
    approval: *a
`
	m, err := manifests.Parse("m.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if ps := m.Validate(); len(ps) > 0 {
		t.Fatalf("problems: %v", manifests.Problems(ps))
	}
	if got := m.Tools["read"].EffectiveTimeout(); got.String() != "1m30s" {
		t.Errorf("timeout = %s, want 1m30s", got)
	}
	want := &manifests.Approval{Group: "ops", EscalateAfter: manifests.Duration(15 * 60e9)}
	if diff := cmp.Diff(want, m.Tools["write"].Approval); diff != "" {
		t.Errorf("aliased approval (-want +got):\n%s", diff)
	}
	if got := m.Lines.Line("tools.write.approval.group"); got != 12 {
		t.Errorf("line of a field reached through an alias = %d, want 12 (the anchor)", got)
	}
	if got := m.Lines.Line("tools.write.timeout"); got != 14 {
		t.Errorf("line of a missing field = %d, want 14 (its tool)", got)
	}
}

func writeFile(t *testing.T, dir, name, src string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadFilesCrossChecks(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, dir, "a.yaml", head+readTool)
	b := writeFile(t, dir, "b.yaml", "# the same server again\n"+head+readTool)
	bad := writeFile(t, dir, "c.yaml", strings.Replace(head, "name: fs", "name: other", 1)+strings.Replace(readTool, "risk: low", "risk: nope", 1))

	_, err := manifests.LoadFiles([]string{a, b, bad})
	want := []string{
		b + `:3: server.name: server "fs" is also declared in ` + a + `:2; server names must be unique across manifests, rename one or merge the files`,
	}
	want = append([]string{bad + `:9: tools.read.risk: "nope" is not a risk tier; use one of low, medium, high, critical`}, want...)
	if diff := cmp.Diff(want, errorLines(t, err)); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}

	ms, err := manifests.LoadFiles([]string{a})
	if err != nil || len(ms) != 1 || ms[0].File != a {
		t.Errorf("LoadFiles(one good file) = %v, %v", ms, err)
	}

	missing := filepath.Join(dir, "missing.yaml")
	_, err = manifests.Load(missing)
	if diff := cmp.Diff([]string{missing + ": cannot read the file: no such file or directory"}, errorLines(t, err)); diff != "" {
		t.Errorf("missing file (-want +got):\n%s", diff)
	}
}

// A value that cannot be decoded does not hide the problems of the rest of
// the file, and is not reported twice (once as undecodable, once as
// missing).
func TestLoadReportsDecodeAndValidationProblems(t *testing.T) {
	p := writeFile(t, t.TempDir(), "m.yaml", head+`  read:
    side_effects: read
    data_access_level: secret
    risk: low
    timeout: 30
    approval: ops
`)
	_, err := manifests.Load(p)
	want := []string{
		p + `:7: tools.read.side_effects: expected a list, got "read"; write [read]`,
		p + `:8: tools.read.data_access_level: "secret" is not a data access level; use one of public, internal, confidential, sensitive, restricted`,
		p + `:10: tools.read.timeout: 30 has no unit; write a duration such as "30s" (s, m or h)`,
		p + `:11: tools.read.approval: expected a mapping (key: value lines), got "ops"`,
	}
	if diff := cmp.Diff(want, errorLines(t, err)); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

func TestValidateAllExposedNames(t *testing.T) {
	// Two manifests built in code (no lines, no file) whose server names
	// are unique; exposed names cannot collide unless the name rules are
	// broken, which is exactly what a manifest built in code may do.
	tool := func() *manifests.Tool {
		return &manifests.Tool{SideEffects: []manifests.SideEffect{"read"}, DataAccessLevel: "public", Risk: "low"}
	}
	a := &manifests.Manifest{File: "a.yaml", Server: manifests.Server{Name: "a__b", Stdio: &manifests.StdioServer{Command: "x"}}, Tools: map[string]*manifests.Tool{"c": tool()}}
	b := &manifests.Manifest{File: "b.yaml", Server: manifests.Server{Name: "a", Stdio: &manifests.StdioServer{Command: "x"}}, Tools: map[string]*manifests.Tool{"b__c": tool()}}
	var got []string
	for _, p := range manifests.ValidateAll([]*manifests.Manifest{a, b}) {
		got = append(got, p.Error())
	}
	want := []string{
		`a.yaml: server.name: "a__b" contains "__", which separates server and tool in exposed names; use a single '_' or '-'`,
		`b.yaml: tools.b__c: exposed name "a__b__c" is also exposed by server "a__b" (a.yaml); exposed names must be unique across manifests, so set a different server.prefix in one of them (here "a__", there "a__b__")`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

func TestProblemError(t *testing.T) {
	tests := []struct {
		p    manifests.Problem
		want string
	}{
		{manifests.Problem{File: "f.yaml", Line: 3, Field: "tools.x.risk", Msg: "bad"}, "f.yaml:3: tools.x.risk: bad"},
		{manifests.Problem{File: "f.yaml", Field: "tools.x.risk", Msg: "bad"}, "f.yaml: tools.x.risk: bad"},
		{manifests.Problem{File: "f.yaml", Line: 3, Msg: "bad"}, "f.yaml:3: bad"},
		{manifests.Problem{Field: "risk", Msg: "bad"}, "risk: bad"},
	}
	for _, tt := range tests {
		if got := tt.p.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
	ps := manifests.Problems{tests[0].p, tests[2].p}
	if got, want := ps.Error(), "f.yaml:3: tools.x.risk: bad\nf.yaml:3: bad"; got != want {
		t.Errorf("Problems.Error() = %q, want %q", got, want)
	}
}

func TestPathRootsRequiredWithPathArgs(t *testing.T) {
	m, err := manifests.Parse("fs.yaml", []byte(`server:
  name: fs
  stdio: {command: x}
tools:
  read: {side_effects: [read], data_access_level: internal, risk: low, path_args: [path]}
`))
	if err != nil {
		t.Fatal(err)
	}
	ps := m.Validate()
	if len(ps) != 1 || ps[0].Field != "server.path_roots" || !strings.Contains(ps[0].Msg, "tools.read declares path_args") {
		t.Fatalf("problems: %v", ps)
	}
	m.Server.PathRoots = []string{"/srv/data", " "}
	ps = m.Validate()
	if len(ps) != 1 || ps[0].Field != "server.path_roots[1]" {
		t.Fatalf("problems with a blank root: %v", ps)
	}
}

func TestCompensable(t *testing.T) {
	var none *manifests.Tool
	for _, tt := range []struct {
		tool *manifests.Tool
		want bool
	}{
		{none, false},
		{&manifests.Tool{}, false},
		{&manifests.Tool{Capture: &manifests.Call{Tool: "read"}}, false},
		{&manifests.Tool{Compensation: &manifests.Call{Tool: "write", When: "before != null"}}, true},
	} {
		if got := tt.tool.Compensable(); got != tt.want {
			t.Errorf("%+v.Compensable() = %v, want %v", tt.tool, got, tt.want)
		}
	}
}

// TestRelativePathRootsRefused: a relative path root passes no call at
// run time (policy refuses to guess the upstream's working directory), so
// validation refuses it, at its line, with an absolute example.
func TestRelativePathRootsRefused(t *testing.T) {
	src := func(root string) string {
		return "server:\n  name: fs\n  stdio: {command: x}\n  path_roots:\n    - /srv/ok\n    - " + root + "\ntools:\n  read: {side_effects: [read], data_access_level: internal, risk: low, path_args: [path]}\n"
	}
	for _, tt := range []struct {
		root, want string
	}{
		{`sandbox`, `m.yaml:6: server.path_roots[1]: "sandbox" is a relative path, and policy denies every call whose paths must lie under a relative root (the upstream resolves paths against a working directory airlock cannot know); write an absolute path, e.g. "/srv/sandbox" or "${AIRLOCK_DATA_DIR}/sandbox"`},
		{`./data/files/`, `m.yaml:6: server.path_roots[1]: "./data/files/" is a relative path, and policy denies every call whose paths must lie under a relative root (the upstream resolves paths against a working directory airlock cannot know); write an absolute path, e.g. "/srv/data/files" or "${AIRLOCK_DATA_DIR}/data/files"`},
		{`"~/notes"`, `m.yaml:6: server.path_roots[1]: "~/notes" is a relative path, and policy denies every call whose paths must lie under a relative root (the upstream resolves paths against a working directory airlock cannot know); write an absolute path, e.g. "/srv/notes" or "${AIRLOCK_DATA_DIR}/notes"`},
		{`../up`, `m.yaml:6: server.path_roots[1]: "../up" is a relative path, and policy denies every call whose paths must lie under a relative root (the upstream resolves paths against a working directory airlock cannot know); write an absolute path, e.g. "/srv/sandbox" or "${AIRLOCK_DATA_DIR}/sandbox"`},
		{`/srv/data`, ``},
		{`"${AIRLOCK_DATA_DIR}/sandbox"`, ``},
		{`"${HOME}"`, ``},
	} {
		t.Run(tt.root, func(t *testing.T) {
			var want []string
			if tt.want != "" {
				want = []string{tt.want}
			}
			if diff := cmp.Diff(want, problemsOf(t, src(tt.root))); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEveryFileProblemHasALine: an empty, comment-only, binary or
// non-UTF-8 manifest is reported at a line (line 1 where nothing better is
// known), in the file:line: shape editors and CI annotators read, through
// the loader `airlock manifests validate` uses.
func TestEveryFileProblemHasALine(t *testing.T) {
	for _, tt := range []struct {
		name string
		data []byte
		want []string
	}{
		{"empty", nil, []string{"m.yaml:1: the file declares nothing (it is empty, or holds only comments); a manifest declares a server and its tools: write them, or have `airlock manifests scan --name NAME --command CMD` write a skeleton"}},
		{"blank lines", []byte("\n \n\n"), []string{"m.yaml:1: the file declares nothing (it is empty, or holds only comments); a manifest declares a server and its tools: write them, or have `airlock manifests scan --name NAME --command CMD` write a skeleton"}},
		{"comments only", []byte("# a manifest\n# to be written\n"), []string{"m.yaml:1: the file declares nothing (it is empty, or holds only comments); a manifest declares a server and its tools: write them, or have `airlock manifests scan --name NAME --command CMD` write a skeleton"}},
		{"binary", []byte("\x00\x01\x02\x03binary"), []string{"m.yaml:1: the file is not YAML text: it holds the control character U+0000 at column 1; remove it (is this a binary file?)"}},
		{"png", []byte("\x89PNG\r\n\x1a\n\x00\x00"), []string{"m.yaml:1: the file is not UTF-8 text: byte 0x89 at column 1 is not UTF-8; save the file as UTF-8 (a manifest is YAML text, not a binary file)"}},
		{"latin-1 on line 2", []byte("server:\n  name: caf\xe9\n"), []string{"m.yaml:2: the file is not UTF-8 text: byte 0xE9 at column 12 is not UTF-8; save the file as UTF-8 (a manifest is YAML text, not a binary file)"}},
		{"escape character", []byte(head + "  read:\n    risk: low\x1b[2J\n"), []string{"m.yaml:7: the file is not YAML text: it holds the control character U+001B at column 14; remove it (is this a binary file?)"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m.yaml")
			if err := os.WriteFile(path, tt.data, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := manifests.LoadFiles([]string{path})
			if err == nil {
				t.Fatal("loaded, want problems")
			}
			got := errorLines(t, err)
			for i := range got {
				got[i] = strings.TrimPrefix(got[i], filepath.Dir(path)+string(filepath.Separator))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
	// A UTF-16 file (with its byte order mark) is YAML that yaml.v3 reads:
	// it is not refused as binary.
	utf16 := []byte{0xFF, 0xFE}
	for _, r := range head + readTool {
		utf16 = append(utf16, byte(r), 0)
	}
	if _, err := manifests.Parse("m.yaml", utf16); err != nil {
		t.Errorf("a UTF-16 manifest: %v", err)
	}
}

// server.prefix: absent means "<server>__", "" the upstream's names
// unchanged; a prefix must keep exposed names valid, and exposed names
// unique across manifests (the message names both files and lines).
func TestPrefix(t *testing.T) {
	withPrefix := func(p string) string {
		return strings.Replace(head, "  name: fs\n", "  name: fs\n  prefix: "+p+"\n", 1)
	}
	tests := []struct {
		name, src string
		want      []string
	}{
		{name: "empty", src: withPrefix(`""`) + readTool},
		{name: "other", src: withPrefix(`fs_`) + readTool},
		{name: "invalid characters", src: withPrefix(`"fs."`) + readTool,
			want: []string{`m.yaml:3: server.prefix: "fs." is not a valid prefix; exposed names may only have letters, digits, '_' and '-' (common MCP clients reject others), so use up to 63 of those, e.g. "fs_", or "" for the upstream's names unchanged`}},
		{name: "exposed name too long", src: withPrefix(strings.Repeat("p", 62)) + readTool,
			want: []string{`m.yaml:7: tools.read: exposed name "` + strings.Repeat("p", 62) + `read" is 66 characters; common MCP clients (Claude, OpenAI) reject tool names longer than 64, so shorten the server name or set a shorter server.prefix`}},
		{name: "tool name with a dot, unprefixed", src: withPrefix(`""`) + strings.Replace(readTool, "read:", "a.read:", 1),
			want: []string{`m.yaml:7: tools.a.read: exposed name "a.read" has characters other than letters, digits, '_' and '-', which common MCP clients (Claude, OpenAI) reject; remove the tool from the manifest`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, problemsOf(t, tt.src)); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("exposed names", func(t *testing.T) {
		m, err := manifests.Parse("m.yaml", []byte(head+readTool))
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Exposed("read"); got != "fs__read" {
			t.Errorf("default Exposed(read) = %q, want fs__read", got)
		}
		m, err = manifests.Parse("m.yaml", []byte(withPrefix(`""`)+readTool))
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Exposed("read"); got != "read" {
			t.Errorf("unprefixed Exposed(read) = %q, want read", got)
		}
	})

	t.Run("clash across manifests", func(t *testing.T) {
		dir := t.TempDir()
		a := writeFile(t, dir, "a.yaml", strings.Replace(withPrefix(`""`), "name: fs", "name: plain", 1)+strings.Replace(readTool, "read:", "fs__read:", 1))
		b := writeFile(t, dir, "b.yaml", head+readTool)
		_, err := manifests.LoadFiles([]string{a, b})
		want := []string{b + `:6: tools.read: exposed name "fs__read" is also exposed by server "plain" (` + a + `:7); exposed names must be unique across manifests, so set a different server.prefix in one of them (here "fs__", there "")`}
		if diff := cmp.Diff(want, errorLines(t, err)); diff != "" {
			t.Errorf("problems (-want +got):\n%s", diff)
		}
	})
}

func TestNames(t *testing.T) {
	empty, short := "", "x_"
	ms := []*manifests.Manifest{
		{Server: manifests.Server{Name: "plain", Prefix: &empty}},
		{Server: manifests.Server{Name: "fs"}},
		{Server: manifests.Server{Name: "x", Prefix: &short}},
	}
	n := manifests.NewNames(ms)
	for _, tt := range []struct{ server, name, exposed string }{
		{"plain", "read", "read"},
		{"fs", "read", "fs__read"},
		{"x", "read", "x_read"},
		{"unknown", "read", "unknown__read"},
	} {
		if got := n.Expose(tt.server, tt.name); got != tt.exposed {
			t.Errorf("Expose(%s, %s) = %q, want %q", tt.server, tt.name, got, tt.exposed)
		}
	}
	for _, tt := range []struct{ exposed, server, name string }{
		{"fs__read", "fs", "read"},
		{"x_read", "x", "read"},
		{"read", "plain", "read"},
		{"fs__", "plain", "fs__"}, // fs's prefix leaves no name
	} {
		s, name, ok := n.Resolve(tt.exposed)
		if !ok || s != tt.server || name != tt.name {
			t.Errorf("Resolve(%s) = %s, %s, %v; want %s, %s", tt.exposed, s, name, ok, tt.server, tt.name)
		}
	}
	if _, _, ok := manifests.NewNames(ms[1:]).Resolve("read"); ok {
		t.Error("Resolve(read) found a server although every server has a prefix")
	}
}

// TestToolCost checks the cost field (issue 16 §3): positive whole
// numbers up to MaxToolCost, default 1.
func TestToolCost(t *testing.T) {
	for _, tc := range []struct {
		cost string
		want []string
	}{
		{cost: "3"},
		{cost: "0", want: []string{`m.yaml:10: tools.read.cost: must be a whole number from 1 to 1000000, got 0; it is what one call counts against its task's budget (omit it for 1)`}},
		{cost: "-2", want: []string{`m.yaml:10: tools.read.cost: must be a whole number from 1 to 1000000, got -2; it is what one call counts against its task's budget (omit it for 1)`}},
		{cost: "2000000", want: []string{`m.yaml:10: tools.read.cost: must be a whole number from 1 to 1000000, got 2000000; it is what one call counts against its task's budget (omit it for 1)`}},
	} {
		t.Run(tc.cost, func(t *testing.T) {
			got := problemsOf(t, head+readTool+"    cost: "+tc.cost+"\n")
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
	m, err := manifests.Parse("m.yaml", []byte(head+readTool))
	if err != nil {
		t.Fatal(err)
	}
	if c := m.Tools["read"].EffectiveCost(); c != 1 {
		t.Errorf("default cost %d, want 1", c)
	}
}
