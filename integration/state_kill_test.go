package integration

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
)

// TestTaskStateSurvivesKill runs `airlock dev` with task.state in its
// configuration (a size limit and an inline schema), sets the state of a
// task over MCP, kills the process with SIGKILL, restarts it on the same
// data dir and reads the state back in the same task; the configured
// schema still refuses a bad value, and `airlock tasks show` prints the
// state's size and keys.
func TestTaskStateSurvivesKill(t *testing.T) {
	t.Parallel()
	d := newCounterDev(t, "  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}\n")
	writeFile(t, filepath.Join(d.dir, "airlock.yaml"), `manifests: [counter.yaml]
task:
  state:
    max_bytes: 1KiB
    schema:
      type: object
      properties:
        done: {type: array, items: {type: string}}
`+identityYAML)
	args, base, temporal := d.devArgs(t, "--no-ui")
	p1 := startDev(t, d.bin, args...)
	p1.waitHealthy(t, base)
	cs := connectURL(t, base+"/mcp", nil)
	waitTools(t, cs, api.ToolStateSet)
	res := call(t, cs, api.ToolStateSet, map[string]any{"key": "done", "value": []string{"plan", "write"}}, "")
	if res.IsError {
		t.Fatalf("set: %s", text(res))
	}
	task, _ := res.Meta[gateway.MetaTask].(string)

	if err := p1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p1.exited
	p2 := startDev(t, d.bin, args...)
	p2.waitHealthy(t, base)
	cs2 := connectURL(t, base+"/mcp", map[string]string{gateway.HeaderTask: task})
	got := call(t, cs2, api.ToolStateGet, map[string]any{"key": "done"}, "")
	sc, _ := got.StructuredContent.(map[string]any)
	if b, _ := json.Marshal(sc["value"]); got.IsError || string(b) != `["plan","write"]` {
		t.Fatalf("state after the restart: isError=%v %s", got.IsError, text(got))
	}
	if bad := call(t, cs2, api.ToolStateSet, map[string]any{"key": "done", "value": "all"}, ""); !bad.IsError || !strings.Contains(text(bad), "task.state.schema") {
		t.Fatalf("a value against the configured schema: isError=%v %s", bad.IsError, text(bad))
	}
	out, err := exec.Command(d.bin, "tasks", "show", "--temporal-address", temporal, task).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "state doc: 25 bytes, 1 key(s): done") {
		t.Errorf("airlock tasks show: %v\n%s", err, out)
	}
}
