package approver

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver/internal/approvertest"
)

func TestProgramNote(t *testing.T) {
	for _, c := range []struct {
		program string
		line    int
		want    string
	}{
		{"", 0, ""},
		{"", 7, ""}, // a line without a program is no program's
		{"p1", 2, "from program p1, line 2"},
		{"p1", 0, "from program p1"},
	} {
		if got := ProgramNote(c.program, c.line); got != c.want {
			t.Errorf("ProgramNote(%q, %d) = %q, want %q", c.program, c.line, got, c.want)
		}
	}
}

// TestShownProgramBounded: a 10k-byte ID is cut to MaxShownProgram bytes
// plus the mark, never inside a character; an ID the workflow accepts
// (at most 200 bytes) is shown whole.
func TestShownProgramBounded(t *testing.T) {
	got := ShownProgram(approvertest.HostileProgram)
	if len(got) > MaxShownProgram+len("…") || !strings.HasSuffix(got, "…") || strings.Contains(got, "TAIL") {
		t.Errorf("ShownProgram(10k) = %d bytes, %q…", len(got), got[:40])
	}
	multi := strings.Repeat("é", 150) // 300 bytes, 2 a character
	if got := ShownProgram(multi); !utf8.ValidString(got) || len(got) > MaxShownProgram+len("…") {
		t.Errorf("ShownProgram cut a character: %q", got)
	}
	whole := strings.Repeat("a", MaxShownProgram)
	if got := ShownProgram(whole); got != whole {
		t.Errorf("ShownProgram cut a 200-byte ID: %q", got)
	}
}

// TestWriteProgramCall: approvals show names the program and line, the
// list gains a PROGRAM column only when a program made a listed call.
func TestWriteProgramCall(t *testing.T) {
	now := time.Now()
	direct, prog := approvertest.Request("task-1", now), approvertest.ProgramRequest("task-2", now)
	var b strings.Builder
	if err := WriteRequest(&b, prog, now); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "program:       prog-7, line 12\n") {
		t.Errorf("show lacks the program line:\n%s", b.String())
	}
	b.Reset()
	if err := WriteRequest(&b, direct, now); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "program") {
		t.Errorf("show of a direct call mentions a program:\n%s", b.String())
	}
	b.Reset()
	if err := WriteList(&b, []api.ApprovalRequest{direct}, now); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "PROGRAM") {
		t.Errorf("list of direct calls has a PROGRAM column:\n%s", b.String())
	}
	b.Reset()
	if err := WriteList(&b, []api.ApprovalRequest{direct, prog}, now); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[0], "PROGRAM") || !strings.HasSuffix(lines[1], " -") || !strings.HasSuffix(lines[2], "prog-7, line 12") {
		t.Errorf("list with a program's call:\n%s", b.String())
	}
}

// TestWriteHostileProgram: a hostile ID stays on its line and bounded in
// both show and list.
func TestWriteHostileProgram(t *testing.T) {
	now := time.Now()
	r := approvertest.ProgramRequest("task-1", now)
	r.Program = approvertest.HostileProgram
	var b strings.Builder
	if err := WriteRequest(&b, r, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Contains(out, "\nstate: approved") || strings.Contains(out, "TAIL") || len(out) > 2000 {
		t.Errorf("show of a hostile program ID (%d bytes):\n%.600s", len(out), out)
	}
	b.Reset()
	if err := WriteList(&b, []api.ApprovalRequest{r}, now); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); strings.Count(out, "\n") != 2 || strings.Contains(out, "TAIL") || len(out) > 1000 {
		t.Errorf("list of a hostile program ID (%d bytes):\n%.600s", len(out), out)
	}
}
