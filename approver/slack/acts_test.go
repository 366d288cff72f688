package slack

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
)

// TestPostSaysWhomTheCallActsAs (issue 31 §2): a request whose call acts
// as its user (token exchange) says, in its posted blocks, whom it runs as
// upstream, until when their sign-in lasts and whether the provider holds
// their grant; a user name cannot make a mention or a link.
func TestPostSaysWhomTheCallActsAs(t *testing.T) {
	until := time.Date(2030, 1, 2, 4, 5, 6, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		held   bool
		want   []string
		unwant []string
	}{
		{"held", true, []string{"*Acts as*", "Runs as *dave@corp* upstream (token exchange)", "the provider holds their grant (offline)",
			"2030-01-02T04:05:06Z", "runs as them with a fresh exchange, unless the grant was revoked"}, []string{"the call does not run"}},
		{"not held", false, []string{"*Acts as*", "Runs as *dave@corp* upstream (token exchange)", "their sign-in ends",
			"2030-01-02T04:05:06Z", "approved after that, the call does not run"}, []string{"holds their grant"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSlackFake(t)
			n := NewNotifier(f.client(), map[string]string{"ops": "C_OPS"})
			notice := slackNotice()
			notice.ActsAs, notice.ActsUntil, notice.ActsHeld = "dave@corp", until, tc.held
			if _, err := n.Post(context.Background(), notice); err != nil {
				t.Fatal(err)
			}
			all := f.ok("chat.postMessage")[0].shown(t)
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("message lacks %q:\n%s", w, all)
				}
			}
			for _, w := range tc.unwant {
				if strings.Contains(all, w) {
					t.Errorf("message says %q:\n%s", w, all)
				}
			}
		})
	}
	// Hostile: a subject that tries a mention, a link and a line break.
	f := newSlackFake(t)
	n := NewNotifier(f.client(), map[string]string{"ops": "C_OPS"})
	notice := slackNotice()
	notice.ActsAs, notice.ActsUntil = "<!channel>\n<https://evil.example|x>@corp", until
	if _, err := n.Post(context.Background(), notice); err != nil {
		t.Fatal(err)
	}
	all := f.ok("chat.postMessage")[0].shown(t)
	if strings.Contains(all, "<!channel>") || strings.Contains(all, "<https://evil") || !strings.Contains(all, "&lt;!channel&gt;") {
		t.Errorf("the subject is not escaped: %s", all)
	}
	// No acts-as line for a call that does not act as its user.
	f = newSlackFake(t)
	n = NewNotifier(f.client(), map[string]string{"ops": "C_OPS"})
	if _, err := n.Post(context.Background(), slackNotice()); err != nil {
		t.Fatal(err)
	}
	if all := f.ok("chat.postMessage")[0].shown(t); strings.Contains(all, "Acts as") {
		t.Errorf("a call without token exchange says whom it acts as: %s", all)
	}
}

// TestUpdateSaysApprovedCallDidNotRun: an approved request whose call did
// not run (its user's grant was gone) is rewritten to say so and why,
// without buttons.
func TestUpdateSaysApprovedCallDidNotRun(t *testing.T) {
	f := newSlackFake(t)
	n := NewNotifier(f.client(), map[string]string{"ops": "C_OPS"})
	notice := slackNotice()
	notice.ActsAs, notice.ActsHeld = "dave@corp", true
	notice.State = api.ApprovalApproved
	notice.Votes = []api.NoticeVote{{Approver: "carol", Approve: true, At: time.Now(), Via: "cli"}, {Approver: "bob", Approve: true, At: time.Now(), Via: "slack"}}
	notice.Messages = []api.MessageRef{{Notifier: NotifierName, Channel: "C_OPS", TS: "1.000001", Group: "ops"}}
	notice.NotRun = "db__drop_table did not run: cannot act as dave@corp <now>: the provider refused: user disabled"
	if err := n.Update(context.Background(), notice); err != nil {
		t.Fatal(err)
	}
	up := f.ok("chat.update")
	if len(up) != 1 {
		t.Fatalf("%d updates, want 1", len(up))
	}
	all := up[0].shown(t)
	for _, w := range []string{"Approved, did not run: db__drop_table", "Approved, but the call did not run", "user disabled", "Nothing ran", "carol", "dave@corp", "&lt;now&gt;"} {
		if !strings.Contains(all, w) {
			t.Errorf("update lacks %q:\n%s", w, all)
		}
	}
	if up[0].actions(t) != nil {
		t.Errorf("the update keeps buttons")
	}
}
