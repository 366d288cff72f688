package slack

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/activities"
	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/config"
)

const slackDigest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

func slackNotice() api.ApprovalNotice {
	return api.ApprovalNotice{
		RequestID: "task-1a2b~call-3c4d", TaskID: "task-1a2b", CallID: "call-3c4d", Tool: "db__drop_table",
		Principal: "alice", Client: "claude-code",
		Arguments:   json.RawMessage(`{"table":"users","auth":{"token":"s3cr3t-tok","user":"admin"},"rows":[{"id":1,"secret":"row-secret-1"},{"id":2,"secret":"row-secret-2"}],"note":"<!channel> see <https://evil.example|here> & more"}`),
		Redact:      []string{"auth.token", "rows.secret", "missing.path"},
		SideEffects: []string{"write", "destructive"}, DataLevel: "confidential", Risk: "critical",
		Rule: "prod-writes", Reason: "writes to production need a second pair of eyes",
		Digest: slackDigest, Group: "ops", Quorum: 2, ExpiresAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC),
	}
}

func TestPostRendersRequest(t *testing.T) {
	f := newSlackFake(t)
	n := NewNotifier(f.client(), map[string]string{"ops": "C_OPS"})
	refs, err := n.Post(context.Background(), slackNotice())
	if err != nil {
		t.Fatal(err)
	}
	posts := f.ok("chat.postMessage")
	if len(posts) != 1 || len(refs) != 1 {
		t.Fatalf("posts %d refs %v", len(posts), refs)
	}
	p := posts[0]
	if p.Form.Get("channel") != "C_OPS" || refs[0].Channel != "C_OPS" || refs[0].TS == "" || refs[0].Notifier != "slack" || refs[0].Group != "ops" {
		t.Fatalf("posted to %q, ref %+v", p.Form.Get("channel"), refs[0])
	}
	all := p.shown(t)
	for _, secret := range []string{"s3cr3t-tok", "row-secret-1", "row-secret-2"} {
		if strings.Contains(all, secret) {
			t.Errorf("message shows redacted value %q", secret)
		}
	}
	if c := strings.Count(all, Mask); c != 3 {
		t.Errorf("%d masks, want 3 (auth.token and rows[*].secret)", c)
	}
	for _, want := range []string{
		"db__drop_table", "alice", "claude-code", "task-1a2b", "write, destructive", "confidential", "critical",
		"prod-writes", "second pair of eyes", "2030-01-02T03:04:05Z", "\\\"table\\\": \\\"users\\\"", "\\\"user\\\": \\\"admin\\\"",
		"2 from group `ops`",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("message lacks %q", want)
		}
	}
	// What the agent wrote cannot mention the channel or make links.
	if strings.Contains(all, "<!channel>") || strings.Contains(all, "<https://evil") || !strings.Contains(all, "&lt;!channel&gt;") {
		t.Errorf("arguments not escaped for slackEscape: %s", all)
	}

	act := p.actions(t)
	if act == nil {
		t.Fatal("no actions block")
	}
	if act["block_id"] != BlockIDPrefix+slackDigest {
		t.Errorf("actions block_id %v, want the digest", act["block_id"])
	}
	els, _ := act["elements"].([]any)
	if len(els) != 3 { // approve, deny, and edit & approve (the tool allows edits)
		t.Fatalf("elements %v", els)
	}
	for i, want := range []struct{ id, style string }{{"approve", "primary"}, {"deny", "danger"}, {"edit", ""}} {
		b := els[i].(map[string]any)
		if style, _ := b["style"].(string); b["action_id"] != want.id || style != want.style || b["value"] != "task-1a2b~call-3c4d" {
			t.Errorf("button %d = %v; want action %s style %s and value = the request ID only", i, b, want.id, want.style)
		}
	}
	if strings.Contains(p.Form.Get("text"), "Escalated") {
		t.Error("not an escalation")
	}
}

func TestPostTruncatesArguments(t *testing.T) {
	f := newSlackFake(t)
	n := NewNotifier(f.client(), map[string]string{"ops": "C_OPS"})
	nt := slackNotice()
	big, _ := json.Marshal(map[string]any{"content": strings.Repeat("é", 20000)})
	nt.Arguments = big
	if _, err := n.Post(context.Background(), nt); err != nil {
		t.Fatal(err)
	}
	p := f.ok("chat.postMessage")[0]
	found := false
	for _, b := range p.blocks(t) {
		txt, _ := b["text"].(map[string]any)
		s, _ := txt["text"].(string)
		if len([]rune(s)) > 3000 {
			t.Errorf("a section holds %d characters (Slack's limit is 3000)", len([]rune(s)))
		}
		if strings.HasPrefix(s, "*Arguments*") {
			found = true
			if !strings.Contains(s, "more characters not shown") {
				t.Errorf("truncation not said: %.200s", s)
			}
		}
	}
	if !found {
		t.Fatal("no arguments section")
	}
	if got := slackArguments(json.RawMessage(`{"a":`), nil); !strings.Contains(got, "withheld") {
		t.Errorf("invalid JSON shown: %q", got)
	}
}

