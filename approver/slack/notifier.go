package slack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/slack-go/slack"
	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/activities"
	"github.com/airlock-run/airlock/api"
)

// NotifierName is the MessageRef.Notifier of the messages Notifier posts.
const NotifierName = "slack"

// Error types of Notifier's application errors.
const (
	// ErrTypeRateLimited: Slack answered 429; the error's
	// NextRetryDelay is Slack's Retry-After.
	ErrTypeRateLimited = "SlackRateLimited"
	// ErrTypeUnavailable: a 5xx, a network failure or a timeout;
	// retried.
	ErrTypeUnavailable = "SlackUnavailable"
	// ErrTypeRejected: Slack refused the request itself (unknown
	// channel, bot not in the channel, bad blocks); not retried.
	ErrTypeRejected = "SlackRejected"
)

// Notifier posts approval requests to their group's Slack channel and
// rewrites them once decided. It implements activities.Notifier; the
// activity's retries (and Temporal's) handle Slack's failures, and a
// request whose message cannot be posted stays pending, never approved.
type Notifier struct {
	api *slack.Client
	// channels maps an approver group to its channel ID.
	channels map[string]string
	// uiBase and uiNamespace make task links (WithTaskLinks).
	uiBase, uiNamespace string
}

var _ activities.Notifier = (*Notifier)(nil)

// NewNotifier posts with api to each group's channel (group name to
// channel ID; groups without one are decided locally).
func NewNotifier(api *slack.Client, channels map[string]string) *Notifier {
	cp := make(map[string]string, len(channels))
	for g, c := range channels {
		if c != "" {
			cp[g] = c
		}
	}
	return &Notifier{api: api, channels: cp}
}

// WithTaskLinks makes messages link each task to its page in the Temporal
// Web UI at base (namespace ns); "" leaves links out.
func (s *Notifier) WithTaskLinks(base, ns string) *Notifier {
	s.uiBase, s.uiNamespace = strings.TrimRight(base, "/"), ns
	return s
}

// TaskURL is the task's page in the Web UI ("" without a base).
func (s *Notifier) TaskURL(task string) string {
	if s.uiBase == "" {
		return ""
	}
	return s.uiBase + "/namespaces/" + url.PathEscape(s.uiNamespace) + "/workflows/" + url.PathEscape(task)
}

// Name is the MessageRef.Notifier of this notifier's messages.
func (s *Notifier) Name() string { return NotifierName }

// Post announces a request in its group's channel (the escalation group's
// on an escalation).
func (s *Notifier) Post(ctx context.Context, n api.ApprovalNotice) ([]api.MessageRef, error) {
	channel, ok := s.channels[n.Group]
	if !ok {
		return nil, activities.ErrNoChannel
	}
	n.TaskURL = s.TaskURL(n.TaskID)
	fallback, blocks := RenderRequest(n)
	ch, ts, err := s.api.PostMessageContext(ctx, channel,
		slack.MsgOptionText(fallback, false), slack.MsgOptionBlocks(blocks...))
	if err != nil {
		return nil, slackError(fmt.Sprintf("posting approval request %s to Slack channel %s of group %q", n.RequestID, channel, n.Group), err)
	}
	if ch == "" {
		ch = channel
	}
	return []api.MessageRef{{Notifier: NotifierName, Channel: ch, TS: ts, Group: n.Group}}, nil
}

// Update rewrites every Slack message of the request: the outcome, who
// decided and when, without buttons once closed; the decisions so far,
// buttons kept, while pending. ErrNoChannel when it posted none.
func (s *Notifier) Update(ctx context.Context, n api.ApprovalNotice) error {
	n.TaskURL = s.TaskURL(n.TaskID)
	fallback, blocks := RenderOutcome(n)
	if n.State == api.ApprovalPending || n.State == "" {
		fallback, blocks = RenderRequest(n)
	}
	var errs []error
	updated := 0
	for _, m := range n.Messages {
		if m.Notifier != NotifierName || m.Channel == "" || m.TS == "" {
			continue
		}
		updated++
		_, _, _, err := s.api.UpdateMessageContext(ctx, m.Channel, m.TS,
			slack.MsgOptionText(fallback, false), slack.MsgOptionBlocks(blocks...))
		if err != nil && !slackMessageGone(err) {
			errs = append(errs, slackError(fmt.Sprintf("updating Slack message %s in %s for request %s", m.TS, m.Channel, n.RequestID), err))
		}
	}
	if updated == 0 {
		return activities.ErrNoChannel
	}
	return slackJoinErrors(errs)
}

