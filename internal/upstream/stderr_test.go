package upstream

import "testing"

func TestSummarizeStderr(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"listening on stdio", "listening on stdio"},
		{"node:internal/modules/cjs/loader:1210\n  throw err;\n  ^\n\nError: Cannot find module '/x.js'\n    at Module._resolveFilename",
			"Error: Cannot find module '/x.js' (6 lines of stderr; see the debug log)"},
		{"starting\nshutting down", "shutting down (2 lines of stderr; see the debug log)"},
		{"panic: runtime error: index out of range\n\ngoroutine 1", "panic: runtime error: index out of range (3 lines of stderr; see the debug log)"},
	}
	for _, tc := range tests {
		if got := summarizeStderr(tc.in); got != tc.want {
			t.Errorf("summarizeStderr(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
