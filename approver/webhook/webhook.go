package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/activities"
	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/redact"
)

// Webhook headers. Both directions are signed the way Slack signs its
// requests: X-Airlock-Signature is "v0=" + hex HMAC-SHA256 of
// "v0:<timestamp>:<body>" with the channel's secret, and the timestamp
// (unix seconds) must be within MaxSkew of the receiver's clock.
const (
	TimestampHeader = "X-Airlock-Request-Timestamp"
	SignatureHeader = "X-Airlock-Signature"
	ChannelHeader   = "X-Airlock-Channel"
	EventHeader     = "X-Airlock-Event"
	DeliveryHeader  = "X-Airlock-Delivery"
	MaxSkew         = 5 * time.Minute
	// DecisionPath is where a bridge posts decisions back, on the
	// gateway's (or the approver role's) listener.
	DecisionPath = "/approvals/webhook"
)

// Webhook events (X-Airlock-Event and the body's "event").
const (
	ApprovalRequested = "approval_requested"
	ApprovalUpdated   = "approval_updated"
	ApprovalClosed    = "approval_closed"
	RollbackFailed    = "rollback_failed"
)

// Error types of Notifier's application errors.
const (
	ErrTypeUnavailable = "WebhookUnavailable"
	ErrTypeRejected    = "WebhookRejected"
)

// maxBody bounds a decision posted to DecisionPath.
const maxBody = 64 << 10

// Sign returns the signature headers of body at ts.
func Sign(secret string, ts time.Time, body []byte) http.Header {
	stamp := strconv.FormatInt(ts.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "v0:%s:", stamp)
	m.Write(body)
	h := http.Header{}
	h.Set(TimestampHeader, stamp)
	h.Set(SignatureHeader, "v0="+hex.EncodeToString(m.Sum(nil)))
	return h
}

