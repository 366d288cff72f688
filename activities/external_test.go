package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/authzen"
	"github.com/airlock-run/airlock/internal/authzen/opapdp"
	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/manifests"
)

// externalRego is the real PDP's policy: alice may act outside /secret;
// nobody else may act at all.
const externalRego = `package airlock.authzen

default allow := false

allow if {
	input.subject.type == "principal"
	input.subject.id == "alice"
	input.action.name == "tools/call"
	input.resource.type == "mcp_tool"
	not startswith(input.context.arguments.path, "/secret")
}

response := {"decision": true, "context": {"reason_admin": {"en": "alice outside /secret"}}} if {
	allow
} else := {"decision": false, "context": {"reason_user": {"en": "no access to secret paths", "fr": "non"}, "reason_admin": {"en": "rule secret-paths"}}}
`

type externalFixture struct {
	pdp   *opapdp.PDP
	a     *Activities
	audit *bytes.Buffer
}

func newExternalFixture(t *testing.T, x func(*External)) externalFixture {
	t.Helper()
	m, err := manifests.Parse(filepath.Join(t.TempDir(), "fs.yaml"), []byte(`server:
  name: fs
  stdio: {command: /bin/true}
tools:
  read: {side_effects: [read], data_access_level: public, risk: low, idempotent: true}
  write: {side_effects: [write], data_access_level: public, risk: high}
  purge: {side_effects: [delete], data_access_level: public, risk: low}
`))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Compile(policy.Config{ApprovalGroup: "ops", Rules: []policy.Rule{
		{Name: "no-purge", When: `tool.upstream == "purge"`, Effect: api.Deny, Reason: "purging is not done here"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	pdp := opapdp.Start(t, externalRego)
	ext := &External{Client: authzen.New(authzen.Options{Endpoint: pdp.URL, Timeout: time.Second}), AppliesTo: "not_denied"}
	if x != nil {
		x(ext)
	}
	var audit bytes.Buffer
	a := &Activities{Policy: pol, Catalog: NewCatalog([]*manifests.Manifest{m}, nil, nil, false), Groups: map[string][]string{"ops": {"olga"}},
		Audit: auditstream.New(&audit)}
	a.Current = func() *Judge { return &Judge{Policy: a.Policy, Catalog: a.Catalog, Groups: a.Groups, External: ext} }
	return externalFixture{pdp: pdp, a: a, audit: &audit}
}

func (f externalFixture) decide(t *testing.T, who, tool, args string) api.DecideOutput {
	t.Helper()
	out, err := f.a.Decide(context.Background(), api.DecideInput{TaskID: "t1", CallID: "c1", Tool: tool, Arguments: json.RawMessage(args), AllowTools: []string{"*"},
		Principal: api.Principal{Name: who, Roles: []string{"dev"}, Permissions: []string{"*"}, DataLevel: manifests.DataRestricted}})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestExternalDecisions: the real PDP's answer makes airlock's decision
// stricter (an allow or an approval becomes a deny naming the PDP's
// reason) and never looser (airlock's deny stays, even when the PDP is
// asked and says yes); what was asked and answered is recorded.
func TestExternalDecisions(t *testing.T) {
	for _, tc := range []struct {
		name, appliesTo, who, tool, args string
		effect                           api.Effect
		check                            string
		asked                            bool
		answer                           bool
		reason                           string
	}{
		{"allowed by both", "", "alice", "fs__read", `{"path":"/a"}`, api.Allow, api.CheckDefault, true, true, "allowed"},
		{"denied by the PDP (path)", "", "alice", "fs__read", `{"path":"/secret/k"}`, api.Deny, api.CheckExternal, true, false, "denied: the external policy decision point denied the call to fs__read: no access to secret paths; airlock's own policy would have allowed it"},
		{"denied by the PDP (subject)", "", "bob", "fs__read", `{"path":"/a"}`, api.Deny, api.CheckExternal, true, false, "no access to secret paths"},
		{"approval made a deny", "", "alice", "fs__write", `{"path":"/secret/k"}`, api.Deny, api.CheckExternal, true, false, "would have sent it to approval"},
		{"approval kept", "", "alice", "fs__write", `{"path":"/a"}`, api.RequireApproval, api.CheckDefault, true, true, "approval"},
		{"airlock's deny not asked", "", "alice", "fs__purge", `{"path":"/a"}`, api.Deny, api.CheckRule, false, false, "purging"},
		{"airlock's deny not loosened", "all", "alice", "fs__purge", `{"path":"/a"}`, api.Deny, api.CheckRule, true, true, "purging"},
		{"approval not asked (allowed only)", "allowed", "bob", "fs__write", `{"path":"/a"}`, api.RequireApproval, api.CheckDefault, false, false, "approval"},
		{"allow asked (allowed only)", "allowed", "bob", "fs__read", `{"path":"/a"}`, api.Deny, api.CheckExternal, true, false, "secret paths"},
		{"unknown tool not asked", "all", "alice", "fs__missing", `{}`, api.Deny, api.CheckError, false, false, "no manifest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newExternalFixture(t, func(x *External) {
				if tc.appliesTo != "" {
					x.AppliesTo = tc.appliesTo
				}
			})
			out := f.decide(t, tc.who, tc.tool, tc.args)
			if out.Effect != tc.effect || out.Check != tc.check || !strings.Contains(out.Reason, tc.reason) {
				t.Fatalf("decision %s (%s): %s; want %s (%s) with %q", out.Effect, out.Check, out.Reason, tc.effect, tc.check, tc.reason)
			}
			if tc.effect == api.Deny && out.Approval != nil {
				t.Fatal("a denied call carries an approval request")
			}
			seen := f.pdp.Requests()
			if !tc.asked {
				if len(seen) != 0 || out.External != nil {
					t.Fatalf("the PDP was asked (%d requests, record %+v)", len(seen), out.External)
				}
				return
			}
			x := out.External
			if len(seen) != 1 || x == nil || x.Decision == nil || *x.Decision != tc.answer || x.Error != "" {
				t.Fatalf("%d requests, record %+v; want one, answered %v", len(seen), x, tc.answer)
			}
			if !bytes.Equal(x.Request, seen[0].Body) || x.RequestBytes != len(seen[0].Body) || len(x.RequestSHA256) != 64 {
				t.Fatalf("recorded request %s (%d bytes), sent %s", x.Request, x.RequestBytes, seen[0].Body)
			}
			if x.Changed != (tc.check == api.CheckExternal) || !strings.Contains(string(x.Context), "reason_admin") {
				t.Fatalf("record %+v context %s", x, x.Context)
			}
			if seen[0].RequestID != "t1/c1" {
				t.Fatalf("X-Request-ID %q", seen[0].RequestID)
			}
			// The audit line carries the answer and the request's digest, never the arguments.
			line := f.audit.String()
			if !strings.Contains(line, `"external":{`) || !strings.Contains(line, `"request_sha256":"`+x.RequestSHA256+`"`) || !strings.Contains(line, "reason_admin") ||
				strings.Contains(line, `"path"`) || !strings.Contains(line, `"check":"`+tc.check+`"`) {
				t.Fatalf("audit line %s", line)
			}
		})
	}
}

// TestExternalRequestShape pins the AuthZEN request a call makes: the
// arguments as the call carries them (numbers exact), no counters.
func TestExternalRequestShape(t *testing.T) {
	f := newExternalFixture(t, nil)
	f.decide(t, "alice", "fs__read", `{"path":"/a","n":12345678901234567890}`)
	var got map[string]any
	if err := json.Unmarshal(f.pdp.Requests()[0].Body, &got); err != nil {
		t.Fatal(err)
	}
	want := `{"subject":{"type":"principal","id":"alice","properties":{"data_level":"restricted","permissions":["*"],"roles":["dev"]}},"action":{"name":"tools/call"},` +
		`"resource":{"type":"mcp_tool","id":"fs__read","properties":{"covered":true,"data_access_level":"public","idempotent":true,"risk":"low","server":"fs","side_effects":["read"],"tool":"read"}},` +
		`"context":{"airlock":{"check":"default","effect":"allow","policy_version":"` + f.a.Policy.Version() + `"},"arguments":{"path":"/a","n":12345678901234567890},"task_id":"t1"}}`
	if body := string(f.pdp.Requests()[0].Body); body != want {
		t.Fatalf("request\n%s\nwant\n%s", body, want)
	}
}

// TestExternalFailures: a PDP that cannot answer denies, unless the
// tool's fail mode is allow; a request too large to record is recorded by
// its digest.
func TestExternalFailures(t *testing.T) {
	f := newExternalFixture(t, func(x *External) {
		x.OnError = func(tool string) string {
			if tool == "fs__write" {
				return "allow"
			}
			return "deny"
		}
	})
	f.pdp.SetDelay(3 * time.Second)
	start := time.Now()
	out := f.decide(t, "alice", "fs__read", `{"path":"/a"}`)
	if out.Effect != api.Deny || out.Check != api.CheckExternal || !strings.Contains(out.Reason, "did not answer within 1s") || strings.Contains(out.Reason, "127.0.0.1") {
		t.Fatalf("decision %s (%s): %s; want a deny for the timeout that does not name the PDP's address", out.Effect, out.Check, out.Reason)
	}
	if time.Since(start) > 2*time.Second {
		t.Fatalf("the decision took %s with a 1s timeout", time.Since(start))
	}
	if x := out.External; x == nil || x.ErrorKind != authzen.KindTimeout || x.OnError != "deny" || x.Decision != nil || !x.Changed || !strings.Contains(x.Error, f.pdp.URL) {
		t.Fatalf("record %+v", out.External)
	}
	out = f.decide(t, "alice", "fs__write", `{"path":"/a"}`)
	if out.Effect != api.RequireApproval || out.External == nil || out.External.OnError != "allow" || out.External.Changed || out.Approval == nil {
		t.Fatalf("on_error allow: %s (%s) record %+v; want airlock's approval to stand, the timeout recorded", out.Effect, out.Check, out.External)
	}
	if !strings.Contains(f.audit.String(), `"error":"timeout","on_error":"allow"`) {
		t.Fatalf("audit %s", f.audit.String())
	}

	f.pdp.SetDelay(0)
	big := `{"path":"/a","pad":"` + strings.Repeat("x", api.MaxRecordedExternalRequest) + `"}`
	out = f.decide(t, "alice", "fs__read", big)
	if x := out.External; out.Effect != api.Allow || x == nil || x.Request != nil || x.RequestBytes <= api.MaxRecordedExternalRequest || len(x.RequestSHA256) != 64 {
		t.Fatalf("large request: %s record %+v", out.Effect, x)
	}
}

// TestExternalFastPath: a call the PDP denies does not run in the local
// activity.
func TestExternalFastPath(t *testing.T) {
	f := newExternalFixture(t, nil)
	caller := &countingCaller{}
	f.a.Tools = caller
	for _, tc := range []struct {
		path string
		ran  bool
	}{{"/a", true}, {"/secret/k", false}} {
		out, err := f.a.DecideAndCall(context.Background(), api.DecideAndCallInput{
			Decide: api.DecideInput{TaskID: "t1", CallID: "c1", Tool: "fs__read", Arguments: json.RawMessage(`{"path":"` + tc.path + `"}`), AllowTools: []string{"*"},
				Principal: api.Principal{Name: "alice", Permissions: []string{"*"}, DataLevel: manifests.DataRestricted}},
			Call: api.CallToolInput{TaskID: "t1", CallID: "c1", Attempt: 1, Server: "fs", Tool: "read", Arguments: json.RawMessage(`{"path":"` + tc.path + `"}`)},
		})
		if err != nil {
			t.Fatal(err)
		}
		if out.Ran != tc.ran || (out.Decision.External == nil) {
			t.Fatalf("%s: ran %v (%s), record %+v", tc.path, out.Ran, out.Decision.Reason, out.Decision.External)
		}
	}
	if len(caller.calls) != 1 {
		t.Fatalf("upstream calls %q, want one", caller.calls)
	}
}

func TestReasonUser(t *testing.T) {
	for _, tc := range []struct{ ctx, want string }{
		{``, ""},
		{`{}`, ""},
		{`{"reason_user":"plain"}`, "plain"},
		{`{"reason_user":{"fr":"non","en-403":"no"}}`, "no"},
		{`{"reason_user":{"fr":"non"}}`, "non"},
		{`{"reason_user":{"en":5,"fr":"non"}}`, "non"},
		{`{"reason_user":"a\nb\u0000c"}`, "a b c"},
		{`{"reason_user":42}`, ""},
		{`{"reason_user":"` + strings.Repeat("é", 400) + `"}`, strings.Repeat("é", 150) + "…"},
	} {
		if got := reasonUser(json.RawMessage(tc.ctx)); got != tc.want {
			t.Errorf("reasonUser(%.40s) = %q, want %q", tc.ctx, got, tc.want)
		}
	}
}

func TestNewExternal(t *testing.T) {
	if x, err := NewExternal(nil, nil); x != nil || err != nil {
		t.Fatalf("no configuration: %v %v", x, err)
	}
	cfg := &config.ExternalPolicy{Endpoint: "http://pdp.example/", AuthorizationEnv: "PDP_TOKEN", Tools: map[string]*config.ExternalTool{"fs__*": {OnError: "allow"}}}
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	if _, err := NewExternal(cfg, getenv); err == nil || !strings.Contains(err.Error(), "authorization_env names PDP_TOKEN, which is not set") {
		t.Fatalf("unset variable: %v", err)
	}
	env["PDP_TOKEN"] = "Bearer a\r\nX-Injected: 1"
	if _, err := NewExternal(cfg, getenv); err == nil || !strings.Contains(err.Error(), "line break") {
		t.Fatalf("header injection: %v", err)
	}
	env["PDP_TOKEN"] = " Bearer tok "
	x, err := NewExternal(cfg, getenv)
	if err != nil {
		t.Fatal(err)
	}
	if x.Client.URL() != "http://pdp.example/access/v1/evaluation" || x.Client.Timeout() != 2*time.Second || x.AppliesTo != "not_denied" ||
		x.OnError("fs__read") != "allow" || x.OnError("web__get") != "deny" {
		t.Fatalf("external %+v", x)
	}
}

// TestExternalOnDenyApproval: under on_deny: require_approval the PDP's no
// sends a call airlock would allow to the configured group instead of
// denying it; a call airlock already sends to approval keeps its own.
func TestExternalOnDenyApproval(t *testing.T) {
	f := newExternalFixture(t, func(x *External) { x.ApprovalGroup = "security" })
	f.a.Groups = map[string][]string{"ops": {"olga"}, "security": {"sam"}}
	out := f.decide(t, "alice", "fs__read", `{"path":"/secret/k"}`)
	if out.Effect != api.RequireApproval || out.Check != api.CheckExternal || out.Group != "security" || out.Quorum != 1 ||
		out.Approval == nil || len(out.Approval.Approvers) != 1 || out.Approval.Approvers[0] != "sam" ||
		!strings.Contains(out.Reason, "did not allow the call to fs__read: no access to secret paths; waiting for 1 approval(s) from group \"security\"") {
		t.Fatalf("decision %s (%s) group %s approval %+v: %s", out.Effect, out.Check, out.Group, out.Approval, out.Reason)
	}
	if x := out.External; x == nil || !x.Changed || x.Effect != api.Allow {
		t.Fatalf("record %+v", x)
	}
	out = f.decide(t, "alice", "fs__write", `{"path":"/secret/k"}`)
	if out.Effect != api.RequireApproval || out.Group != "ops" || out.External == nil || out.External.Changed {
		t.Fatalf("airlock's approval: %s group %s record %+v", out.Effect, out.Group, out.External)
	}
	if out := f.decide(t, "alice", "fs__read", `{"path":"/a"}`); out.Effect != api.Allow {
		t.Fatalf("the PDP's yes: %s", out.Effect)
	}
}
