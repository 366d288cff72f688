package integration

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/internal/upstream"
)

// counterDev is what the tests of the airlock binary against
// integration/testupstream share: both binaries built, a fresh directory
// holding counter.yaml (the upstream, its side effects logged to effects)
// with the given tools block, indented as under "tools:".
type counterDev struct {
	bin, upstream, dir, effects string
}

func newCounterDev(t *testing.T, tools string) counterDev {
	t.Helper()
	if testing.Short() {
		t.Skip("subprocess test; skipped with -short")
	}
	d := counterDev{bin: buildBinary(t, "./cmd/airlock"), upstream: buildBinary(t, "./integration/testupstream"), dir: t.TempDir()}
	d.effects = newEffectsLog(t)
	writeFile(t, filepath.Join(d.dir, "counter.yaml"), fmt.Sprintf(`server:
  name: counter
  stdio:
    command: %s
    env: {SIDE_EFFECT_LOG: %s}
%stools:
%s`, d.upstream, d.effects, effectsSandbox(d.effects), tools))
	return d
}

// newEffectsLog is where a test upstream that an airlock binary runs
// writes its side-effect log (SIDE_EFFECT_LOG): in a directory of its own,
// not beside airlock.yaml or under the data directory, both of which the
// stdio sandbox hides from the server. The manifest grants that directory
// with effectsSandbox, as a user's manifest grants a server its own state.
func newEffectsLog(t *testing.T) string {
	t.Helper()
	requireSandbox(t)
	return filepath.Join(t.TempDir(), "effects.log")
}

// effectsSandbox is the server.sandbox line of a manifest (indented under
// server:) whose server writes the side-effect log effects: its
// directory is one of sandbox.write_paths.
func effectsSandbox(effects string) string {
	return "  sandbox: {write_paths: [" + filepath.Dir(effects) + "]}\n"
}

// devArgs are the arguments of an airlock dev on d's airlock.yaml, its data
// in d.dir/data, on free ports, then extra: base is its gateway's URL,
// temporal its embedded Temporal's address. A dev restarted with the same
// arguments finds its tasks again.
func (d counterDev) devArgs(t *testing.T, extra ...string) (args []string, base, temporal string) {
	t.Helper()
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	tport := freePort(t)
	args = append([]string{"--config", filepath.Join(d.dir, "airlock.yaml"), "--data-dir", filepath.Join(d.dir, "data"),
		"--listen", listen, "--temporal-port", fmt.Sprint(tport), "--log-format", "json"}, extra...)
	return args, "http://" + listen, fmt.Sprintf("127.0.0.1:%d", tport)
}

// appendNeedsOpsTools is a tools block whose append needs ops' approval.
const appendNeedsOpsTools = `  append:
    side_effects: [write]
    data_access_level: internal
    risk: high
    approval: {group: ops, timeout: 30m}
`

// writeApprovalsConfig writes airlock.yaml for counter.yaml: alice calls,
// bob (group ops) approves, the gateway answers pending after inlineWait.
func (d counterDev) writeApprovalsConfig(t *testing.T, inlineWait string) string {
	t.Helper()
	path := filepath.Join(d.dir, "airlock.yaml")
	writeFile(t, path, `manifests: [counter.yaml]
approvals: {inline_wait: `+inlineWait+`}
principals:
  - {name: alice, roles: [all], api_key_sha256: [`+identity.HashKey("alice-key")+`]}
  - {name: bob, roles: [all], api_key_sha256: [`+identity.HashKey("bob-key")+`]}
roles:
  all: {permissions: ["*"], data_access_level: restricted, tools: ["*"]}
approver_groups:
  ops: {members: [bob]}
`)
	return path
}

// hostSandbox is whether this host can run stdio servers sandboxed, probed
// once: the error says why not.
var hostSandbox = sync.OnceValue(func() error { return upstream.ProbeSandbox(nil).Err() })

// requireSandbox fails t under CI=true when the host has no stdio sandbox
// (the airlock binaries it starts would run their servers unconfined,
// with a warning); elsewhere it logs that they do.
func requireSandbox(t *testing.T) {
	t.Helper()
	if err := hostSandbox(); err != nil {
		if testenv.CI() {
			t.Fatalf("%v (CI=true: the airlock binaries the integration tests start run their stdio servers sandboxed)", err)
		}
		t.Logf("stdio servers run unsandboxed: %v", err)
	}
}