// Verify checks a signed body against secret at now.
func Verify(h http.Header, body []byte, secret string, now time.Time) error {
	stamp, sig := h.Get(TimestampHeader), h.Get(SignatureHeader)
	if stamp == "" || sig == "" {
		return fmt.Errorf("missing %s or %s header", TimestampHeader, SignatureHeader)
	}
	sec, err := strconv.ParseInt(stamp, 10, 64)
	if err != nil {
		return fmt.Errorf("%s %q is not unix seconds", TimestampHeader, stamp)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > MaxSkew || d < -MaxSkew {
		return fmt.Errorf("timestamp is %s from this server's clock (more than %s): a replay, or a clock to fix", d.Round(time.Second), MaxSkew)
	}
	got, ok := strings.CutPrefix(sig, "v0=")
	raw, err := hex.DecodeString(got)
	if !ok || err != nil {
		return errors.New("signature is not v0=<hex>")
	}
	want := Sign(secret, time.Unix(sec, 0), body).Get(SignatureHeader)
	wantRaw, _ := hex.DecodeString(strings.TrimPrefix(want, "v0="))
	if !hmac.Equal(raw, wantRaw) {
		return errors.New("invalid signature")
	}
	return nil
}

// Channel is an approval channel of kind webhook with its secret.
type Channel struct {
	Name   string
	URL    string
	Secret string
	// Groups it serves; empty: all.
	Groups []string
}

// Channels reads cfg's webhook channels, getenv giving the
// environment; a channel whose secret variable is unset is an error.
func Channels(cfg *config.Config, getenv func(string) string) ([]Channel, error) {
	var out []Channel
	for _, ch := range cfg.ApprovalChannels {
		if ch.Kind != config.ApprovalChannelWebhook {
			continue
		}
		secret := strings.TrimSpace(getenv(ch.SecretEnv))
		if secret == "" {
			return nil, fmt.Errorf("approval channel %s: environment variable %s is not set (approval_channels[].secret_env names it): export the secret shared with the bridge", ch.Name, ch.SecretEnv)
		}
		out = append(out, Channel{Name: ch.Name, URL: ch.URL, Secret: secret, Groups: ch.Groups})
	}
	return out, nil
}

// scope is the channel as the decision rules see it: a decision through
// it counts only on requests of the groups it serves (or escalated to one).
func (c Channel) scope() *approver.ChannelScope {
	return &approver.ChannelScope{Name: c.Name, Groups: c.Groups}
}

// Notifier posts approval requests, their updates and rollback
// failures to a webhook channel as signed JSON. One call is one attempt: a
// delivery that fails is retried by Temporal, durably and with backoff
// over minutes (429, 5xx and network errors; other 4xx are the bridge
// refusing and are not retried), and every failed attempt is logged.
type Notifier struct {
	ch     Channel
	client *http.Client
	now    func() time.Time
}

var _ activities.Notifier = (*Notifier)(nil)

// NewNotifier posts to ch with client (nil: a 15 s timeout client).
func NewNotifier(ch Channel, client *http.Client) *Notifier {
	if client == nil {
		client = &http.Client{Timeout: 15 * time.Second}
	}
	return &Notifier{ch: ch, client: client, now: time.Now}
}

// Name is the MessageRef.Notifier of this notifier's deliveries.
func (w *Notifier) Name() string { return "webhook:" + w.ch.Name }

// Request is the request part of a webhook event: what an approver
// needs to decide, arguments masked by the manifest's redact paths.
type Request struct {
	ID          string          `json:"id"`
	Task        string          `json:"task"`
	Call        string          `json:"call"`
	Tool        string          `json:"tool"`
	Principal   string          `json:"principal"`
	Client      string          `json:"client,omitempty"`
	Arguments   json.RawMessage `json:"arguments,omitempty"`
	Digest      string          `json:"digest"`
	SideEffects []string        `json:"side_effects"`
	DataLevel   string          `json:"data_level"`
	Risk        string          `json:"risk"`
	Rule        string          `json:"rule,omitempty"`
	Reason      string          `json:"reason,omitempty"`
	Group       string          `json:"group"`
	Quorum      int             `json:"quorum"`
	RequestedAt *time.Time      `json:"requested_at,omitempty"`
	ExpiresAt   time.Time       `json:"expires_at"`
	Escalation  bool            `json:"escalation,omitempty"`
	State       string          `json:"state,omitempty"`
	Votes       []Vote          `json:"votes,omitempty"`
	// Approve with edits: Editable says a decision may carry arguments;
	// EditOf and EditedBy name the edit a request asks about.
	Editable bool   `json:"editable"`
	EditOf   string `json:"edit_of,omitempty"`
	EditedBy string `json:"edited_by,omitempty"`
	// MaxGrant (approval grants) is the most an approval may also grant.
	MaxGrant *GrantBound `json:"max_grant,omitempty"`
	// Edit is the edit an approver made when approving (approve with
	// edits), with what policy said of the edited call.
	Edit *Edit `json:"edit,omitempty"`
	// Outcome, on approval_closed, is how the call's approval ended:
	// approved, denied, expired, or edit_refused (approved with edited
	// arguments that policy then refused: nothing ran).
	Outcome string `json:"outcome,omitempty"`
	// Program and Line (code mode): the call is that program's, made at
	// that line of its source; absent for a call the agent made
	// directly. The ID is cut to approver.MaxShownProgram bytes, which
	// the workflow's own limit on IDs never reaches.
	Program string `json:"program,omitempty"`
	Line    int    `json:"line,omitempty"`
	// ActsAs, ActsUntil and ActsHeld (token exchange): the user the call
	// acts as upstream, when their sign-in ends, and whether the provider
	// holds their grant (approved later, the call still runs as them).
	ActsAs    string     `json:"acts_as,omitempty"`
	ActsUntil *time.Time `json:"acts_until,omitempty"`
	ActsHeld  bool       `json:"acts_held,omitempty"`
	// NotRun, with outcome not_run on a second approval_closed, says why
	// the approved call did not run (the user's grant was gone).
	NotRun string `json:"not_run,omitempty"`
}

// Edit is an approver's edit in a webhook event.
type Edit struct {
	By     string `json:"by"`
	Digest string `json:"digest"`
	// Effect is policy's decision on the edited call (allow, deny,
	// require_approval); Refused says why it was refused (nothing ran).
	Effect  string `json:"effect,omitempty"`
	Refused string `json:"refused,omitempty"`
}

// Vote is one decision in an update.
type Vote struct {
	Approver string    `json:"approver"`
	Approve  bool      `json:"approve"`
	At       time.Time `json:"at"`
}

// Event is the body of every delivery.
type Event struct {
	Event    string   `json:"event"`
	Channel  string   `json:"channel"`
	Delivery string   `json:"delivery"`
	Request  *Request `json:"request,omitempty"`
	Rollback *struct {
		Task      string   `json:"task"`
		Principal string   `json:"principal"`
		Group     string   `json:"group"`
		Reason    string   `json:"reason"`
		Remaining []string `json:"remaining_calls"`
	} `json:"rollback,omitempty"`
	// DecidePath is where the bridge posts decisions back (on the gateway).
	DecidePath string `json:"decide_path,omitempty"`
}

func noticeRequest(n api.ApprovalNotice) *Request {
	r := &Request{
		ID: n.RequestID, Task: n.TaskID, Call: n.CallID, Tool: n.Tool, Principal: n.Principal, Client: n.Client,
		Arguments: redact.Arguments(n.Arguments, n.Redact), Digest: n.Digest, SideEffects: n.SideEffects, DataLevel: n.DataLevel,
		Risk: n.Risk, Rule: n.Rule, Reason: n.Reason, Group: n.Group, Quorum: n.Quorum, ExpiresAt: n.ExpiresAt, Escalation: n.Escalation, State: n.State,
		Editable: !n.NoEdits, EditOf: n.EditOf, EditedBy: n.EditedBy,
	}
	if n.Program != "" { // code mode
		r.Program, r.Line = approver.ShownProgram(n.Program), n.Line
	}
	if n.ActsAs != "" { // token exchange
		r.ActsAs, r.ActsHeld = n.ActsAs, n.ActsHeld
		if !n.ActsUntil.IsZero() {
			u := n.ActsUntil
			r.ActsUntil = &u
		}
	}
	if e := n.Edit; e != nil {
		r.Edit = &Edit{By: e.By, Digest: e.Digest, Effect: e.Effect, Refused: e.Refused}
	}
	if n.State != api.ApprovalPending && n.State != "" {
		r.Outcome = n.State
		if n.State == api.ApprovalApproved && n.Edit != nil && n.Edit.Refused != "" {
			r.Outcome = "edit_refused"
		}
		if n.State == api.ApprovalApproved && n.NotRun != "" {
			r.Outcome, r.NotRun = "not_run", n.NotRun
		}
	}
	if !n.RequestedAt.IsZero() {
		t := n.RequestedAt
		r.RequestedAt = &t
	}
	for _, v := range n.Votes {
		r.Votes = append(r.Votes, Vote{Approver: v.Approver, Approve: v.Approve, At: v.At})
	}
	if b := n.MaxGrant; b != nil {
		r.MaxGrant = &GrantBound{Calls: b.Calls, Principal: b.Principal}
		if b.Duration > 0 {
			r.MaxGrant.Duration = b.Duration.String()
		}
	}
	return r
}

// Post delivers approval_requested when the channel serves the group.
func (w *Notifier) Post(ctx context.Context, n api.ApprovalNotice) ([]api.MessageRef, error) {
	if !w.ch.scope().Serves(n.Group) {
		return nil, activities.ErrNoChannel
	}
	ev := Event{Event: ApprovalRequested, Request: noticeRequest(n), DecidePath: DecisionPath}
	id, err := w.deliver(ctx, ev, n.RequestID+":"+ApprovalRequested+":"+n.Group)
	if err != nil {
		return nil, err
	}
	return []api.MessageRef{{Notifier: w.Name(), Channel: w.ch.Name, TS: id, Group: n.Group}}, nil
}

// Update delivers approval_updated (still pending) or approval_closed to a
// channel that was told about the request.
func (w *Notifier) Update(ctx context.Context, n api.ApprovalNotice) error {
	told := slices.ContainsFunc(n.Messages, func(m api.MessageRef) bool { return m.Notifier == w.Name() })
	if !told {
		return activities.ErrNoChannel
	}
	event := ApprovalClosed
	if n.State == api.ApprovalPending || n.State == "" {
		event = ApprovalUpdated
	}
	key := fmt.Sprintf("%s:%s:%d", n.RequestID, event, len(n.Votes))
	if n.NotRun != "" { // a second approval_closed: its own delivery ID, so a bridge does not drop it as a repeat
		key += ":not_run"
	}
	_, err := w.deliver(ctx, Event{Event: event, Request: noticeRequest(n)}, key)
	return err
}

// Alert delivers rollback_failed for the groups the channel serves.
func (w *Notifier) Alert(ctx context.Context, n api.RollbackNotice) error {
	if !w.ch.scope().Serves(n.Group) {
		return activities.ErrNoChannel
	}
	ev := Event{Event: RollbackFailed}
	ev.Rollback = &struct {
		Task      string   `json:"task"`
		Principal string   `json:"principal"`
		Group     string   `json:"group"`
		Reason    string   `json:"reason"`
		Remaining []string `json:"remaining_calls"`
	}{Task: n.TaskID, Principal: n.Principal, Group: n.Group, Reason: n.Reason}
	for _, r := range n.Remaining {
		ev.Rollback.Remaining = append(ev.Rollback.Remaining, r.CallID)
	}
	_, err := w.deliver(ctx, ev, n.TaskID+":"+RollbackFailed)
	return err
}

// deliver posts ev, signed, once (Temporal retries); the delivery ID is
// stable per event (key), so a bridge can drop repeats.
func (w *Notifier) deliver(ctx context.Context, ev Event, key string) (string, error) {
	sum := sha256.Sum256([]byte(w.ch.Name + "\x00" + key))
	ev.Channel, ev.Delivery = w.ch.Name, hex.EncodeToString(sum[:12])
	body, err := json.Marshal(ev)
	if err != nil {
		return "", temporal.NewNonRetryableApplicationError("encoding the webhook event", ErrTypeRejected, err)
	}
	what := fmt.Sprintf("delivering %s to approval channel %s (%s)", ev.Event, w.ch.Name, w.ch.URL)
	_, err = w.post(ctx, ev, body)
	if err == nil {
		return ev.Delivery, nil
	}
	var rej *rejected
	if errors.As(err, &rej) {
		return "", temporal.NewNonRetryableApplicationError(what+": "+err.Error(), ErrTypeRejected, err)
	}
	return "", temporal.NewApplicationErrorWithCause(what+": "+err.Error()+"; retrying", ErrTypeUnavailable, err)
}

type rejected struct{ status string }

func (e *rejected) Error() string {
	return "the bridge refused it: " + e.status + " (check the channel's url and the bridge's secret)"
}

func (w *Notifier) post(ctx context.Context, ev Event, body []byte) (retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.ch.URL, bytes.NewReader(body))
	if err != nil {
		return false, &rejected{status: err.Error()}
	}
	for k, v := range Sign(w.ch.Secret, w.now(), body) {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "airlock-webhook")
	req.Header.Set(ChannelHeader, w.ch.Name)
	req.Header.Set(EventHeader, ev.Event)
	req.Header.Set(DeliveryHeader, ev.Delivery)
	resp, err := w.client.Do(req)
	if err != nil {
		return true, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return false, nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode >= 500:
		return true, fmt.Errorf("the bridge answered %s", resp.Status)
	default:
		return false, &rejected{status: resp.Status}
	}
}

