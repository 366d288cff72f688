package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/devserver"
)

// TestRolesAgainstExternalTemporal runs the production shape: a Temporal
// server the test owns (standing in for a cluster), and the airlock binary
// as two separate processes, `worker` (address from TEMPORAL_ADDRESS) and
// `gateway` (address from --temporal-address). A call through the gateway
// is executed by the worker process.
func TestRolesAgainstExternalTemporal(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("subprocess test; skipped with -short")
	}
	bin := buildBinary(t, "./cmd/airlock")
	upstreamBin := buildBinary(t, "./integration/testupstream")
	srv, err := devserver.Start(context.Background(), devserver.Options{DataDir: t.TempDir(), Namespace: "prod-like",
		SearchAttributes: api.SearchAttributes()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })

	dir := t.TempDir()
	effects := newEffectsLog(t)
	writeFile(t, filepath.Join(dir, "counter.yaml"), fmt.Sprintf(`server:
  name: counter
  stdio:
    command: %s
    env: {SIDE_EFFECT_LOG: %s}
%stools:
  append: {side_effects: [write], data_access_level: internal, risk: medium, idempotent: false}
`, upstreamBin, effects, effectsSandbox(effects)))
	writeFile(t, filepath.Join(dir, "airlock.yaml"), "manifests: [counter.yaml]\ntemporal: {namespace: prod-like, task_queue: airlock-roles}\n"+identityYAML)
	cfg := filepath.Join(dir, "airlock.yaml")

	worker := exec.Command(bin, "worker", "--config", cfg, "--data-dir", filepath.Join(dir, "worker-data"))
	worker.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+srv.HostPort())
	wout := &lockedWriter{w: new(bytes.Buffer)}
	worker.Stdout, worker.Stderr = wout, wout
	startProc(t, worker, wout)

	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	gw := exec.Command(bin, "gateway", "--config", cfg, "--temporal-address", srv.HostPort(), "--listen", listen, "--data-dir", filepath.Join(dir, "gateway-data"))
	gw.Env = append(os.Environ(), "TEMPORAL_ADDRESS=")
	gout := &lockedWriter{w: new(bytes.Buffer)}
	gw.Stdout, gw.Stderr = gout, gout
	p := startProc(t, gw, gout)
	p.waitHealthy(t, "http://"+listen)

	cs := connectURL(t, "http://"+listen+"/mcp", nil)
	waitTools(t, cs, "counter__append")
	res := call(t, cs, "counter__append", map[string]any{"key": "roles"}, "")
	if res.IsError {
		t.Fatalf("call through gateway+worker: %s\nworker:\n%s\ngateway:\n%s", text(res), wout.String(), gout.String())
	}
	if n := sideEffects(t, effects, "append", "roles"); n < 1 {
		t.Fatalf("the upstream did not run the call (worker output:\n%s)", wout.String())
	}
	task, _ := res.Meta[gateway.MetaTask].(string)
	desc, err := dialTest(t, srv.HostPort(), "prod-like").DescribeWorkflowExecution(context.Background(), task, "")
	if err != nil {
		t.Fatalf("task %s not in namespace prod-like: %v", task, err)
	}
	if tq := desc.GetExecutionConfig().GetTaskQueue().GetName(); tq != "airlock-roles" {
		t.Fatalf("task ran on task queue %q, want the configured airlock-roles", tq)
	}
}

func dialTest(t *testing.T, hostPort, ns string) client.Client {
	t.Helper()
	c, err := client.Dial(client.Options{HostPort: hostPort, Namespace: ns, Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}
