package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/activities"
	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	approverslack "github.com/airlock-run/airlock/approver/slack"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/exchange"
)

// TestTokenExchangeSlackApprover (issue 31 §2): the approver is told whom a
// call acts as and when the user's grant is gone. Through the real stack
// (gateway, worker, embedded Temporal, the real OpenID provider, the Slack
// notifier posting to a fake Slack Web API):
//   - alice's request, posted to Slack, says it runs as alice@corp upstream,
//     until when her sign-in lasts, and that the provider holds her grant;
//     approved, it runs as alice and its message says approved;
//   - dave's request, approved after his 3 s sign-in ended and after the
//     provider disabled him, does not run (UserGrant); its Slack message is
//     updated once more to say the call did not run and why, and approvals
//     show prints the outcome;
//   - nothing posted to Slack, and no history, audit or log line, holds a
//     token.
//
// With -record it writes grant_gone_v1_run1.json (dave's task:
// changeGrantGoneNotice).
func TestTokenExchangeSlackApprover(t *testing.T) {
	const resource = "https://airlock.test/mcp"
	p := startExchangeProvider(t)
	up := startTicketsUpstream(t, p.issuer)
	t.Setenv("TICKETS_EXCHANGE_SECRET", "exchange-secret")
	key, err := exchange.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	fake := newFakeSlackAPI(t)
	notifier := approverslack.NewNotifier(fake.client(), map[string]string{"ops": "C_OPS"})
	var logs, audit syncBuffer
	s := heldGrantStack(t, p, up, stackOptions{subjectKey: key, logs: &logs, audit: auditstream.New(&audit),
		notifiers: []activities.Notifier{notifier}})
	local := approver.Local{Temporal: s.client, Namespace: s.srv.Namespace()}
	tokens := map[string]string{"alice": p.signIn(t, "alice", resource, time.Hour)}
	tasks := map[string]bool{}
	approve := func(r api.ApprovalRequest) {
		t.Helper()
		if _, err := local.Decide(context.Background(), approver.Decision{RequestID: r.ID, Approver: "carol", Approve: true, Via: "cli", Digest: r.Digest[:12]}); err != nil {
			t.Fatal(err)
		}
	}
	taskOf := func(res asyncResult) string {
		t.Helper()
		if res.err != nil {
			t.Fatal(res.err)
		}
		id, _ := res.res.Meta[gateway.MetaTask].(string)
		if id == "" {
			t.Fatalf("no task in %v", res.res.Meta)
		}
		tasks[id] = true
		return id
	}

	// 1. alice: the posted request says whom it acts as; approved, it runs.
	alice := connectURL(t, s.url, map[string]string{"Authorization": "Bearer " + tokens["alice"]})
	waitTools(t, alice, "desk__deploy")
	pending := callAsync(alice, "desk__deploy", map[string]any{"n": 4001})
	r := waitPending(t, local, "4001", nil)
	post := fake.waitPost(t, 1)
	shown := post.shown(t)
	for _, want := range []string{"Acts as", "Runs as *alice@corp* upstream (token exchange)", "the provider holds their grant (offline)",
		r.ActsUntil.UTC().Format(time.RFC3339), "runs as them with a fresh exchange, unless the grant was revoked"} {
		if !strings.Contains(shown, want) {
			t.Errorf("alice's Slack message lacks %q:\n%s", want, shown)
		}
	}
	approve(r)
	res := <-pending
	taskOf(res)
	if res.res.IsError || text(res.res) != "deploy #4001 as alice" {
		t.Fatalf("alice's approved deploy: %s", text(res.res))
	}
	fake.waitCall(t, "chat.update", "alice's message updated to approved", func(c slackAPICall) bool {
		return strings.Contains(c.Form.Get("text"), "Approved: desk__deploy")
	})

	// 2. dave: approved after his sign-in ended and he was disabled: it
	// does not run, and the approver is told.
	tokens["dave"] = p.signIn(t, "dave", resource, 3*time.Second)
	dave := connectURL(t, s.url, map[string]string{"Authorization": "Bearer " + tokens["dave"]})
	pending = callAsync(dave, "desk__deploy", map[string]any{"n": 4002})
	r = waitPending(t, local, "4002", map[string]bool{r.ID: true})
	post = fake.waitPost(t, 2)
	if shown := post.shown(t); !strings.Contains(shown, "Runs as *dave@corp* upstream") || !strings.Contains(shown, "holds their grant") {
		t.Errorf("dave's Slack message does not say whom it acts as:\n%s", shown)
	}
	waitFor(t, "dave's token to expire", 10*time.Second, func() bool { return expired(tokens["dave"]) })
	p.revoke("dave")
	approve(r)
	res = <-pending
	daveTask := taskOf(res)
	if !res.res.IsError || !strings.Contains(text(res.res), "did not run") || !strings.Contains(text(res.res), "dave@corp") {
		t.Fatalf("dave's revoked deploy: %s; want it not run", text(res.res))
	}
	if got := up.runs("deploy"); len(got) != 1 || got[0] != "alice" {
		t.Fatalf("deploy ran for %v; want alice only", got)
	}
	channel := post.Form.Get("channel")
	upd := fake.waitCall(t, "chat.update", "dave's message updated to say the call did not run", func(c slackAPICall) bool {
		return c.Form.Get("channel") == channel && strings.Contains(c.Form.Get("text"), "Approved, did not run: desk__deploy") &&
			strings.Contains(c.Form.Get("text"), r.ID)
	})
	shown = upd.shown(t)
	for _, want := range []string{"Approved, but the call did not run", "dave@corp", "disabled", "Nothing ran", "carol"} {
		if !strings.Contains(shown, want) {
			t.Errorf("dave's updated message lacks %q:\n%s", want, shown)
		}
	}
	if strings.Contains(shown, `"actions"`) {
		t.Errorf("dave's updated message keeps its buttons:\n%s", shown)
	}
	// The update after the closing one: the message ends saying it did
	// not run (the last update of dave's request is this one).
	var last slackAPICall
	for _, c := range fake.list("chat.update", true) {
		if strings.Contains(c.Form.Get("text"), r.ID) {
			last = c
		}
	}
	if !strings.Contains(last.Form.Get("text"), "did not run") {
		t.Errorf("the last update of dave's message says %q; want that the call did not run", last.Form.Get("text"))
	}
	// approvals show prints the outcome.
	var got api.ApprovalRequest
	waitFor(t, "the request to record that the call did not run", 30*time.Second, func() bool {
		got, err = approver.Lookup(context.Background(), s.client, r.ID)
		return err == nil && got.NotRun != ""
	})
	var b strings.Builder
	if err := approver.WriteRequest(&b, got, time.Now()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "outcome:") || !strings.Contains(b.String(), "did not run") || !strings.Contains(b.String(), "disabled") {
		t.Errorf("approvals show does not print the outcome:\n%s", b.String())
	}

	// 3. No token anywhere: Slack, histories, audit stream, logs.
	var slackText strings.Builder
	for _, m := range []string{"chat.postMessage", "chat.update"} {
		for _, c := range fake.list(m, false) {
			slackText.WriteString(c.Form.Encode())
			slackText.Write(c.JSON)
		}
	}
	h := searchTokens(t, s, tasks, p, up, tokens, &logs, &audit)
	p.mu.Lock()
	secrets := append([]string{"exchange-secret"}, p.exchanged...)
	p.mu.Unlock()
	for _, tok := range tokens {
		secrets = append(secrets, tok)
	}
	up.mu.Lock()
	secrets = append(secrets, up.seen...)
	up.mu.Unlock()
	for _, sec := range secrets {
		for _, part := range strings.Split(sec, ".") {
			if len(part) >= 16 && strings.Contains(slackText.String(), part) {
				t.Fatalf("what was posted to Slack holds token material (%.12s…)", part)
			}
		}
	}
	if !strings.Contains(h, "grant-gone-notice") {
		t.Errorf("the histories hold no grant-gone-notice marker")
	}

	desc, err := s.client.DescribeWorkflowExecution(context.Background(), daveTask, "")
	if err != nil {
		t.Fatal(err)
	}
	finishTask(t, s, daveTask)
	replayRuns(t, s, daveTask, desc.GetWorkflowExecutionInfo().GetExecution().GetRunId(), "grant_gone_v1")
}
