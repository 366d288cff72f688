package config_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/manifests"
)

func write(t *testing.T, path, src string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func manifestFor(name string) string {
	return "server:\n  name: " + name + "\n  stdio:\n    command: npx\ntools:\n  read:\n    side_effects: [read]\n    data_access_level: internal\n    risk: low\n"
}

func problems(t *testing.T, err error) []string {
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

func TestLoadDefaultsAndRelativeManifests(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "m", "b.yaml"), manifestFor("beta"))
	write(t, filepath.Join(dir, "m", "a.yaml"), manifestFor("alpha"))
	cfgPath := write(t, filepath.Join(dir, "airlock.yaml"), "manifests: [m/*.yaml, m/a.yaml]\n")

	// Load from another directory: manifest paths follow the config file,
	// not the current directory.
	t.Chdir(t.TempDir())
	snap, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	want := &config.Config{
		File:      cfgPath,
		DataDir:   ".airlock",
		Listen:    "127.0.0.1:7400",
		Manifests: []string{"m/*.yaml", "m/a.yaml"},
		Temporal:  config.Temporal{Namespace: "default", TaskQueue: "airlock"},
		Task: config.Task{
			MaxCalls:    1000,
			Deadline:    manifests.Duration(24 * time.Hour),
			IdleTimeout: manifests.Duration(time.Hour),
			AskTimeout:  manifests.Duration(5 * time.Minute),
		},
		HTTP: config.HTTP{
			ReadHeaderTimeout:       manifests.Duration(10 * time.Second),
			ReadTimeout:             manifests.Duration(30 * time.Second),
			IdleTimeout:             manifests.Duration(2 * time.Minute),
			MaxHeaderBytes:          64 << 10,
			MaxUnauthenticatedBody:  256 << 10,
			MaxUnauthenticatedConns: 1024,
		},
		Gateway: config.Gateway{SessionIdleTimeout: manifests.Duration(30 * time.Minute), MaxSessionsPerPrincipal: 100, TaskConcurrency: 32, TaskBacklog: 256, PrincipalShare: 1, SessionKeyEnv: config.DefaultSessionKeyEnv, UnnamedCalls: config.UnnamedNewTask},
	}
	if diff := cmp.Diff(want, snap.Config); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	var got [][2]string
	for _, m := range snap.Manifests {
		got = append(got, [2]string{m.Server.Name, m.File})
	}
	wantM := [][2]string{ // sorted by server name, a.yaml loaded once
		{"alpha", filepath.Join(dir, "m", "a.yaml")},
		{"beta", filepath.Join(dir, "m", "b.yaml")},
	}
	if diff := cmp.Diff(wantM, got); diff != "" {
		t.Errorf("manifests (-want +got):\n%s", diff)
	}
}

