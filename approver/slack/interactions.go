package slack

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/identity"
)

// MaxInteractionBody bounds an interaction request's body.
const MaxInteractionBody = 1 << 20

// Via is the Vote.Via of decisions made in Slack.
const Via = "slack"

// DeliverFunc delivers one decision to its task (approver.Deliver with a
// Temporal client); tests substitute their own.
type DeliverFunc func(ctx context.Context, updateID string, d api.DecideRequest) (api.DecideResult, error)

// Users maps a Slack user to a principal; *identity.Directory is one.
type Users interface {
	BySlackUser(id string) (*identity.Principal, bool)
}

// InteractionOptions configure the processing of Slack clicks, over HTTP
// (InteractionHandler) or Socket Mode (RunSocketMode).
type InteractionOptions struct {
	// SigningSecret checks each HTTP request's X-Slack-Signature (required
	// over HTTP; Socket Mode is authenticated by its app-level token).
	SigningSecret string
	// Slack posts ephemeral replies to the clicker (chat.postEphemeral);
	// nil posts none.
	Slack *slack.Client
	// Users maps the clicker's Slack user ID to a principal.
	Users Users
	// Temporal delivers decisions (approver.Deliver) unless Deliver is set.
	Temporal client.Client
	Deliver  DeliverFunc
	// Timeout bounds one click's delivery (default 30s).
	Timeout time.Duration
	Logger  zerolog.Logger
	// Audit receives a line per click decided or refused (nil: none).
	Audit *auditstream.Log
	// Lookup reads a request for the modals (modal.go; default:
	// approver.Lookup with Temporal).
	Lookup func(ctx context.Context, requestID string) (api.ApprovalRequest, error)
}

// Interactions processes Slack clicks: it acknowledges at once and
// delivers each decision in the background, as the Update "decide" with an
// update ID derived from the click, so a redelivered payload changes
// nothing in the task. It remembers the update IDs it has answered for a
// while, so a redelivered payload is not audited or confirmed again either:
// Temporal answers a repeated Update ID with the first outcome and does not
// say it is a repeat, so only the approver can tell.
type Interactions struct {
	opts   InteractionOptions
	log    zerolog.Logger
	base   context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
	// seen holds the update IDs delivered or being delivered, with when
	// they were first accepted.
	seen map[string]time.Time
}

// redeliveryWindow is how long a click's update ID is remembered. Slack
// retries an unacknowledged interaction within minutes; an hour is ample
// and keeps the set small.
const redeliveryWindow = time.Hour

// InteractionHandler returns the HTTP endpoint Slack posts interactions to
// (the app's Interactivity Request URL). Close it (or Shutdown) to wait for
// the deliveries in flight.
func InteractionHandler(opts InteractionOptions) *Interactions {
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.Deliver == nil && opts.Temporal != nil {
		c := opts.Temporal
		opts.Deliver = func(ctx context.Context, id string, d api.DecideRequest) (api.DecideResult, error) {
			return approver.Deliver(ctx, c, id, d)
		}
	}
	base, cancel := context.WithCancel(context.Background())
	return &Interactions{opts: opts, log: opts.Logger.With().Str("component", "slack-interactions").Logger(), base: base, cancel: cancel}
}

