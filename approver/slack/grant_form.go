package slack

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
)

// Approve with a chosen grant in Slack: beside the "Approve + next N
// calls" / "Approve + next D" buttons (the tool's approval.max_grant), a
// request whose tool allows grants has an "Approve + grant…" button. It
// opens a modal (views.open with the click's trigger_id, as "Edit &
// approve" does) whose menus offer only grants within max_grant: a number
// of calls, a duration, and, when the tool allows it, "all of the
// principal's tasks". Submitting it (a signed view_submission) approves
// with that grant; a choice the bound refuses, or none, keeps the modal
// open with the reason under the menus.
const (
	// ActionGrantForm is the "Approve + grant…" button's action ID.
	ActionGrantForm = "grant_form"
	// ViewGrant is the modal's callback ID.
	ViewGrant = "airlock_grant"
	// The modal's inputs (block ID / action ID): a view_submission
	// carries each choice under them.
	GrantCallsBlock     = "airlock_grant_calls"
	GrantCallsInput     = "calls"
	GrantForBlock       = "airlock_grant_for"
	GrantForInput       = "for"
	GrantScopeBlock     = "airlock_grant_scope"
	GrantScopeInput     = "scope"
	grantScopePrincipal = "principal"
)

// grantFormButton is the message's "Approve + grant…" button, or nil when
// the tool allows no grant.
func grantFormButton(n api.ApprovalNotice) slack.BlockElement {
	if b := n.MaxGrant; b == nil || (b.Calls == 0 && b.Duration == 0) {
		return nil
	}
	return slack.NewButtonBlockElement(ActionGrantForm, n.RequestID, slackPlain("Approve + grant…", 75))
}

// grantCallChoices are the call counts the modal offers: round numbers up
// to the bound, and the bound.
func grantCallChoices(most int) []int {
	var out []int
	for _, n := range []int{1, 2, 3, 5, 10, 15, 20, 25, 50, 100, 200, 500, 1000} {
		if n < most {
			out = append(out, n)
		}
	}
	if most > 0 {
		out = append(out, most)
	}
	return out
}

// grantDurationChoices are the durations the modal offers, up to the
// bound, and the bound.
func grantDurationChoices(most time.Duration) []time.Duration {
	var out []time.Duration
	for _, d := range []time.Duration{time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
		time.Hour, 2 * time.Hour, 4 * time.Hour, 8 * time.Hour, 12 * time.Hour, 24 * time.Hour, 48 * time.Hour, 7 * 24 * time.Hour} {
		if d < most {
			out = append(out, d)
		}
	}
	if most > 0 {
		out = append(out, most)
	}
	return out
}

// grantModal is the form an approver chooses a grant in.
func grantModal(r api.ApprovalRequest, meta string) slack.ModalViewRequest {
	b := r.MaxGrant
	blocks := []slack.Block{
		slack.NewSectionBlock(slackMd(fmt.Sprintf("*%s* requested by *%s*\nRequest `%s`\nApprove this call, and also the next calls of *%s* in this task with the same %s, up to the most its manifest allows: *%s*.",
			slackEscape(r.Tool), slackEscape(r.Principal), slackEscape(r.ID), slackEscape(r.Tool), grantArgsText(r.GrantArgs), slackEscape(b.String()))), nil, nil),
	}
	if b.Calls > 0 {
		var opts []*slack.OptionBlockObject
		for _, n := range grantCallChoices(b.Calls) {
			opts = append(opts, slack.NewOptionBlockObject(strconv.Itoa(n), slackPlain((&api.GrantAsk{Calls: n}).String(), 75), nil))
		}
		sel := slack.NewOptionsSelectBlockElement(slack.OptTypeStatic, slackPlain("Number of calls", 150), GrantCallsInput, opts...)
		blocks = append(blocks, slack.NewInputBlock(GrantCallsBlock, slackPlain("Next calls", 2000), nil, sel).WithOptional(true))
	}
	if b.Duration > 0 {
		var opts []*slack.OptionBlockObject
		for _, d := range grantDurationChoices(b.Duration) {
			opts = append(opts, slack.NewOptionBlockObject(d.String(), slackPlain("for "+d.String(), 75), nil))
		}
		sel := slack.NewOptionsSelectBlockElement(slack.OptTypeStatic, slackPlain("How long", 150), GrantForInput, opts...)
		blocks = append(blocks, slack.NewInputBlock(GrantForBlock, slackPlain("For the next", 2000), nil, sel).WithOptional(true))
	}
	if b.Principal {
		box := slack.NewCheckboxGroupsBlockElement(GrantScopeInput, slack.NewOptionBlockObject(grantScopePrincipal,
			slackPlain("In every task of "+r.Principal, 75), nil))
		blocks = append(blocks, slack.NewInputBlock(GrantScopeBlock, slackPlain("Scope", 2000), nil, box).WithOptional(true))
	}
	return slack.ModalViewRequest{
		Type:       slack.VTModal,
		Title:      slackPlain("Approve + grant", 24),
		Submit:     slackPlain("Approve", 24),
		Close:      slackPlain("Cancel", 24),
		CallbackID: ViewGrant, PrivateMetadata: meta,
		Blocks: slack.Blocks{BlockSet: blocks},
	}
}

func grantArgsText(args []string) string {
	if len(args) == 0 {
		return "arguments"
	}
	return "values of " + slackEscape(strings.Join(args, ", "))
}

