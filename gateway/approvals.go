package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/redact"
)

// Built-in tools with which an approver decides from an MCP client (Claude
// Desktop, an IDE): offered only to principals in an approver group.
const (
	ToolApprovalsList   = "airlock_approvals_list"
	ToolApprovalsDecide = "airlock_approvals_decide"
)

// Approvals is what the approval tools need from the approver side (the
// gateway does not import a role; cmd/airlock adapts approver.Local). The
// task's workflow is the authority on every rule: group, no
// self-approval, digest binding, one vote.
type Approvals interface {
	// Groups returns the approver groups name belongs to (none: the tools
	// are hidden from it and refuse it).
	Groups(name string) []string
	// Decidable lists the pending requests name may decide now.
	Decidable(ctx context.Context, name string) ([]api.ApprovalRequest, error)
	// Decide records name's vote, bound to the digest (a prefix of at
	// least 8 hex digits). A refusal is an error whose text says why.
	Decide(ctx context.Context, d MCPDecision) (api.DecideResult, error)
}

// MCPDecision is one decision made with airlock_approvals_decide.
type MCPDecision struct {
	RequestID, Approver, Digest, Comment string
	Approve                              bool
	// Arguments, with Approve, are edited arguments to run instead
	// (approve with edits); nil: none.
	Arguments json.RawMessage
	// Grant (approval grants): later calls the approval also covers.
	Grant *api.GrantAsk
}

// ApprovalView is one request as airlock_approvals_list shows it: the
// arguments with the manifest's redact paths masked.
type ApprovalView struct {
	ID          string `json:"id"`
	Task        string `json:"task"`
	Tool        string `json:"tool"`
	RequestedBy string `json:"requested_by"`
	// Arguments are the masked arguments' bytes: decoded into any, an
	// integer beyond 2^53 would show as its neighbour.
	Arguments   json.RawMessage `json:"arguments,omitempty" jsonschema:"the call's arguments, sensitive fields masked"`
	Digest      string          `json:"digest"`
	SideEffects []string        `json:"side_effects"`
	DataLevel   string          `json:"data_level"`
	Risk        string          `json:"risk"`
	Rule        string          `json:"rule,omitempty"`
	Reason      string          `json:"reason,omitempty"`
	Group       string          `json:"group"`
	Approvals   int             `json:"approvals"`
	Quorum      int             `json:"quorum"`
	RequestedAt time.Time       `json:"requested_at"`
	ExpiresAt   time.Time       `json:"expires_at"`
	OnTimeout   string          `json:"on_timeout"`
	// Editable: the approver may change the arguments when approving.
	Editable bool `json:"editable"`
	// MaxGrant (approval grants) is the most an approval may also grant
	// ("10 calls, 1h0m0s"); empty: once only.
	MaxGrant string `json:"max_grant,omitempty"`
	// Program and Line (code mode): the call is that program's, made at
	// that line of its source; absent for the agent's own call.
	Program string `json:"program,omitempty" jsonschema:"the program that made the call, when a program made it"`
	Line    int    `json:"line,omitempty" jsonschema:"the line of the program's source that made the call"`
}

type approvalsListOut struct {
	Requests []ApprovalView `json:"requests"`
}

type approvalsDecideIn struct {
	RequestID string `json:"request_id" jsonschema:"the request's id, from airlock_approvals_list"`
	Decision  string `json:"decision" jsonschema:"approve or deny"`
	Digest    string `json:"digest" jsonschema:"the request's digest from airlock_approvals_list (at least its first 8 hex digits): binds your decision to the call you saw"`
	Comment   string `json:"comment,omitempty" jsonschema:"optional; the agent sees it on a deny"`
	// Approve with edits.
	Arguments map[string]any `json:"arguments,omitempty" jsonschema:"optional, with approve and an editable request: the arguments to run instead (a JSON object; a masked value left as [redacted] keeps the call's own); airlock's policy checks the edited call again"`
	// Approval grants.
	GrantCalls     int    `json:"grant_calls,omitempty" jsonschema:"optional, with approve: also approve the next N calls of this tool in this task (with the same grant_args values), within the request's max_grant"`
	GrantFor       string `json:"grant_for,omitempty" jsonschema:"optional, with approve: also approve this tool's calls in this task for this long, e.g. 30m, within the request's max_grant"`
	GrantPrincipal bool   `json:"grant_principal,omitempty" jsonschema:"optional: the grant covers the requester's other tasks too, if max_grant allows"`
}

