package workflows

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
)

// TestNumbersPast2To53StayApart (issue 25 item 4, changeExactNumbers): a
// grant bound to account 9007199254740992 does not cover 9007199254740993
// (which asks, and is denied), one bound to 1234567890123456789 does not
// cover 1234567890123456700; their requests' digests differ from the
// covered numbers'; and an approver's edit to 9007199254740993 runs with
// exactly that number.
func TestNumbersPast2To53StayApart(t *testing.T) {
	spec := grantSpec()
	spec.GrantArgs = []string{"account"}
	h := newApprovalHarness(t, spec, 1)
	calls := map[string]*api.CallResult{}
	reqs := map[string]api.CallRequest{}
	at := func(d time.Duration, id, account string) api.CallRequest {
		r := req(id, false)
		r.Arguments = json.RawMessage(`{"account":` + account + `}`)
		calls[id], reqs[id] = &api.CallResult{}, r
		h.callAt(d, r, calls[id], nil)
		return r
	}
	grant := &api.GrantAsk{Calls: 5}
	h.grantDecide(2*time.Second, at(time.Second, "a1", "9007199254740992"), "bob", true, grant, nil, nil)
	h.grantDecide(4*time.Second, at(3*time.Second, "a2", "9007199254740993"), "bob", false, nil, nil, nil)
	at(5*time.Second, "a3", "9007199254740992")
	h.grantDecide(7*time.Second, at(6*time.Second, "b1", "1234567890123456789"), "bob", true, grant, nil, nil)
	h.grantDecide(9*time.Second, at(8*time.Second, "b2", "1234567890123456700"), "bob", false, nil, nil, nil)
	at(10*time.Second, "b3", "1234567890123456789")
	e1 := at(11*time.Second, "e1", "1")
	var dres api.DecideResult
	h.decideAt(12*time.Second, "edit-e1", func() api.DecideRequest {
		d := edit("bob", `{"account": 9007199254740993}`)
		d.RequestID, d.Digest = "task-1~e1", api.RequestDigest("task-1", "e1", e1.Tool, e1.Arguments, "pv1")
		return d
	}(), &dres, nil)
	h.finishAt(time.Hour)
	h.run(baseInput())

	want := map[string]struct {
		outcome api.Outcome
		check   string
	}{
		"a1": {api.OutcomeOK, "default"}, "a2": {api.OutcomeDenied, "default"}, "a3": {api.OutcomeOK, api.CheckGrant},
		"b1": {api.OutcomeOK, "default"}, "b2": {api.OutcomeDenied, "default"}, "b3": {api.OutcomeOK, api.CheckGrant},
		"e1": {api.OutcomeOK, "default"},
	}
	for id, w := range want {
		r := calls[id]
		if r.Outcome != w.outcome || r.Decision == nil || r.Decision.Check != w.check {
			t.Errorf("%s %s: %s %+v; want %s by check %s", id, reqs[id].Arguments, r.Outcome, r.Decision, w.outcome, w.check)
		}
	}
	var ran []string
	h.tools.mu.Lock()
	for _, in := range h.tools.seen {
		ran = append(ran, string(in.Arguments))
	}
	h.tools.mu.Unlock()
	wantRan := []string{`{"account":9007199254740992}`, `{"account":9007199254740992}`, `{"account":1234567890123456789}`,
		`{"account":1234567890123456789}`, `{"account":9007199254740993}`}
	if len(ran) != len(wantRan) {
		t.Fatalf("the tool ran with %v; want %v", ran, wantRan)
	}
	for i := range ran {
		if ran[i] != wantRan[i] {
			t.Errorf("run %d with %s; want %s", i+1, ran[i], wantRan[i])
		}
	}
	if e := calls["e1"].Edit; e == nil || string(e.Arguments) != `{"account":9007199254740993}` ||
		e.Digest != api.RequestDigest("task-1", "e1", e1.Tool, json.RawMessage(`{"account":9007199254740993}`), "pv1") ||
		e.Digest == api.RequestDigest("task-1", "e1", e1.Tool, json.RawMessage(`{"account":9007199254740992}`), "pv1") {
		t.Errorf("edit %+v", e)
	}
}
