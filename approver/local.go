package approver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/identity"
)

// Local decides approval requests without Slack: the CLI (airlock
// approvals) and the gateway's /approvals page both go through it. It reads
// the requests from the tasks themselves and delivers decisions as the
// decide Update, so the workflow's validator applies the same rules as to a
// Slack click.
type Local struct {
	Temporal  client.Client
	Namespace string
	// Audit receives a line per decision delivered or refused (nil: none).
	Audit *auditstream.Log
}

// Decision is one person's decision on one request, as the local paths
// take it.
type Decision struct {
	RequestID string
	// Approver is the principal name; the caller has authenticated it.
	Approver string
	Approve  bool
	// Via is "cli" or "web". With RequestID, Approver and Approve it makes
	// the Update ID, so repeating the same decision changes nothing.
	Via     string
	Comment string
	// Digest is the request digest the approver saw, or a prefix of it (at
	// least MinDigestPrefix hex digits). Empty: the request as it is now.
	Digest string
	// Arguments, with Approve, are edited arguments as the approver
	// submitted them (masked values kept; see EditedArguments): approve
	// with edits.
	Arguments json.RawMessage
	// Grant (approval grants): an approval that also covers later calls
	// (api.ParseGrant reads it from a form or flags).
	Grant *api.GrantAsk
	// Channel, when set, restricts the decision to the requests of the
	// groups the deciding channel serves (a webhook channel's groups).
	Channel *ChannelScope
}

// ChannelScope is a deciding channel as the decision rules see it: its
// name, and the approver groups it serves (empty: all).
type ChannelScope struct {
	Name   string
	Groups []string
}

// Serves reports whether the channel serves group.
func (c ChannelScope) Serves(group string) bool {
	return len(c.Groups) == 0 || slices.Contains(c.Groups, group)
}

// ServesRequest reports whether the channel may decide r: it serves r's
// group, or the group r was escalated to.
func (c ChannelScope) ServesRequest(r api.ApprovalRequest) bool {
	return c.Serves(r.Group) || r.Escalated && r.EscalateTo != "" && c.Serves(r.EscalateTo)
}

// MinDigestPrefix is the shortest digest prefix a decision may bind to.
const MinDigestPrefix = 8

// DigestPrefix is a decision's digest (prefix) in lower case, or an error
// when it is too short or not hex ("" is no digest: the request as it is).
// A channel that takes digests from outside (the webhook) checks them with
// it before deciding.
func DigestPrefix(digest string) (string, error) {
	want := strings.ToLower(strings.TrimSpace(digest))
	if want != "" && (len(want) < MinDigestPrefix || strings.Trim(want, "0123456789abcdef") != "") {
		return "", fmt.Errorf("digest %q: give at least %d hex digits of the request's digest (airlock approvals show prints it; a webhook event carries it whole)", digest, MinDigestPrefix)
	}
	return want, nil
}

// Refusal is a decision that did not count, with the reason worded for the
// person who decided (from the workflow's validator, or a local check).
type Refusal struct {
	RequestID string
	Reason    string
	// Repeat: the same approver had already made this decision; it was
	// recorded then, and this repeat recorded (and audited) nothing.
	Repeat bool
}

func (r *Refusal) Error() string { return "refused: " + r.Reason }

// UpdateID is the Update ID of a local decision: one per request, approver,
// path and decision. The decision is part of it so that repeating the same
// decision is the same Update (Temporal answers it with the first outcome
// and changes nothing), while the opposite decision is a new Update that
// the workflow's validator refuses. Without it, Deny after Approve would get
// the approval's outcome back and look recorded.
func UpdateID(via, requestID, approver string, approve bool) string {
	return via + ":" + requestID + ":" + approver + ":" + verdict(approve)
}

func verdict(approve bool) string {
	if approve {
		return "approve"
	}
	return "deny"
}

// Mismatch says why res, the outcome Temporal returned for d, is not d's
// own (it is the outcome of an earlier decision), or "" when it is.
func Mismatch(d api.DecideRequest, res api.DecideResult) string {
	if res.Approver == "" { // a result recorded before DecideResult named its vote
		return ""
	}
	if res.Approver != d.Approver || res.Approve != d.Approve {
		past := "approved"
		if !res.Approve {
			past = "denied"
		}
		return fmt.Sprintf("%s already %s request %s; a decision cannot be changed", res.Approver, past, d.RequestID)
	}
	return ""
}

