package slack

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/slack-go/slack"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver/internal/approvertest"
)

// programLines are the context lines of blocks that name a program.
func programLines(t *testing.T, blocks []slack.Block) []string {
	t.Helper()
	var out []string
	for _, b := range blocks {
		c, ok := b.(*slack.ContextBlock)
		if !ok {
			continue
		}
		for _, e := range c.ContextElements.Elements {
			if tb, ok := e.(*slack.TextBlockObject); ok && strings.HasPrefix(tb.Text, "from program") {
				out = append(out, tb.Text)
			}
		}
	}
	return out
}

// TestProgramCallContext (issue 27 §5): a program's call shows "from
// program `<ID>`, line <N>" on its request and on its outcome; a direct
// call shows no such line.
func TestProgramCallContext(t *testing.T) {
	n := slackNotice()
	n.CallID, n.Program, n.Line = api.ProgramCallID("prog-7", 3), "prog-7", 12
	_, req := RenderRequest(n)
	n.State = api.ApprovalApproved
	_, out := RenderOutcome(n)
	for name, blocks := range map[string][]slack.Block{"request": req, "outcome": out} {
		if got := programLines(t, blocks); len(got) != 1 || got[0] != "from program `prog-7`, line 12" {
			t.Errorf("%s: program lines %q", name, got)
		}
	}
	d := slackNotice()
	_, req = RenderRequest(d)
	d.State = api.ApprovalDenied
	_, out = RenderOutcome(d)
	for name, blocks := range map[string][]slack.Block{"request": req, "outcome": out} {
		b, _ := json.Marshal(blocks)
		if strings.Contains(string(b), "program") {
			t.Errorf("%s of a direct call mentions a program: %s", name, b)
		}
	}
}

// TestProgramContextHostileID: markup, mentions, a backtick that would
// close the code span, a newline and 10k bytes all render inert and cut.
func TestProgramContextHostileID(t *testing.T) {
	n := slackNotice()
	n.Program, n.Line = approvertest.HostileProgram, 4
	_, blocks := RenderRequest(n)
	got := programLines(t, blocks)
	if len(got) != 1 {
		t.Fatalf("program lines %q", got)
	}
	s := got[0]
	for _, bad := range []string{"<script", "<!channel>", "\n", "TAIL", "&amp;<"} {
		if strings.Contains(s, bad) {
			t.Errorf("program line holds %q: %.300s", bad, s)
		}
	}
	if strings.Count(s, "`") != 2 || !strings.HasSuffix(s, "…`, line 4") || len(s) > 1500 {
		t.Errorf("program line not one bounded code span (%d bytes): %.300s…%s", len(s), s, s[max(len(s)-40, 0):])
	}
	if !strings.Contains(s, "&lt;script&gt;") || !strings.Contains(s, `\u000a`) {
		t.Errorf("program line does not show the ID escaped: %.300s", s)
	}
}
