package workflows

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
)

// editsPolicy asks ops to approve fs__read; an edited path under /secret
// is denied, and one under /prod needs group leads.
func editsPolicy(h *approvalHarness, leads api.ApprovalSpec) {
	ops := *h.policy.approval
	h.policy.decide = func(in api.DecideInput) (api.Verdict, error) {
		// Called under the fake's lock, which reads approval next.
		h.policy.approval = &ops
		var a struct{ Path string }
		_ = json.Unmarshal(in.Arguments, &a)
		switch {
		case strings.HasPrefix(a.Path, "/secret"):
			return api.Verdict{Effect: api.Deny, Check: api.CheckRule, Rule: "no-secret", Reason: "denied by rule no-secret: secrets stay put", Version: "pv1"}, nil
		case strings.HasPrefix(a.Path, "/prod"):
			h.policy.approval = &leads
			return api.Verdict{Effect: api.RequireApproval, Check: api.CheckRule, Rule: "prod", Group: "leads", Quorum: 1, Version: "pv1"}, nil
		}
		return api.Verdict{Effect: api.RequireApproval, Check: api.CheckDefault, Group: "ops", Quorum: 1, Version: "pv1"}, nil
	}
}

func edit(approver, args string) api.DecideRequest {
	d := vote(approver, true)
	d.Arguments = args
	return d
}

func TestApproveWithEditsRunsTheEditedCall(t *testing.T) {
	h := newApprovalHarness(t, ops("bob", "carol"), 1)
	h.policy.approval.Redact = []string{"token"}
	editsPolicy(h, ops("lisa"))
	r := req("c1", false)
	r.Arguments = json.RawMessage(`{"path":"/a","token":"s3cret-1"}`)
	var res api.CallResult
	var dres api.DecideResult
	h.callAt(time.Second, r, &res, nil)
	h.decideAt(time.Minute, "click-1", func() api.DecideRequest {
		d := edit("bob", `{"path":"/b","token":"s3cret-2"}`)
		d.Digest = api.RequestDigest("task-1", "c1", "fs__read", r.Arguments, "pv1")
		return d
	}(), &dres, nil)
	h.finishAt(2 * time.Hour)
	h.run(baseInput())

	if res.Outcome != api.OutcomeOK || h.tools.calls() != 1 {
		t.Fatalf("call %+v ran %d times", res, h.tools.calls())
	}
	if got := string(h.tools.seen[0].Arguments); got != `{"path":"/b","token":"s3cret-2"}` {
		t.Errorf("the tool ran with %s, want the edited arguments", got)
	}
	if dres.State != api.ApprovalApproved || dres.EditDigest == "" {
		t.Errorf("decide result %+v", dres)
	}
	// Judged twice: the original, then the edited call.
	if len(h.policy.seen) != 2 || !strings.Contains(string(h.policy.seen[1].Arguments), `"/b"`) {
		t.Fatalf("policy saw %+v", h.policy.seen)
	}
	e := res.Edit
	if e == nil || e.By != "bob" || e.Via != "test" || e.Digest != dres.EditDigest ||
		e.OriginalDigest != api.RequestDigest("task-1", "c1", "fs__read", r.Arguments, "pv1") ||
		e.Digest != api.RequestDigest("task-1", "c1", "fs__read", json.RawMessage(`{"path":"/b","token":"s3cret-2"}`), "pv1") {
		t.Fatalf("edit %+v", e)
	}
	var out struct {
		Content []struct{ Type, Text string }
		Meta    map[string]struct {
			By      string
			Changes []api.ArgChange
		} `json:"_meta"`
	}
	if err := json.Unmarshal(res.Result, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Content) != 2 || out.Content[0].Text != "default" ||
		!strings.Contains(out.Content[1].Text, "approver bob changed the arguments") ||
		!strings.Contains(out.Content[1].Text, `path: "/a" → "/b"`) || !strings.Contains(out.Content[1].Text, `token: masked value changed`) {
		t.Errorf("result content %+v", out.Content)
	}
	m := out.Meta[api.EditMetaKey]
	if m.By != "bob" || len(m.Changes) != 2 || m.Changes[0].Path != "path" {
		t.Errorf("result _meta %+v", out.Meta)
	}
	if strings.Contains(string(res.Result), "s3cret") {
		t.Errorf("the result shows a redacted value: %s", res.Result)
	}
}