// ServeHTTP checks the request's signature and timestamp (401 otherwise),
// acknowledges a valid click with 200 before delivering it, and delivers
// it in the background.
func (h *Interactions) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed: Slack posts interactions here", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxInteractionBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "reading request body failed", http.StatusBadRequest)
		return
	}
	if err := VerifyRequest(r.Header, body, h.opts.SigningSecret); err != nil {
		h.log.Warn().Str("remote", r.RemoteAddr).Str("reason", err.Error()).Msg("rejected a Slack interaction request: bad signature or timestamp")
		h.opts.Audit.AuthFailed(auditstream.AuthFailure{Channel: "slack", Status: http.StatusUnauthorized, Reason: err.Error(),
			Method: r.Method, Path: r.URL.Path, Remote: r.RemoteAddr})
		http.Error(w, "invalid Slack request signature or timestamp", http.StatusUnauthorized)
		return
	}
	form, err := url.ParseQuery(string(body))
	payload := form.Get("payload")
	if err != nil || payload == "" {
		http.Error(w, "no interaction payload (want form field payload)", http.StatusBadRequest)
		return
	}
	var ic slack.InteractionCallback
	if err := json.Unmarshal([]byte(payload), &ic); err != nil {
		http.Error(w, "interaction payload is not valid JSON", http.StatusBadRequest)
		return
	}
	// Edit & approve, Approve + grant… (grant_form.go).
	if resp, start, ours := h.submitView(&ic); ours {
		h.serveViewSubmission(w, resp, start)
		return
	}
	// Register the click (so Wait and Shutdown see it), then acknowledge
	// before delivering: Slack shows the clicker an error after 3 seconds,
	// and a decision waits for a worker to process the Update.
	start := h.accept(&ic)
	w.WriteHeader(http.StatusOK)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	start()
}

// VerifyRequest checks Slack's v0 signature of body with secret and
// that the timestamp is within five minutes of now (either way).
func VerifyRequest(header http.Header, body []byte, secret string) error {
	if secret == "" {
		return errors.New("no signing secret configured")
	}
	sv, err := slack.NewSecretsVerifier(header, secret)
	if err != nil {
		return fmt.Errorf("verifying Slack signature: %w", err)
	}
	if _, err := sv.Write(body); err != nil {
		return fmt.Errorf("verifying Slack signature: %w", err)
	}
	if err := sv.Ensure(); err != nil {
		return fmt.Errorf("verifying Slack signature: %w", err)
	}
	return nil
}

// Click is one Approve or Deny click, as a decision to deliver.
type Click struct {
	// UpdateID is stable for a click: the same payload delivered twice
	// has the same ID, so the task counts it once.
	UpdateID string
	Decision api.DecideRequest
	// SlackUser and Channel are where ephemeral replies go.
	SlackUser string
	Channel   string
}

// ParseClick extracts a decision from an interaction. ours is false for
// interactions that are not an airlock button (they are acknowledged and
// ignored); problem explains, for the clicker, a button that cannot be
// decided on. The Approver is left to the caller (who maps the Slack user).
func ParseClick(ic *slack.InteractionCallback) (c Click, ours bool, problem string) {
	if ic.Type != slack.InteractionTypeBlockActions {
		return c, false, ""
	}
	var a *slack.BlockAction
	for _, x := range ic.ActionCallback.BlockActions {
		if x != nil && (x.ActionID == ActionApprove || x.ActionID == ActionDeny || isGrantAction(x.ActionID)) && strings.HasPrefix(x.BlockID, BlockIDPrefix) {
			a = x
			break
		}
	}
	if a == nil {
		return c, false, ""
	}
	c.SlackUser = ic.User.ID
	c.Channel = ic.Channel.ID
	if c.Channel == "" {
		c.Channel = ic.Container.ChannelID
	}
	ts := a.ActionTs
	if ts == "" {
		ts = ic.ActionTs
	}
	if ts == "" {
		ts = ic.TriggerID
	}
	c.UpdateID = "slack:" + ts + ":" + ic.User.ID
	c.Decision = api.DecideRequest{
		RequestID: a.Value,
		Digest:    strings.TrimPrefix(a.BlockID, BlockIDPrefix),
		Approve:   a.ActionID == ActionApprove || isGrantAction(a.ActionID),
		Via:       Via,
	}
	grant, grantOK := grantOfAction(a.ActionID)
	c.Decision.Grant = grant
	switch {
	case !grantOK:
		return c, true, "this button names no grant airlock understands; decide with `airlock approvals` instead"
	case ic.User.ID == "":
		return c, true, "this click names no Slack user"
	case ts == "":
		return c, true, "this click carries no action timestamp"
	}
	if _, err := approver.TaskOf(a.Value); err != nil {
		return c, true, "this button does not name an airlock approval request"
	}
	if b, err := hex.DecodeString(c.Decision.Digest); err != nil || len(b) != 32 {
		return c, true, "this message does not carry the request's digest; decide with `airlock approvals` instead"
	}
	return c, true, ""
}

