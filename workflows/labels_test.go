package workflows

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.temporal.io/sdk/testsuite"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/testenv"
)

// labelReq is a call of tool whose spec declares level, side effects and
// open_world, with args.
func labelReq(id, tool, level string, openWorld bool, args string, sideEffects ...string) api.CallRequest {
	server, upstream, _ := strings.Cut(tool, "__")
	return api.CallRequest{CallID: id, Tool: tool, Server: server, UpstreamTool: upstream, Arguments: json.RawMessage(args),
		Spec: api.ToolSpec{Timeout: time.Minute, Retry: api.RetrySpec{MaxAttempts: 1}, SideEffects: sideEffects, DataLevel: level, OpenWorld: openWorld}}
}

func (h *harness) resetLabelsAt(d time.Duration, id string, r api.ResetLabelsRequest, res *api.ResetLabelsResult, rejected *error) {
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(api.UpdateResetLabels, id, &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) {
				if rejected != nil {
					*rejected = err
				}
			},
			OnComplete: func(v any, err error) {
				if err != nil {
					h.t.Errorf("reset_labels failed: %v", err)
					return
				}
				*res = v.(api.ResetLabelsResult)
			},
		}, r)
	}, d)
}

// seenLabels are the labels each decision was given, by call ID.
func (f *fakePolicy) seenLabels() map[string]api.Labels {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]api.Labels{}
	for _, in := range f.seen {
		var l api.Labels
		if in.Labels != nil {
			l = *in.Labels
		}
		out[in.CallID] = l
	}
	return out
}

// TestLabelsAccumulate: the labels rise with what calls did and never
// fall; calls that delivered nothing (denied, not sent) raise nothing;
// each decision sees the labels of the calls before it; the call that
// raised them says so.
func TestLabelsAccumulate(t *testing.T) {
	ok := respond(okOutput(`{"content":[{"type":"text","text":"ok"}]}`), nil)
	h := newHarness(t,
		ok, // r1 confidential
		ok, // r2 public: no lower
		respond(api.CallToolOutput{}, appErr(api.ErrTypeNotSent)), // r3 restricted, not sent
		ok, // w1 open world
		ok, // s1 send
		ok, // s2 send again: listed once
	)
	h.policy.decide = func(in api.DecideInput) (api.Verdict, error) {
		if in.CallID == "d1" {
			return api.Verdict{Effect: api.Deny, Check: api.CheckRule, Reason: "no"}, nil
		}
		return api.Verdict{Effect: api.Allow, Check: api.CheckDefault}, nil
	}
	reqs := []api.CallRequest{
		labelReq("r1", "fs__read", "confidential", false, `{"path":"/hr/salaries"}`, "read"),
		labelReq("r2", "fs__read", "public", false, `{"path":"/pub"}`, "read"),
		labelReq("r3", "fs__read", "restricted", false, `{"path":"/keys"}`, "read"),
		labelReq("d1", "vault__get", "restricted", true, `{}`, "read"),
		labelReq("w1", "web__fetch", "public", true, `{"url":"https://example.com"}`, "read"),
		labelReq("s1", "mail__send", "internal", false, `{"to":"x@example.com"}`, "send"),
		labelReq("s2", "mail__send", "internal", false, `{"to":"y@example.com"}`, "send"),
	}
	res := make([]api.CallResult, len(reqs))
	for i, r := range reqs {
		h.callAt(time.Duration(i+1)*time.Second, r, &res[i], nil)
	}
	var st api.Status
	h.statusAt(time.Minute, &st)
	h.finishAt(2 * time.Minute)
	h.run(baseInput())

	want := api.Labels{ReadLevel: "confidential", Untrusted: true, UntrustedBy: "web__fetch (open_world)", Egress: []string{"mail__send"}}
	if st.Labels == nil || !cmp.Equal(*st.Labels, want) {
		t.Fatalf("status labels %+v, want %+v", st.Labels, want)
	}
	seen := h.policy.seenLabels()
	for id, w := range map[string]api.Labels{
		"r1": {},
		"r2": {ReadLevel: "confidential"},
		"d1": {ReadLevel: "confidential"}, // r3 was not sent: nothing read
		"w1": {ReadLevel: "confidential"}, // d1 was denied
		"s1": {ReadLevel: "confidential", Untrusted: true, UntrustedBy: "web__fetch (open_world)"},
		"s2": want,
	} {
		if !cmp.Equal(seen[id], w) {
			t.Errorf("decision of %s saw labels %+v, want %+v", id, seen[id], w)
		}
	}
	// Which calls raised them: r1, w1, s1; not r2 (lower), r3 (not sent),
	// d1 (denied), s2 (already listed).
	var raised []string
	for _, r := range res {
		if r.Labels != nil {
			raised = append(raised, r.CallID)
		}
	}
	if !slices.Equal(raised, []string{"r1", "w1", "s1"}) {
		t.Errorf("calls that raised labels: %v, want [r1 w1 s1]", raised)
	}
	if got := st.Labels.String(); got != "read confidential; untrusted (web__fetch (open_world)); egress mail__send" {
		t.Errorf("labels print as %q", got)
	}
}

