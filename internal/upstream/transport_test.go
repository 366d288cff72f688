package upstream

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestStderrTail(t *testing.T) {
	tests := []struct {
		name      string
		writes    []string
		wantTail  string
		wantLines []string
	}{
		{name: "empty", wantTail: ""},
		{name: "lines split across writes", writes: []string{"first li", "ne\nsecond\r\n", "partial"},
			wantTail: "first line\nsecond\r\npartial", wantLines: []string{"first line", "second"}},
		{name: "keeps the last 4KB", writes: []string{strings.Repeat("a", 10000) + "\n", "end\n"},
			wantTail: strings.Repeat("a", stderrTailBytes-5) + "\nend", wantLines: []string{strings.Repeat("a", 10000), "end"}},
		{name: "cut inside a rune; an over-long line is logged unfinished", writes: []string{"é" + strings.Repeat("b", stderrTailBytes-1)},
			wantTail: strings.Repeat("b", stderrTailBytes-1), wantLines: []string{"é" + strings.Repeat("b", stderrTailBytes-1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var lines []string
			w := &stderrTail{logLine: func(l string) { lines = append(lines, l) }}
			for _, s := range tt.writes {
				if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if got := w.String(); got != tt.wantTail {
				t.Errorf("tail = %.60q… (%d bytes), want %.60q… (%d bytes)", got, len(got), tt.wantTail, len(tt.wantTail))
			}
			if diff := cmp.Diff(tt.wantLines, lines); diff != "" {
				t.Errorf("logged lines (-want +got):\n%s", diff)
			}
		})
	}
}