func TestLoadProblems(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string // relative to the temp dir
		cfg   string
		want  []string // "DIR/" stands for the temp dir
	}{
		{
			name: "glob matching nothing",
			cfg:  "manifests:\n  - m/*.yaml\n  - nothing/*.yaml\n",
			files: map[string]string{
				"m/a.yaml": manifestFor("alpha"),
			},
			want: []string{`DIR/airlock.yaml:3: manifests[1]: "nothing/*.yaml" matches no file (looked for DIR/nothing/*.yaml); fix the pattern, which is relative to the configuration file, or remove it`},
		},
		{
			name: "manifests missing",
			cfg:  "listen: 127.0.0.1:1\n",
			want: []string{`DIR/airlock.yaml:1: manifests: is required; list manifest files or globs relative to this file, e.g. ["manifests/*.yaml"]`},
		},
		{
			name:  "role guard action unknown",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\nroles:\n  strict:\n    guard:\n      results:\n        secrets: hide\n",
			want:  []string{`DIR/airlock.yaml:6: roles.strict.guard.results.secrets: must be one of redact, block, require_approval, annotate, off, got "hide"; redact replaces each match in a tool's result with a marker, block withholds the result, require_approval holds it until an approver approves delivering it (the call has run), annotate delivers it and records the finding`},
		},
		{
			name:  "role guard descriptions",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\nroles:\n  strict:\n    guard:\n      descriptions: {injection: block}\n",
			want:  []string{`DIR/airlock.yaml:5: roles.strict.guard.descriptions: a tool's definition is inspected once for every principal, so a role cannot set it; set guard.descriptions in airlock.yaml or the tool's manifest, or remove it`},
		},
		{
			name:  "role guard empty",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\nroles:\n  strict:\n    tools: [\"*\"]\n    guard:\n",
			want:  []string{`DIR/airlock.yaml:5: roles.strict.guard: is empty; write e.g. guard: {results: {secrets: block}}, or remove it`},
		},
		{
			name:  "role guard duplicate key",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\nroles:\n  strict:\n    guard:\n      arguments: {secrets: block}\n      arguments: {secrets: off}\n",
			want: []string{
				`DIR/airlock.yaml:4: roles.strict.guard.results: is required in guard; write results: {secrets: redact} or {personal_data: redact} (or injection: annotate; or block, or off), arguments: {secrets: block} or descriptions: {injection: annotate}, or remove guard`,
				`DIR/airlock.yaml:6: roles.strict.guard.arguments: defined twice (first at line 5); keep one`,
			},
		},
		{
			name:  "role guard case-folded key",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\nroles:\n  strict:\n    guard:\n      Results: {secrets: block}\n",
			want: []string{
				`DIR/airlock.yaml:4: roles.strict.guard.results: is required in guard; write results: {secrets: redact} or {personal_data: redact} (or injection: annotate; or block, or off), arguments: {secrets: block} or descriptions: {injection: annotate}, or remove guard`,
				`DIR/airlock.yaml:5: roles.strict.guard.Results: unknown field; did you mean "results"?`,
			},
		},
		{
			name:  "guard action unknown",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\nguard:\n  results:\n    secrets: hide\n",
			want:  []string{`DIR/airlock.yaml:4: guard.results.secrets: must be one of redact, block, require_approval, annotate, off, got "hide"; redact replaces each match in a tool's result with a marker, block withholds the result, require_approval holds it until an approver approves delivering it (the call has run), annotate delivers it and records the finding`},
		},
		{
			name:  "guard without results",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\nguard: {}\n",
			want:  []string{`DIR/airlock.yaml:2: guard.results: is required in guard; write results: {secrets: redact} or {personal_data: redact} (or injection: annotate; or block, or off), arguments: {secrets: block} or descriptions: {injection: annotate}, or remove guard`},
		},
		{
			name:  "guard personal data action unknown",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\nguard:\n  results:\n    secrets: redact\n    personal_data: mask\n",
			want:  []string{`DIR/airlock.yaml:5: guard.results.personal_data: must be one of redact, block, require_approval, annotate, off, got "mask"; redact replaces each match in a tool's result with a marker, block withholds the result, require_approval holds it until an approver approves delivering it (the call has run), annotate delivers it and records the finding`},
		},
		{
			name:  "guard results naming nothing",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\nguard:\n  results: {}\n",
			want:  []string{`DIR/airlock.yaml:3: guard.results: names no category; write secrets: redact, personal_data: redact and/or injection: annotate (or block, or off), or remove results`},
		},
		{
			name:  "guard injection action unknown",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\nguard:\n  results:\n    injection: warn\n",
			want:  []string{`DIR/airlock.yaml:4: guard.results.injection: must be one of annotate, block, redact, require_approval, off, got "warn"; annotate delivers a result holding prompt-injection markers and records them, block withholds it, redact replaces each marker, require_approval holds it until an approver approves delivering it`},
		},
		{
			name:  "guard descriptions redact",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\nguard:\n  descriptions:\n    injection: redact\n",
			want:  []string{`DIR/airlock.yaml:4: guard.descriptions.injection: must be one of annotate, block, off, got "redact"; annotate lists a tool whose definition holds prompt-injection markers and records them, block hides it and refuses its calls (redact is for results: a definition is listed whole or not at all)`},
		},
		{
			name:  "guard descriptions naming nothing",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\nguard:\n  descriptions: {}\n",
			want:  []string{`DIR/airlock.yaml:3: guard.descriptions: names no category; write injection: annotate (or block, or off), or remove descriptions`},
		},
		{
			name:  "guard injection duplicate key",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\nguard:\n  results:\n    injection: annotate\n    injection: off\n",
			// The duplicate is refused (the loader's check); the value is
			// not taken, so results names no category either.
			want: []string{
				`DIR/airlock.yaml:3: guard.results: names no category; write secrets: redact, personal_data: redact and/or injection: annotate (or block, or off), or remove results`,
				`DIR/airlock.yaml:5: guard.results.injection: defined twice (first at line 4); keep one`,
			},
		},
		{
			name:  "guard arguments action unknown",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\nguard:\n  arguments:\n    secrets: ask\n",
			want:  []string{`DIR/airlock.yaml:4: guard.arguments.secrets: must be one of redact, block, require_approval, annotate, off, got "ask"; redact replaces each match in a call's arguments with a marker, block refuses the call, require_approval asks an approver, annotate runs it and records the finding`},
		},
		{
			name:  "guard arguments case-folded key",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\nguard:\n  Arguments:\n    secrets: block\n",
			want: []string{`DIR/airlock.yaml:2: guard.results: is required in guard; write results: {secrets: redact} or {personal_data: redact} (or injection: annotate; or block, or off), arguments: {secrets: block} or descriptions: {injection: annotate}, or remove guard`,
				`DIR/airlock.yaml:3: guard.Arguments: unknown field; did you mean "arguments"?`},
		},
		{
			name:  "guard arguments duplicate key",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\nguard:\n  arguments:\n    secrets: block\n    secrets: off\n",
			want: []string{`DIR/airlock.yaml:3: guard.arguments: names no category; write secrets: block and/or personal_data: annotate (or redact, require_approval, off), or remove arguments`,
				`DIR/airlock.yaml:5: guard.arguments.secrets: defined twice (first at line 4); keep one`},
		},
		{
			name:  "guard injection in arguments",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\nguard:\n  arguments: {secrets: block, injection: annotate}\n",
			want:  []string{`DIR/airlock.yaml:3: guard.arguments.injection: prompt-injection markers are inspected in results and descriptions, not in a call's arguments; move it to results (or descriptions), or remove it`},
		},
		{
			name:  "http limits",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg: `manifests: [m.yaml]
http:
  read_header_timeout: 20s
  read_timeout: 5s
  idle_timeout: 0s
  max_header_bytes: 1KiB
  max_unauthenticated_body: 0B
  max_unauthenticated_conns: 0
`,
			want: []string{
				`DIR/airlock.yaml:4: http.read_timeout: 5s is less than http.read_header_timeout (20s): it bounds the headers and the body together; make it at least as long`,
				`DIR/airlock.yaml:5: http.idle_timeout: must be positive, got 0s; write how long an idle connection stays open, e.g. "2m" (the default)`,
				`DIR/airlock.yaml:6: http.max_header_bytes: must be at least 4KiB, got 1KiB; write e.g. "64KiB" (the default)`,
				`DIR/airlock.yaml:7: http.max_unauthenticated_body: must be at least 1KiB, got 0B: the approvals page's login and Slack's clicks send bodies before airlock knows the caller; write e.g. "256KiB" (the default)`,
				`DIR/airlock.yaml:8: http.max_unauthenticated_conns: must be at least 1, got 0; it caps the connections that have not sent a valid API key (default 1024)`,
			},
		},
		{
			name:  "http limits of the wrong kind",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\nhttp:\n  read_timeout: 30\n  max_unauthenticated_body: 64\n",
			want: []string{
				`DIR/airlock.yaml:3: http.read_timeout: 30 has no unit; write a duration such as "30s" (s, m or h)`,
				`DIR/airlock.yaml:4: http.max_unauthenticated_body: "64" is not a size; write a number and a unit, e.g. "64MiB" (B, KiB, MiB, GiB, KB, MB, GB)`,
			},
		},
		{
			name: "empty configuration",
			cfg:  "",
			want: []string{`DIR/airlock.yaml:1: manifests: is required; list manifest files or globs relative to this file, e.g. ["manifests/*.yaml"]`},
		},
		{
			name:  "empty and binary manifests",
			files: map[string]string{"m/a.yaml": "", "m/b.yaml": "\x00\x00\x00"},
			cfg:   "manifests: [m/*.yaml]\n",
			want: []string{
				"DIR/m/a.yaml:1: the file declares nothing (it is empty, or holds only comments); a manifest declares a server and its tools: write them, or have `airlock manifests scan --name NAME --command CMD` write a skeleton",
				"DIR/m/b.yaml:1: the file is not YAML text: it holds the control character U+0000 at column 1; remove it (is this a binary file?)",
			},
		},
		{
			name:  "unknown field",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\ntask:\n  max_call: 5\n",
			want:  []string{`DIR/airlock.yaml:3: task.max_call: unknown field; did you mean "max_calls"?`},
		},
		{
			name:  "max_calls beyond what a task can remember",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\ntask:\n  max_calls: 25001\n",
			want:  []string{`DIR/airlock.yaml:3: task.max_calls: is 25001, more than the 25000 calls one task can remember to keep retries from running twice; split the work into more tasks`},
		},
		{
			name:  "gateway session limits",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\ngateway:\n  session_idle_timeout: 0s\n  max_sessions_per_principal: 0\n",
			want: []string{
				`DIR/airlock.yaml:3: gateway.session_idle_timeout: must be positive, got 0s; write how long an unused MCP session stays open, e.g. "30m"`,
				`DIR/airlock.yaml:4: gateway.max_sessions_per_principal: must be at least 1, got 0; it caps the open MCP sessions of one principal (default 100)`,
			},
		},
		{
			name:  "gateway unnamed calls",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\ngateway:\n  unnamed_calls: New_Task\n",
			want:  []string{`DIR/airlock.yaml:3: gateway.unnamed_calls: "New_Task" is not one of new_task (each request that names no task starts its own; default) or principal_task (all of a principal's such requests share <principal>-default)`},
		},
		{
			name:  "task concurrency and backlog",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\ngateway:\n  task_concurrency: 65\n  task_backlog: -1\n",
			want: []string{
				`DIR/airlock.yaml:3: gateway.task_concurrency: must be 1-64, got 65; it is how many calls the gateway sends one task at once (default 32), and must stay under the Temporal server's history.maxInFlightUpdates (deploy/README.md)`,
				`DIR/airlock.yaml:4: gateway.task_backlog: must be 1-100000, got -1; it is how many calls wait their turn in one task before a call is answered that the task is busy (default 256)`,
			},
		},
		{
			name:  "principal share",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\ngateway:\n  principal_share: -1\n",
			want:  []string{`DIR/airlock.yaml:3: gateway.principal_share: must be 0-64, got -1; it is how many calls a principal keeps in flight at least while other principals have calls (default 1; 0: no bound)`},
		},
		{
			name:  "principal share past the bound",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\ngateway:\n  principal_share: 9007199254740993\n",
			want:  []string{`DIR/airlock.yaml:3: gateway.principal_share: must be 0-64, got 9007199254740993; it is how many calls a principal keeps in flight at least while other principals have calls (default 1; 0: no bound)`},
		},
		{
			name:  "task concurrency zero",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\ngateway:\n  task_concurrency: 0\n",
			want:  []string{`DIR/airlock.yaml:3: gateway.task_concurrency: must be 1-64, got 0; it is how many calls the gateway sends one task at once (default 32), and must stay under the Temporal server's history.maxInFlightUpdates (deploy/README.md)`},
		},
		{
			name:  "ask timeout",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\ntask:\n  ask_timeout: 0s\n",
			want:  []string{`DIR/airlock.yaml:3: task.ask_timeout: must be positive, got 0s; write how long an upstream's sampling or elicitation request waits for the client's answer, e.g. "5m"`},
		},
		{
			name:  "bare number duration",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\ntask:\n  deadline: 30\n",
			want:  []string{`DIR/airlock.yaml:3: task.deadline: 30 has no unit; write a duration such as "30s" (s, m or h)`},
		},
		{
			name:  "bad values, config and manifest problems together",
			files: map[string]string{"m.yaml": manifestFor("Bad")},
			cfg: `manifests: [m.yaml]
listen: "7400"
temporal:
  address: "temporal:port"
  namespace: ""
task:
  max_calls: 0
  deadline: 0s
  idle_timeout: -1m
`,
			want: []string{
				`DIR/airlock.yaml:2: listen: "7400" is not host:port; write e.g. "127.0.0.1:7400" (":7400" listens on every interface)`,
				`DIR/airlock.yaml:4: temporal.address: "temporal:port" has no valid port number (0 to 65535); write e.g. "temporal.example.com:7233", or omit it to use the embedded dev server`,
				`DIR/airlock.yaml:5: temporal.namespace: is empty; omit it for "default"`,
				`DIR/airlock.yaml:7: task.max_calls: must be at least 1, got 0; it caps the tool calls of one task (default 1000)`,
				`DIR/airlock.yaml:8: task.deadline: must be positive, got 0s; write how long a task may run, e.g. "24h"`,
				`DIR/airlock.yaml:9: task.idle_timeout: must be positive, got -1m0s; write how long a task may wait for its agent, e.g. "1h"`,
				`DIR/m.yaml:2: server.name: "Bad" is not a valid server name; start with a lowercase letter, then up to 30 lowercase letters, digits, '-' or '_'`,
			},
		},
		{
			name:  "blob store URLs",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\nblobs: gs://bucket\nblobs_dir: /var/lib/airlock/blobs\n",
			want: []string{
				`DIR/airlock.yaml:2: blobs: and blobs_dir are both set; keep one (blobs_dir: DIR is the same as blobs: file:///absolute/DIR)`,
				`DIR/airlock.yaml:2: blobs: "gs://bucket": scheme "gs" is not one of file, s3, mem; write file:///var/lib/airlock/blobs (one host or a shared mount), s3://BUCKET?region=REGION (add &endpoint=URL&use_path_style=true for MinIO and other S3-compatible servers, &prefix=airlock/ to share a bucket) or mem:// (one process, tests)`,
			},
		},
		{
			name:  "blob store URL shapes",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\nblobs: file://var/blobs\n",
			want: []string{
				`DIR/airlock.yaml:2: blobs: "file://var/blobs" does not name an absolute directory: a file URL has three slashes, e.g. file:///var/lib/airlock/blobs`,
			},
		},
		{
			name:  "s3 blob store with a path",
			files: map[string]string{"m.yaml": manifestFor("m")},
			cfg:   "manifests: [m.yaml]\nblobs: s3://bucket/airlock\n",
			want: []string{
				`DIR/airlock.yaml:2: blobs: "s3://bucket/airlock" has a path: put the key prefix in the query instead, e.g. s3://bucket?prefix=airlock/`,
			},
		},
		{
			name: "duplicate server across files",
			files: map[string]string{
				"m/a.yaml": manifestFor("same"),
				"m/b.yaml": manifestFor("same"),
			},
			cfg:  "manifests: [m/*.yaml]\n",
			want: []string{`DIR/m/b.yaml:2: server.name: server "same" is also declared in DIR/m/a.yaml:2; server names must be unique across manifests, rename one or merge the files`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, src := range tt.files {
				write(t, filepath.Join(dir, name), src)
			}
			_, err := config.Load(write(t, filepath.Join(dir, "airlock.yaml"), tt.cfg))
			if err == nil {
				t.Fatal("Load succeeded, want problems")
			}
			var want []string
			for _, w := range tt.want {
				want = append(want, string(bytes.ReplaceAll([]byte(w), []byte("DIR/"), []byte(dir+string(filepath.Separator)))))
			}
			if diff := cmp.Diff(want, problems(t, err)); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "airlock.yaml")
	_, err := config.Load(p)
	if diff := cmp.Diff([]string{p + ": cannot read the file: no such file or directory"}, problems(t, err)); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

// The repository's own airlock.yaml and example manifests load cleanly.
func TestRepositoryConfig(t *testing.T) {
	snap, err := config.Load("../../airlock.yaml")
	if err != nil {
		t.Fatalf("airlock.yaml has problems:\n%v", err)
	}
	var names []string
	for _, m := range snap.Manifests {
		names = append(names, m.Server.Name)
	}
	if diff := cmp.Diff([]string{"filesystem", "memory", "native"}, names); diff != "" {
		t.Errorf("servers (-want +got):\n%s", diff)
	}
	// The example redacts secrets in results (issue 30 §1): every tool
	// that declares no guard of its own gets it.
	for _, m := range snap.Manifests {
		for name, tool := range m.Tools {
			if tool.Guard == nil && m.SecretsInResults(tool) != manifests.GuardRedact {
				t.Errorf("%s.%s: secrets in results: %q, want redact (airlock.yaml's guard)", m.Server.Name, name, m.SecretsInResults(tool))
			}
			// Personal data is off in the example (RATIONALE.md).
			if tool.Guard == nil && m.PersonalDataInResults(tool) != manifests.GuardOff {
				t.Errorf("%s.%s: personal data in results: %q, want off", m.Server.Name, name, m.PersonalDataInResults(tool))
			}
			// Prompt-injection markers are annotated, in results and in
			// the tools' listed definitions.
			if tool.Guard == nil && (m.InjectionInResults(tool) != manifests.GuardAnnotate || m.InjectionInDescriptions(tool) != manifests.GuardAnnotate) {
				t.Errorf("%s.%s: injection in results %q, in descriptions %q, want annotate", m.Server.Name, name, m.InjectionInResults(tool), m.InjectionInDescriptions(tool))
			}
		}
	}
}

// TestGuardPersonalDataApplied: airlock.yaml's guard.results.personal_data
// becomes every manifest's default, beside secrets.
func TestGuardPersonalDataApplied(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "m.yaml"), manifestFor("m"))
	write(t, filepath.Join(dir, "airlock.yaml"), "manifests: [m.yaml]\nguard:\n  results: {personal_data: block}\n")
	snap, err := config.Load(filepath.Join(dir, "airlock.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := snap.Manifests[0]
	if got := m.PersonalDataInResults(nil); got != manifests.GuardBlock {
		t.Errorf("personal data: %q, want block", got)
	}
	if got := m.SecretsInResults(nil); got != manifests.GuardOff {
		t.Errorf("secrets: %q, want off (not configured)", got)
	}
}

// TestGuardInjectionApplied: airlock.yaml's guard.results.injection and
// guard.descriptions.injection become every manifest's defaults, and a
// guard with descriptions only leaves the result settings off.
func TestGuardInjectionApplied(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "m.yaml"), manifestFor("m"))
	write(t, filepath.Join(dir, "airlock.yaml"), "manifests: [m.yaml]\nguard:\n  results: {injection: block}\n  descriptions: {injection: annotate}\n")
	snap, err := config.Load(filepath.Join(dir, "airlock.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := snap.Manifests[0]
	if got := m.InjectionInResults(nil); got != manifests.GuardBlock {
		t.Errorf("injection in results: %q, want block", got)
	}
	if got := m.InjectionInDescriptions(nil); got != manifests.GuardAnnotate {
		t.Errorf("injection in descriptions: %q, want annotate", got)
	}
	write(t, filepath.Join(dir, "airlock.yaml"), "manifests: [m.yaml]\nguard:\n  descriptions: {injection: block}\n")
	snap, err = config.Load(filepath.Join(dir, "airlock.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m = snap.Manifests[0]
	if m.InjectionInDescriptions(nil) != manifests.GuardBlock || m.InjectionInResults(nil) != manifests.GuardOff || m.SecretsInResults(nil) != manifests.GuardOff {
		t.Errorf("descriptions only: %q %q %q", m.InjectionInDescriptions(nil), m.InjectionInResults(nil), m.SecretsInResults(nil))
	}
}

// TestGuardRolesApplied: the roles' guard blocks reach every manifest,
// and the action in force for a principal is the strictest of the tool's
// (else the configuration's) and each of its roles': a role tightens,
// never loosens.
func TestGuardRolesApplied(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "m.yaml"), manifestFor("m"))
	write(t, filepath.Join(dir, "airlock.yaml"), "manifests: [m.yaml]\nguard:\n  results: {secrets: redact}\n  arguments: {secrets: annotate}\n"+
		"roles:\n  strict:\n    guard:\n      results: {secrets: block, personal_data: redact}\n      arguments: {secrets: require_approval}\n"+
		"  auditor:\n    guard: {results: {secrets: annotate, injection: annotate}}\n  plain: {tools: [\"*\"]}\n")
	snap, err := config.Load(filepath.Join(dir, "airlock.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := snap.Manifests[0]
	for _, tc := range []struct {
		roles                     []string
		secrets, personal, inject manifests.GuardAction
		argSecrets, argPersonal   manifests.GuardAction
	}{
		{nil, manifests.GuardRedact, manifests.GuardOff, manifests.GuardOff, manifests.GuardAnnotate, manifests.GuardOff},
		{[]string{"plain"}, manifests.GuardRedact, manifests.GuardOff, manifests.GuardOff, manifests.GuardAnnotate, manifests.GuardOff},
		{[]string{"auditor"}, manifests.GuardRedact, manifests.GuardOff, manifests.GuardAnnotate, manifests.GuardAnnotate, manifests.GuardOff},
		{[]string{"strict"}, manifests.GuardBlock, manifests.GuardRedact, manifests.GuardOff, manifests.GuardRequireApproval, manifests.GuardOff},
		{[]string{"auditor", "strict"}, manifests.GuardBlock, manifests.GuardRedact, manifests.GuardAnnotate, manifests.GuardRequireApproval, manifests.GuardOff},
		{[]string{"no-such-role"}, manifests.GuardRedact, manifests.GuardOff, manifests.GuardOff, manifests.GuardAnnotate, manifests.GuardOff},
	} {
		s, p, i := m.ResultGuardFor(nil, tc.roles)
		as, ap := m.ArgumentGuardFor(nil, tc.roles)
		if s != tc.secrets || p != tc.personal || i != tc.inject || as != tc.argSecrets || ap != tc.argPersonal {
			t.Errorf("roles %v: results %q %q %q, arguments %q %q; want %q %q %q, %q %q", tc.roles, s, p, i, as, ap,
				tc.secrets, tc.personal, tc.inject, tc.argSecrets, tc.argPersonal)
		}
	}
	// A tool's own setting replaces the configuration's, as before; a
	// role tightens that too.
	own := &manifests.Tool{Guard: &manifests.Guard{Results: &manifests.GuardResults{Secrets: manifests.GuardOff}}}
	if s, _, _ := m.ResultGuardFor(own, nil); s != manifests.GuardOff {
		t.Errorf("a tool's off with no role: %q, want off", s)
	}
	if s, _, _ := m.ResultGuardFor(own, []string{"strict"}); s != manifests.GuardBlock {
		t.Errorf("a tool's off for a strict principal: %q, want block", s)
	}
}

// TestGuardArgumentsApplied: airlock.yaml's guard.arguments is every
// tool's default for its arguments, apart from the results' setting.
func TestGuardArgumentsApplied(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "m.yaml"), manifestFor("m"))
	write(t, filepath.Join(dir, "airlock.yaml"), "manifests: [m.yaml]\nguard:\n  arguments: {secrets: require_approval, personal_data: annotate}\n")
	snap, err := config.Load(filepath.Join(dir, "airlock.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := snap.Manifests[0]
	if s, p := m.SecretsInArguments(nil), m.PersonalDataInArguments(nil); s != manifests.GuardRequireApproval || p != manifests.GuardAnnotate {
		t.Errorf("arguments: %q %q, want require_approval annotate", s, p)
	}
	if got := m.SecretsInResults(nil); got != manifests.GuardOff {
		t.Errorf("results: %q, want off (not configured)", got)
	}
}

func TestValidateCommand(t *testing.T) {
	dir := t.TempDir()
	good := write(t, filepath.Join(dir, "good.yaml"), manifestFor("good"))
	bad := write(t, filepath.Join(dir, "bad.yaml"), "server:\n  name: bad\n  stdio: {command: x}\ntools:\n  t:\n    side_effects: [writes]\n    data_access_level: internal\n    risk: low\n    timeout: 30\n")

	tests := []struct {
		name       string
		config     string
		files      []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{"repository config", "../../airlock.yaml", nil, 0, "ok: 3 manifests, 28 tools\n", ""},
		{"good file", "", []string{good}, 0, "ok: 1 manifests, 1 tools\n", ""},
		{"bad file", "", []string{good, bad}, 1, "",
			bad + `:6: tools.t.side_effects: "writes" is not a side effect; use one of none, read, write, delete, send, pay, exec` + "\n" +
				bad + `:9: tools.t.timeout: 30 has no unit; write a duration such as "30s" (s, m or h)` + "\n"},
		{"missing config", filepath.Join(dir, "none.yaml"), nil, 1, "",
			filepath.Join(dir, "none.yaml") + ": cannot read the file: no such file or directory\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := config.ValidateCommand(tt.config, tt.files, &stdout, &stderr)
			if code != tt.wantCode || stdout.String() != tt.wantStdout || stderr.String() != tt.wantStderr {
				t.Errorf("ValidateCommand = %d\nstdout %q\nstderr %q\nwant %d\nstdout %q\nstderr %q",
					code, stdout.String(), stderr.String(), tt.wantCode, tt.wantStdout, tt.wantStderr)
			}
		})
	}
}

func TestBadRulesReportedAtTheirLine(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "m.yaml"), "server:\n  name: fs\n  stdio: {command: x}\ntools:\n  read: {side_effects: [read], data_access_level: internal, risk: low}\n")
	cfgPath := filepath.Join(dir, "airlock.yaml")
	write(t, cfgPath, `manifests: [m.yaml]
policy:
  rules:
    - name: ok
      when: 'tool.risk == "low"'
      effect: allow
    - name: broken
      when: 'args.path.startsWith('
      effect: deny
    - name: not-bool
      when: '1 + 1'
      effect: deny
`)
	_, err := config.Load(cfgPath)
	if err == nil {
		t.Fatal("bad rules loaded")
	}
	got := err.Error()
	for _, want := range []string{cfgPath + `:8: policy.rules[1].when: rule "broken"`, cfgPath + `:11: policy.rules[2].when: rule "not-bool"`} {
		if !strings.Contains(got, want) {
			t.Errorf("error lacks %q:\n%s", want, got)
		}
	}
}

func TestApproverGroupsMustBePrincipals(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "m.yaml"), manifestFor("fs"))
	cfgPath := write(t, filepath.Join(dir, "airlock.yaml"), `manifests: [m.yaml]
principals:
  - {name: alice, roles: [r]}
roles:
  r: {tools: ["*"]}
approver_groups:
  ops: {members: [alice, zed], slack_channel: C1}
  empty: {members: []}
`)
	_, err := config.Load(cfgPath)
	if err == nil {
		t.Fatal("loaded")
	}
	for _, want := range []string{`approver_groups.ops.members[1]: "zed" is not one of principals`, "approver_groups.empty.members: is empty"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
}

func TestApprovalChannels(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "m.yaml"), manifestFor("fs"))
	head := `manifests: [m.yaml]
principals:
  - {name: alice, roles: [r]}
roles:
  r: {tools: ["*"]}
approver_groups:
  ops: {members: [alice]}
`
	good := write(t, filepath.Join(dir, "good.yaml"), head+`approval_channels:
  - {name: teams, kind: webhook, url: "https://bridge.example.com/airlock", secret_env: TEAMS_SECRET, groups: [ops]}
  - {name: local-bridge, kind: webhook, url: "http://127.0.0.1:9000/in", secret_env: LOCAL_SECRET}
`)
	snap, err := config.Load(good)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(snap.Config.ApprovalChannels); n != 2 || snap.Config.ApprovalChannels[0].URL != "https://bridge.example.com/airlock" {
		t.Errorf("channels %+v", snap.Config.ApprovalChannels)
	}
	bad := write(t, filepath.Join(dir, "bad.yaml"), head+`approval_channels:
  - {name: Teams!, kind: email, url: "http://bridge.example.com/x", secret_env: "sk-123 456", groups: [nope]}
  - {name: dup, kind: webhook, url: "https://u:p@bridge.example.com", secret_env: A}
  - {name: dup, kind: webhook, url: "", secret_env: B}
`)
	_, err = config.Load(bad)
	if err == nil {
		t.Fatal("loaded")
	}
	for _, want := range []string{
		`bad.yaml:9: approval_channels[0].name: "Teams!" is not a channel name`,
		`approval_channels[0].kind: "email" is not a channel kind; use webhook`,
		`approval_channels[0].url: "http://bridge.example.com/x": requests carry call arguments, so they go over https`,
		`approval_channels[0].secret_env: "sk-123 456" is not an environment variable name`,
		`approval_channels[0].groups[0]: "nope" is not one of approver_groups (ops)`,
		`approval_channels[1].url: "https://u:p@bridge.example.com" holds credentials`,
		`approval_channels[2].name: "dup" is used by another approval channel`,
		`approval_channels[2].url: is required`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
}