// AuthenticateKey finds the principal of an API key, as the gateway does
// for an HTTP caller.
func AuthenticateKey(dir *identity.Directory, key string) (*identity.Principal, error) {
	if dir == nil {
		return nil, errors.New("no principals are configured, so nobody can be authenticated; add principals to the configuration")
	}
	key = strings.TrimSpace(key)
	if key == "" {
		return nil, identity.ErrNoCredentials
	}
	return dir.Authenticate(http.Header{"Authorization": {"Bearer " + key}})
}

// List returns the pending requests, oldest first.
func (l Local) List(ctx context.Context) ([]api.ApprovalRequest, error) {
	if l.Temporal == nil {
		return nil, errors.New("no Temporal client to read approval requests with")
	}
	return Pending(ctx, l.Temporal, l.Namespace)
}

// Show returns one request, whatever its state.
func (l Local) Show(ctx context.Context, requestID string) (api.ApprovalRequest, error) {
	if l.Temporal == nil {
		return api.ApprovalRequest{}, errors.New("no Temporal client to read approval requests with")
	}
	r, err := Lookup(ctx, l.Temporal, requestID)
	if err != nil {
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			task, _ := TaskOf(requestID)
			return r, fmt.Errorf("no task %s: check the request ID (airlock approvals list shows the pending ones)", task)
		}
	}
	return r, err
}

// Decide delivers one decision on the request as it is now (bound to
// d.Digest when given). A decision the workflow refuses comes back as a
// *Refusal. Recorded and refused decisions are audited.
func (l Local) Decide(ctx context.Context, d Decision) (api.DecideResult, error) {
	res, _, err := l.DecideOn(ctx, d)
	return res, err
}

// DecideOn is Decide that also returns the request as it was read before
// the decision (zero when it could not be read), so a caller can say what
// was decided: its tool, task and arguments.
func (l Local) DecideOn(ctx context.Context, d Decision) (api.DecideResult, api.ApprovalRequest, error) {
	res, r, err := l.decide(ctx, d)
	var ref *Refusal
	switch {
	case err == nil:
		l.Audit.ApprovalDecision(auditstream.ApprovalDecision{Request: res.RequestID, Approver: d.Approver, Approve: d.Approve, Via: d.Via,
			UpdateID: localUpdateID(d, res.RequestID), State: res.State, EditDigest: res.EditDigest, Grant: GrantText(d.Grant)})
	case errors.As(err, &ref) && !ref.Repeat: // a repeat was audited when it was recorded
		l.Audit.ApprovalDecision(auditstream.ApprovalDecision{Request: ref.RequestID, Approver: d.Approver, Approve: d.Approve, Via: d.Via,
			UpdateID: localUpdateID(d, ref.RequestID), Refused: ref.Reason, Grant: GrantText(d.Grant)})
	}
	return res, r, err
}