// Alert posts a rollback failure to the group's channel.
func (s *Notifier) Alert(ctx context.Context, n api.RollbackNotice) error {
	channel, ok := s.channels[n.Group]
	if !ok {
		return activities.ErrNoChannel
	}
	n.TaskURL = s.TaskURL(n.TaskID)
	fallback, blocks := RenderRollbackFailed(n)
	if _, _, err := s.api.PostMessageContext(ctx, channel,
		slack.MsgOptionText(fallback, false), slack.MsgOptionBlocks(blocks...)); err != nil {
		return slackError(fmt.Sprintf("posting the rollback failure of task %s to Slack channel %s of group %q", n.TaskID, channel, n.Group), err)
	}
	return nil
}

// slackJoinErrors keeps a single error as it is, so that its application
// error type and retry delay reach Temporal.
func slackJoinErrors(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	// Several messages failed: retry after the longest delay asked for.
	var delay time.Duration
	nonRetryable := true
	for _, e := range errs {
		var ae *temporal.ApplicationError
		if errors.As(e, &ae) {
			delay = max(delay, ae.NextRetryDelay())
			nonRetryable = nonRetryable && ae.NonRetryable()
		} else {
			nonRetryable = false
		}
	}
	joined := errors.Join(errs...)
	return temporal.NewApplicationErrorWithOptions(joined.Error(), ErrTypeUnavailable,
		temporal.ApplicationErrorOptions{NonRetryable: nonRetryable, NextRetryDelay: delay, Cause: joined})
}

// slackMessageGone reports errors after which there is nothing left to update.
func slackMessageGone(err error) bool {
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		switch se.Err {
		case "message_not_found", "channel_not_found", "cant_update_message", "edit_window_closed", "is_archived":
			return true
		}
	}
	return false
}

// permanentSlackErrors are Slack refusals that retrying cannot fix.
var permanentSlackErrors = map[string]bool{
	"channel_not_found": true, "not_in_channel": true, "is_archived": true, "invalid_blocks": true,
	"invalid_blocks_format": true, "msg_too_long": true, "no_text": true, "invalid_arguments": true,
	"too_many_attachments": true, "restricted_action": true, "user_not_in_channel": true,
}

// slackError classifies a Slack client error for Temporal: 429 retries
// after Slack's Retry-After, 5xx and network errors retry with the
// activity's backoff, Slack's refusals of the request itself do not retry.
// The message never holds a token: slack-go's errors do not carry them.
func slackError(what string, err error) error {
	var rl *slack.RateLimitedError
	if errors.As(err, &rl) {
		return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("%s: rate limited by Slack, retrying after %s", what, rl.RetryAfter),
			ErrTypeRateLimited, temporal.ApplicationErrorOptions{NextRetryDelay: max(rl.RetryAfter, time.Second), Cause: err})
	}
	var sc slack.StatusCodeError
	if errors.As(err, &sc) {
		if sc.Code >= 500 || sc.Code == http.StatusTooManyRequests {
			return temporal.NewApplicationErrorWithCause(fmt.Sprintf("%s: Slack answered %s; retrying", what, sc.Status), ErrTypeUnavailable, err)
		}
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: Slack answered %s", what, sc.Status), ErrTypeRejected, err)
	}
	var se slack.SlackErrorResponse
	if errors.As(err, &se) && permanentSlackErrors[se.Err] {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: Slack refused it: %s (check the channel ID and that the bot is in the channel)", what, se.Err), ErrTypeRejected, err)
	}
	return temporal.NewApplicationErrorWithCause(fmt.Sprintf("%s: %v; retrying", what, err), ErrTypeUnavailable, err)
}