func TestCatalogMode(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "m.yaml"), manifestFor("fs"))
	for body, want := range map[string]string{
		"catalog: search\n":                           "",
		"catalog: full\n":                             "",
		"catalog: everything\n":                       `catalog: "everything" is not a catalog mode`,
		"gateway: {page_size: -1}\n":                  "gateway.page_size: -1: use 1 to 10000",
		"catalog: search\ngateway: {page_size: 50}\n": "",
	} {
		path := write(t, filepath.Join(dir, "airlock.yaml"), "manifests: [m.yaml]\n"+body)
		snap, err := config.Load(path)
		switch {
		case want == "" && err != nil:
			t.Errorf("%q: %v", body, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%q: %v, want %q", body, err, want)
		case want == "" && body[:8] == "catalog:" && snap.Config.Catalog == "":
			t.Errorf("%q: catalog not read", body)
		}
	}
}

// TestGuardAllBlocksApplied: guard.arguments, guard.results (with
// injection) and guard.descriptions together each set their own defaults.
func TestGuardAllBlocksApplied(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "m.yaml"), manifestFor("m"))
	write(t, filepath.Join(dir, "airlock.yaml"), "manifests: [m.yaml]\nguard:\n  arguments: {secrets: block}\n  results: {secrets: redact, personal_data: annotate, injection: annotate}\n  descriptions: {injection: block}\n")
	snap, err := config.Load(filepath.Join(dir, "airlock.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := snap.Manifests[0]
	got := []manifests.GuardAction{m.SecretsInArguments(nil), m.PersonalDataInArguments(nil), m.SecretsInResults(nil), m.PersonalDataInResults(nil), m.InjectionInResults(nil), m.InjectionInDescriptions(nil)}
	want := []manifests.GuardAction{manifests.GuardBlock, manifests.GuardOff, manifests.GuardRedact, manifests.GuardAnnotate, manifests.GuardAnnotate, manifests.GuardBlock}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
}