func (l Local) decide(ctx context.Context, d Decision) (api.DecideResult, api.ApprovalRequest, error) {
	if strings.TrimSpace(d.Approver) == "" {
		return api.DecideResult{}, api.ApprovalRequest{}, errors.New("the decision names no approver")
	}
	if d.Via == "" {
		return api.DecideResult{}, api.ApprovalRequest{}, errors.New("the decision names no path (cli or web)")
	}
	want, err := DigestPrefix(d.Digest)
	if err != nil {
		return api.DecideResult{}, api.ApprovalRequest{}, err
	}
	r, err := l.Show(ctx, d.RequestID)
	if err != nil {
		return api.DecideResult{}, api.ApprovalRequest{}, err
	}
	if c := d.Channel; c != nil && !c.ServesRequest(r) {
		return api.DecideResult{}, r, &Refusal{RequestID: r.ID, Reason: fmt.Sprintf(
			"approval channel %s serves groups %s, and request %s is for group %q: decide it through a channel of that group",
			c.Name, strings.Join(c.Groups, ", "), r.ID, r.Group)}
	}
	if want != "" && !strings.HasPrefix(r.Digest, want) {
		return api.DecideResult{}, r, &Refusal{RequestID: r.ID, Reason: fmt.Sprintf(
			"request %s has digest %s, not the %s you decided on; it is not the call you saw: run airlock approvals show %s and decide again",
			r.ID, ShortDigest(r.Digest), want, r.ID)}
	}
	if why := repeated(r, d); why != "" {
		return api.DecideResult{}, r, &Refusal{RequestID: r.ID, Reason: why, Repeat: true}
	}
	dr := api.DecideRequest{
		RequestID: r.ID, Digest: r.Digest, Approver: d.Approver, Approve: d.Approve, Via: d.Via, Comment: d.Comment,
		Grant: d.Grant,
	}
	if len(d.Arguments) > 0 { // approve with edits (edits.go)
		if !d.Approve {
			return api.DecideResult{}, r, &Refusal{RequestID: r.ID, Reason: "edited arguments come with an approval only; to refuse the call, deny it without arguments"}
		}
		args, err := EditedArguments(r, d.Arguments)
		if err != nil {
			return api.DecideResult{}, r, &Refusal{RequestID: r.ID, Reason: err.Error()}
		}
		dr.Arguments = string(args)
	}
	res, err := Deliver(ctx, l.Temporal, localUpdateID(d, r.ID), dr)
	if err != nil {
		var app *temporal.ApplicationError
		if errors.As(err, &app) {
			return res, r, &Refusal{RequestID: r.ID, Reason: app.Message()}
		}
		var nt *NoTaskError
		if errors.As(err, &nt) {
			return res, r, &Refusal{RequestID: r.ID, Reason: Explain(err)}
		}
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return res, r, &Refusal{RequestID: r.ID, Reason: fmt.Sprintf("task %s has ended, so request %s is closed", r.TaskID, r.ID)}
		}
		var rep *RepeatedError
		if errors.As(err, &rep) {
			return api.DecideResult{}, r, &Refusal{RequestID: r.ID, Reason: rep.Error(), Repeat: true}
		}
		return res, r, err
	}
	if why := Mismatch(dr, res); why != "" {
		return api.DecideResult{}, r, &Refusal{RequestID: r.ID, Reason: why}
	}
	return res, r, nil
}

// repeated says how d repeats a vote its approver already cast on r (the
// same verdict), or "" when it does not. The opposite verdict is not a
// repeat: the workflow's validator refuses it, and that refusal is
// audited.
func repeated(r api.ApprovalRequest, d Decision) string {
	if r.EditOf != "" && d.Approver == r.EditedBy {
		return "" // the validator says why the editor may not approve the edit
	}
	for _, v := range r.Votes {
		if v.Approver != d.Approver || v.Approve != d.Approve {
			continue
		}
		how := ""
		if v.Via != "" {
			how = " via " + v.Via
		}
		if !v.At.IsZero() {
			how += " at " + v.At.UTC().Format(time.RFC3339)
		}
		return fmt.Sprintf("%s already %s request %s%s (it is %s now); a decision is recorded once, and this repeat recorded nothing",
			v.Approver, pastVerdict(v.Approve), r.ID, how, r.State)
	}
	return ""
}

// MayDecide says why name may not decide on r, or nil when it may. The
// workflow's validator is the authority; this only picks what to offer.
func MayDecide(r api.ApprovalRequest, name string, now time.Time) error {
	switch {
	case r.State != api.ApprovalPending:
		return fmt.Errorf("request %s is already %s", r.ID, r.State)
	case !now.Before(r.ExpiresAt):
		return fmt.Errorf("request %s has expired", r.ID)
	case name == r.Principal:
		return fmt.Errorf("%s asked for this call and may not approve it", name)
	case !slices.Contains(r.Approvers, name):
		return fmt.Errorf("%s is not in approver group %q", name, r.Group)
	case r.EditOf != "" && name == r.EditedBy: // approve with edits
		return fmt.Errorf("%s edited these arguments and may not approve the edit again", name)
	}
	for _, v := range r.Votes {
		if v.Approver == name {
			return fmt.Errorf("%s has already decided on request %s", name, r.ID)
		}
	}
	return nil
}

// localUpdateID is the Update ID of a local decision (EditUpdateID when it
// carries edited arguments).
func localUpdateID(d Decision, requestID string) string {
	if len(d.Arguments) > 0 && d.Approve {
		return EditUpdateID(d.Via, requestID, d.Approver, d.Arguments) + GrantUpdateSuffix(d.Grant)
	}
	return UpdateID(d.Via, requestID, d.Approver, d.Approve) + GrantUpdateSuffix(d.Grant)
}