type approvalsDecideOut struct {
	Request string `json:"request"`
	State   string `json:"state"`
	Message string `json:"message"`
	// EditDigest is the edited arguments' digest when the approval
	// carried edits.
	EditDigest string `json:"edit_digest,omitempty"`
	// EditRefused says why policy refused the edited call: nothing ran.
	EditRefused string `json:"edit_refused,omitempty"`
}

func (g *Gateway) addApprovalTools() {
	if g.opts.Approvals == nil {
		return
	}
	// A raw handler with its own output schema: the SDK's typed handler
	// re-encodes structured output from float64s, which would show an
	// approver 9007199254740992 for a call that runs 9007199254740993.
	g.server.AddTool(&mcp.Tool{Name: ToolApprovalsList, Title: "airlock: calls waiting for your approval",
		Description: "Lists the calls waiting for a decision that you may make (you are in their approver group and did not ask for them), " +
			"with their arguments (sensitive fields masked), risk, rule and digest. Read-only.",
		InputSchema: &jsonschema.Schema{Type: "object"}, OutputSchema: approvalsListSchema(),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, g.approvalsListTool)
	mcp.AddTool(g.server, &mcp.Tool{Name: ToolApprovalsDecide, Title: "airlock: approve or deny a call",
		Description: "Approves or denies one waiting call as you, bound to the digest airlock_approvals_list showed (so you decide on the call you saw). " +
			"You may not decide on your own calls, and you vote once.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true}}, g.approvalsDecideTool)
}

// approverName is the caller when it is in an approver group.
func (g *Gateway) approverName(req *mcp.CallToolRequest) (string, error) {
	pr, err := g.principalFor(req.Extra)
	if err != nil {
		return "", err
	}
	if len(g.opts.Approvals.Groups(pr.Name)) == 0 {
		return "", fmt.Errorf("%s is in no approver group, so it decides on no request; an operator adds approvers to approver_groups.<group>.members", pr.Name)
	}
	return pr.Name, nil
}

// approvalsListSchema is approvalsListOut's schema, arguments any JSON.
func approvalsListSchema() *jsonschema.Schema {
	s, err := jsonschema.For[approvalsListOut](&jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[json.RawMessage](): {}}})
	if err != nil {
		panic(err) // a programmer error in approvalsListOut, at registration
	}
	return s
}

func (g *Gateway) approvalsListTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, err := g.approverName(req)
	if err != nil {
		return errorResult("", "", err.Error()), nil
	}
	reqs, err := g.opts.Approvals.Decidable(ctx, name)
	if err != nil {
		return errorResult("", "", "cannot read the pending requests: "+err.Error()), nil
	}
	out := approvalsListOut{Requests: []ApprovalView{}}
	var b strings.Builder
	if len(reqs) == 0 {
		b.WriteString("Nothing waits for your decision.")
	}
	for _, r := range reqs {
		masked := redact.Arguments(r.Arguments, r.Redact) // always JSON, numbers as written
		v := ApprovalView{ID: r.ID, Task: r.TaskID, Tool: r.Tool, RequestedBy: r.Principal, Arguments: masked,
			Digest: r.Digest, SideEffects: r.SideEffects, DataLevel: r.DataLevel, Risk: r.Risk, Rule: r.Rule, Reason: r.Reason,
			Group: r.Group, Approvals: r.Approvals(), Quorum: r.Quorum, RequestedAt: r.RequestedAt, ExpiresAt: r.ExpiresAt, OnTimeout: r.OnTimeout,
			Editable: !r.NoEdits}
		if r.MaxGrant != nil {
			v.MaxGrant = r.MaxGrant.String()
		}
		if r.Program != "" { // code mode
			v.Program, v.Line = r.Program, r.Line
		}
		out.Requests = append(out.Requests, v)
		fmt.Fprintf(&b, "%s: %s by %s, risk %s, %s, group %s %d/%d, expires %s (then %s), digest %s, arguments %s\n",
			v.ID, v.Tool, v.RequestedBy, v.Risk, strings.Join(v.SideEffects, "+"), v.Group, v.Approvals, v.Quorum,
			v.ExpiresAt.UTC().Format(time.RFC3339), v.OnTimeout, shortDigest(v.Digest), masked)
		if v.Program != "" { // code mode; the ID on one line
			fmt.Fprintf(&b, "  from program %s", redact.VisibleLine(v.Program))
			if v.Line > 0 {
				fmt.Fprintf(&b, ", line %d", v.Line)
			}
			b.WriteString("\n")
		}
		if v.MaxGrant != "" { // approval grants
			fmt.Fprintf(&b, "  an approval may also grant later calls of %s in task %s (grant_calls, grant_for): at most %s\n", v.Tool, v.Task, v.MaxGrant)
		}
	}
	sc, err := json.Marshal(out)
	if err != nil {
		return errorResult("", "", "cannot encode the pending requests: "+err.Error()), nil
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.TrimSpace(b.String())}},
		StructuredContent: json.RawMessage(sc)}, nil
}