func TestPostEscalationAndNoChannel(t *testing.T) {
	f := newSlackFake(t)
	n := NewNotifier(f.client(), map[string]string{"ops": "C_OPS", "leads": "C_LEADS", "none": ""})
	nt := slackNotice()
	nt.Group, nt.Escalation = "leads", true
	if _, err := n.Post(context.Background(), nt); err != nil {
		t.Fatal(err)
	}
	p := f.ok("chat.postMessage")[0]
	if p.Form.Get("channel") != "C_LEADS" || !strings.Contains(p.Form.Get("text"), "Escalated") || !strings.Contains(p.Form.Get("blocks"), "Escalated to `leads`") {
		t.Errorf("escalation postSlack: channel %s text %q", p.Form.Get("channel"), p.Form.Get("text"))
	}
	for _, g := range []string{"none", "unknown"} {
		nt.Group = g
		if _, err := n.Post(context.Background(), nt); !errors.Is(err, activities.ErrNoChannel) {
			t.Errorf("group %s: %v, want ErrNoChannel", g, err)
		}
	}
	if len(f.all()) != 1 {
		t.Errorf("posted for a group without a channel: %+v", f.all())
	}
}

func TestUpdateShowsOutcome(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC)
	cases := []struct {
		state string
		votes []api.NoticeVote
		want  []string
	}{
		{api.ApprovalApproved, []api.NoticeVote{{Approver: "bob", Approve: true, At: at, Via: "slack"}, {Approver: "carol", Approve: true, At: at, Via: "cli"}},
			[]string{"Approved: db__drop_table", "2 of 2 approvals", "*bob* approved via slack", "*carol* approved via cli", "2030-01-02T03:00:00Z"}},
		{api.ApprovalDenied, []api.NoticeVote{{Approver: "dave", Approve: false, At: at, Via: "slack"}},
			[]string{"Denied: db__drop_table", "*dave* denied via slack"}},
		{api.ApprovalExpired, nil, []string{"Expired: db__drop_table", "nobody decided in time"}},
	}
	for _, c := range cases {
		t.Run(c.state, func(t *testing.T) {
			f := newSlackFake(t)
			n := NewNotifier(f.client(), map[string]string{"ops": "C_OPS"})
			nt := slackNotice()
			nt.State, nt.Votes = c.state, c.votes
			nt.Messages = []api.MessageRef{
				{Notifier: "slack", Channel: "C_OPS", TS: "111.1", Group: "ops"},
				{Notifier: "slack", Channel: "C_LEADS", TS: "222.2", Group: "leads"},
				{Notifier: "email", Channel: "x", TS: "1"},
			}
			if err := n.Update(context.Background(), nt); err != nil {
				t.Fatal(err)
			}
			ups := f.ok("chat.update")
			if len(ups) != 2 || ups[0].Form.Get("ts") != "111.1" || ups[1].Form.Get("channel") != "C_LEADS" {
				t.Fatalf("updates %+v", ups)
			}
			all := ups[0].shown(t)
			for _, w := range c.want {
				if !strings.Contains(all, w) {
					t.Errorf("update lacks %q:\n%s", w, all)
				}
			}
			if ups[0].actions(t) != nil {
				t.Error("a decided request still has buttons")
			}
			if strings.Contains(all, "s3cr3t-tok") {
				t.Error("update shows a redacted value")
			}
		})
	}

	// Nothing posted by Slack: nothing to update.
	f := newSlackFake(t)
	n := NewNotifier(f.client(), nil)
	nt := slackNotice()
	nt.State = api.ApprovalApproved
	if err := n.Update(context.Background(), nt); !errors.Is(err, activities.ErrNoChannel) {
		t.Errorf("no messages: %v", err)
	}
}

func TestSlackFailuresAreClassified(t *testing.T) {
	f := newSlackFake(t)
	n := NewNotifier(f.client(), map[string]string{"ops": "C_OPS"})
	cases := []struct {
		name         string
		slackFault   slackFault
		typ          string
		nonRetryable bool
		delay        time.Duration
	}{
		{"429", slackFault{status: http.StatusTooManyRequests, retryAfter: "7"}, ErrTypeRateLimited, false, 7 * time.Second},
		{"503", slackFault{status: http.StatusServiceUnavailable}, ErrTypeUnavailable, false, 0},
		{"500", slackFault{status: http.StatusInternalServerError}, ErrTypeUnavailable, false, 0},
		{"channel_not_found", slackFault{slackErr: "channel_not_found"}, ErrTypeRejected, true, 0},
		{"internal_error", slackFault{slackErr: "internal_error"}, ErrTypeUnavailable, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f.fail("chat.postMessage", c.slackFault)
			_, err := n.Post(context.Background(), slackNotice())
			var ae *temporal.ApplicationError
			if !errors.As(err, &ae) {
				t.Fatalf("error %T %v, want an application error", err, err)
			}
			if ae.Type() != c.typ || ae.NonRetryable() != c.nonRetryable || ae.NextRetryDelay() != c.delay {
				t.Errorf("type %s nonRetryable %v delay %s; want %s %v %s", ae.Type(), ae.NonRetryable(), ae.NextRetryDelay(), c.typ, c.nonRetryable, c.delay)
			}
			if strings.Contains(err.Error(), "xoxb") {
				t.Errorf("error shows the token: %v", err)
			}
		})
	}
	// The network is down: retried.
	f.srv.Close()
	_, err := n.Post(context.Background(), slackNotice())
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.NonRetryable() || ae.Type() != ErrTypeUnavailable {
		t.Errorf("network error: %v", err)
	}
}

