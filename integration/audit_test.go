package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/internal/timeline"
	"github.com/airlock-run/airlock/manifests"
)

// TestAuditCommand: a task made over MCP (an allowed call, a call whose
// argument the manifest redacts, a call policy denies), then the airlock
// binary shows its timeline, exports it, verifies the export and replays
// the task, all against the live server.
func TestAuditCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := buildBinary(t, "./integration/testupstream")
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mpath := write("counter.yaml", `server:
  name: counter
  stdio:
    command: `+bin+`
    env: {SIDE_EFFECT_LOG: `+filepath.Join(dir, "effects.log")+`}
tools:
  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}
  put: {side_effects: [write], data_access_level: internal, risk: medium, idempotent: true, redact: [key]}
  fail: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}
`)
	cfg := write("airlock.yaml", "manifests: [counter.yaml]\n")
	m, err := manifests.Load(mpath)
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, policy: &policy.Config{Rules: []policy.Rule{{
		Name: "no-fail", When: `tool.name == "counter__fail"`, Effect: api.Deny, Reason: "fail is off limits"}}}})
	const task = "audit-e2e"
	cs := s.connect(t, map[string]string{gateway.HeaderTask: task})
	waitTools(t, cs, "counter__echo", "counter__put", "counter__fail")
	call(t, cs, "counter__echo", map[string]any{"text": "hello"}, "")
	call(t, cs, "counter__put", map[string]any{"key": "top-secret-value"}, "")
	if res := call(t, cs, "counter__fail", map[string]any{"text": "x"}, ""); !res.IsError {
		t.Fatalf("counter__fail was not denied: %s", text(res))
	}
	ctx := context.Background()
	if err := s.client.SignalWorkflow(ctx, task, "", api.SignalFinish, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.client.GetWorkflow(ctx, task, "").Get(ctx, nil); err != nil {
		t.Fatal(err)
	}

	airlock := buildBinary(t, "./cmd/airlock")
	conn := []string{"--temporal-address", s.srv.HostPort(), "--namespace", s.srv.Namespace()}
	run := func(args ...string) (code int, stdout, stderr string) {
		t.Helper()
		full := append(append([]string{"audit", args[0]}, conn...), args[1:]...)
		cmd := exec.Command(airlock, full...)
		cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS=", "AIRLOCK_UI_URL=")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code = cmd.ProcessState.ExitCode()
		if err != nil && code < 0 {
			t.Fatalf("airlock %s: %v", strings.Join(full, " "), err)
		}
		return code, out.String(), errb.String()
	}

	code, out, errs := run("show", "--config", cfg, "--ui-url", "http://127.0.0.1:8233", task)
	if code != 0 {
		t.Fatalf("audit show: exit %d\n%s", code, errs)
	}
	for _, want := range []string{
		"task:      " + task,
		"ui:        http://127.0.0.1:8233/namespaces/" + s.srv.Namespace() + "/workflows/" + task,
		`counter__echo {"text":"hello"}`,
		`counter__put {"key":"[redacted]"}`,
		"policy: deny (rule no-fail",
		"finished: denied",
		"finish requested",
		"task ended: finished (3 calls)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("audit show lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "top-secret-value") {
		t.Errorf("audit show printed a redacted argument:\n%s", out)
	}

	code, out, errs = run("show", "--json", task)
	var tl timeline.Timeline
	if err := json.Unmarshal([]byte(out), &tl); code != 0 || err != nil {
		t.Fatalf("audit show --json: exit %d, %v\n%s", code, err, errs)
	}
	if len(tl.Calls) != 3 || tl.End != api.StateFinished || tl.Principal != "tester" {
		t.Errorf("timeline: %d calls, end %s, principal %s", len(tl.Calls), tl.End, tl.Principal)
	}

	export := filepath.Join(dir, "audit.jsonl")
	code, _, errs = run("export", "--config", cfg, "--task", task, "--out", export)
	if code != 0 || !strings.Contains(errs, "of 1 task(s)") {
		t.Fatalf("audit export: exit %d\n%s", code, errs)
	}
	b, err := os.ReadFile(export)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("top-secret-value")) || !bytes.Contains(b, []byte(`"arguments":{"key":"[redacted]"}`)) {
		t.Errorf("the export does not mask counter__put's key:\n%s", b)
	}
	if code, out, errs := run("verify", export); code != 0 || !strings.Contains(out, "the chain is intact") {
		t.Errorf("audit verify %s: exit %d\n%s%s", export, code, out, errs)
	}
	if code, out, errs := run("verify", task); code != 0 || !strings.Contains(out, "OK: task "+task+": 1 run(s)") {
		t.Errorf("audit verify %s: exit %d\n%s%s", task, code, out, errs)
	}

	waitVisible(t, s, "WorkflowType = '"+api.AgentTaskName+"'", task)
	since := filepath.Join(dir, "since.jsonl")
	if code, _, errs := run("export", "--since", "1h", "--out", since); code != 0 {
		t.Fatalf("audit export --since: exit %d\n%s", code, errs)
	}
	if code, out, errs := run("verify", since); code != 0 || !strings.Contains(out, "the chain is intact") {
		t.Errorf("audit verify %s: exit %d\n%s%s", since, code, out, errs)
	}
	if b, _ := os.ReadFile(since); !bytes.Contains(b, []byte(`"task":"`+task+`"`)) {
		t.Errorf("export --since 1h lacks task %s", task)
	}

	if code, _, errs := run("show", "no-such-task"); code != 1 || !strings.Contains(errs, "no task no-such-task") {
		t.Errorf("audit show of an unknown task: exit %d\n%s", code, errs)
	}
}
