package activities

import (
	"context"
	"errors"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/api"
)

type stubNotifier struct {
	name  string
	err   error
	posts int
}

func (s *stubNotifier) Name() string { return s.name }
func (s *stubNotifier) Post(context.Context, api.ApprovalNotice) ([]api.MessageRef, error) {
	s.posts++
	if s.err != nil {
		return nil, s.err
	}
	return []api.MessageRef{{Notifier: s.name, Channel: "C1", TS: "1"}}, nil
}
func (s *stubNotifier) Update(context.Context, api.ApprovalNotice) error { return nil }
func (s *stubNotifier) Alert(context.Context, api.RollbackNotice) error  { return nil }

// TestNotifyApproversKeepsFailedDeliveries (issue 25 §10): a webhook that
// fails beside a Slack that works is not dropped: the workflow is told
// which notifier failed and why, and DeliverApprovalNotice retries that
// one alone.
func TestNotifyApproversKeepsFailedDeliveries(t *testing.T) {
	slack := &stubNotifier{name: "slack"}
	hook := &stubNotifier{name: "webhook:teams", err: errors.New("the bridge answered 500 Internal Server Error")}
	a := &Activities{Notifiers: []Notifier{slack, hook}}
	refs, err := a.NotifyApprovers(context.Background(), api.ApprovalNotice{RequestID: "t~c", Group: "ops", Separate: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 2 || refs[0].Failed != "" || refs[1].Notifier != "webhook:teams" || refs[1].Failed == "" {
		t.Fatalf("refs %+v, want slack posted and the webhook's failure", refs)
	}
	hook.err = nil
	got, err := a.DeliverApprovalNotice(context.Background(), api.ChannelNotice{Notifier: "webhook:teams", Notice: api.ApprovalNotice{RequestID: "t~c", Group: "ops"}})
	if err != nil || len(got) != 1 || got[0].Notifier != "webhook:teams" || slack.posts != 1 {
		t.Fatalf("redelivery %+v %v (slack posted %d times, want once)", got, err, slack.posts)
	}
	_, err = a.DeliverApprovalNotice(context.Background(), api.ChannelNotice{Notifier: "webhook:gone"})
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || !app.NonRetryable() {
		t.Errorf("a notifier no longer configured: %v, want a non-retryable error", err)
	}
}