func TestUpdateFailuresKeepRetryDelay(t *testing.T) {
	f := newSlackFake(t)
	n := NewNotifier(f.client(), nil)
	nt := slackNotice()
	nt.State = api.ApprovalDenied
	nt.Messages = []api.MessageRef{{Notifier: "slack", Channel: "C1", TS: "1.1"}, {Notifier: "slack", Channel: "C2", TS: "2.2"}, {Notifier: "slack", Channel: "C3", TS: "3.3"}}
	f.fail("chat.update", slackFault{status: 429, retryAfter: "3"}, slackFault{slackErr: "message_not_found"})
	err := n.Update(context.Background(), nt)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.NextRetryDelay() != 3*time.Second || ae.NonRetryable() {
		t.Fatalf("error %v", err)
	}
	// A deleted message is not an error; the third was updated.
	if len(f.ok("chat.update")) != 2 {
		t.Errorf("updates %+v", f.all())
	}
}

func TestSlackAppSecrets(t *testing.T) {
	cfg := &config.Config{
		Slack:          &config.Slack{BotTokenEnv: "MY_BOT", APIURL: "http://127.0.0.1:1/"},
		ApproverGroups: map[string]*config.ApproverGroup{"ops": {Members: []string{"bob"}, SlackChannel: "C_OPS"}, "local": {Members: []string{"bob"}}},
	}
	if NewApp(&config.Config{}, nil) != nil {
		t.Fatal("no slack block: want no app")
	}
	env := map[string]string{}
	a := NewApp(cfg, func(k string) string { return env[k] })
	if _, err := a.BotClient(); err == nil || !strings.Contains(err.Error(), "MY_BOT") || !strings.Contains(err.Error(), "bot_token_env") {
		t.Errorf("missing bot token: %v", err)
	}
	if _, err := a.SigningSecret(); err == nil || !strings.Contains(err.Error(), "SLACK_SIGNING_SECRET") {
		t.Errorf("missing signing secret: %v", err)
	}
	if _, err := a.AppClient(); err == nil || !strings.Contains(err.Error(), "SLACK_APP_TOKEN") {
		t.Errorf("missing app token: %v", err)
	}
	env = map[string]string{"MY_BOT": "xoxb-1", "SLACK_SIGNING_SECRET": "sek", "SLACK_APP_TOKEN": "xapp-1"}
	a = NewApp(cfg, func(k string) string { return env[k] })
	if _, err := a.Notifier(); err != nil {
		t.Error(err)
	}
	if s, err := a.SigningSecret(); err != nil || s != "sek" {
		t.Errorf("secret %q %v", s, err)
	}
	if _, err := a.AppClient(); err != nil {
		t.Error(err)
	}
	if len(a.Channels) != 1 || a.Channels["ops"] != "C_OPS" || a.Config.Mode != "http" || a.Config.InteractionsPath != "/slack/interactions" {
		t.Errorf("app %+v", a)
	}
}

func TestPostLinksTaskToWebUI(t *testing.T) {
	f := newSlackFake(t)
	n := NewNotifier(f.client(), map[string]string{"ops": "C_OPS"}).WithTaskLinks("http://127.0.0.1:8233/", "prod ns")
	if _, err := n.Post(context.Background(), slackNotice()); err != nil {
		t.Fatal(err)
	}
	all := f.ok("chat.postMessage")[0].shown(t)
	if want := "<http://127.0.0.1:8233/namespaces/prod%20ns/workflows/task-1a2b|task-1a2b>"; !strings.Contains(all, want) {
		t.Errorf("message lacks the task link %s:\n%s", want, all)
	}
	// Without a UI, the task is plain code.
	plain := NewNotifier(f.client(), map[string]string{"ops": "C_OPS"})
	if _, err := plain.Post(context.Background(), slackNotice()); err != nil {
		t.Fatal(err)
	}
	if all := f.ok("chat.postMessage")[1].shown(t); strings.Contains(all, "/workflows/") || !strings.Contains(all, "`task-1a2b`") {
		t.Errorf("message without UI:\n%s", all)
	}
}
