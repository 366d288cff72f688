package workflows

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
)

// An approved call that fails UserGrant (its user's grant was gone when it
// ran, or when its pre-image capture ran) did not run: the approvers'
// messages are updated once more, after the closing update, with NotRun
// saying why (changeGrantGoneNotice), and the request records it. Any
// other failure of an approved call leaves the messages at "approved".
func TestApprovedCallWhoseGrantIsGone(t *testing.T) {
	for _, tc := range []struct {
		name    string
		capture bool
		fail    error
		notRun  bool
	}{
		{"call", false, appErr(api.ErrTypeUserGrant), true},
		{"capture", true, appErr(api.ErrTypeUserGrant), true},
		{"rejected, not a grant", false, appErr(api.ErrTypeRejected), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newApprovalHarness(t, ops("bob"), 1)
			h.tools.script = append(h.tools.script, respond(api.CallToolOutput{}, tc.fail))
			if tc.capture {
				h.policy.undo = func(in api.DecideInput, out *api.DecideOutput) {
					out.Compensable = true
					out.Capture = &api.ToolCall{Tool: "fs__read", Server: "fs", UpstreamTool: "read",
						Arguments: json.RawMessage(`{"path":"/a"}`), Spec: api.ToolSpec{Timeout: time.Minute, Idempotent: true, Retry: api.RetrySpec{MaxAttempts: 1}}}
				}
			}
			r := req("c1", false)
			r.Subject = &api.Subject{Principal: "dave@corp", Held: true, Sealed: []byte("ciphertext")}
			var res api.CallResult
			h.callAt(time.Second, r, &res, nil)
			h.decideAt(time.Minute, "click-1", vote("bob", true), nil, nil)
			var reqs []api.ApprovalRequest
			h.env.RegisterDelayedCallback(func() {
				v, err := h.env.QueryWorkflow(api.QueryApprovals)
				if err == nil {
					_ = v.Get(&reqs)
				}
			}, time.Hour)
			h.finishAt(2 * time.Hour)
			h.run(baseInput())
			if h.tools.calls() != 1 || res.Outcome == api.OutcomeOK {
				t.Fatalf("call %+v, %d tool calls", res, h.tools.calls())
			}
			updates := h.notes.updates
			if !tc.notRun {
				if len(updates) != 1 || updates[0].NotRun != "" || len(reqs) != 1 || reqs[0].NotRun != "" {
					t.Fatalf("updates %+v, requests %+v; want the closing update only", updates, reqs)
				}
				return
			}
			if len(updates) != 2 || updates[0].NotRun != "" || updates[0].State != api.ApprovalApproved {
				t.Fatalf("updates %+v; want the closing one, then one saying it did not run", updates)
			}
			n := updates[1]
			if n.State != api.ApprovalApproved || !strings.Contains(n.NotRun, "did not run") || n.ActsAs != "dave@corp" || !n.ActsHeld || len(n.Messages) != 1 || len(n.Votes) != 1 {
				t.Fatalf("the second update %+v", n)
			}
			if len(reqs) != 1 || reqs[0].NotRun != n.NotRun {
				t.Fatalf("the request does not record it: %+v", reqs)
			}
		})
	}
}
