package timeline

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/redact"
	"github.com/google/go-cmp/cmp"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	updatepb "go.temporal.io/api/update/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// recorded is where the recorded histories live (workflows' replay tests
// use them too).
const recorded = "../../workflows/testdata"

func loadHistory(t testing.TB, name string) *historypb.History {
	t.Helper()
	f, err := os.Open(filepath.Join(recorded, name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return h
}

func loadChain(t testing.TB, names ...string) []*historypb.History {
	var hs []*historypb.History
	for _, n := range names {
		hs = append(hs, loadHistory(t, n))
	}
	return hs
}

// tasks are the recorded tasks, each with the runs of its chain.
var tasks = []struct {
	name string
	runs []string
}{
	{"agent_task_v3", []string{"agent_task_v3_run1", "agent_task_v3_run2", "agent_task_v3_run3", "agent_task_v3_run4"}},
	{"agent_task_v1", []string{"agent_task_v1_run1", "agent_task_v1_run2", "agent_task_v1_run3"}},
	{"saga_v1", []string{"saga_v1_run1"}},
	{"plan_v1", []string{"plan_v1_run1"}},
	{"approvals_v1", []string{"approvals_v1_run1"}},
	{"rollback_task_v1", []string{"rollback_task_v1_run1"}},
	{"agent_task_v4", []string{"agent_task_v4_run1", "agent_task_v4_run2", "agent_task_v4_run3", "agent_task_v4_run4"}},
	{"edits_v1", []string{"edits_v1_run1"}},
	{"approvals_v2", []string{"approvals_v2_run1"}},
	{"program_v1", []string{"program_v1_run1"}},
	{"plan_program_v1", []string{"plan_program_v1_run1"}},
	{"approval_recheck_v1", []string{"approval_recheck_v1_run1"}},
	{"labels_v1", []string{"labels_v1_run1", "labels_v1_run2"}},
}

func build(t testing.TB, runs []string, opts *Options) *Timeline {
	t.Helper()
	tl, err := BuildChain(loadChain(t, runs...), opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(tl.Problems) > 0 {
		t.Errorf("problems: %q", tl.Problems)
	}
	return tl
}

// checkGolden compares tl's rendering with testdata/<name>.golden (-update
// rewrites it).
func checkGolden(t *testing.T, tl *Timeline, name string) {
	t.Helper()
	var b bytes.Buffer
	if err := Render(&b, tl, &RenderOptions{UIURL: "http://127.0.0.1:8233", Namespace: "default"}); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), b.String()); diff != "" {
		t.Errorf("rendering differs from %s (-want +got; -update rewrites it):\n%s", golden, diff)
	}
}

func TestRenderGolden(t *testing.T) {
	for _, tc := range tasks {
		t.Run(tc.name, func(t *testing.T) {
			tl := build(t, tc.runs, nil)
			checkGolden(t, tl, tc.name)
		})
	}
}

func TestJSONRoundTrip(t *testing.T) {
	for _, tc := range tasks {
		t.Run(tc.name, func(t *testing.T) {
			tl := build(t, tc.runs, nil)
			b, err := json.Marshal(tl)
			if err != nil {
				t.Fatal(err)
			}
			var back Timeline
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tl, &back); diff != "" {
				t.Errorf("timeline changed through JSON (-before +after):\n%s", diff)
			}
			var fields map[string]any
			if err := json.Unmarshal(b, &fields); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"task", "kind", "principal", "started", "end", "runs", "calls"} {
				if _, ok := fields[k]; !ok {
					t.Errorf("JSON has no %q field", k)
				}
			}
		})
	}
}