// grantFlow is the grant modal's flow (modal.go): a click on
// "Approve + grant…" opens it; its submission approves with the chosen
// grant.
func (h *Interactions) grantFlow() modalFlow {
	return modalFlow{
		name: "grant", view: ViewGrant, action: ActionGrantForm,
		refuse: func(r api.ApprovalRequest) string {
			if r.MaxGrant == nil || (r.MaxGrant.Calls == 0 && r.MaxGrant.Duration == 0) {
				return slackEscape((*api.GrantBound)(nil).Check(r.Tool, &api.GrantAsk{Calls: 1}))
			}
			return ""
		},
		modal: grantModal,
		submit: func(ic *slack.InteractionCallback) (Click, string, func()) {
			c, problem, _, start := h.submitGrant(ic)
			return c, problem, start
		},
		instead: "`airlock approvals approve --grant-calls N` or `--grant-for D`",
	}
}

// grantOfView reads the choices of a submitted grant modal.
func grantOfView(v slack.View) (*api.GrantAsk, string) {
	var g api.GrantAsk
	if v.State == nil {
		return &g, ""
	}
	vals := v.State.Values
	if s := vals[GrantCallsBlock][GrantCallsInput].SelectedOption.Value; s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return nil, fmt.Sprintf("%q is not a number of calls", s)
		}
		g.Calls = n
	}
	if s := vals[GrantForBlock][GrantForInput].SelectedOption.Value; s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return nil, fmt.Sprintf("%q is not a duration", s)
		}
		g.For = d
	}
	g.Principal = slices.ContainsFunc(vals[GrantScopeBlock][GrantScopeInput].SelectedOptions,
		func(o slack.OptionBlockObject) bool { return o.Value == grantScopePrincipal })
	return &g, ""
}

// submitGrant checks a submitted grant modal and returns the decision to
// deliver; problem (for the approver, shown under block) says why it
// cannot be, and start delivers it in the background otherwise.
func (h *Interactions) submitGrant(ic *slack.InteractionCallback) (c Click, problem, block string, start func()) {
	var m editMeta
	_ = json.Unmarshal([]byte(ic.View.PrivateMetadata), &m)
	c = Click{SlackUser: ic.User.ID, Channel: m.Channel, Decision: api.DecideRequest{RequestID: m.Request, Digest: m.Digest, Approve: true, Via: Via}}
	block = GrantCallsBlock
	if ic.View.State != nil {
		if _, ok := ic.View.State.Values[GrantCallsBlock]; !ok {
			block = GrantForBlock
		}
	}
	if m.Request == "" || m.Digest == "" {
		return c, "this form does not name an airlock approval request", block, nil
	}
	p, problem := h.principal(ic.User.ID)
	if problem != "" {
		return c, problem, block, nil
	}
	c.Decision.Approver = p.Name
	g, problem := grantOfView(ic.View)
	if problem != "" {
		return c, problem, block, nil
	}
	ctx, cancel := context.WithTimeout(h.base, 2500*time.Millisecond) // Slack waits 3 s for the answer
	defer cancel()
	r, err := h.lookup(ctx, m.Request)
	if err != nil {
		return c, "airlock could not read the request: " + approver.Explain(err), block, nil
	}
	if r.Digest != m.Digest {
		return c, "the request changed since you opened this form; cancel and decide on the current request", block, nil
	}
	if g.Empty() {
		return c, "choose a number of calls or a duration (to approve this call only, use Approve on the message)", block, nil
	}
	if why := r.MaxGrant.Check(r.Tool, g); why != "" {
		if g.Principal {
			block = GrantScopeBlock
		}
		return c, why, block, nil
	}
	c.Decision.Grant = g
	c.UpdateID = "slack:view:" + ic.View.ID + ":" + ic.User.ID + approver.GrantUpdateSuffix(g)
	h.mu.Lock()
	repeat := h.repeat(c.UpdateID, time.Now())
	h.mu.Unlock()
	if repeat {
		return c, "", block, func() {}
	}
	return c, "", block, h.background(func() { h.process(c, "") })
}

// submitView checks a submitted airlock modal (Edit & approve, or Approve
// + grant…): resp keeps it open with the problem under its input (the
// answer to Slack over HTTP, or the Socket Mode ack's payload), or is nil
// (the modal closes) and start delivers the decision. ours is false for
// any other view.
func (h *Interactions) submitView(ic *slack.InteractionCallback) (resp *slack.ViewSubmissionResponse, start func(), ours bool) {
	if ic.Type != slack.InteractionTypeViewSubmission {
		return nil, nil, false
	}
	var problem, block string
	switch ic.View.CallbackID {
	case ViewEdit:
		_, problem, start = h.submitEdit(ic)
		block = EditBlock
	case ViewGrant:
		_, problem, block, start = h.submitGrant(ic)
	default:
		return nil, nil, false
	}
	if problem != "" {
		return slack.NewErrorsViewSubmissionResponse(map[string]string{block: problem}), func() {}, true
	}
	return nil, start, true
}

// serveViewSubmission answers a submitted airlock modal over HTTP: the
// problem under its input (the modal stays open), or 200 (it closes) and
// the decision delivered in the background.
func (h *Interactions) serveViewSubmission(w http.ResponseWriter, resp *slack.ViewSubmissionResponse, start func()) {
	if resp != nil {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp)
		return
	}
	w.WriteHeader(http.StatusOK)
	start()
}