func TestApproveWithEditsDeniedByPolicy(t *testing.T) {
	h := newApprovalHarness(t, ops("bob"), 1)
	editsPolicy(h, ops("lisa"))
	var res api.CallResult
	var dres api.DecideResult
	h.callAt(time.Second, req("c1", false), &res, nil)
	h.decideAt(time.Minute, "click-1", edit("bob", `{"path":"/secret/key"}`), &dres, nil)
	h.finishAt(2 * time.Hour)
	h.run(baseInput())
	// Issue 25 §8: the approver is told that the edit was refused and
	// nothing ran, and so is every channel (the closing notice).
	if dres.EditRefused == "" || !strings.Contains(dres.EditRefused, "no-secret") || dres.EditEffect != string(api.Deny) ||
		!strings.Contains(dres.Message, "the edit was refused") || !strings.Contains(dres.Message, "nothing ran") {
		t.Errorf("decide result %+v, want it to say the edit was refused", dres)
	}
	if len(h.notes.updates) != 1 || h.notes.updates[0].Edit == nil || !strings.Contains(h.notes.updates[0].Edit.Refused, "no-secret") {
		t.Errorf("closing notices %+v, want the edit's refusal", h.notes.updates)
	}
	if res.Outcome != api.OutcomeDenied || h.tools.calls() != 0 ||
		!strings.Contains(res.Reason, "bob approved fs__read with edited arguments, but the edit was refused") ||
		!strings.Contains(res.Reason, "rule no-secret") {
		t.Fatalf("call %+v ran %d times", res, h.tools.calls())
	}
	if res.Edit == nil || res.Edit.Effect != string(api.Deny) || res.Decision == nil || res.Decision.Rule != "no-secret" {
		t.Errorf("edit %+v decision %+v", res.Edit, res.Decision)
	}
}

// TestEditNoteNamesMaskedPaths (issue 25 §11): an edit inside a masked
// nested field shows which path changed in the agent's note and _meta.
func TestEditNoteNamesMaskedPaths(t *testing.T) {
	h := newApprovalHarness(t, ops("bob"), 1)
	h.policy.approval.Redact = []string{"deletions.key"}
	editsPolicy(h, ops("lisa"))
	r := req("c1", false)
	r.Arguments = json.RawMessage(`{"path":"/a","deletions":[{"line":1,"key":"k1"},{"line":2,"key":"k2"}]}`)
	var res api.CallResult
	h.callAt(time.Second, r, &res, nil)
	h.decideAt(time.Minute, "click-1", func() api.DecideRequest {
		d := edit("bob", `{"path":"/a","deletions":[{"line":1,"key":"k1"},{"line":2,"key":"k9"}]}`)
		d.Digest = api.RequestDigest("task-1", "c1", "fs__read", r.Arguments, "pv1")
		return d
	}(), nil, nil)
	h.finishAt(2 * time.Hour)
	h.run(baseInput())
	if res.Outcome != api.OutcomeOK || res.Edit == nil {
		t.Fatalf("call %+v", res)
	}
	if c := res.Edit.Changes; len(c) != 1 || c[0].Path != "deletions.1.key" || !c[0].Masked {
		t.Errorf("changes %+v, want deletions.1.key (masked)", c)
	}
	if text := api.ResultText(res.Result); !strings.Contains(text, "deletions.1.key: masked value changed") || strings.Contains(text, "k9") {
		t.Errorf("the agent's note: %s", text)
	}
}

func TestApproveWithEditsGoesToAnotherGroup(t *testing.T) {
	h := newApprovalHarness(t, ops("bob"), 1)
	editsPolicy(h, ops("lisa", "bob"))
	var res api.CallResult
	var self, other error
	h.callAt(time.Second, req("c1", false), &res, nil)
	h.decideAt(time.Minute, "click-1", edit("bob", `{"path":"/prod/x"}`), nil, nil)
	digest := api.RequestDigest("task-1", "c1", "fs__read", json.RawMessage(`{"path":"/prod/x"}`), "pv1")
	// bob may not approve his own edit for leads; lisa may.
	h.decideAt(2*time.Minute, "click-2", api.DecideRequest{RequestID: "task-1~c1~edit", Digest: digest, Approver: "bob", Approve: true, Via: "test"}, nil, &self)
	h.decideAt(3*time.Minute, "click-3", api.DecideRequest{RequestID: "task-1~c1~edit", Digest: digest, Approver: "lisa", Approve: true, Via: "test"}, nil, &other)
	h.finishAt(2 * time.Hour)
	h.run(baseInput())
	if self == nil || !strings.Contains(self.Error(), "bob edited these arguments") {
		t.Errorf("bob approving his own edit: %v", self)
	}
	if other != nil {
		t.Errorf("lisa approving: %v", other)
	}
	if res.Outcome != api.OutcomeOK || h.tools.calls() != 1 || string(h.tools.seen[0].Arguments) != `{"path":"/prod/x"}` {
		t.Fatalf("call %+v", res)
	}
	if len(h.notes.posts) != 2 || h.notes.posts[1].Group != "leads" || h.notes.posts[1].RequestID != "task-1~c1~edit" ||
		h.notes.posts[1].EditOf != "task-1~c1" || h.notes.posts[1].EditedBy != "bob" {
		t.Errorf("posts %+v", h.notes.posts)
	}
}

func TestApproveWithEditsRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		noEdits bool
		d       api.DecideRequest
		want    string
	}{
		{"the tool forbids edits", true, edit("bob", `{"path":"/b"}`), "approval.edits: false"},
		{"edits come with an approval", false, func() api.DecideRequest { d := edit("bob", `{"path":"/b"}`); d.Approve = false; return d }(), "with an approval only"},
		{"edits are an object", false, edit("bob", `["/b"]`), "must be a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := ops("bob")
			spec.NoEdits = tc.noEdits
			h := newApprovalHarness(t, spec, 1)
			var res api.CallResult
			var rejected error
			h.callAt(time.Second, req("c1", false), &res, nil)
			h.decideAt(time.Minute, "click-1", tc.d, nil, &rejected)
			h.decideAt(2*time.Minute, "click-2", vote("bob", true), nil, nil)
			h.finishAt(2 * time.Hour)
			h.run(baseInput())
			if rejected == nil || !strings.Contains(rejected.Error(), tc.want) {
				t.Fatalf("rejection %v, want %q", rejected, tc.want)
			}
			// Nothing was recorded: bob's plain approval afterwards counts.
			if res.Outcome != api.OutcomeOK || res.Edit != nil || string(h.tools.seen[0].Arguments) != `{"path":"/a"}` {
				t.Fatalf("call %+v", res)
			}
		})
	}
}

func TestArgChangesMasksRedactPaths(t *testing.T) {
	got := argChanges(json.RawMessage(`{"a":1,"auth":{"token":"x"},"gone":true,"list":[{"k":"s"}]}`),
		json.RawMessage(`{"a":2,"auth":{"token":"y"},"new":"n","list":[{"k":"t"}]}`), []string{"auth.token", "list.k"})
	b, _ := json.Marshal(got)
	want := `[{"path":"a","from":1,"to":2},{"path":"auth.token","from":"[redacted]","to":"[redacted]"},{"path":"gone","from":true},{"path":"list","from":"[redacted]","to":"[redacted]"},{"path":"new","to":"n"}]`
	if string(b) != want {
		t.Errorf("changes\n %s\nwant\n %s", b, want)
	}
}

// TestApproveWithEditsQuorum: with a quorum of 2, an edit needs the same
// group again; the editor's approval counts, another member's completes it.
func TestApproveWithEditsQuorum(t *testing.T) {
	h := newApprovalHarness(t, ops("bob", "carol"), 2)
	var res api.CallResult
	var again error
	h.callAt(time.Second, req("c1", false), &res, nil)
	h.decideAt(time.Minute, "click-1", edit("bob", `{"path":"/b"}`), nil, nil)
	digest := api.RequestDigest("task-1", "c1", "fs__read", json.RawMessage(`{"path":"/b"}`), "pv1")
	h.decideAt(2*time.Minute, "click-2", api.DecideRequest{RequestID: "task-1~c1~edit", Digest: digest, Approver: "bob", Approve: true, Via: "test"}, nil, &again)
	h.decideAt(3*time.Minute, "click-3", api.DecideRequest{RequestID: "task-1~c1~edit", Digest: digest, Approver: "carol", Approve: true, Via: "test"}, nil, nil)
	h.finishAt(2 * time.Hour)
	h.run(baseInput())
	if again == nil || !strings.Contains(again.Error(), "bob already approved request task-1~c1~edit") {
		t.Errorf("bob approving his edit twice: %v", again)
	}
	if res.Outcome != api.OutcomeOK || h.tools.calls() != 1 || string(h.tools.seen[0].Arguments) != `{"path":"/b"}` {
		t.Fatalf("call %+v", res)
	}
	if len(h.notes.posts) != 2 || h.notes.posts[1].RequestID != "task-1~c1~edit" || len(h.notes.posts[1].Votes) != 1 || h.notes.posts[1].Votes[0].Approver != "bob" {
		t.Errorf("the edit's request: %+v", h.notes.posts)
	}
}

func TestEditKeepsNumbersExact(t *testing.T) {
	if got := string(canonical(json.RawMessage(`{"n": 12345678901234567890, "a": 1.50}`))); got != `{"a":1.50,"n":12345678901234567890}` {
		t.Errorf("canonical %s", got)
	}
	ch := argChanges(json.RawMessage(`{"n":1}`), json.RawMessage(`{"n":12345678901234567890}`), nil)
	if len(ch) != 1 || string(ch[0].To) != "12345678901234567890" {
		t.Errorf("changes %+v", ch)
	}
}
