package slack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/slack-go/slack"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/internal/identity"
)

// Approve with edits in Slack: a request's message has an "Edit & approve"
// button (when the tool allows edits); it opens a modal (views.open with
// the click's trigger_id) holding the arguments, masked, in a multiline
// input. Submitting the modal (a view_submission payload, signed like
// every interaction) approves with the edited arguments. A submission
// that is not a JSON object, or meets a request that changed or closed,
// keeps the modal open with the error under the input.
const (
	// ActionEdit is the "Edit & approve" button's action ID.
	ActionEdit = "edit"
	// ViewEdit is the modal's callback ID.
	ViewEdit = "airlock_edit"
	// EditBlock and EditInput name the modal's input (its block and
	// action IDs): a view_submission carries the value under them.
	EditBlock = "airlock_args"
	EditInput = "arguments"
)

// editButton is the message's "Edit & approve" button ("" digest: none).
func editButton(n api.ApprovalNotice) *slack.ButtonBlockElement {
	return slack.NewButtonBlockElement(ActionEdit, n.RequestID, slackPlain("Edit & approve", 75))
}

// editMeta is the modal's private_metadata: what the approver opened it
// on, and where to answer.
type editMeta struct {
	Request string `json:"r"`
	Digest  string `json:"d"`
	Channel string `json:"c,omitempty"`
}

// lookup reads one request as its task holds it now.
func (h *Interactions) lookup(ctx context.Context, id string) (api.ApprovalRequest, error) {
	if h.opts.Lookup != nil {
		return h.opts.Lookup(ctx, id)
	}
	if h.opts.Temporal == nil {
		return api.ApprovalRequest{}, fmt.Errorf("no Temporal client to read request %s with", id)
	}
	return approver.Lookup(ctx, h.opts.Temporal, id)
}

// principal maps a Slack user to a principal, or says why not.
func (h *Interactions) principal(slackUser string) (*identity.Principal, string) {
	if h.opts.Users != nil {
		if p, ok := h.opts.Users.BySlackUser(slackUser); ok {
			return p, ""
		}
	}
	return nil, fmt.Sprintf("you are not a known approver: your Slack user (%s) is not the slack_user_id of any principal in airlock's configuration; ask an operator to add it", slackUser)
}

// background runs f as a tracked delivery (Wait and Shutdown see it);
// false after Shutdown.
func (h *Interactions) background(f func()) func() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return func() {}
	}
	h.wg.Add(1)
	h.mu.Unlock()
	return func() {
		go func() {
			defer h.wg.Done()
			f()
		}()
	}
}

// editFlow is the edit modal's flow (modal.go): a click on "Edit &
// approve" opens it; its submission approves with the edited arguments.
func (h *Interactions) editFlow() modalFlow {
	return modalFlow{
		name: "edit", view: ViewEdit, action: ActionEdit,
		refuse: func(r api.ApprovalRequest) string {
			if approver.EditableArguments(r) == "" {
				_, err := approver.EditedArguments(r, []byte("{}"))
				return slackEscape(err.Error())
			}
			return ""
		},
		modal: editModal,
		submit: func(ic *slack.InteractionCallback) (Click, string, func()) {
			return h.submitEdit(ic)
		},
		instead: "`airlock approvals approve --args FILE`",
	}
}

// editModal is the form an approver edits a request's arguments in.
func editModal(r api.ApprovalRequest, meta string) slack.ModalViewRequest {
	args := approver.EditableArguments(r)
	input := slack.NewPlainTextInputBlockElement(nil, EditInput).WithMultiline(true).WithInitialValue(args)
	hint := slackPlain(`JSON. A "`+`[redacted]`+`" value keeps the call's own. airlock's policy checks the edited call again before it runs.`, 150)
	return slack.ModalViewRequest{
		Type:       slack.VTModal,
		Title:      slackPlain("Edit & approve", 24),
		Submit:     slackPlain("Approve", 24),
		Close:      slackPlain("Cancel", 24),
		CallbackID: ViewEdit, PrivateMetadata: meta,
		Blocks: slack.Blocks{BlockSet: []slack.Block{
			slack.NewSectionBlock(slackMd(fmt.Sprintf("*%s* requested by *%s*\nRequest `%s`", slackEscape(r.Tool), slackEscape(r.Principal), slackEscape(r.ID))), nil, nil),
			slack.NewInputBlock(EditBlock, slackPlain("Arguments to run", 2000), hint, input),
		}},
	}
}

