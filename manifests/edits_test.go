package manifests_test

import (
	"strings"
	"testing"

	"github.com/airlock-run/airlock/manifests"
)

// TestApprovalEdits: approval.edits defaults to allowed, false forbids
// edits, and a value that is not a boolean is refused naming its line.
func TestApprovalEdits(t *testing.T) {
	for _, tc := range []struct {
		value, err string
		allowed    bool
	}{
		{value: "", allowed: true},
		{value: "true", allowed: true},
		{value: "false", allowed: false},
		{value: "maybe", err: `m.yaml:12: tools.read.approval.edits: expected true or false, got "maybe"`},
	} {
		src := head + readTool + "    approval:\n      group: ops\n"
		if tc.value != "" {
			src += "      edits: " + tc.value + "\n"
		}
		m, err := manifests.Parse("m.yaml", []byte(src))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("edits %q: error %v, want %q", tc.value, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("edits %q: %v", tc.value, err)
		}
		if got := m.Tools["read"].Approval.EditsAllowed(); got != tc.allowed {
			t.Errorf("edits %q: allowed %v, want %v", tc.value, got, tc.allowed)
		}
	}
}