// Dispatch processes one interaction after it was acknowledged: it maps
// the clicker to a principal and delivers the decision in the background,
// telling the clicker (ephemerally) when it is refused.
func (h *Interactions) Dispatch(ic *slack.InteractionCallback) {
	h.accept(ic)()
}

// accept parses an interaction and registers its delivery with the wait
// group; the returned function starts the delivery (it does nothing for
// interactions that are not airlock clicks, or after Shutdown).
func (h *Interactions) accept(ic *slack.InteractionCallback) (start func()) {
	if start, ours := h.acceptModal(ic, h.editFlow()); ours { // approve with edits (edits.go)
		return start
	}
	if start, ours := h.acceptModal(ic, h.grantFlow()); ours { // a chosen grant (grant_form.go)
		return start
	}
	c, ours, problem := ParseClick(ic)
	if !ours {
		return func() {}
	}
	var p *identity.Principal
	if problem == "" {
		var ok bool
		if h.opts.Users != nil {
			p, ok = h.opts.Users.BySlackUser(c.SlackUser)
		}
		if !ok {
			problem = fmt.Sprintf("you are not a known approver: your Slack user (%s) is not the slack_user_id of any principal in airlock's configuration; ask an operator to add it", c.SlackUser)
		}
	}
	if p != nil {
		c.Decision.Approver = p.Name
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		h.log.Warn().Str("request", c.Decision.RequestID).Msg("Slack click dropped: shutting down")
		return func() {}
	}
	if h.repeat(c.UpdateID, time.Now()) {
		h.mu.Unlock()
		h.log.Info().Str("request", c.Decision.RequestID).Str("update_id", c.UpdateID).Msg("Slack click redelivered: already answered")
		return func() {}
	}
	h.wg.Add(1)
	h.mu.Unlock()
	return func() {
		go func() {
			defer h.wg.Done()
			h.process(c, problem)
		}()
	}
}

// repeat reports whether id was accepted within the redelivery window, and
// remembers it otherwise. h.mu must be held.
func (h *Interactions) repeat(id string, now time.Time) bool {
	if h.seen == nil {
		h.seen = map[string]time.Time{}
	}
	for k, at := range h.seen {
		if now.Sub(at) > redeliveryWindow {
			delete(h.seen, k)
		}
	}
	if _, ok := h.seen[id]; ok {
		return true
	}
	h.seen[id] = now
	return false
}

// forget lets a redelivery of id be delivered again: the first delivery
// did not reach the task, so nothing was recorded or answered.
func (h *Interactions) forget(id string) {
	h.mu.Lock()
	delete(h.seen, id)
	h.mu.Unlock()
}

