package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
)

// TestTasksShowPrograms: tasks show lists the running programs with their
// calls and start; nothing when none runs; a hostile ID is escaped.
func TestTasksShowPrograms(t *testing.T) {
	var b bytes.Buffer
	printPrograms(&b, nil)
	if b.Len() != 0 {
		t.Errorf("no programs printed %q", b.String())
	}
	started := time.Date(2026, 12, 4, 2, 3, 4, 0, time.UTC)
	printPrograms(&b, []api.ProgramStatus{{ProgramID: "prog-1", Calls: 3, Started: started},
		{ProgramID: "p\x1b[2Jx", Calls: 1, Started: started}})
	out := b.String()
	for _, want := range []string{"programs running:\n", "  prog-1 ", "3 calls", "1 call ", "started " + started.Local().Format(time.DateTime), `p\u001b[2Jx`} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("an escape reached the terminal: %q", out)
	}
}
