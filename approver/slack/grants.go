package slack

import (
	"fmt"
	"strings"

	"github.com/slack-go/slack"

	"github.com/airlock-run/airlock/api"
)

// ActionApproveGrant prefixes the action ID of an "Approve + …" button:
// the rest says the grant ("calls=10" or "for=1h0m0s"), so the click
// carries it back as the Approve button carries the decision. The value is
// the request ID, as on Approve.
const ActionApproveGrant = "approve_grant:"

func isGrantAction(id string) bool { return strings.HasPrefix(id, ActionApproveGrant) }

// grantOfAction is the grant an action ID asks for (nil for Approve and
// Deny); ok is false for a grant button airlock cannot read.
func grantOfAction(id string) (g *api.GrantAsk, ok bool) {
	rest, found := strings.CutPrefix(id, ActionApproveGrant)
	if !found {
		return nil, true
	}
	k, v, _ := strings.Cut(rest, "=")
	var err error
	switch k {
	case "calls":
		g, err = api.ParseGrant(v, "", false)
	case "for":
		g, err = api.ParseGrant("", v, false)
	default:
		return nil, false
	}
	return g, err == nil && g != nil
}

// slackGrantButtons are the "Approve + …" buttons of a request whose tool
// allows grants (approval.max_grant): one per dimension, at its bound.
// Fewer calls or a shorter time: the "Approve + grant…" form
// (grant_form.go), airlock approvals approve, the web page, or
// airlock_approvals_decide.
func slackGrantButtons(n api.ApprovalNotice) []slack.BlockElement {
	b := n.MaxGrant
	if b == nil {
		return nil
	}
	var out []slack.BlockElement
	if b.Calls > 0 {
		out = append(out, slack.NewButtonBlockElement(fmt.Sprintf("%scalls=%d", ActionApproveGrant, b.Calls), n.RequestID,
			slackPlain(fmt.Sprintf("Approve + next %d calls", b.Calls), 75)))
	}
	if b.Duration > 0 {
		out = append(out, slack.NewButtonBlockElement(ActionApproveGrant+"for="+b.Duration.String(), n.RequestID,
			slackPlain("Approve + next "+b.Duration.String(), 75)))
	}
	return out
}