// TestLabelsFromInjectionFinding: an injection finding of the content
// guard in a call's result marks the task untrusted, even from a tool that
// is not open-world and whose result the guard withheld; other findings
// (secrets) do not.
func TestLabelsFromInjectionFinding(t *testing.T) {
	h := newHarness(t,
		respond(api.CallToolOutput{Result: json.RawMessage(`{"content":[]}`), Findings: []api.Finding{{Rule: "aws-access-key", Path: "content[0].text", Action: "redact"}}}, nil),
		respond(api.CallToolOutput{Result: json.RawMessage(`{"content":[],"isError":true}`), IsError: true,
			Findings: []api.Finding{{Rule: "injection-ignore-previous", Path: "content[0].text", Action: "block"}}}, nil),
	)
	var a, b api.CallResult
	h.callAt(time.Second, labelReq("k1", "fs__read", "internal", false, `{}`, "read"), &a, nil)
	h.callAt(2*time.Second, labelReq("k2", "issues__get", "internal", false, `{}`, "read"), &b, nil)
	var mid, st api.Status
	h.statusAt(1500*time.Millisecond, &mid)
	h.statusAt(time.Minute, &st)
	h.finishAt(2 * time.Minute)
	h.run(baseInput())
	if mid.Labels == nil || mid.Labels.Untrusted {
		t.Fatalf("a secret finding made the task untrusted: %+v", mid.Labels)
	}
	if st.Labels == nil || !st.Labels.Untrusted || st.Labels.UntrustedBy != "issues__get (injection-ignore-previous at content[0].text)" {
		t.Fatalf("labels after an injection finding: %+v", st.Labels)
	}
	if b.Labels == nil || !b.Labels.Untrusted {
		t.Errorf("k2's result does not say it raised untrusted: %+v", b.Labels)
	}
}

// TestLabelsEgressOutcomes: an egress call that may have taken effect
// (ok, tool error, unknown) counts; one that surely did not run (denied,
// not sent, rejected) does not.
func TestLabelsEgressOutcomes(t *testing.T) {
	toolErr := respond(api.CallToolOutput{Result: json.RawMessage(`{"content":[],"isError":true}`), IsError: true}, nil)
	h := newHarness(t,
		respond(api.CallToolOutput{}, appErr(api.ErrTypeNotSent)),  // a: not sent
		respond(api.CallToolOutput{}, appErr(api.ErrTypeRejected)), // b: rejected
		toolErr, // c: tool error
		respond(api.CallToolOutput{}, appErr(api.ErrTypeOutcomeUnknown)), // e: unknown
	)
	h.policy.decide = func(in api.DecideInput) (api.Verdict, error) {
		if in.CallID == "d" {
			return api.Verdict{Effect: api.Deny, Check: api.CheckRule, Reason: "no"}, nil
		}
		return api.Verdict{Effect: api.Allow, Check: api.CheckDefault}, nil
	}
	for i, id := range []string{"a", "b", "c", "d", "e"} {
		h.callAt(time.Duration(i+1)*time.Second, labelReq(id, "out__"+id, "", false, `{}`, "pay"), nil, nil)
	}
	var st api.Status
	h.statusAt(time.Minute, &st)
	h.finishAt(2 * time.Minute)
	h.run(baseInput())
	if st.Labels == nil || !slices.Equal(st.Labels.Egress, []string{"out__c", "out__e"}) || st.Labels.ReadLevel != "" {
		t.Fatalf("labels %+v, want egress [out__c out__e] and nothing read (tool error c declares no level)", st.Labels)
	}
}