// TestTimelineFacts checks what each recorded task must show.
func TestTimelineFacts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		runs  []string
		check func(t *testing.T, tl *Timeline)
	}{
		{"approved call, denial, limit across four runs", tasks[0].runs, func(t *testing.T, tl *Timeline) {
			want(t, "end", tl.End, api.StateFinished)
			want(t, "runs", len(tl.Runs), 4)
			want(t, "calls", len(tl.Calls), 7)
			want(t, "call count", tl.CallCount, 6)
			c0 := tl.Call("c0")
			want(t, "c0 effect", c0.Decision.Effect, "require_approval")
			want(t, "c0 rule", c0.Decision.Rule, "approve-puts")
			want(t, "c0 policy", c0.Decision.PolicyVersion, "ca52332e9a9f5231")
			want(t, "c0 approval group", c0.Approval.Group, "ops")
			want(t, "c0 approval state", c0.Approval.State, api.ApprovalApproved)
			want(t, "c0 votes", len(c0.Approval.Votes), 1)
			want(t, "c0 approver", c0.Approval.Votes[0].Approver+" via "+c0.Approval.Votes[0].Via, "bob via cli")
			want(t, "c0 outcome", c0.Result.Outcome, "ok")
			want(t, "c3 attempts", len(tl.Call("c3").Tries), 2)
			want(t, "c3 outcome", tl.Call("c3").Result.Outcome, "unavailable")
			want(t, "c5 rule", tl.Call("c5").Decision.Rule, "no-secrets")
			want(t, "c5 outcome", tl.Call("c5").Result.Outcome, "denied")
			want(t, "c6 outcome", tl.Call("c6").Result.Outcome, "limit")
			want(t, "c6 run", tl.Call("c6").Run, 4)
			if tl.Call("c6").Decision != nil {
				t.Errorf("c6 was stopped by the limit before policy, yet has decision %+v", tl.Call("c6").Decision)
			}
		}},
		{"before policy existed", tasks[1].runs, func(t *testing.T, tl *Timeline) {
			want(t, "end", tl.End, api.StateFinished)
			for _, c := range tl.Calls {
				if c.Decision != nil {
					t.Errorf("call %s has a decision in a history from before policy", c.ID)
				}
			}
		}},
		{"rollbacks and cancel", tasks[2].runs, func(t *testing.T, tl *Timeline) {
			want(t, "end", tl.End, api.StateCanceled)
			want(t, "rollbacks", len(tl.Rollbacks), 3)
			r0, r1, r2 := tl.Rollbacks[0], tl.Rollbacks[1], tl.Rollbacks[2]
			want(t, "first rollback", r0.By+" "+r0.State+" "+strings.Join(r0.Compensated, ","), "recorder rolled_back c2,c1")
			want(t, "second rollback", r1.State, api.RollbackNothing)
			want(t, "cancel's rollback", r2.By+" "+r2.State+" "+strings.Join(r2.Compensated, ","), "cancel rolled_back c3")
			want(t, "inferred", r2.Inferred, true)
			c1 := tl.Call("c1")
			want(t, "c1 capture", c1.Capture.Tool+" "+c1.Capture.Outcome, "counter__echo ok")
			want(t, "c1 compensation", c1.Compensation.Tool+" "+string(c1.Compensation.Arguments)+" "+c1.Compensation.State, `counter__put {"key":"undo-a1"} done`)
			want(t, "c1 undone by", c1.Compensation.Runs[0].Rollback, 0)
			want(t, "c3 undone by", tl.Call("c3").Compensation.Runs[0].Rollback, 2)
		}},
		{"plan: skip, failure, rollback", tasks[3].runs, func(t *testing.T, tl *Timeline) {
			want(t, "kind", tl.Kind, "plan")
			want(t, "plan", tl.Plan, "recorded")
			want(t, "end", tl.End, api.StateRolledBack)
			var states []string
			for _, s := range tl.Steps {
				states = append(states, s.ID+"="+s.State)
			}
			want(t, "steps", strings.Join(states, " "), "first=ok skipped=skipped second=ok boom=failed")
			want(t, "boom", tl.Call("step-boom").Result.Outcome, "tool_error")
			want(t, "rollbacks", len(tl.Rollbacks), 1)
			want(t, "rollback", tl.Rollbacks[0].By+" "+strings.Join(tl.Rollbacks[0].Compensated, ","), "plan step-second,step-first")
		}},
		{"approvals: denied, expired, escalated", tasks[4].runs, func(t *testing.T, tl *Timeline) {
			want(t, "denied", tl.Call("denied").Approval.State, api.ApprovalDenied)
			want(t, "denied by", tl.Call("denied").Approval.Votes[0].Approver, "bob")
			want(t, "timed out", tl.Call("timed-out").Approval.State, api.ApprovalExpired)
			esc := tl.Call("escalated").Approval
			want(t, "escalated to", esc.EscalatedTo, "leads")
			want(t, "escalated", esc.State+" by "+esc.Votes[0].Approver, "approved by lisa")
			if esc.Digest == "" || esc.Expires.IsZero() || esc.Decided == nil {
				t.Errorf("escalated request lacks digest, expiry or decision time: %+v", esc)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, build(t, tc.runs, nil)) })
	}
}

