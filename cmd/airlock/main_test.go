package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// hangBound is how long one command may take before the test calls it hung.
// No case here starts a server; the slowest one waits for a Temporal
// frontend that never answers, which the dial timeout cuts short.
const hangBound = 35 * time.Second

// problemLine is the shape of every line `manifests validate` prints for a
// problem: "file:line: field: message".
var problemLine = regexp.MustCompile(`^[^:\s]+:\d+: [A-Za-z0-9_.\[\]]+: \S.*$`)

// cliCase is one invocation of run and what it must produce.
type cliCase struct {
	name   string
	args   []string
	code   int
	stdout []string // substrings stdout must contain
	stderr []string // substrings stderr must contain
	// problems: stderr is non-empty and every line of it is a problem line.
	problems bool
	check    func(t *testing.T) // further checks of what the command left
}

func TestRun(t *testing.T) {
	// What the environment says about Temporal must not leak into the
	// cases: gateway and worker read these when they register their flags.
	t.Setenv("TEMPORAL_ADDRESS", "")
	t.Setenv("TEMPORAL_NAMESPACE", "")

	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("good.yaml", `server:
  name: echo
  stdio:
    command: echo-server
tools:
  echo:
    side_effects: [none]
    data_access_level: public
    risk: low
    idempotent: true
`)
	broken := write("broken.yaml", `server:
  name: broken
  stdio:
    command: broken-server
tools:
  t1:
    side_effects: [wrte]
    data_access_level: public
    risk: extreme
    idempotent: maybe
`)
	typoConfig := write("typo.yaml", `manifests:
  - good.yaml
listn: 127.0.0.1:7400
task:
  max_cals: 3
`)
	brokenConfig := write("broken-config.yaml", `manifests:
  - broken.yaml
  - none-*.yaml
`)
	badPlan := write("bad-plan.yaml", `name: bad
steps:
  - id: first
    tool: filesystem__write_file
    args: {path: "${{ steps.later.result }}"}
  - id: later
    tool: filesystem__no_such_tool
`)
	unknownVarPlan := write("var-plan.yaml", `name: vars
vars: {dir: /tmp}
steps:
  - id: only
    tool: filesystem__list_allowed_directories
`)
	gatewayData := filepath.Join(dir, "gateway-data")
	workerData := filepath.Join(dir, "worker-data")
	silent := silentListener(t)

	usage := "airlock dev        [flags]"
	servingFlags := []string{"-config", "-data-dir", "-listen", "-temporal-address", "-namespace", "-task-queue", "-log-level", "-log-format",
		"-metrics-listen", "-audit-log"}

	cases := []cliCase{
		// The command itself.
		{name: "no args", args: nil, code: 2, stderr: []string{usage}},
		{name: "help", args: []string{"help"}, code: 0, stdout: []string{usage}},
		{name: "-h", args: []string{"-h"}, code: 0, stdout: []string{usage}},
		{name: "--help", args: []string{"--help"}, code: 0, stdout: []string{usage}},
		{name: "unknown command", args: []string{"frobnicate"}, code: 2, stderr: []string{`unknown command "frobnicate"`, usage}},
		{name: "version", args: []string{"version"}, code: 0, stdout: []string{"airlock " + version}},

		// dev: every case fails before the embedded Temporal would start.
		{name: "dev -h", args: []string{"dev", "-h"}, code: 0,
			stderr: append([]string{"Usage: airlock dev", "-stdio", "-temporal-port", "-ui-port", "-no-ui"}, servingFlags...)},
		{name: "dev bad ui port", args: []string{"dev", "--ui-port", "-2"}, code: 2,
			stderr: []string{"--ui-port -2", "0 picks a free port", "-1 (no UI)"}},
		{name: "dev unknown flag", args: []string{"dev", "--bogus"}, code: 2,
			stderr: []string{"flag provided but not defined: -bogus", "Usage: airlock dev"}},
		{name: "dev extra argument", args: []string{"dev", "extra-arg"}, code: 2,
			stderr: []string{`unexpected argument "extra-arg"`, "flags only", "airlock dev -h"}},
		{name: "dev missing config", args: []string{"dev", "--config", "/nonexistent.yaml"}, code: 1,
			stderr: []string{"--config /nonexistent.yaml", "does not exist", "fix the path"}},
		{name: "dev missing default config", args: []string{"dev"}, code: 1,
			stderr: []string{"airlock.yaml does not exist", "run from the repository root", "--config FILE"}},
		{name: "dev bad log level", args: []string{"dev", "--log-level", "loud"}, code: 1,
			stderr: []string{`--log-level "loud"`, "debug, info, warn or error"}},
		{name: "dev bad log format", args: []string{"dev", "--log-format", "xml"}, code: 1,
			stderr: []string{`--log-format "xml"`, "console or json"}},
		{name: "dev config with unknown fields", args: []string{"dev", "--config", typoConfig}, code: 1,
			stderr: []string{
				typoConfig + `:3: listn: unknown field; did you mean "listen"?`,
				typoConfig + `:5: task.max_cals: unknown field; did you mean "max_calls"?`,
			}},

		// gateway and worker need a Temporal address and refuse before
		// touching the disk without one.
		{name: "gateway -h", args: []string{"gateway", "-h"}, code: 0,
			stderr: append([]string{"Usage: airlock gateway --temporal-address", "-stdio", "-task "}, servingFlags...)},
		{name: "worker -h", args: []string{"worker", "-h"}, code: 0,
			stderr: append([]string{"Usage: airlock worker --temporal-address", "http://<metrics-listen>/metrics", `(default "127.0.0.1:7402")`}, servingFlags...)},
		{name: "gateway without Temporal address",
			args: []string{"gateway", "--config", "../../airlock.yaml", "--data-dir", gatewayData}, code: 1,
			stderr: []string{"no Temporal address", "--temporal-address HOST:PORT", "TEMPORAL_ADDRESS", "temporal.address"},
			check:  notExist(gatewayData)},
		{name: "worker without Temporal address",
			args: []string{"worker", "--config", "../../airlock.yaml", "--data-dir", workerData}, code: 1,
			stderr: []string{"no Temporal address", "--temporal-address HOST:PORT"},
			check:  notExist(workerData)},
		{name: "gateway extra argument", args: []string{"gateway", "serve"}, code: 2,
			stderr: []string{`unexpected argument "serve"`}},
		{name: "worker missing config", args: []string{"worker", "--config", "/nonexistent.yaml"}, code: 1,
			stderr: []string{"--config /nonexistent.yaml", "does not exist"}},

		// manifests
		{name: "manifests validate repository config", args: []string{"manifests", "validate", "--config", "../../airlock.yaml"}, code: 0,
			stdout: []string{"ok: "}},
		{name: "manifests validate production example", args: []string{"manifests", "validate", "--config", "../../deploy/airlock.production.yaml"}, code: 0,
			stdout: []string{"ok: "}},
		{name: "manifests validate broken file", args: []string{"manifests", "validate", broken}, code: 1, problems: true,
			stderr: []string{
				broken + `:7: tools.t1.side_effects: "wrte" is not a side effect; use one of`,
				broken + `:9: tools.t1.risk: "extreme" is not a risk tier; use one of`,
				broken + `:10: tools.t1.idempotent: expected true or false, got "maybe"`,
			}},
		{name: "manifests validate broken config", args: []string{"manifests", "validate", "--config", brokenConfig}, code: 1, problems: true,
			stderr: []string{
				brokenConfig + `:3: manifests[1]: "none-*.yaml" matches no file`,
				`broken.yaml:9: tools.t1.risk: "extreme" is not a risk tier`,
			}},
		{name: "manifests validate missing config", args: []string{"manifests", "validate", "--config", "/nonexistent.yaml"}, code: 1,
			stderr: []string{"--config /nonexistent.yaml", "does not exist", "name manifest files"}},
		{name: "manifests no subcommand", args: []string{"manifests"}, code: 2, stderr: []string{"airlock manifests validate"}},
		{name: "manifests -h", args: []string{"manifests", "-h"}, code: 0, stderr: []string{"airlock manifests validate"}},
		{name: "manifests unknown subcommand", args: []string{"manifests", "check"}, code: 2, stderr: []string{`unknown subcommand "check"`}},

		// tasks: argument mistakes are reported without dialing, and an
		// unreachable Temporal is reported, quickly, as such.
		{name: "tasks no subcommand", args: []string{"tasks"}, code: 2, stderr: []string{"airlock tasks list", "airlock tasks show"}},
		{name: "tasks -h", args: []string{"tasks", "-h"}, code: 0, stderr: []string{"airlock tasks list"}},
		{name: "tasks unknown subcommand", args: []string{"tasks", "purge", "--temporal-address", "127.0.0.1:1"}, code: 2, stderr: []string{`unknown subcommand "purge"`}},
		{name: "tasks show without ID", args: []string{"tasks", "show", "--temporal-address", "127.0.0.1:1"}, code: 2,
			stderr: []string{"name one TASK_ID"}},
		{name: "tasks list bad status", args: []string{"tasks", "list", "--temporal-address", "127.0.0.1:1", "--status", "sleeping"}, code: 2,
			stderr: []string{`--status "sleeping"`, "use running, completed"}},
		{name: "tasks list bad limit", args: []string{"tasks", "list", "--temporal-address", "127.0.0.1:1", "--limit", "0"}, code: 2,
			stderr: []string{"--limit 0", "at least 1"}},
		{name: "tasks list bad state", args: []string{"tasks", "list", "--temporal-address", "127.0.0.1:1", "--state", "sleeping"}, code: 2,
			stderr: []string{`--state "sleeping"`, "use one of running, finished", "rolled_back", "rollback_failed"}},
		{name: "tasks list quote in principal", args: []string{"tasks", "list", "--temporal-address", "127.0.0.1:1", "--principal", "alice' OR 'a'='a"}, code: 2,
			stderr: []string{`--principal "alice' OR 'a'='a"`, `may not contain '\''`}},
		{name: "tasks list double quote in tool", args: []string{"tasks", "list", "--temporal-address", "127.0.0.1:1", "--tool", `fs__"x"`}, code: 2,
			stderr: []string{`--tool "fs__\"x\""`, `may not contain '"'`}},
		{name: "tasks list newline in tool", args: []string{"tasks", "list", "--temporal-address", "127.0.0.1:1", "--tool", "a\nb"}, code: 2,
			stderr: []string{`may not contain '\n'`}},
		{name: "tasks list pending-approval takes no value", args: []string{"tasks", "list", "--temporal-address", "127.0.0.1:1", "--pending-approval=maybe"}, code: 2,
			stderr: []string{"-pending-approval"}},
		{name: "tasks list all filters, connection refused", args: []string{"tasks", "list", "--temporal-address", "127.0.0.1:1", "--status", "running",
			"--state", "rollback_failed", "--principal", "alice", "--tool", "filesystem__write_file", "--pending-approval"}, code: 1,
			stderr: []string{"cannot connect to Temporal at 127.0.0.1:1"}},
		{name: "tasks -h lists the filters", args: []string{"tasks", "list", "-h"}, code: 0,
			stderr: []string{"--principal", "--tool", "--state", "--pending-approval", "-principal principal"}},
		{name: "tasks list connection refused", args: []string{"tasks", "list", "--temporal-address", "127.0.0.1:1"}, code: 1,
			stderr: []string{"cannot connect to Temporal at 127.0.0.1:1", "--temporal-address HOST:PORT"}},
		{name: "tasks rollback without ID", args: []string{"tasks", "rollback", "--temporal-address", "127.0.0.1:1"}, code: 2,
			stderr: []string{"airlock tasks rollback: name one TASK_ID"}},
		{name: "tasks cancel two IDs", args: []string{"tasks", "cancel", "a", "b"}, code: 2,
			stderr: []string{"airlock tasks cancel: name one TASK_ID"}},
		{name: "tasks finish connection refused", args: []string{"tasks", "finish", "--temporal-address", "127.0.0.1:1", "t1"}, code: 1,
			stderr: []string{"cannot connect to Temporal at 127.0.0.1:1"}},

		// run: the plan and flags are checked before dialing.
		{name: "run without plan", args: []string{"run", "--config", "../../airlock.yaml"}, code: 2, stderr: []string{"name one plan file"}},
		{name: "run -h", args: []string{"run", "-h"}, code: 0, stderr: []string{"Usage: airlock run", "-var", "-detach"}},
		{name: "run bad plan", args: []string{"run", "--config", "../../airlock.yaml", badPlan}, code: 2, stderr: []string{
			badPlan + `:5: steps[0] (first).args.path: ${{ steps.later.result }}: step "later" is not an earlier step`,
			badPlan + `:7: steps[1] (later).tool:`, "filesystem__no_such_tool"}},
		{name: "run unknown var", args: []string{"run", "--config", "../../airlock.yaml", unknownVarPlan, "--var", "dri=/x"}, code: 2,
			stderr: []string{"--var", "dri"}},
		{name: "run bad var syntax", args: []string{"run", "--var", "novalue", unknownVarPlan}, code: 2, stderr: []string{`"novalue": write name=value`}},
		{name: "run unknown principal", args: []string{"run", "--config", "../../airlock.yaml", "--as", "mallory", unknownVarPlan}, code: 2,
			stderr: []string{`principal "mallory" is not one of the configuration's principals`}},
		{name: "run example plan, no Temporal", args: []string{"run", "--config", "../../airlock.yaml", "--temporal-address", "127.0.0.1:1", "../../plans/examples/seed-project.yaml"}, code: 1,
			stderr: []string{"cannot connect to Temporal at 127.0.0.1:1"}},
		{name: "tasks list silent server", args: []string{"tasks", "list", "--temporal-address", silent}, code: 1,
			stderr: []string{"cannot connect to Temporal at " + silent, "--temporal-address HOST:PORT"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runBounded(t, tc.args)
			if code != tc.code {
				t.Errorf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			for _, want := range tc.stdout {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout does not contain %q:\n%s", want, stdout)
				}
			}
			for _, want := range tc.stderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr does not contain %q:\n%s", want, stderr)
				}
			}
			// Failures are for people, on stderr; stdout may belong to MCP
			// (--stdio) or to a script reading the output.
			if code != 0 && stdout != "" {
				t.Errorf("exit code %d with output on stdout:\n%s", code, stdout)
			}
			if tc.problems {
				lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
				for _, l := range lines {
					if !problemLine.MatchString(l) {
						t.Errorf("stderr line is not file:line: field: message: %q", l)
					}
				}
			}
			if tc.check != nil {
				tc.check(t)
			}
		})
	}
}

// runBounded calls run and fails the test if it does not return within
// hangBound.
func runBounded(t *testing.T, args []string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run(args, strings.NewReader(""), &out, &errOut) }()
	select {
	case code = <-done:
		return code, out.String(), errOut.String()
	case <-time.After(hangBound):
		t.Fatalf("airlock %s did not return within %s", strings.Join(args, " "), hangBound)
		return 0, "", ""
	}
}

// silentListener accepts TCP connections and never answers on them, like a
// firewall that lets the handshake through or a wedged server.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// notExist checks that a command left no file or directory at path.
func notExist(path string) func(t *testing.T) {
	return func(t *testing.T) {
		t.Helper()
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("%s exists (err %v); the command should have stopped before creating it", path, err)
		}
	}
}