func (h *Interactions) process(c Click, problem string) {
	log := h.log.With().Str("request", c.Decision.RequestID).Str("slack_user", c.SlackUser).Str("approver", c.Decision.Approver).
		Bool("approve", c.Decision.Approve).Str("update_id", c.UpdateID).Logger()
	audit := auditstream.ApprovalDecision{Request: c.Decision.RequestID, Approver: c.Decision.Approver, Approve: c.Decision.Approve,
		Via: Via, UpdateID: c.UpdateID, Grant: approver.GrantText(c.Decision.Grant)}
	if problem != "" {
		log.Info().Str("problem", problem).Msg("Slack click refused")
		audit.Refused = problem
		h.opts.Audit.ApprovalDecision(audit)
		h.ephemeral(c, ":warning: "+problem+".")
		return
	}
	if h.opts.Deliver == nil {
		log.Error().Msg("Slack click not delivered: no Temporal client configured")
		h.ephemeral(c, ":warning: airlock could not record your decision (its approver service has no Temporal connection).")
		return
	}
	ctx, cancel := context.WithTimeout(h.base, h.opts.Timeout)
	defer cancel()
	res, err := h.opts.Deliver(ctx, c.UpdateID, c.Decision)
	var rep *approver.RepeatedError
	if errors.As(err, &rep) { // recorded (and audited) by the first delivery
		log.Info().Str("reason", rep.Error()).Msg("Slack decision repeated: already recorded")
		h.ephemeral(c, fmt.Sprintf("Your decision on request `%s` was already recorded: %s", slackEscape(c.Decision.RequestID), slackEscape(rep.Error())))
		return
	}
	if err != nil {
		why := approver.Explain(err)
		log.Info().Str("reason", why).Msg("Slack decision refused")
		if refusal(err) {
			audit.Refused = why
			h.opts.Audit.ApprovalDecision(audit)
		} else {
			h.forget(c.UpdateID)
		}
		h.ephemeral(c, fmt.Sprintf(":warning: Your decision on request `%s` was not recorded: %s", slackEscape(c.Decision.RequestID), slackEscape(why)))
		return
	}
	if why := approver.Mismatch(c.Decision, res); why != "" {
		log.Info().Str("reason", why).Msg("Slack decision refused")
		audit.Refused = why
		h.opts.Audit.ApprovalDecision(audit)
		h.ephemeral(c, fmt.Sprintf(":warning: Your decision on request `%s` was not recorded: %s", slackEscape(c.Decision.RequestID), slackEscape(why)))
		return
	}
	log.Info().Str("state", res.State).Msg("Slack decision recorded")
	audit.State, audit.EditDigest = res.State, res.EditDigest
	h.opts.Audit.ApprovalDecision(audit)
	verb := "approval"
	if !c.Decision.Approve {
		verb = "denial"
	}
	h.ephemeral(c, fmt.Sprintf("Your %s of request `%s` was recorded (%s).", verb, slackEscape(c.Decision.RequestID), slackEscape(res.Message)))
}

// refusal reports whether a delivery error is the task's answer (its
// validator refused the decision, or the task has ended) rather than a
// failure to reach it.
func refusal(err error) bool {
	var nf *serviceerror.NotFound
	var ae *temporal.ApplicationError
	var nt *approver.NoTaskError
	return errors.As(err, &ae) || errors.As(err, &nf) || errors.As(err, &nt)
}

func (h *Interactions) ephemeral(c Click, text string) {
	if h.opts.Slack == nil || c.Channel == "" || c.SlackUser == "" {
		return
	}
	ctx, cancel := context.WithTimeout(h.base, 10*time.Second)
	defer cancel()
	if _, err := h.opts.Slack.PostEphemeralContext(ctx, c.Channel, c.SlackUser, slack.MsgOptionText(text, false)); err != nil {
		h.log.Warn().Err(err).Str("request", c.Decision.RequestID).Msg("could not postSlack an ephemeral reply in Slack")
	}
}

// Wait blocks until the deliveries in flight are done.
func (h *Interactions) Wait() { h.wg.Wait() }

// Shutdown stops taking clicks and waits for the deliveries in flight
// until ctx is done, then cancels what is left.
func (h *Interactions) Shutdown(ctx context.Context) error {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	done := make(chan struct{})
	go func() {
		h.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		h.cancel()
		return nil
	case <-ctx.Done():
		h.cancel()
		<-done
		return ctx.Err()
	}
}

// Close stops taking clicks and waits up to 10s for the deliveries in
// flight.
func (h *Interactions) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Shutdown(ctx); err != nil {
		return fmt.Errorf("slack interactions: deliveries still running at shutdown: %w", err)
	}
	return nil
}