func want[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func TestBuildErrors(t *testing.T) {
	run1, run3 := loadHistory(t, "agent_task_v3_run1"), loadHistory(t, "agent_task_v3_run3")
	for _, tc := range []struct {
		name  string
		hists []*historypb.History
		want  string
	}{
		{"nothing", nil, "no history"},
		{"empty", []*historypb.History{{}}, "no events"},
		{"no start", []*historypb.History{{Events: run1.Events[1:]}}, "does not begin with the workflow's start"},
		{"a gap in the chain", []*historypb.History{run1, run3}, "does not continue run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := BuildChain(tc.hists, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestPartial: a run without the ones before it says so.
func TestPartial(t *testing.T) {
	tl := build(t, []string{"agent_task_v3_run2"}, nil)
	want(t, "partial", tl.Partial, true)
	want(t, "started", tl.Started.Format("15:04:05.000"), "11:40:24.975")
	want(t, "end", tl.End, "continued_as_new")
}

func export(t *testing.T, opts *Options) []byte {
	t.Helper()
	var b bytes.Buffer
	x := NewExporter(&b)
	for _, tc := range tasks {
		if err := x.Write(build(t, tc.runs, opts)); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

func lines(b []byte) [][]byte { return bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) }

func TestExportVerifies(t *testing.T) {
	out := export(t, nil)
	n := len(lines(out))
	res, err := Verify(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("the export does not verify: %v", err)
	}
	want(t, "records", res.Records, int64(n))
	want(t, "last", res.Last, lineHash(lines(out)[n-1]))

	types := map[string]bool{}
	for i, l := range lines(out) {
		var rec map[string]any
		if err := json.Unmarshal(l, &rec); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"seq", "time", "task", "type", "prev", "hash"} {
			if _, ok := rec[k]; !ok {
				t.Errorf("record %d has no %q", i+1, k)
			}
		}
		types[rec["type"].(string)] = true
	}
	for _, typ := range []string{EventTaskStarted, EventCallRequested, EventPolicyDecision, EventApprovalRequested, EventApprovalEscalated,
		EventApprovalDecided, EventApprovalClosed, EventCapture, EventCallAttempt, EventCallFinished, EventCompensationRecorded,
		EventRollbackRequested, EventCompensation, EventRollbackFinished, EventFinishRequested, EventCancelRequested,
		EventContinuedAsNew, EventTaskEnded, EventProgramStarted, EventProgramStopRequested, EventProgramFinished} {
		if !types[typ] {
			t.Errorf("no %s record in the export of the recorded tasks", typ)
		}
	}
	// The same timelines export to the same bytes.
	if again := export(t, nil); !bytes.Equal(again, out) {
		t.Error("exporting twice gave different bytes")
	}
}

// TestVerifyFindsTampering: a changed byte is reported at its record; a
// removed or moved record at the record after the gap.
func TestVerifyFindsTampering(t *testing.T) {
	out := export(t, nil)
	ls := lines(out)
	join := func(ls [][]byte) []byte { return append(bytes.Join(ls, []byte("\n")), '\n') }
	flip := func(line int, at func(l []byte) int) []byte {
		c := make([][]byte, len(ls))
		copy(c, ls)
		l := bytes.Clone(ls[line-1])
		l[at(l)] ^= 0x01
		c[line-1] = l
		return join(c)
	}
	index := func(s string) func([]byte) int {
		return func(l []byte) int { return bytes.Index(l, []byte(s)) + len(s) }
	}
	for _, tc := range []struct {
		name    string
		file    []byte
		line    int
		seq     int64
		problem string
	}{
		{"a byte of a value", flip(7, index(`"tool":"`)), 7, 7, "hash mismatch"},
		{"a byte of the time", flip(12, index(`"time":"2026-11-29T`)), 12, 12, "hash mismatch"},
		{"a byte of prev", flip(20, index(`"prev":"`)), 20, 20, "hash mismatch"},
		{"a byte of the hash", flip(3, func(l []byte) int { return len(l) - 5 }), 3, 3, "hash mismatch"},
		{"the opening brace", flip(9, func([]byte) int { return 0 }), 9, 0, "not a JSON record"},
		{"a digit of seq", flip(5, index(`"seq":`)), 5, 4, "hash mismatch"},
		{"a deleted line", join(append(append([][]byte{}, ls[:10]...), ls[11:]...)), 11, 12, "prev mismatch"},
		{"the first line deleted", join(ls[1:]), 1, 2, "prev mismatch"},
		{"two lines swapped", join(append(append(append([][]byte{}, ls[:4]...), ls[5], ls[4]), ls[6:]...)), 5, 6, "prev mismatch"},
		{"an empty line", join(append(append(append([][]byte{}, ls[:2]...), []byte{}), ls[2:]...)), 3, 0, "empty line"},
		{"no records", nil, 1, 0, "no records"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Verify(bytes.NewReader(tc.file))
			var ce *ChainError
			if !errors.As(err, &ce) {
				t.Fatalf("Verify = %v, want a *ChainError", err)
			}
			if ce.Line != tc.line || ce.Seq != tc.seq || !strings.Contains(ce.Problem, tc.problem) {
				t.Errorf("Verify = %q (line %d, seq %d), want line %d, seq %d, %q", ce, ce.Line, ce.Seq, tc.line, tc.seq, tc.problem)
			}
		})
	}
}

// TestRedaction: the manifests' redact paths are masked (through lists
// too), and _meta and credential-named members never reach the timeline
// or the export.
func TestRedaction(t *testing.T) {
	// A call whose arguments carry what must not come out.
	hist := loadHistory(t, "agent_task_v3_run1")
	args := `{"text":"hi","_meta":{"progressToken":"p-1"},"auth":{"token":"tok-s3cr3t","user":"ann"},` +
		`"items":[{"name":"n1","Password":"pw-s3cr3t"},{"name":"n2","note":"keep"}],` +
		`"Authorization":"Bearer s3cr3t","api-key":"k-s3cr3t","clientSecret":"cs-s3cr3t","nested":{"deeper":{"session_cookie":"c-s3cr3t","ok":1}}}`
	setCallArgs(t, hist, "c1", args)
	hists := append([]*historypb.History{hist}, loadChain(t, "agent_task_v3_run2", "agent_task_v3_run3", "agent_task_v3_run4")...)
	opts := &Options{Redact: map[string][]string{"counter__echo": {"items.name", "auth.user"}, "counter__put": {"key"}}}
	tl, err := BuildChain(hists, opts)
	if err != nil {
		t.Fatal(err)
	}
	got := string(tl.Call("c1").Arguments)
	want(t, "c1 arguments", got, `{"auth":{"user":"[redacted]"},"items":[{"name":"[redacted]"},{"name":"[redacted]","note":"keep"}],"nested":{"deeper":{"ok":1}},"text":"hi"}`)
	want(t, "c0 arguments", string(tl.Call("c0").Arguments), `{"key":"[redacted]"}`)
	// counter__put echoes its key: the redacted value is masked in the
	// result too.
	want(t, "c0 result", tl.Call("c0").Result.Text, `{"count":1,"key":"[redacted]"}`)

	var b bytes.Buffer
	x := NewExporter(&b)
	if err := x.Write(tl); err != nil {
		t.Fatal(err)
	}
	var r bytes.Buffer
	if err := Render(&r, tl, nil); err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(tl)
	for what, out := range map[string]string{"export": b.String(), "rendering": r.String(), "JSON": string(js)} {
		for _, bad := range []string{"s3cr3t", "_meta", "progressToken", `"arguments":{"key":"approved"}`} {
			if strings.Contains(out, bad) {
				t.Errorf("the %s contains %q", what, bad)
			}
		}
	}
}

// TestExportHasNoSecrets walks every exported record: no _meta and no
// credential-named member at any depth, and the redact paths masked.
func TestExportHasNoSecrets(t *testing.T) {
	out := export(t, &Options{Redact: map[string][]string{"counter__put": {"key"}, "counter__append": {"key"}}})
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, val := range x {
				if k == "_meta" || redact.SecretName(k) {
					t.Errorf("%s.%s in the export", path, k)
				}
				walk(path+"."+k, val)
			}
		case []any:
			for _, e := range x {
				walk(path+"[]", e)
			}
		}
	}
	masked := 0
	for i, l := range lines(out) {
		var rec map[string]any
		if err := json.Unmarshal(l, &rec); err != nil {
			t.Fatal(err)
		}
		walk("record", rec)
		tool, _ := rec["tool"].(string)
		if a, ok := rec["arguments"].(map[string]any); ok && (tool == "counter__put" || tool == "counter__append") {
			if a["key"] != "[redacted]" {
				t.Errorf("record %d: %s key not masked: %v", i+1, tool, a)
			}
			masked++
		}
	}
	if masked == 0 {
		t.Error("no record had counter__put or counter__append arguments to mask")
	}
}

// setCallArgs replaces the arguments of call id's call_tool Update (and of
// its CallTool activity) in a recorded history.
func setCallArgs(t *testing.T, h *historypb.History, id, args string) {
	t.Helper()
	dc := converter.GetDefaultDataConverter()
	found := false
	for _, ev := range h.Events {
		if a := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes(); a != nil && a.GetAcceptedRequest().GetInput().GetName() == api.UpdateCallTool {
			in := a.GetAcceptedRequest().GetInput()
			var req api.CallRequest
			if err := dc.FromPayloads(in.GetArgs(), &req); err != nil {
				t.Fatal(err)
			}
			if req.CallID != id {
				continue
			}
			req.Arguments = json.RawMessage(args)
			p, err := dc.ToPayloads(req)
			if err != nil {
				t.Fatal(err)
			}
			in.Args = p
			found = true
		}
	}
	if !found {
		t.Fatalf("no call_tool update for %s", id)
	}
}

// TestRepeatedCall: a call ID retried in a later run is answered from the
// task's memory; the timeline shows it as a repeat and keeps the call
// that ran as the one its ID names.
func TestRepeatedCall(t *testing.T) {
	hists := loadChain(t, tasks[0].runs...)
	run2 := hists[1]
	dc := converter.GetDefaultDataConverter()
	req, err := dc.ToPayloads(api.CallRequest{CallID: "c0", Tool: "counter__put", Server: "counter", UpstreamTool: "put",
		Arguments: json.RawMessage(`{"key":"approved"}`)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := dc.ToPayloads(api.CallResult{CallID: "c0", Tool: "counter__put", Outcome: api.OutcomeOK, Attempts: 1,
		Result: json.RawMessage(`{"content":[{"type":"text","text":"done"}]}`)})
	if err != nil {
		t.Fatal(err)
	}
	last := run2.Events[len(run2.Events)-1]
	at := last.GetEventTime()
	accepted := &historypb.HistoryEvent{EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED, EventTime: at,
		Attributes: &historypb.HistoryEvent_WorkflowExecutionUpdateAcceptedEventAttributes{WorkflowExecutionUpdateAcceptedEventAttributes: &historypb.WorkflowExecutionUpdateAcceptedEventAttributes{
			ProtocolInstanceId: "c0", AcceptedRequest: &updatepb.Request{Meta: &updatepb.Meta{UpdateId: "c0"},
				Input: &updatepb.Input{Name: api.UpdateCallTool, Args: req}}}}}
	completed := &historypb.HistoryEvent{EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED, EventTime: at,
		Attributes: &historypb.HistoryEvent_WorkflowExecutionUpdateCompletedEventAttributes{WorkflowExecutionUpdateCompletedEventAttributes: &historypb.WorkflowExecutionUpdateCompletedEventAttributes{
			Meta: &updatepb.Meta{UpdateId: "c0"}, Outcome: &updatepb.Outcome{Value: &updatepb.Outcome_Success{Success: res}}}}}
	run2.Events = append(run2.Events[:len(run2.Events)-1], accepted, completed, last)

	tl, err := BuildChain(hists, nil)
	if err != nil {
		t.Fatal(err)
	}
	var c0s []*Call
	for _, c := range tl.Calls {
		if c.ID == "c0" {
			c0s = append(c0s, c)
		}
	}
	if len(c0s) != 2 {
		t.Fatalf("%d calls c0, want the call and its repeat", len(c0s))
	}
	want(t, "first is a repeat", c0s[0].Repeat, false)
	want(t, "second is a repeat", c0s[1].Repeat, true)
	want(t, "repeat's run", c0s[1].Run, 2)
	want(t, "Call(c0) approval", tl.Call("c0").Approval != nil, true)
	var b bytes.Buffer
	if err := Render(&b, tl, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "a repeat of a call from an earlier run") {
		t.Errorf("the rendering does not say c0 was repeated:\n%s", b.String())
	}
}

// TestRejudgedDecisions: an approved call judged again before it ran shows
// that second decision (approval_recheck_v1: unchanged, revoked by a new
// rule, sent to another group); an edited call's second decision is its
// edit's, not a re-judgement (edits_v1).
func TestRejudgedDecisions(t *testing.T) {
	tl := build(t, []string{"approval_recheck_v1_run1"}, nil)
	var got []string
	for _, c := range tl.Calls {
		if c.Rejudged == nil {
			got = append(got, c.ID+": none")
			continue
		}
		got = append(got, c.ID+": "+string(c.Rejudged.Effect)+" "+c.Rejudged.Rule+" "+c.Rejudged.Group)
	}
	want := []string{"same: require_approval  ops", "revoked: deny freeze ", "regrouped: require_approval leads-now leads"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("re-judgements %q, want %q", got, want)
	}
	for _, c := range build(t, []string{"edits_v1_run1"}, nil).Calls {
		if c.Rejudged != nil {
			t.Errorf("edited call %s shows a re-judgement %+v; its second decision is its edit's", c.ID, c.Rejudged)
		}
	}
}
