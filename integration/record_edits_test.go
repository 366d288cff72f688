package integration

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/manifests"
)

// TestRecordEditsHistory records approve with edits on the real server with
// the real policy (changeApproveEdits): an edit that runs (and whose
// compensation is computed from the edited arguments), an edit a rule
// denies, an edit the upstream's input schema refuses, and an edit a rule
// sends to another group, whose member approves it. With -record it writes
// edits_v1_run1.json.
func TestRecordEditsHistory(t *testing.T) {
	t.Parallel()
	m, effects := counterManifest(t, `  put:
    side_effects: [write]
    data_access_level: internal
    risk: high
    idempotent: true
    approval: {group: ops, timeout: 1h}
    compensation: {tool: put, args: {key: '"undo-" + args.key'}}
`)
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, policy: &policy.Config{Rules: []policy.Rule{
		{Name: "no-secrets", When: `args.?key.orValue("") == "secret"`, Effect: api.Deny, Reason: "secrets stay out of tools"},
		{Name: "prod-needs-leads", When: `string(args.?key.orValue("")).startsWith("prod")`, Effect: api.RequireApproval, Group: "leads"},
	}}, groups: map[string][]string{"ops": {"bob"}, "leads": {"lisa"}}})
	waitTools(t, s.connect(t, nil), "counter__put")
	ctx := context.Background()
	taskID := "record-edits"
	run := startRecorderTask(t, s, taskID, api.Limits{MaxCalls: 10, IdleTimeout: time.Hour})
	// decide waits for request id to be pending, then delivers who's
	// decision (with edited arguments when args is set).
	decide := func(id, who, args string) {
		err := testenv.Poll("request "+id+" to be pending", time.Minute, func() error {
			ar, err := approver.Lookup(ctx, s.client, id)
			if err != nil || ar.State != api.ApprovalPending {
				return errors.Join(err, errors.New("not pending"))
			}
			d := api.DecideRequest{RequestID: ar.ID, Digest: ar.Digest, Approver: who, Approve: true, Via: "cli"}
			if args != "" {
				d.Arguments = args
			}
			if _, err := approver.Deliver(ctx, s.client, "record:"+who+":"+id, d); err != nil {
				t.Errorf("deliver %s: %v", id, err)
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	}
	send := func(id, key string) api.CallResult {
		t.Helper()
		req := api.CallRequest{CallID: id, Tool: "counter__put", Server: "counter", UpstreamTool: "put",
			Arguments: json.RawMessage(`{"key":"` + key + `"}`), Spec: api.SpecFor(m.Tools["put"])}
		res, err := sendCall(ctx, s, taskID, req)
		if err != nil {
			t.Fatalf("call %s: %v", id, err)
		}
		return res
	}

	// 1 edited and run: the tool sees the edited key, the agent is told.
	go decide(taskID+"~edited", "bob", `{"key":"final"}`)
	res := send("edited", "draft")
	if res.Outcome != api.OutcomeOK || res.Edit == nil || res.Edit.By != "bob" || string(res.Edit.Arguments) != `{"key":"final"}` ||
		res.Edit.OriginalDigest == res.Edit.Digest || !strings.Contains(api.ResultText(res.Result), `key: "draft" → "final"`) {
		t.Fatalf("edited: %+v", res)
	}
	// 2 an edit a rule denies: nothing runs.
	go decide(taskID+"~denied", "bob", `{"key":"secret"}`)
	if res := send("denied", "k2"); res.Outcome != api.OutcomeDenied || !strings.Contains(res.Reason, "the edit was refused") ||
		!strings.Contains(res.Reason, "no-secrets") || res.Edit == nil {
		t.Fatalf("denied: %+v", res)
	}
	// 3 an edit that breaks the input schema: refused too.
	go decide(taskID+"~schema", "bob", `{"key":5}`)
	if res := send("schema", "k3"); res.Outcome != api.OutcomeDenied || res.Decision == nil || res.Decision.Check != api.CheckSchema {
		t.Fatalf("schema: %+v %+v", res, res.Decision)
	}
	// 4 an edit that needs leads: a new request, lisa approves it.
	go func() {
		decide(taskID+"~leads", "bob", `{"key":"prod-1"}`)
		decide(taskID+"~leads~edit", "lisa", "")
	}()
	if res := send("leads", "k4"); res.Outcome != api.OutcomeOK || res.Edit == nil || res.Decision == nil || res.Decision.Group != "leads" {
		t.Fatalf("leads: %+v", res)
	}
	if ar, err := approver.Lookup(ctx, s.client, taskID+"~leads~edit"); err != nil || ar.Group != "leads" || ar.EditOf != taskID+"~leads" ||
		ar.EditedBy != "bob" || ar.State != api.ApprovalApproved || len(ar.Votes) != 1 || ar.Votes[0].Approver != "lisa" {
		t.Errorf("the edit's request: %+v %v", ar, err)
	}

	b, _ := os.ReadFile(effects)
	if got := strings.Fields(strings.ReplaceAll(string(b), "\n", " | ")); strings.Join(got, " ") != "put final | put prod-1 |" {
		t.Errorf("side effects %q, want only the edited calls", b)
	}
	st := status(t, s, taskID)
	if len(st.Compensations) != 2 || st.Compensations[0].Compensation == nil || string(st.Compensations[0].Compensation.Arguments) != `{"key":"undo-final"}` {
		t.Errorf("compensations %+v: the compensation must undo the edited call", st.Compensations)
	}

	finishTask(t, s, taskID)
	replayRuns(t, s, taskID, run.GetRunID(), "edits_v1")
}