// Decision is what a bridge posts to DecisionPath, signed
// with its channel's secret and naming the channel in X-Airlock-Channel.
type Decision struct {
	Request  string `json:"request"`
	Digest   string `json:"digest"`
	Approver string `json:"approver"`
	// Decision is "approve" or "deny".
	Decision string `json:"decision"`
	Comment  string `json:"comment,omitempty"`
	// Arguments, with approve, are edited arguments to run instead
	// (approve with edits; masked values kept as "[redacted]").
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Approval grants: with approve, also the next grant_calls calls
	// and/or the next grant_for ("30m") of the tool in the task (across
	// the principal's tasks with grant_principal), within max_grant.
	GrantCalls     int    `json:"grant_calls,omitempty"`
	GrantFor       string `json:"grant_for,omitempty"`
	GrantPrincipal bool   `json:"grant_principal,omitempty"`
}

// GrantBound is a request's max_grant in a webhook event.
type GrantBound struct {
	Calls     int    `json:"calls,omitempty"`
	Duration  string `json:"duration,omitempty"`
	Principal bool   `json:"principal,omitempty"`
}

// DecisionOptions configure the decision endpoint.
type DecisionOptions struct {
	Channels  []Channel
	Directory *identity.Directory
	Local     approver.Local
	Audit     *auditstream.Log
	Now       func() time.Time
}

