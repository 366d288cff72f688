package web

import (
	"regexp"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver/internal/approvertest"
)

var programRE = regexp.MustCompile(`<p class="muted program">([^<]*)</p>`)

// TestWebProgramCall (issue 27 §5): a program's call shows "from program
// <ID>, line <N>" under its heading; the agent's own call shows no such
// line.
func TestWebProgramCall(t *testing.T) {
	e := newWebEnv(t)
	e.ft.Reqs = append(e.ft.Reqs, approvertest.ProgramRequest("task-2", e.now))
	bob := e.browser()
	e.login(bob, "bob-key")
	_, body, _ := e.page(bob)
	got := programRE.FindAllStringSubmatch(body, -1)
	if len(got) != 1 || got[0][1] != "from program prog-7, line 12" {
		t.Fatalf("program lines %q, want one for the program's call:\n%s", got, body)
	}
	// It belongs to the program's request, the second section.
	if i, j := strings.Index(body, got[0][0]), strings.Index(body, `value="task-2~prog-7/3"`); i < strings.Index(body, `value="task-1~call-1"`) || j < i {
		t.Errorf("program line is not in task-2's section:\n%s", body)
	}
}

// TestWebProgramHostileID: markup and a newline in a program's ID are
// escaped, and a 10k-byte ID is cut.
func TestWebProgramHostileID(t *testing.T) {
	e := newWebEnv(t)
	r := approvertest.ProgramRequest("task-2", e.now)
	r.Program = approvertest.HostileProgram
	e.ft.Reqs = []api.ApprovalRequest{r}
	bob := e.browser()
	e.login(bob, "bob-key")
	_, body, _ := e.page(bob)
	got := programRE.FindAllStringSubmatch(body, -1)
	if len(got) != 1 {
		t.Fatalf("program lines %q:\n%.2000s", got, body)
	}
	s := got[0][1]
	if strings.Contains(body, "<script>") || strings.Contains(s, "\n") || strings.Contains(body, "TAIL") || len(s) > 1500 {
		t.Errorf("hostile program line (%d bytes): %.400s", len(s), s)
	}
	if !strings.HasPrefix(s, "from program &lt;script&gt;alert(1)&lt;/script&gt;&amp;amp;&lt;!channel&gt;") || !strings.HasSuffix(s, "…, line 12") {
		t.Errorf("program line not escaped as expected: %.400s … %s", s, s[max(len(s)-40, 0):])
	}
}
