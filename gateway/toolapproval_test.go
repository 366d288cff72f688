package gateway

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
)

// metaWith is a request's _meta declaring extensions (raw JSON).
func metaWith(t *testing.T, extensions string) mcp.Meta {
	t.Helper()
	var m mcp.Meta
	if err := json.Unmarshal([]byte(`{"`+metaClientCapabilities+`":{"extensions":`+extensions+`}}`), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestDeclaredApprovalExts(t *testing.T) {
	for _, tc := range []struct {
		name, extensions string
		want             approvalExts
		wantErr          string
	}{
		{"none", `{}`, approvalExts{}, ""},
		{"tasks only", `{"io.modelcontextprotocol/tasks":{}}`, approvalExts{tasks: true}, ""},
		{"approval", `{"io.modelcontextprotocol/tasks":{},"io.modelcontextprotocol/tool-approval":{}}`, approvalExts{tasks: true, approval: true, authz: true}, ""},
		{"denials only", `{"io.modelcontextprotocol/authorization":{}}`, approvalExts{authz: true}, ""},
		{"approval settings a string", `{"io.modelcontextprotocol/tasks":{},"io.modelcontextprotocol/tool-approval":"yes"}`, approvalExts{}, `extensions["io.modelcontextprotocol/tool-approval"] is "yes"`},
		{"approval settings null", `{"io.modelcontextprotocol/tasks":{},"io.modelcontextprotocol/tool-approval":null}`, approvalExts{}, "is null"},
		{"approval settings an array", `{"io.modelcontextprotocol/tasks":{},"io.modelcontextprotocol/tool-approval":[{}]}`, approvalExts{}, "is [{}]"},
		{"denials settings a number", `{"io.modelcontextprotocol/authorization":1}`, approvalExts{}, "a JSON object"},
		{"approval without tasks", `{"io.modelcontextprotocol/tool-approval":{}}`, approvalExts{}, "without \"io.modelcontextprotocol/tasks\""},
		{"huge settings", `{"io.modelcontextprotocol/authorization":"` + strings.Repeat("x", 1<<16) + `"}`, approvalExts{}, "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, jerr := declaredApprovalExts(metaWith(t, tc.extensions))
			if tc.wantErr == "" {
				if jerr != nil || got != tc.want {
					t.Fatalf("got %+v %v, want %+v", got, jerr, tc.want)
				}
				return
			}
			if jerr == nil || jerr.Code != jsonrpc.CodeInvalidParams || !strings.Contains(jerr.Message, tc.wantErr) || len(jerr.Message) > 400 {
				t.Fatalf("got %+v %v; want invalid params containing %q (and short)", got, jerr, tc.wantErr)
			}
		})
	}
	// No capabilities at all (a 2025 session's call): nothing declared.
	if got, jerr := declaredApprovalExts(nil); jerr != nil || got != (approvalExts{}) {
		t.Fatalf("no _meta: %+v %v", got, jerr)
	}
}

// The shapes of a decided approval call (SEP-2848's table) and of a
// policy denial (SEP-2643), from the call's recorded result.
func TestDecorateFinished(t *testing.T) {
	approvalDecision := &api.Decision{Effect: api.RequireApproval, Group: "ops", PolicyVersion: "p1"}
	ruleDecision := &api.Decision{Effect: api.Deny, Check: api.CheckRule, Rule: "no-secrets", PolicyVersion: "p1"}
	ok := okResult("ran")
	ok.CallID, ok.Tool, ok.Decision = "c1", "counter__append", approvalDecision
	full := approvalExts{tasks: true, approval: true, authz: true}
	for _, tc := range []struct {
		name       string
		res        api.CallResult
		ext        approvalExts
		status     string
		disp       string
		envelope   string // remediation, "" for none
		bodyLine   string
		contextID  bool
		policyHint bool
	}{
		{"approved and ran", ok, full, "completed", DispositionExecuted, "", "", false, false},
		{"approver denied", api.CallResult{CallID: "c1", Tool: "t", Outcome: api.OutcomeDenied, Reason: "bob denied t", Decision: approvalDecision}, full, "completed", DispositionDenied, remediationUnavailable, "did not run", false, false},
		{"ran and errored", api.CallResult{CallID: "c1", Tool: "t", Outcome: api.OutcomeToolError, Result: json.RawMessage(`{"content":[],"isError":true}`), Decision: approvalDecision}, full, "completed", DispositionExecError, "", "reported an error", false, false},
		{"outcome unknown", api.CallResult{CallID: "c1", Tool: "t", Outcome: api.OutcomeUnknown, Decision: approvalDecision}, full, "completed", DispositionUnknown, "", "outcome is unknown", false, false},
		{"withdrawn", api.CallResult{CallID: "c1", Tool: "t", Outcome: api.OutcomeCancelled, Decision: approvalDecision}, full, "cancelled", "", "", "", false, false},
		{"unavailable after approval", api.CallResult{CallID: "c1", Tool: "t", Outcome: api.OutcomeUnavailable, Decision: approvalDecision}, full, "failed", "", "", "", false, false},
		{"policy denial, denials declared", api.CallResult{CallID: "c1", Tool: "t", Outcome: api.OutcomeDenied, Decision: ruleDecision}, approvalExts{authz: true}, "failed", "", remediationUnavailable, "", true, true},
		{"schema refusal is no authorization denial", api.CallResult{CallID: "c1", Tool: "t", Outcome: api.OutcomeDenied, Decision: &api.Decision{Effect: api.Deny, Check: api.CheckSchema}}, full, "failed", "", "", "", false, false},
		{"approval denied, denials only", api.CallResult{CallID: "c1", Tool: "t", Outcome: api.OutcomeDenied, Decision: approvalDecision}, approvalExts{authz: true}, "failed", "", remediationUnavailable, "", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := toMCP("task-1", tc.res)
			before := len(r.Content)
			decorateFinished(r, "task-1", tc.res, tc.ext)
			if got := approvalStatus(tc.res, tc.ext); got != tc.status {
				t.Errorf("status %q, want %q", got, tc.status)
			}
			if got, _ := r.Meta[MetaDisposition].(string); got != tc.disp {
				t.Errorf("disposition %q, want %q", got, tc.disp)
			}
			env, has := r.Meta[MetaAuthorization].(authzEnvelope)
			if has != (tc.envelope != "") || has && (env.Remediation != tc.envelope || env.Reason != reasonInsufficientAuthz) {
				t.Errorf("envelope %+v (present %v), want remediation %q", env, has, tc.envelope)
			}
			if has && (env.AuthorizationContextID != "") != tc.contextID {
				t.Errorf("authorizationContextId %q, want one: %v", env.AuthorizationContextID, tc.contextID)
			}
			if has && tc.contextID && env.AuthorizationContextID != "task-1~c1" {
				t.Errorf("authorizationContextId %q, want the request ID", env.AuthorizationContextID)
			}
			if has && (len(env.RemediationHints) == 1 && env.RemediationHints[0].Type == HintPolicy && env.RemediationHints[0].Rule == "no-secrets") != tc.policyHint {
				t.Errorf("hints %+v, want the policy hint: %v", env.RemediationHints, tc.policyHint)
			}
			added := r.Content[before:]
			if tc.bodyLine == "" && len(added) != 0 || tc.bodyLine != "" && (len(added) != 1 || !strings.Contains(added[0].(*mcp.TextContent).Text, tc.bodyLine) || !r.IsError) {
				t.Errorf("added body %v (isError %v), want %q", added, r.IsError, tc.bodyLine)
			}
		})
	}
	// Without a declaration: today's status.
	if got := approvalStatus(api.CallResult{Outcome: api.OutcomeDenied, Decision: approvalDecision}, approvalExts{tasks: true}); got != "failed" {
		t.Errorf("status without the extension %q, want today's failed", got)
	}
}
