package main

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/gateway"
)

// mcpApprovals gives the gateway's approval tools the approver's rules:
// approver.Local lists and decides (Via "mcp"), MayDecide picks what to
// offer, the workflow is the authority.
type mcpApprovals struct {
	local  approver.Local
	groups func() map[string][]string // group -> members, of the configuration in force
}

var _ gateway.Approvals = mcpApprovals{}

func (m mcpApprovals) Groups(name string) []string {
	var out []string
	for g, members := range m.groups() {
		if slices.Contains(members, name) {
			out = append(out, g)
		}
	}
	slices.Sort(out)
	return out
}

func (m mcpApprovals) Decidable(ctx context.Context, name string) ([]api.ApprovalRequest, error) {
	reqs, err := m.local.List(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := reqs[:0]
	for _, r := range reqs {
		if approver.MayDecide(r, name, now) == nil {
			r.Program = approver.ShownProgram(r.Program) // bounded, as every channel shows it
			out = append(out, r)
		}
	}
	return out, nil
}

func (m mcpApprovals) Decide(ctx context.Context, d gateway.MCPDecision) (api.DecideResult, error) {
	res, err := m.local.Decide(ctx, approver.Decision{RequestID: d.RequestID, Approver: d.Approver, Approve: d.Approve,
		Via: "mcp", Comment: d.Comment, Digest: d.Digest, Arguments: d.Arguments, Grant: d.Grant})
	var ref *approver.Refusal
	if errors.As(err, &ref) {
		return res, errors.New(ref.Reason)
	}
	return res, err
}
