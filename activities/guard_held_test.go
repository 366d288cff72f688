package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/internal/seal"
	"github.com/airlock-run/airlock/manifests"
)

// mixedTools answers with a token and an e-mail address (both assembled).
type mixedTools struct{}

var testAddress = "ops" + "@" + "northwind-" + "corp.com"

func (mixedTools) CallTool(context.Context, string, string, json.RawMessage) (*mcp.CallToolResult, error) {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "token=" + testToken + " contact=" + testAddress}}}, nil
}

// TestCallToolHeldResult (guard.results: require_approval): the activity
// holds a result with a finding under require_approval: the output the
// history records has it redacted, and the result as it would be
// delivered (another category's redact applied) sealed to the gateway's
// key, with an approval by the policy's group whose reason names the
// finding, never the value. Without a key (a program's call), with a
// key that is no X25519 key, or with no approver group, the result is
// withheld; a role's require_approval holds a result the tool would
// deliver; nothing under require_approval found delivers as is.
func TestCallToolHeldResult(t *testing.T) {
	m, err := manifests.Parse(filepath.Join(t.TempDir(), "fs.yaml"), []byte(`server:
  name: fs
  stdio: {command: /bin/true}
tools:
  held: {side_effects: [read], data_access_level: public, risk: low, idempotent: true, guard: {results: {secrets: require_approval, personal_data: redact}}}
  plain: {side_effects: [read], data_access_level: public, risk: low, idempotent: true}
  mail: {side_effects: [read], data_access_level: public, risk: low, idempotent: true, guard: {results: {personal_data: require_approval}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	m.RoleGuards = map[string]*manifests.Guard{"careful": {Results: &manifests.GuardResults{Secrets: manifests.GuardRequireApproval}}}
	p, err := policy.Compile(policy.Config{ApprovalGroup: "sec"})
	if err != nil {
		t.Fatal(err)
	}
	a := &Activities{Tools: mixedTools{}, Catalog: NewCatalog([]*manifests.Manifest{m}, nil, nil, false), Policy: p, Groups: map[string][]string{"sec": {"bob"}}}
	key, err := seal.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	call := func(tool string, resultKey []byte, roles ...string) api.CallToolOutput {
		t.Helper()
		out, err := a.CallTool(context.Background(), api.CallToolInput{TaskID: "t", CallID: "c-" + tool, Server: "fs", Tool: tool, ExposedName: "fs__" + tool,
			ResultKey: resultKey, Roles: roles})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	noSecret := func(what string, b []byte) {
		t.Helper()
		if strings.Contains(string(b), testToken) {
			t.Errorf("%s holds the token: %s", what, b)
		}
	}

	out := call("held", key.PublicKey().Bytes())
	noSecret("the recorded output", mustJSON(t, out))
	if out.Held == nil || out.IsError {
		t.Fatalf("not held: %+v", out)
	}
	if got := api.ResultText(out.Result); got != "token=[REDACTED:github-token] contact=[REDACTED:email]" {
		t.Errorf("the recorded copy is %q", got)
	}
	h := out.Held
	if h.Group != "sec" || h.Approval == nil || h.Approval.OnTimeout != "deny" || !h.Approval.NoEdits || len(h.Approval.Approvers) != 1 ||
		!strings.Contains(h.Reason, "the call ran; approve delivering its result") || !strings.Contains(h.Reason, "github-token at content[0].text") {
		t.Errorf("the held approval: %+v %+v", h, h.Approval)
	}
	clear, err := seal.Open(key, h.Peer, h.Sealed)
	if err != nil {
		t.Fatal(err)
	}
	if got := api.ResultText(clear); got != "token="+testToken+" contact=[REDACTED:email]" {
		t.Errorf("the sealed result delivers %q; want the token, and the address redacted (its own category)", got)
	}
	var held, redacted int
	for _, f := range out.Findings {
		switch {
		case f.Rule == "github-token" && f.Action == "require_approval":
			held++
		case f.Rule == "email" && f.Action == "redact":
			redacted++
		}
	}
	if held != 1 || redacted != 1 || len(out.Findings) != 2 {
		t.Errorf("findings %+v", out.Findings)
	}
	// Tampered ciphertext does not open.
	bad := append([]byte(nil), h.Sealed...)
	bad[len(bad)-1] ^= 1
	if _, err := seal.Open(key, h.Peer, bad); err == nil {
		t.Error("tampered ciphertext opened")
	}

	for name, k := range map[string][]byte{"no key (a program's call)": nil, "a key of 31 bytes": make([]byte, 31), "a key of 33 bytes": make([]byte, 33)} {
		out := call("held", k)
		noSecret(name, mustJSON(t, out))
		if out.Held != nil || !out.IsError || !strings.Contains(api.ResultText(out.Result), "withheld") {
			t.Errorf("%s: %+v; want the result withheld", name, out)
		}
	}

	// A role's require_approval holds what the tool would deliver.
	if out := call("plain", key.PublicKey().Bytes()); out.Held != nil || api.ResultText(out.Result) != "token="+testToken+" contact="+testAddress {
		t.Errorf("plain, no role: %+v", out)
	}
	if out := call("plain", key.PublicKey().Bytes(), "careful"); out.Held == nil {
		t.Errorf("plain, role careful: not held: %+v", out)
	}
	if !a.holdsResults("fs__plain", []string{"careful"}) || a.holdsResults("fs__plain", nil) || !a.holdsResults("fs__held", nil) {
		t.Error("holdsResults does not follow the tool's and the roles' guard")
	}

	// No approver group: withheld at once.
	a.Policy, err = policy.Compile(policy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	out = call("mail", key.PublicKey().Bytes())
	if out.Held != nil || !out.IsError || !strings.Contains(api.ResultText(out.Result), "no approver group") || strings.Contains(string(out.Result), testAddress) {
		t.Errorf("no group: %+v", out)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sizedTools answers with text of a given size holding one token.
type sizedTools struct{ text string }

func (s sizedTools) CallTool(context.Context, string, string, json.RawMessage) (*mcp.CallToolResult, error) {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s.text}}}, nil
}

// BenchmarkCallToolHeld compares the CallTool activity's cost for a
// result holding a token under redact and under require_approval (the
// result inspected in two passes, encoded and sealed beside the redacted
// copy), for 1 KB and 1 MiB results: report the ratio held/redact of the
// same run.
func BenchmarkCallToolHeld(b *testing.B) {
	m, err := manifests.Parse(filepath.Join(b.TempDir(), "fs.yaml"), []byte(`server:
  name: fs
  stdio: {command: /bin/true}
tools:
  redact: {side_effects: [read], data_access_level: public, risk: low, idempotent: true, guard: {results: {secrets: redact}}}
  held: {side_effects: [read], data_access_level: public, risk: low, idempotent: true, guard: {results: {secrets: require_approval}}}
`))
	if err != nil {
		b.Fatal(err)
	}
	p, err := policy.Compile(policy.Config{ApprovalGroup: "sec"})
	if err != nil {
		b.Fatal(err)
	}
	key, err := seal.NewKey()
	if err != nil {
		b.Fatal(err)
	}
	for _, size := range []int{1 << 10, 1 << 20} {
		text := strings.Repeat("lorem ipsum dolor sit amet ", size/27) + " token=" + testToken
		a := &Activities{Tools: sizedTools{text}, Catalog: NewCatalog([]*manifests.Manifest{m}, nil, nil, false), Policy: p, Groups: map[string][]string{"sec": {"bob"}},
			MaxResultBytes: 8 << 20}
		for _, tool := range []string{"redact", "held"} {
			b.Run(fmt.Sprintf("%s/%dKiB", tool, size>>10), func(b *testing.B) {
				b.SetBytes(int64(len(text)))
				for b.Loop() {
					out, err := a.CallTool(context.Background(), api.CallToolInput{TaskID: "t", CallID: "c", Server: "fs", Tool: tool, ExposedName: "fs__" + tool,
						ResultKey: key.PublicKey().Bytes()})
					if err != nil || len(out.Findings) != 1 || (tool == "held") != (out.Held != nil) {
						b.Fatalf("%v %+v", err, out.Findings)
					}
				}
			})
		}
	}
}

// TestCallToolHeldTooLarge: a held result whose redacted and sealed
// copies together pass the result limit is withheld, not held.
func TestCallToolHeldTooLarge(t *testing.T) {
	m, err := manifests.Parse(filepath.Join(t.TempDir(), "fs.yaml"), []byte(`server:
  name: fs
  stdio: {command: /bin/true}
tools:
  held: {side_effects: [read], data_access_level: public, risk: low, idempotent: true, guard: {results: {secrets: require_approval}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(policy.Config{ApprovalGroup: "sec"})
	if err != nil {
		t.Fatal(err)
	}
	key, err := seal.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("x", 600) + " token=" + testToken
	for limit, wantHeld := range map[int]bool{4096: true, 1000: false} {
		a := &Activities{Tools: sizedTools{text}, Catalog: NewCatalog([]*manifests.Manifest{m}, nil, nil, false), Policy: p,
			Groups: map[string][]string{"sec": {"bob"}}, MaxResultBytes: limit}
		out, err := a.CallTool(context.Background(), api.CallToolInput{TaskID: "t", CallID: "c", Server: "fs", Tool: "held", ExposedName: "fs__held", ResultKey: key.PublicKey().Bytes()})
		if err != nil {
			t.Fatal(err)
		}
		if (out.Held != nil) != wantHeld || strings.Contains(string(mustJSON(t, out)), testToken) {
			t.Errorf("limit %d: held %v, want %v: %s", limit, out.Held != nil, wantHeld, api.ResultText(out.Result))
		}
		if !wantHeld && (!out.IsError || !strings.Contains(api.ResultText(out.Result), "too large to hold")) {
			t.Errorf("limit %d: %s", limit, api.ResultText(out.Result))
		}
	}
}
