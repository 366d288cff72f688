package activities

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/manifests"
)

// secretTools answers every call with a text holding a GitHub token
// (assembled, never a literal here).
type secretTools struct{}

var testToken = "ghp_" + strings.Repeat("aB3", 12)

func (secretTools) CallTool(context.Context, string, string, json.RawMessage) (*mcp.CallToolResult, error) {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "token=" + testToken}}}, nil
}

// TestCallToolGuard: the activity's output, what Temporal records, holds
// the guarded result and its findings: redacted by the configuration's
// default, blocked by the tool's own guard, untouched when off and for a
// capture (a pre-image a compensation restores); and a tool no manifest
// declares (expose_uncovered) gets the configuration's default.
func TestCallToolGuard(t *testing.T) {
	m, err := manifests.Parse(filepath.Join(t.TempDir(), "fs.yaml"), []byte(`server:
  name: fs
  stdio: {command: /bin/true}
tools:
  read: {side_effects: [read], data_access_level: public, risk: low, idempotent: true}
  strict: {side_effects: [read], data_access_level: public, risk: low, idempotent: true, guard: {results: {secrets: block}}}
  open: {side_effects: [read], data_access_level: public, risk: low, idempotent: true, guard: {results: {secrets: off}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	m.GuardDefault = manifests.GuardRedact
	a := &Activities{Tools: secretTools{}, Catalog: NewCatalog([]*manifests.Manifest{m}, nil, nil, true)}
	for _, tc := range []struct {
		name, tool, callID string
		isError            bool
		text               string
		findings           []api.Finding
	}{
		{"default redact", "read", "c1", false, "token=[REDACTED:github-token]", []api.Finding{{Rule: "github-token", Path: "content[0].text", Action: "redact"}}},
		{"tool blocks", "strict", "c2", true, "", []api.Finding{{Rule: "github-token", Path: "content[0].text", Action: "block"}}},
		{"tool off", "open", "c3", false, "token=" + testToken, nil},
		{"capture", "read", "c4/capture", false, "token=" + testToken, nil},
		{"uncovered tool", "other", "c5", false, "token=[REDACTED:github-token]", []api.Finding{{Rule: "github-token", Path: "content[0].text", Action: "redact"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := a.CallTool(context.Background(), api.CallToolInput{TaskID: "t", CallID: tc.callID, Server: "fs", Tool: tc.tool, ExposedName: "fs__" + tc.tool})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.findings, out.Findings); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
			if out.IsError != tc.isError {
				t.Errorf("isError %v, want %v", out.IsError, tc.isError)
			}
			got := api.ResultText(out.Result)
			if tc.isError {
				if strings.Contains(string(out.Result), testToken) || !strings.Contains(got, "github-token at content[0].text") {
					t.Errorf("blocked result: %s", got)
				}
				return
			}
			if got != tc.text {
				t.Errorf("result text %q, want %q", got, tc.text)
			}
		})
	}
}