func (g *Gateway) approvalsDecideTool(ctx context.Context, req *mcp.CallToolRequest, in approvalsDecideIn) (*mcp.CallToolResult, approvalsDecideOut, error) {
	name, err := g.approverName(req)
	if err != nil {
		return errorResult("", "", err.Error()), approvalsDecideOut{}, nil
	}
	var approve bool
	switch strings.ToLower(strings.TrimSpace(in.Decision)) {
	case "approve":
		approve = true
	case "deny":
	default:
		return errorResult("", "", fmt.Sprintf("decision %q: say approve or deny", in.Decision)), approvalsDecideOut{}, nil
	}
	if strings.TrimSpace(in.RequestID) == "" || len(strings.TrimSpace(in.Digest)) < 8 {
		return errorResult("", "", "give request_id and digest (at least 8 hex digits) as airlock_approvals_list shows them"), approvalsDecideOut{}, nil
	}
	if len(in.Comment) > api.MaxReasonBytes {
		return errorResult("", "", fmt.Sprintf("comment is %d bytes; keep it under %d", len(in.Comment), api.MaxReasonBytes)), approvalsDecideOut{}, nil
	}
	d := MCPDecision{RequestID: strings.TrimSpace(in.RequestID), Approver: name, Approve: approve,
		Digest: strings.TrimSpace(in.Digest), Comment: in.Comment}
	if in.Arguments != nil { // approve with edits
		if !approve {
			return errorResult("", "", "arguments come with approve only; to refuse the call, deny it without arguments"), approvalsDecideOut{}, nil
		}
		// The bytes the approver sent, not in.Arguments re-encoded: the
		// SDK decoded those into float64s (9007199254740993 became
		// 9007199254740992). The SDK has validated the request against
		// the input schema, which admits one "arguments" key only.
		var raw struct {
			Arguments json.RawMessage `json:"arguments"`
		}
		if err := json.Unmarshal(req.Params.Arguments, &raw); err != nil {
			return errorResult("", "", "arguments: "+err.Error()), approvalsDecideOut{}, nil
		}
		d.Arguments = bytes.TrimSpace(raw.Arguments)
	}
	calls := ""
	if in.GrantCalls != 0 {
		calls = strconv.Itoa(in.GrantCalls)
	}
	grant, err := api.ParseGrant(calls, in.GrantFor, in.GrantPrincipal)
	if err != nil {
		return errorResult("", "", err.Error()), approvalsDecideOut{}, nil
	}
	d.Grant = grant
	res, err := g.opts.Approvals.Decide(ctx, d)
	if err != nil {
		return errorResult("", "", "not recorded: "+err.Error()), approvalsDecideOut{}, nil
	}
	verb := "denial"
	if approve {
		verb = "approval"
	}
	out := approvalsDecideOut{Request: res.RequestID, State: res.State, Message: res.Message, EditDigest: res.EditDigest, EditRefused: res.EditRefused}
	if res.EditRefused != "" { // approve with edits: the vote counts, the edited call was refused
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(
			"Your approval of %s is recorded, but the edit was refused by policy: %s. Nothing ran, neither the original nor the edited call.", res.RequestID, res.EditRefused)}}}, out, nil
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("Your %s of %s is recorded: %s", verb, res.RequestID, res.Message)}}}, out, nil
}

func shortDigest(d string) string {
	if len(d) > 12 {
		return d[:12]
	}
	return d
}

// approvalToolVisible says whether a principal sees the approval tools.
func (g *Gateway) approvalToolVisible(name string) bool {
	return g.opts.Approvals != nil && len(g.opts.Approvals.Groups(name)) > 0
}