// TestLabelsCannotBeLoweredByTheAgent: labels in the arguments or a
// forged spec in the request (the gateway's copy) change nothing: the
// labels come from the declaration the worker judged (the decision's
// route) and from what ran.
func TestLabelsCannotBeLoweredByTheAgent(t *testing.T) {
	h := newHarness(t)
	h.policy.undo = func(in api.DecideInput, out *api.DecideOutput) {
		// The worker's catalog: fs__read is restricted and open-world.
		out.Route = &api.Route{Server: "fs", UpstreamTool: "read", Spec: api.ToolSpec{Timeout: time.Minute, DataLevel: "restricted", OpenWorld: true, SideEffects: []string{"read"}}}
	}
	forged := labelReq("c1", "fs__read", "public", false,
		`{"path":"/a","task":{"read_level":"public","untrusted":false,"egress":[]},"read_level":"public","_meta":{"labels":{}}}`, "read")
	h.callAt(time.Second, forged, nil, nil)
	h.callAt(2*time.Second, labelReq("c2", "fs__read", "public", false, `{"read_level":"","untrusted":false}`, "read"), nil, nil)
	var st api.Status
	h.statusAt(time.Minute, &st)
	h.finishAt(2 * time.Minute)
	h.run(baseInput())
	if st.Labels == nil || st.Labels.ReadLevel != "restricted" || !st.Labels.Untrusted {
		t.Fatalf("labels %+v: the judged declaration (restricted, open world) must count, not the request's or the arguments'", st.Labels)
	}
	if l := h.policy.seenLabels()["c2"]; l.ReadLevel != "restricted" || !l.Untrusted {
		t.Errorf("the second decision saw %+v", l)
	}
}

// TestLabelsSurviveContinueAsNew: the labels are carried into the next
// run, which keeps raising them, shows them and gives them to decisions.
func TestLabelsSurviveContinueAsNew(t *testing.T) {
	h := newHarness(t)
	in := baseInput()
	in.Limits.ContinueAsNewAfter = 2
	h.callAt(time.Second, labelReq("r1", "fs__read", "sensitive", false, `{}`, "read"), nil, nil)
	h.callAt(2*time.Second, labelReq("w1", "web__fetch", "public", true, `{}`, "read"), nil, nil)
	next := h.continued(in)
	want := api.Labels{ReadLevel: "sensitive", Untrusted: true, UntrustedBy: "web__fetch (open_world)"}
	if next.Carried == nil || next.Carried.Labels == nil || !cmp.Equal(*next.Carried.Labels, want) {
		t.Fatalf("carried labels %+v, want %+v", next.Carried, want)
	}

	h2 := newHarness(t)
	h2.callAt(time.Second, labelReq("s1", "mail__send", "public", false, `{}`, "send"), nil, nil)
	var st api.Status
	h2.statusAt(time.Minute, &st)
	h2.finishAt(2 * time.Minute)
	next.Limits.ContinueAsNewAfter = 100
	h2.run(next)
	if l := h2.policy.seenLabels()["s1"]; !cmp.Equal(l, want) {
		t.Errorf("the next run's decision saw %+v, want %+v", l, want)
	}
	want.Egress = []string{"mail__send"}
	if st.Labels == nil || !cmp.Equal(*st.Labels, want) {
		t.Errorf("labels after continue-as-new %+v, want %+v", st.Labels, want)
	}
}

