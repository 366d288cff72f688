package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/timeline"
)

// budgetHoldsUnderBurstDevBinary is issue 25 item 3 against the real
// `airlock dev`: task.budget 10 and testupstream's put (idempotent, low
// risk, cost 3). Each round sends 48 concurrent tools/call over HTTP, far
// above Temporal's 10 Updates in flight per workflow, from four go-sdk
// clients (two with MCP sessions, two sessionless) naming one task with
// Airlock-Task; a call answered pending or refused before it could run is
// sent again with its idempotency key. Then the upstream's own effect log
// is compared, call by call, with `airlock audit show --json TASK` run as
// the CLI: at most 3 puts reached the upstream (10 / 3), every one that
// did is recorded as run, and every refusal recorded left no effect. The
// second round keeps every core busy as well, so that workflow tasks run
// late and are retried, as on the tester's loaded machine.
func budgetHoldsUnderBurstDevBinary(t *testing.T) {
	// Run by TestBudgetHoldsUnderBurst, beside its in-process variant and
	// with no other test: burnCPU starves every test in the process.
	d := newCounterDev(t, cheapPut)
	cfg := filepath.Join(d.dir, "airlock.yaml")
	writeFile(t, cfg, `manifests: [counter.yaml]
task:
  budget: 10
principals:
  - {name: alice, roles: [all], api_key_sha256: [`+identity.HashKey("alice-key")+`]}
roles:
  all: {permissions: ["*"], data_access_level: restricted, tools: ["*"]}
`)
	args, base, temporal := d.devArgs(t, "--no-ui")
	p := startDev(t, d.bin, args...)
	p.waitHealthy(t, base)

	const budget, cost, burst, rounds = 10, 3, 48, 2
	// roundTimeout bounds a round: every call, with its re-sends, is
	// answered within it or the round fails naming the call.
	const roundTimeout = 4 * time.Minute
	for r := range rounds {
		if r == rounds-1 {
			burnCPU(t)
		}
		taskID := fmt.Sprintf("alice-burst-%d", r)
		h := map[string]string{"Authorization": "Bearer alice-key", gateway.HeaderTask: taskID}
		clients := []*mcp.ClientSession{connectURL(t, base+"/mcp", h), connectStateless(t, base+"/mcp", h),
			connectURL(t, base+"/mcp", h), connectStateless(t, base+"/mcp", h)}
		waitTools(t, clients[0], "counter__put")

		keys := burstKeys(fmt.Sprintf("bin-r%d", r), burst)
		okCalls := sendBurst(t, fmt.Sprintf("round %d", r), clients, keys, roundTimeout)

		tl := auditShowJSON(t, d.bin, cfg, temporal, taskID)
		recorded := map[string]bool{}
		for _, c := range tl.Calls {
			recorded[c.ID] = true
		}
		for _, k := range keys {
			if !recorded[api.CallIDForKey(k)] {
				t.Errorf("round %d: audit show has no call k-%s (each call, run or refused, is recorded)", r, k)
			}
		}
		runs := checkAgainstTimeline(t, tl, d.effects, taskID, keys, api.CallIDForKey, cost, budget)
		if okCalls != budget/cost || runs != budget/cost {
			t.Errorf("round %d: %d calls answered ok and %d recorded as run in audit show; want %d", r, okCalls, runs, budget/cost)
		}
		if t.Failed() {
			return // the next round would repeat the failure under more load
		}
	}
}

// auditShowJSON runs `airlock audit show --json task` against the dev's
// Temporal and decodes its timeline.
func auditShowJSON(t *testing.T, bin, cfg, temporal, task string) *timeline.Timeline {
	t.Helper()
	cmd := exec.Command(bin, "audit", "show", "--config", cfg, "--temporal-address", temporal, "--json", task)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("airlock audit show --json %s: %v\n%s", task, err, errb.String())
	}
	var tl timeline.Timeline
	if err := json.Unmarshal(out.Bytes(), &tl); err != nil {
		t.Fatalf("airlock audit show --json %s: %v\n%s", task, err, out.String())
	}
	return &tl
}