// submitEdit checks a submitted modal and returns the decision to
// deliver; problem (for the approver) says why it cannot be, and start
// delivers it in the background otherwise.
func (h *Interactions) submitEdit(ic *slack.InteractionCallback) (c Click, problem string, start func()) {
	var m editMeta
	_ = json.Unmarshal([]byte(ic.View.PrivateMetadata), &m)
	c = Click{SlackUser: ic.User.ID, Channel: m.Channel, Decision: api.DecideRequest{RequestID: m.Request, Digest: m.Digest, Approve: true, Via: Via}}
	if m.Request == "" || m.Digest == "" {
		return c, "this form does not name an airlock approval request", nil
	}
	p, problem := h.principal(ic.User.ID)
	if problem != "" {
		return c, problem, nil
	}
	c.Decision.Approver = p.Name
	var value string
	if ic.View.State != nil {
		value = ic.View.State.Values[EditBlock][EditInput].Value
	}
	ctx, cancel := context.WithTimeout(h.base, 2500*time.Millisecond) // Slack waits 3 s for the answer
	defer cancel()
	r, err := h.lookup(ctx, m.Request)
	if err != nil {
		return c, "airlock could not read the request: " + err.Error(), nil
	}
	if r.Digest != m.Digest {
		return c, "the request changed since you opened this form; cancel and decide on the current request", nil
	}
	args, err := approver.EditedArguments(r, []byte(value))
	if err != nil {
		return c, err.Error(), nil
	}
	sum := sha256.Sum256([]byte(value))
	c.UpdateID = "slack:view:" + ic.View.ID + ":" + ic.User.ID + ":edit-" + hex.EncodeToString(sum[:8])
	if args != nil {
		c.Decision.Arguments = string(args)
	}
	h.mu.Lock()
	repeat := h.repeat(c.UpdateID, time.Now())
	h.mu.Unlock()
	if repeat {
		return c, "", func() {}
	}
	return c, "", h.background(func() { h.process(c, "") })
}

// slackEditNote says, on a request's message, that it asks about an
// approver's edit, or that it was approved with one ("" otherwise).
func slackEditNote(n api.ApprovalNotice) string {
	switch {
	case n.EditOf != "":
		return fmt.Sprintf(":pencil2: *Edited by %s* when approving request `%s`: the arguments below are %s's. %s may not approve them again.",
			slackEscape(n.EditedBy), slackEscape(n.EditOf), slackEscape(n.EditedBy), slackEscape(n.EditedBy))
	case n.Edit != nil && n.Edit.Refused != "":
		return fmt.Sprintf(":pencil2: Edited by %s (digest `%s`): the edited call was refused, so nothing ran.",
			slackEscape(n.Edit.By), slackEscape(approver.ShortDigest(n.Edit.Digest)))
	case n.Edit != nil && n.Edit.Effect == api.EditNeedsApproval:
		return fmt.Sprintf(":pencil2: *Approved with edited arguments* by %s (digest `%s`); policy sends the edited call to another approval before it runs.",
			slackEscape(n.Edit.By), slackEscape(approver.ShortDigest(n.Edit.Digest)))
	case n.Edit != nil:
		return fmt.Sprintf(":pencil2: *Approved with edited arguments* by %s (digest `%s`); policy judged the edited call again.",
			slackEscape(n.Edit.By), slackEscape(approver.ShortDigest(n.Edit.Digest)))
	}
	return ""
}
