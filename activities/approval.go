package activities

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
)

// Approval activity names (wire names).
const (
	NotifyApproversName = "NotifyApprovers"
	UpdateApprovalName  = "UpdateApprovalMessages"
)

// ApprovalNotice is what approvers are shown about one request. Arguments
// are raw; notifiers mask Redact paths before showing them.
type ApprovalNotice struct {
	RequestID   string
	TaskID      string
	CallID      string
	Tool        string
	Principal   string
	Client      string `json:",omitempty"`
	Arguments   json.RawMessage
	Redact      []string `json:",omitempty"`
	SideEffects []string
	DataLevel   string
	Risk        string
	Rule        string `json:",omitempty"`
	Reason      string `json:",omitempty"`
	Digest      string
	// Group is the group notified by this notice (the escalation group on
	// an escalation).
	Group      string
	Quorum     int
	ExpiresAt  time.Time
	Escalation bool `json:",omitempty"`

	// For updates: the request's state, its votes, and the messages to
	// update.
	State    string       `json:",omitempty"`
	Votes    []NoticeVote `json:",omitempty"`
	Messages []MessageRef `json:",omitempty"`
}

// NoticeVote is one decision, for showing who decided and when.
type NoticeVote struct {
	Approver string
	Approve  bool
	At       time.Time
	Via      string
}

// MessageRef locates a posted notification so it can be updated.
type MessageRef struct {
	Notifier string // "slack"
	Channel  string
	TS       string
	Group    string
}

// Notifier tells people about approval requests. Slack implements it; the
// local path (CLI, web page) needs none: it reads the workflow's state.
type Notifier interface {
	Name() string
	// Post announces a request to its group and returns where it posted.
	Post(ctx context.Context, n ApprovalNotice) ([]MessageRef, error)
	// Update rewrites posted messages to show the outcome.
	Update(ctx context.Context, n ApprovalNotice) error
	// Alert tells a group that a rollback left compensations undone.
	Alert(ctx context.Context, n RollbackNotice) error
}

// ErrNoChannel is returned by a notifier that has nowhere to post for a
// group; the request stays pending and visible locally.
var ErrNoChannel = errors.New("no channel configured for this approver group")

// NotifyApprovers posts a request with every configured notifier. A
// notifier that fails is retried by Temporal (429s and 5xx included); the
// request stays pending meanwhile and is never approved by default.
func (a *Activities) NotifyApprovers(ctx context.Context, n ApprovalNotice) ([]MessageRef, error) {
	var refs []MessageRef
	var errs []error
	for _, nt := range a.Notifiers {
		r, err := nt.Post(ctx, n)
		if errors.Is(err, ErrNoChannel) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		refs = append(refs, r...)
	}
	switch {
	case len(errs) == 1 && len(refs) == 0:
		return nil, errs[0] // keeps the notifier's error type and retry delay (Slack's Retry-After)
	case len(errs) > 0 && len(refs) == 0:
		return nil, errors.Join(errs...)
	}
	return refs, nil
}

// UpdateApprovalMessages shows a request's outcome on its messages.
func (a *Activities) UpdateApprovalMessages(ctx context.Context, n ApprovalNotice) error {
	var errs []error
	for _, nt := range a.Notifiers {
		if err := nt.Update(ctx, n); err != nil && !errors.Is(err, ErrNoChannel) {
			errs = append(errs, err)
		}
	}
	if len(errs) == 1 {
		return errs[0] // keeps its retry delay
	}
	if err := errors.Join(errs...); err != nil {
		return temporal.NewApplicationErrorWithCause("updating approval messages", "NotifyFailed", err)
	}
	return nil
}

// NotifyRollbackFailedName is the wire name of the activity that tells
// people a rollback stopped with compensations left undone.
const NotifyRollbackFailedName = "NotifyRollbackFailed"

// RollbackNotice says which compensations of a task remain undone.
type RollbackNotice struct {
	TaskID      string
	Principal   string
	Group       string
	RequestedBy string
	Reason      string
	Remaining   []RemainingUndo
}

// RemainingUndo is one compensation that did not run (or failed).
type RemainingUndo struct {
	CallID    string
	Tool      string          // the call's tool
	Undo      string          `json:",omitempty"` // the compensation's tool
	Arguments json.RawMessage `json:",omitempty"`
	State     string
	Reason    string `json:",omitempty"`
}

// NotifyRollbackFailed tells the task's rollback group, through every
// notifier that can reach it. With no group or no channel it only logs:
// the task's state (rollback_failed) and history still hold everything.
func (a *Activities) NotifyRollbackFailed(ctx context.Context, n RollbackNotice) error {
	activity.GetLogger(ctx).Error("rollback failed: compensations remain undone",
		"task", n.TaskID, "group", n.Group, "remaining", len(n.Remaining), "reason", n.Reason)
	if n.Group == "" {
		return nil
	}
	var errs []error
	for _, nt := range a.Notifiers {
		if err := nt.Alert(ctx, n); err != nil && !errors.Is(err, ErrNoChannel) {
			errs = append(errs, err)
		}
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}