// TestLabelsReset: an operator's reset needs who and why (rejected before
// it enters history otherwise), clears the labels, keeps what it cleared,
// and later calls raise them again.
func TestLabelsReset(t *testing.T) {
	h := newHarness(t)
	h.callAt(time.Second, labelReq("r1", "fs__read", "restricted", true, `{}`, "read"), nil, nil)
	var noReason, noBy, tooLong error
	var res api.ResetLabelsResult
	h.resetLabelsAt(2*time.Second, "bad1", api.ResetLabelsRequest{By: "ops"}, nil, &noReason)
	h.resetLabelsAt(2*time.Second, "bad2", api.ResetLabelsRequest{Reason: "reviewed"}, nil, &noBy)
	h.resetLabelsAt(2*time.Second, "bad3", api.ResetLabelsRequest{By: "ops", Reason: strings.Repeat("x", api.MaxResetReasonBytes+1)}, nil, &tooLong)
	var before, after, final api.Status
	h.statusAt(2500*time.Millisecond, &before)
	h.resetLabelsAt(3*time.Second, "ok", api.ResetLabelsRequest{By: "ops", Reason: "reviewed the file: nothing secret"}, &res, nil)
	h.statusAt(4*time.Second, &after)
	h.callAt(5*time.Second, labelReq("r2", "fs__read", "internal", false, `{}`, "read"), nil, nil)
	h.statusAt(time.Minute, &final)
	h.finishAt(2 * time.Minute)
	h.run(baseInput())

	for name, err := range map[string]error{"no reason": noReason, "no by": noBy, "too long": tooLong} {
		if err == nil {
			t.Errorf("a reset with %s was accepted", name)
		}
	}
	if before.Labels == nil || before.Labels.ReadLevel != "restricted" || before.Labels.Resets != 0 {
		t.Fatalf("a rejected reset changed the labels: %+v", before.Labels)
	}
	if res.Before.ReadLevel != "restricted" || !res.Before.Untrusted {
		t.Errorf("the reset says it cleared %+v", res.Before)
	}
	l := after.Labels
	if l == nil || !l.Empty() || l.Resets != 1 || l.LastReset == nil || l.LastReset.By != "ops" || l.LastReset.Reason != "reviewed the file: nothing secret" ||
		l.LastReset.Before.ReadLevel != "restricted" {
		t.Fatalf("labels after the reset: %+v", l)
	}
	if final.Labels == nil || final.Labels.ReadLevel != "internal" || final.Labels.Untrusted || final.Labels.Resets != 1 {
		t.Errorf("labels after a call following the reset: %+v", final.Labels)
	}
}

// TestLabelsNameTheApprovalReason: an approval request in a labelled task
// tells the approver the labels.
func TestLabelsNameTheApprovalReason(t *testing.T) {
	h := newApprovalHarness(t, ops("bob"), 1)
	h.policy.decide = func(in api.DecideInput) (api.Verdict, error) {
		if in.CallID == "s1" {
			return api.Verdict{Effect: api.RequireApproval, Check: api.CheckRule, Rule: "trifecta", Reason: "egress after sensitive reads and untrusted content", Group: "ops"}, nil
		}
		return api.Verdict{Effect: api.Allow, Check: api.CheckDefault}, nil
	}
	h.callAt(time.Second, labelReq("r1", "fs__read", "confidential", false, `{}`, "read"), nil, nil)
	h.callAt(2*time.Second, labelReq("w1", "web__fetch", "public", true, `{}`, "read"), nil, nil)
	h.callAt(3*time.Second, labelReq("s1", "mail__send", "internal", false, `{}`, "send"), nil, nil)
	h.finishAt(2 * time.Hour)
	h.run(baseInput())
	want := "egress after sensitive reads and untrusted content Task labels: read confidential; untrusted (web__fetch (open_world))."
	if len(h.notes.posts) == 0 || h.notes.posts[0].Reason != want {
		t.Fatalf("the approvers were told %+v, want the reason %q", h.notes.posts, want)
	}
}