// Decisions serves DecisionPath: a signed decision from a
// bridge is delivered like a CLI or web decision (Via "webhook:<channel>"),
// with the same refusals; the answer is JSON: 200 {"recorded":true,...},
// 200 {"recorded":false,"already_decided":true,...} for a repeat of a
// recorded decision (a replayed delivery; nothing is recorded or audited
// again), 409 {"recorded":false,"refused":...} (also for a request of a
// group the channel does not serve), 401 for a bad signature (audited as
// auth_failed on channel webhook), 400 for a malformed body or digest.
func Decisions(o DecisionOptions) http.Handler {
	if o.Now == nil {
		o.Now = time.Now
	}
	byName := map[string]Channel{}
	for _, c := range o.Channels {
		byName[c.Name] = c
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answer := func(code int, v map[string]any) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			_ = json.NewEncoder(w).Encode(v)
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			answer(http.StatusMethodNotAllowed, map[string]any{"error": "POST a signed decision here"})
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			answer(http.StatusRequestEntityTooLarge, map[string]any{"error": "body too large or unreadable"})
			return
		}
		name := r.Header.Get(ChannelHeader)
		ch, ok := byName[name]
		if !ok {
			err = fmt.Errorf("%s %q names no webhook approval channel", ChannelHeader, name)
		} else {
			err = Verify(r.Header, body, ch.Secret, o.Now())
		}
		if err != nil {
			o.Audit.AuthFailed(auditstream.AuthFailure{Channel: "webhook", Status: http.StatusUnauthorized, Reason: err.Error(),
				Method: r.Method, Path: r.URL.Path, Remote: r.RemoteAddr})
			answer(http.StatusUnauthorized, map[string]any{"error": err.Error()})
			return
		}
		var d Decision
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&d); err != nil {
			answer(http.StatusBadRequest, map[string]any{"error": "the decision is not valid JSON of the documented shape: " + err.Error()})
			return
		}
		var approve bool
		switch d.Decision {
		case "approve":
			approve = true
		case "deny":
		default:
			answer(http.StatusBadRequest, map[string]any{"error": fmt.Sprintf("decision %q: use approve or deny", d.Decision)})
			return
		}
		if d.Request == "" || d.Digest == "" || d.Approver == "" {
			answer(http.StatusBadRequest, map[string]any{"error": "request, digest and approver are required"})
			return
		}
		if _, err := approver.DigestPrefix(d.Digest); err != nil {
			answer(http.StatusBadRequest, map[string]any{"error": err.Error()})
			return
		}
		if o.Directory != nil {
			if _, ok := o.Directory.Lookup(d.Approver); !ok {
				answer(http.StatusConflict, map[string]any{"recorded": false, "refused": fmt.Sprintf("approver %q is not one of the configured principals", d.Approver)})
				return
			}
		}
		calls := ""
		if d.GrantCalls != 0 {
			calls = strconv.Itoa(d.GrantCalls)
		}
		grant, err := api.ParseGrant(calls, d.GrantFor, d.GrantPrincipal)
		if err == nil && grant != nil && !approve {
			err = errors.New("a denial grants nothing; send grant_calls and grant_for with approve only")
		}
		if err != nil {
			answer(http.StatusBadRequest, map[string]any{"error": err.Error()})
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		res, err := o.Local.Decide(ctx, approver.Decision{RequestID: d.Request, Approver: d.Approver, Approve: approve,
			Via: "webhook:" + ch.Name, Comment: d.Comment, Digest: d.Digest, Arguments: d.Arguments, Grant: grant, Channel: ch.scope()})
		var ref *approver.Refusal
		switch {
		case errors.As(err, &ref) && ref.Repeat:
			answer(http.StatusOK, map[string]any{"recorded": false, "already_decided": true, "request": d.Request, "message": ref.Reason})
		case errors.As(err, &ref):
			answer(http.StatusConflict, map[string]any{"recorded": false, "request": d.Request, "refused": ref.Reason})
		case err != nil:
			answer(http.StatusServiceUnavailable, map[string]any{"recorded": false, "request": d.Request, "error": err.Error()})
		default:
			ok := map[string]any{"recorded": true, "request": res.RequestID, "state": res.State, "message": res.Message}
			if res.EditDigest != "" {
				ok["edit_digest"] = res.EditDigest
			}
			answer(http.StatusOK, ok)
		}
	})
}
