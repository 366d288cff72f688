package slack

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
)

// modalFlow is one of the Slack modals an approver decides through (edit
// and approve, approve with a chosen grant): a button on the request's
// message opens it, and its submission is the decision.
type modalFlow struct {
	name   string // in logs and messages: "edit", "grant"
	view   string // the modal's callback ID
	action string // the opening button's action ID
	// refuse says why this request cannot be decided through the modal
	// ("" when it can).
	refuse func(api.ApprovalRequest) string
	modal  func(r api.ApprovalRequest, meta string) slack.ModalViewRequest
	// submit checks a submitted modal: the click, why it cannot be
	// delivered, else the delivery to start in the background.
	submit func(*slack.InteractionCallback) (Click, string, func())
	// instead is the CLI command to use when the modal cannot open.
	instead string
}

// acceptModal handles f's interactions: a click on its button (opens the
// modal) and a submitted modal (delivered in the background; problems said
// ephemerally: Socket Mode). ours is false for any other interaction.
func (h *Interactions) acceptModal(ic *slack.InteractionCallback, f modalFlow) (start func(), ours bool) {
	switch ic.Type {
	case slack.InteractionTypeViewSubmission:
		if ic.View.CallbackID != f.view {
			return nil, false
		}
		c, problem, start := f.submit(ic)
		if problem != "" {
			return h.background(func() { h.ephemeral(c, ":warning: "+problem) }), true
		}
		return start, true
	case slack.InteractionTypeBlockActions:
		for _, a := range ic.ActionCallback.BlockActions {
			if a != nil && a.ActionID == f.action && strings.HasPrefix(a.BlockID, BlockIDPrefix) {
				a := *a
				return h.background(func() { h.openModal(ic, a, f) }), true
			}
		}
	}
	return nil, false
}

// openModal opens f's modal for a click on its button, or tells the
// clicker why not.
func (h *Interactions) openModal(ic *slack.InteractionCallback, a slack.BlockAction, f modalFlow) {
	c := Click{SlackUser: ic.User.ID, Channel: ic.Channel.ID, Decision: api.DecideRequest{RequestID: a.Value, Via: Via}}
	if c.Channel == "" {
		c.Channel = ic.Container.ChannelID
	}
	p, problem := h.principal(ic.User.ID)
	if problem != "" {
		h.ephemeral(c, ":warning: "+problem+".")
		return
	}
	ctx, cancel := context.WithTimeout(h.base, h.opts.Timeout)
	defer cancel()
	r, err := h.lookup(ctx, a.Value)
	switch {
	case err != nil:
		problem = "airlock could not read the request: " + approver.Explain(err)
	case approver.MayDecide(r, p.Name, time.Now()) != nil: // the form opens only for someone who may submit it
		problem = approver.MayDecide(r, p.Name, time.Now()).Error()
	case r.State != api.ApprovalPending:
		problem = fmt.Sprintf("request `%s` is already %s", slackEscape(r.ID), r.State)
	case r.Digest != strings.TrimPrefix(a.BlockID, BlockIDPrefix):
		problem = fmt.Sprintf("request `%s` changed since this message was posted; decide on the current request", slackEscape(r.ID))
	default:
		problem = f.refuse(r)
	}
	if problem != "" {
		h.ephemeral(c, ":warning: "+problem+".")
		return
	}
	if h.opts.Slack == nil {
		h.log.Error().Str("request", r.ID).Msgf("cannot open the %s modal: no Slack client configured", f.name)
		return
	}
	meta, _ := json.Marshal(editMeta{Request: r.ID, Digest: r.Digest, Channel: c.Channel})
	if _, err := h.opts.Slack.OpenViewContext(ctx, ic.TriggerID, f.modal(r, string(meta))); err != nil {
		h.log.Warn().Err(err).Str("request", r.ID).Msgf("could not open the %s modal in Slack", f.name)
		h.ephemeral(c, fmt.Sprintf(":warning: airlock could not open the %s form (%s); use %s instead.", f.name, slackEscape(err.Error()), f.instead))
	}
}