// TestLabelsFromProgramCalls: a program's calls (code mode) raise the
// task's labels like direct calls, each decided on the labels of the calls
// before it, and the program's result says which of its calls raised them.
func TestLabelsFromProgramCalls(t *testing.T) {
	h := newHarness(t)
	useRunner(t, &testenv.ScriptRunner{})
	tools := progTools()
	for i := range tools {
		switch tools[i].Name {
		case "fs__read":
			tools[i].Spec.DataLevel, tools[i].Spec.SideEffects = "confidential", []string{"read"}
		case "fs__write":
			tools[i].Spec.OpenWorld, tools[i].Spec.SideEffects = true, []string{"send"}
		}
	}
	req := progReq("p1", "call fs__read {\"path\":\"/a\"}\ncall fs__write {\"path\":\"/b\"}\ncall fs__read {\"path\":\"/c\"}")
	req.Tools = tools
	var res api.ProgramResult
	h.programAt(time.Second, req, &res, nil)
	var st api.Status
	h.statusAt(time.Minute, &st)
	h.finishAt(time.Hour)
	h.run(baseInput())
	if res.Outcome != api.ProgramOK || len(res.Calls) != 3 {
		t.Fatalf("program %+v", res)
	}
	want := api.Labels{ReadLevel: "confidential", Untrusted: true, UntrustedBy: "fs__write (open_world)", Egress: []string{"fs__write"}}
	if st.Labels == nil || !cmp.Equal(*st.Labels, want) {
		t.Fatalf("labels %+v, want %+v", st.Labels, want)
	}
	if res.Calls[0].Labels == nil || res.Calls[1].Labels == nil || res.Calls[2].Labels != nil {
		t.Errorf("calls that raised labels: %+v", res.Calls)
	}
	if l := h.policy.seenLabels()["p1/3"]; !cmp.Equal(l, want) {
		t.Errorf("the program's third call was decided on %+v, want %+v", l, want)
	}
}

// TestLabelsCarriedUnknownLevel: a carried read level this code does not
// know counts as restricted (fail closed), not as nothing read.
func TestLabelsCarriedUnknownLevel(t *testing.T) {
	h := newHarness(t)
	in := baseInput()
	in.Limits.IdleTimeout = 0 // the carried LastActivity is zero
	in.Carried = &api.Carried{Runs: 1, Labels: &api.Labels{ReadLevel: "top-secret\x00", Egress: []string{"mail__send"}}}
	var st api.Status
	h.statusAt(time.Second, &st)
	h.finishAt(time.Minute)
	h.run(in)
	if st.Labels == nil || st.Labels.ReadLevel != "restricted" || !slices.Equal(st.Labels.Egress, []string{"mail__send"}) {
		t.Fatalf("labels from a carried unknown level: %+v", st.Labels)
	}
}

// TestLabelsFromTheFastPath: a call decided and run in one local activity
// raises the labels by the judged declaration (the decision's route) and
// its findings, as the regular path does.
func TestLabelsFromTheFastPath(t *testing.T) {
	h := newHarness(t)
	f := withFastPath(h,
		respond(api.CallToolOutput{Result: json.RawMessage(`{"content":[]}`)}, nil),
		respond(api.CallToolOutput{Result: json.RawMessage(`{"content":[]}`), Findings: []api.Finding{{Rule: "injection-role-override", Path: "content[0].text", Action: "annotate"}}}, nil),
	)
	h.policy.undo = func(in api.DecideInput, out *api.DecideOutput) {
		out.Route = &api.Route{Server: "fs", UpstreamTool: "read", Spec: api.ToolSpec{Timeout: time.Minute, Idempotent: true, Risk: "low", DataLevel: "sensitive", SideEffects: []string{"read"}}}
	}
	fast := func(id string) api.CallRequest {
		r := labelReq(id, "fs__read", "public", false, `{}`, "read")
		r.Spec.Idempotent, r.Spec.Risk = true, "low"
		return r
	}
	h.callAt(time.Second, fast("f1"), nil, nil)
	h.callAt(2*time.Second, fast("f2"), nil, nil)
	var st api.Status
	h.statusAt(time.Minute, &st)
	h.finishAt(2 * time.Minute)
	h.run(fastInput())
	if local, regular := f.ran(); !slices.Contains(local, api.DecideAndCallName) || slices.Contains(regular, api.CallToolName) {
		t.Fatalf("the calls did not take the fast path: local %v, regular %v", local, regular)
	}
	if st.Labels == nil || st.Labels.ReadLevel != "sensitive" || st.Labels.UntrustedBy != "fs__read (injection-role-override at content[0].text)" {
		t.Fatalf("labels from the fast path: %+v", st.Labels)
	}
}
