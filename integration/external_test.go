package integration

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	sdkworker "go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/proto"

	"github.com/airlock-run/airlock/activities"
	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/authzen/opapdp"
	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/metrics"
	"github.com/airlock-run/airlock/internal/timeline"
	"github.com/airlock-run/airlock/manifests"
	"github.com/airlock-run/airlock/worker"
)

// externalRego is the decision point's policy: no file whose path holds
// "secret", for anyone; answers about notes.txt may be reused for 5
// minutes.
const externalRego = `package airlock.authzen

default allow := false

allow if {
	input.subject.type == "principal"
	input.resource.type == "mcp_tool"
	not contains(object.get(input.context.arguments, "path", ""), "secret")
}

response := {"decision": true} if {
	allow
} else := {"decision": false, "context": {"reason_user": {"en": "secret files are not for agents"}, "reason_admin": {"en": "rule no-secret-files"}}}

max_age := 300 if endswith(object.get(input.context.arguments, "path", ""), "notes.txt")
`

// TestExternalPolicyHook (issue 30 §3): through the real stack (embedded
// Temporal, the npm filesystem server, the gateway) with the external
// policy airlock.yaml configures, OPA's Rego engine answering as an
// AuthZEN PDP: it allows, denies (the model is told why), is not asked
// again while its answer's max-age holds, times out (denied; a tool
// configured on_error: allow runs), and each answer is in the history,
// the audit stream and audit show. Replaying the history never asks it.
func TestExternalPolicyHook(t *testing.T) {
	t.Parallel()
	sandbox, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"notes.txt": "meeting at ten", "secret.txt": "the launch codes", "other.txt": "other"} {
		if err := os.WriteFile(filepath.Join(sandbox, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pdp := opapdp.Start(t, externalRego)

	// The configuration as an operator writes it, decoded and validated by
	// the loader.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "m.yaml"), []byte("server:\n  name: m\n  stdio: {command: /bin/true}\ntools:\n  t: {side_effects: [read], data_access_level: public, risk: low}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "airlock.yaml")
	if err := os.WriteFile(cfgFile, []byte(`manifests: [m.yaml]
external_policy:
  endpoint: `+pdp.URL+`
  timeout: 300ms
  authorization_env: TEST_PDP_AUTHORIZATION
  tools:
    filesystem__list_allowed_directories: {on_error: allow}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	snap, err := config.Load(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	ext, err := activities.NewExternal(snap.Config.ExternalPolicy, func(k string) string {
		return map[string]string{"TEST_PDP_AUTHORIZATION": "Bearer pdp-test-token"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}

	fsm := loadExample(t, "filesystem.yaml", "server-filesystem", []string{sandbox}, nil)
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{fsm}, external: ext, audit: openAudit(t, auditPath)})
	const task = "external-policy"
	cs := s.connect(t, map[string]string{gateway.HeaderTask: task})
	waitTools(t, cs, "filesystem__read_text_file", "filesystem__list_allowed_directories")

	denyBefore := testutil.ToFloat64(metrics.ExternalDecisions.WithLabelValues("deny", "false"))
	cachedBefore := testutil.ToFloat64(metrics.ExternalDecisions.WithLabelValues("allow", "true"))
	timeoutBefore := testutil.ToFloat64(metrics.ExternalDecisions.WithLabelValues("timeout", "false"))
	read := func(name string) (string, bool) {
		res := call(t, cs, "filesystem__read_text_file", map[string]any{"path": filepath.Join(sandbox, name)}, "")
		return text(res), res.IsError
	}
	if got, isErr := read("notes.txt"); isErr || got != "meeting at ten" {
		t.Fatalf("allowed read: isError=%v %s", isErr, got)
	}
	if got, isErr := read("notes.txt"); isErr || got != "meeting at ten" {
		t.Fatalf("second read: isError=%v %s", isErr, got)
	}
	if n := len(pdp.Requests()); n != 1 {
		t.Fatalf("the PDP was asked %d times for two equal reads, want once (max-age=300)", n)
	}
	got, isErr := read("secret.txt")
	if !isErr || !strings.Contains(got, "denied: the external policy decision point denied the call to filesystem__read_text_file: secret files are not for agents") ||
		strings.Contains(got, "launch codes") {
		t.Fatalf("denied read: isError=%v %s", isErr, got)
	}
	pdp.SetDelay(2 * time.Second)
	got, isErr = read("other.txt")
	if !isErr || !strings.Contains(got, "did not answer within 300ms") || strings.Contains(got, pdp.URL) {
		t.Fatalf("read with the PDP timing out: isError=%v %s", isErr, got)
	}
	res := call(t, cs, "filesystem__list_allowed_directories", map[string]any{}, "")
	if res.IsError || !strings.Contains(text(res), sandbox) {
		t.Fatalf("on_error: allow tool with the PDP timing out: isError=%v %s", res.IsError, text(res))
	}
	pdp.SetDelay(0)
	asked := len(pdp.Requests())
	if asked != 4 {
		t.Fatalf("the PDP was asked %d times, want 4 (notes once, secret, other, list)", asked)
	}
	for _, r := range pdp.Requests() {
		if r.Authorization != "Bearer pdp-test-token" || !strings.HasPrefix(r.RequestID, task+"/") {
			t.Fatalf("request headers %+v", r)
		}
	}

	for _, m := range []struct {
		result, cached string
		before, want   float64
	}{{"deny", "false", denyBefore, 1}, {"allow", "true", cachedBefore, 1}, {"timeout", "false", timeoutBefore, 2}} {
		if d := testutil.ToFloat64(metrics.ExternalDecisions.WithLabelValues(m.result, m.cached)) - m.before; d != m.want {
			t.Errorf("airlock_external_decisions_total{result=%s,cached=%s} rose by %v, want %v", m.result, m.cached, d, m.want)
		}
	}

	// The history holds each decision's request and answer; audit show
	// renders them.
	hist := fetchHistory(t, s.client, task, "")
	tl, err := timeline.Build(hist, nil)
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		decision         string
		cached, changed  bool
		errorKind, check string
	}
	var got2 []seen
	for _, c := range tl.Calls {
		d := c.Decision
		if d == nil || d.External == nil {
			t.Fatalf("call %s (%s) has no external decision recorded: %+v", c.ID, c.Tool, d)
		}
		x := d.External
		sv := seen{cached: x.Cached, changed: x.Changed, errorKind: x.ErrorKind, check: d.Check}
		if x.Decision != nil {
			sv.decision = map[bool]string{true: "allow", false: "deny"}[*x.Decision]
		}
		if len(x.Request) == 0 || !json.Valid(x.Request) || x.URL != pdp.URL+"/access/v1/evaluation" {
			t.Fatalf("call %s: request %s URL %s", c.ID, x.Request, x.URL)
		}
		got2 = append(got2, sv)
	}
	want := []seen{
		{decision: "allow", check: api.CheckDefault},
		{decision: "allow", cached: true, check: api.CheckDefault},
		{decision: "deny", changed: true, check: api.CheckExternal},
		{errorKind: "timeout", changed: true, check: api.CheckExternal},
		{errorKind: "timeout", check: api.CheckDefault},
	}
	if len(got2) != len(want) {
		t.Fatalf("recorded %+v, want %+v", got2, want)
	}
	for i := range want {
		if got2[i] != want[i] {
			t.Errorf("call %d recorded %+v, want %+v", i, got2[i], want[i])
		}
	}
	var shown bytes.Buffer
	if err := timeline.Render(&shown, tl, nil); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"external policy " + pdp.URL + "/access/v1/evaluation: allow (cached)", `deny {"reason_admin":{"en":"rule no-secret-files"}`, "no answer (timeout:", "on_error allow"} {
		if !strings.Contains(shown.String(), w) {
			t.Errorf("audit show lacks %q:\n%s", w, shown.String())
		}
	}
	audit, err := os.ReadFile(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(audit, []byte(`"decision":"deny"`)) || !bytes.Contains(audit, []byte("rule no-secret-files")) || !bytes.Contains(audit, []byte(`"error":"timeout","on_error":"allow"`)) ||
		bytes.Contains(audit, []byte("pdp-test-token")) {
		t.Errorf("audit stream:\n%s", audit)
	}
	raw, err := proto.Marshal(hist)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("pdp-test-token")) {
		t.Error("the history holds the PDP's Authorization header")
	}

	// A replay reads the answers from the history: the PDP is not asked.
	replayer := sdkworker.NewWorkflowReplayer()
	worker.RegisterWorkflows(replayer)
	if err := replayer.ReplayWorkflowHistory(nil, hist); err != nil {
		t.Fatalf("replaying the task: %v", err)
	}
	if n := len(pdp.Requests()); n != asked {
		t.Fatalf("the replay asked the PDP %d more times", n-asked)
	}
}
