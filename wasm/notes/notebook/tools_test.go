package notebook_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/wasm/internal/guest"
	"github.com/airlock-run/airlock/wasm/notes/notebook"
)

// TestTools runs a sequence of calls as notes.wasm would serve them, over
// one notebook: what a capture and a compensation see.
func TestTools(t *testing.T) {
	tools := notebook.Tools(t.TempDir())
	for _, tt := range []struct {
		name       string
		tool       string
		args       string
		wantStdout string
		wantStderr string
	}{
		{
			name:       "read before any write",
			tool:       "read",
			args:       `{"name": "plan"}`,
			wantStderr: "note plan does not exist",
		},
		{
			name:       "create",
			tool:       "write",
			args:       `{"name": "plan", "content": "step 1\nstep 2"}`,
			wantStdout: `{"content":[{"type":"text","text":"note plan created (13 bytes)"}],"structuredContent":{"name":"plan","bytes":13,"created":true}}`,
		},
		{
			name:       "read it",
			tool:       "read",
			args:       `{"name": "plan"}`,
			wantStdout: `{"content":[{"type":"text","text":"step 1\nstep 2"}],"structuredContent":{"name":"plan","content":"step 1\nstep 2"}}`,
		},
		{
			name:       "replace",
			tool:       "write",
			args:       `{"name": "plan", "content": ""}`,
			wantStdout: `{"content":[{"type":"text","text":"note plan replaced (0 bytes)"}],"structuredContent":{"name":"plan","bytes":0,"created":false}}`,
		},
		{
			name:       "write without content",
			tool:       "write",
			args:       `{"name": "plan"}`,
			wantStderr: `argument content is required: the note's text ("" for an empty note)`,
		},
		{
			name:       "write with a bad name",
			tool:       "write",
			args:       `{"name": "my plan.md", "content": "x"}`,
			wantStderr: `note name "my plan.md" is not allowed: use 1 to 64 characters of a-z, 0-9, _ and - (no dots, slashes, spaces or capitals)`,
		},
		{
			name:       "delete",
			tool:       "delete",
			args:       `{"name": "plan"}`,
			wantStdout: `{"content":[{"type":"text","text":"note plan deleted"}],"structuredContent":{"name":"plan","deleted":true}}`,
		},
		{
			name:       "delete again",
			tool:       "delete",
			args:       `{"name": "plan"}`,
			wantStdout: `{"content":[{"type":"text","text":"note plan did not exist; nothing to delete"}],"structuredContent":{"name":"plan","deleted":false}}`,
		},
		{
			name:       "unknown argument",
			tool:       "delete",
			args:       `{"name": "plan", "force": true}`,
			wantStderr: `unknown argument "force"; this tool takes name`,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := guest.Run([]string{"notes.wasm", tt.tool}, strings.NewReader(tt.args), &stdout, &stderr, tools)
			wantCode := guest.ExitOK
			if tt.wantStderr != "" {
				wantCode = guest.ExitTool
				tt.wantStderr += "\n"
			}
			if tt.wantStdout != "" {
				tt.wantStdout += "\n"
			}
			if code != wantCode {
				t.Errorf("exit code %d, want %d", code, wantCode)
			}
			if diff := cmp.Diff(tt.wantStdout, stdout.String()); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantStderr, stderr.String()); diff != "" {
				t.Errorf("stderr (-want +got):\n%s", diff)
			}
		})
	}
}
