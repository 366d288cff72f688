package timeline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	historypb "go.temporal.io/api/history/v1"
	updatepb "go.temporal.io/api/update/v1"
	"go.temporal.io/sdk/converter"

	"github.com/airlock-run/airlock/api"
)

// TestProgramTimeline: the recorded programs (an atomic one that failed
// after an approved write and two denials, one that ended ok, one stopped
// while its call waited for approval) show with their calls grouped
// under them, each with its line, decision, approval and outcome.
func TestProgramTimeline(t *testing.T) {
	tl := build(t, []string{"program_v1_run1"}, &Options{Redact: map[string][]string{"counter__put": {"key"}}})
	want(t, "programs", len(tl.Programs), 3)
	p1 := tl.Program("prog-1")
	want(t, "prog-1 principal", p1.Principal, "recorder")
	want(t, "prog-1 outcome", p1.Outcome, string(api.ProgramError))
	want(t, "prog-1 line", p1.Line, 5)
	want(t, "prog-1 atomic", p1.Atomic, true)
	want(t, "prog-1 calls", strings.Join(p1.Calls, " "), "prog-1/1 prog-1/2 prog-1/3 prog-1/4 prog-1/5 prog-1/6")
	want(t, "prog-1 rolled back", strings.Join(p1.RolledBack, " "), "prog-1/4")
	if !strings.Contains(p1.Error, `denied by policy rule "no-secrets"`) {
		t.Errorf("prog-1 error %q", p1.Error)
	}
	for _, tc := range []struct {
		id, tool, outcome, effect string
		line                      int
	}{
		{"prog-1/1", "counter__echo", "ok", "allow", 1},
		{"prog-1/2", "counter__echo", "ok", "allow", 2},
		{"prog-1/3", "counter__echo", "ok", "allow", 2},
		{"prog-1/4", "counter__put", "ok", "require_approval", 3},
		{"prog-1/5", "counter__echo", "denied", "deny", 4},
		{"prog-1/6", "counter__echo", "denied", "deny", 5},
		{"prog-2/1", "counter__echo", "ok", "allow", 1},
		{"prog-3/1", "counter__put", "cancelled", "require_approval", 1},
	} {
		c := tl.Call(tc.id)
		if c == nil {
			t.Errorf("no call %s", tc.id)
			continue
		}
		prog, _, _ := api.SplitProgramCallID(tc.id)
		want(t, tc.id+" program", c.Program, prog)
		want(t, tc.id+" tool", c.Tool, tc.tool)
		want(t, tc.id+" line", c.Line, tc.line)
		if c.Result == nil || c.Decision == nil {
			t.Errorf("%s: result %+v, decision %+v", tc.id, c.Result, c.Decision)
			continue
		}
		want(t, tc.id+" outcome", c.Result.Outcome, tc.outcome)
		want(t, tc.id+" effect", string(c.Decision.Effect), tc.effect)
	}
	c4 := tl.Call("prog-1/4")
	want(t, "prog-1/4 arguments", string(c4.Arguments), `{"key":"[redacted]"}`)
	want(t, "prog-1/4 approval", c4.Approval.State+" by "+c4.Approval.Votes[0].Approver, "approved by bob")
	want(t, "prog-1/4 compensation", c4.Compensation.State, api.CompensationDone)
	want(t, "prog-1/1 result", tl.Call("prog-1/1").Result.Text, "one")
	want(t, "rollback by", tl.Rollbacks[0].By, "program prog-1")
	p2 := tl.Program("prog-2")
	want(t, "prog-2", p2.Outcome+" "+string(p2.Result)+" "+p2.Output, `ok ["two"] 1 calls`+"\n")
	p3 := tl.Program("prog-3")
	want(t, "prog-3", p3.Outcome, string(api.ProgramStopped))
	want(t, "prog-3 stops", len(p3.Stops), 1)
	want(t, "prog-3 stop", p3.Stops[0].By+": "+p3.Stops[0].Reason, "recorder: not needed")
	// The key the source passes to counter__put is masked there too.
	for _, p := range []*Program{p1, p3} {
		if strings.Contains(p.Source, `"p1"`) || strings.Contains(p.Source, `"p3"`) || !strings.Contains(p.Source, `counter.put(key="[redacted]")`) {
			t.Errorf("%s source not masked:\n%s", p.ID, p.Source)
		}
	}
	var out bytes.Buffer
	if err := Render(&out, tl, nil); err != nil {
		t.Fatal(err)
	}
	r := out.String()
	for _, s := range []string{
		"program prog-1 by recorder (atomic;",
		"   4 | attempt(counter.echo, text=\"secret\")",
		"    call prog-1/4 (line 3): counter__put {\"key\":\"[redacted]\"}",
		"      bob approved via cli",
		"    program prog-1 ended: error at line 5 after 6 calls",
		"rolled back prog-1/4",
		"    stop requested by recorder: not needed",
	} {
		if !strings.Contains(r, s) {
			t.Errorf("the rendering lacks %q:\n%s", s, r)
		}
	}
	// An export of it verifies, with the program events in it.
	var x bytes.Buffer
	if err := NewExporter(&x).Write(tl); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(bytes.NewReader(x.Bytes())); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{EventProgramStarted, EventProgramStopRequested, EventProgramFinished} {
		if !strings.Contains(x.String(), `"type":"`+typ+`"`) {
			t.Errorf("no %s record in the export", typ)
		}
	}
	if strings.Contains(x.String(), `key=\"p1\"`) {
		t.Error("the export holds the unmasked source")
	}
}

// setProgramSource replaces the source of program id's run_program
// Update in a recorded history.
func setProgramSource(t *testing.T, h *historypb.History, id, src string) {
	t.Helper()
	dc := converter.GetDefaultDataConverter()
	for _, ev := range h.Events {
		a := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes()
		if a == nil || a.GetAcceptedRequest().GetInput().GetName() != api.UpdateRunProgram {
			continue
		}
		in := a.GetAcceptedRequest().GetInput()
		var req api.ProgramRequest
		if err := dc.FromPayloads(in.GetArgs(), &req); err != nil {
			t.Fatal(err)
		}
		if req.ProgramID != id {
			continue
		}
		req.Source = src
		p, err := dc.ToPayloads(req)
		if err != nil {
			t.Fatal(err)
		}
		in.Args = p
		return
	}
	t.Fatalf("no run_program update for %s", id)
}

// TestProgramHostileSource: a source with terminal escapes, bidi
// overrides, carriage returns and a huge line renders escaped, one
// source line per rendered line; the JSON keeps it exact.
func TestProgramHostileSource(t *testing.T) {
	h := loadHistory(t, "program_v1_run1")
	src := "counter.echo(text=\"\x1b[2J\x1b]0;pwned\x07\")\r\n# \u202egnp.exe\u202c\rhidden\u200b\n" + strings.Repeat("x", 1<<16)
	setProgramSource(t, h, "prog-2", src)
	tl, err := Build(h, nil)
	if err != nil {
		t.Fatal(err)
	}
	want(t, "source kept exact", tl.Program("prog-2").Source, src)
	var out bytes.Buffer
	if err := Render(&out, tl, nil); err != nil {
		t.Fatal(err)
	}
	r := out.String()
	if len(r) > 16<<10 {
		t.Errorf("the rendering of a 64 KiB source line is %d bytes; want it clipped", len(r))
	}
	if !strings.Contains(r, "   3 | "+strings.Repeat("x", maxSourceLine)+"…") {
		t.Error("the long line is not shown clipped")
	}
	for _, bad := range []string{"\x1b", "\x07", "\r", "\u202e", "\u200b"} {
		if strings.Contains(r, bad) {
			t.Errorf("the rendering holds %q", bad)
		}
	}
	for _, s := range []string{`   1 | counter.echo(text="\u001b[2J\u001b]0;pwned\u0007")`, `   2 | # \u202egnp.exe\u202c\u000dhidden\u200b`} {
		if !strings.Contains(r, s) {
			t.Errorf("the rendering lacks %q", s)
		}
	}
	js, err := json.Marshal(tl)
	if err != nil {
		t.Fatal(err)
	}
	var back Timeline
	if err := json.Unmarshal(js, &back); err != nil || back.Program("prog-2").Source != src {
		t.Errorf("the JSON does not keep the source (%v)", err)
	}
}

func TestMaskSource(t *testing.T) {
	paths := map[string][]string{"fs.write": {"token", "auth.password"}, "fs__write": {"token", "auth.password"}}
	for _, tc := range []struct{ in, want string }{
		{`fs.write(path="a", token="t-1")`, `fs.write(path="a", token="[redacted]")`},
		{`fs.write(token='t-1', path="a")`, `fs.write(token="[redacted]", path="a")`},
		{`attempt(fs.write, token="""t
1""", path="a")`, `attempt(fs.write, token="[redacted]", path="a")`},
		{`call("fs__write", auth={"user": "u", "password": "pw"}, path="a")`, `call("fs__write", auth={"user": "[redacted]", "password": "[redacted]"}, path="a")`},
		{`fs.write(path=f("token=", "x"), token=r"t\"1")`, `fs.write(path=f("token=", "x"), token="[redacted]")`},
		{`fs.read(token="keep") # fs.write(token="c")`, `fs.read(token="keep") # fs.write(token="c")`},
		{`x = "fs.write(token='s')"`, `x = "fs.write(token='s')"`},
		{`fs.write(token == "keep")`, `fs.write(token == "keep")`},
		{`fs.write(token="unterminated`, `fs.write(token="unterminated`},
		{`parallel(lambda: fs.write(token="a"), lambda: fs.read(token="b"))`, `parallel(lambda: fs.write(token="[redacted]"), lambda: fs.read(token="b"))`},
	} {
		if got, _ := maskSource(tc.in, paths); got != tc.want {
			t.Errorf("maskSource(%s)\n got %s\nwant %s", tc.in, got, tc.want)
		}
	}
	deep := strings.Repeat("(", 100000) + `fs.write(token="s")` + strings.Repeat(")", 100000)
	if got, values := maskSource(deep, paths); strings.Contains(got, `"s"`) || len(values) != 1 || values[0] != "s" {
		t.Error("deeply nested call not masked")
	}
}

// TestProgramRunning: a history cut while a program runs (its call
// approved and running) shows the program running, its calls so far, and
// the waiting call's line from its approval request.
func TestProgramRunning(t *testing.T) {
	h := loadHistory(t, "program_v1_run1")
	cut := -1
	for i, ev := range h.Events {
		if ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == api.CallToolName {
			cut = i + 1 // prog-1/4's tool scheduled, not yet ended
			break
		}
	}
	if cut < 0 {
		t.Fatal("no CallTool activity in the history")
	}
	h.Events = h.Events[:cut]
	tl, err := Build(h, &Options{Redact: map[string][]string{"counter__put": {"key"}}})
	if err != nil {
		t.Fatal(err)
	}
	want(t, "programs", len(tl.Programs), 1)
	p := tl.Program("prog-1")
	want(t, "outcome", p.Outcome, "running")
	want(t, "finished", p.Finished == nil, true)
	want(t, "calls so far", strings.Join(p.Calls, " "), "prog-1/1 prog-1/2 prog-1/3 prog-1/4")
	c4 := tl.Call("prog-1/4")
	want(t, "prog-1/4 line", c4.Line, 3)
	want(t, "prog-1/4 tool", c4.Tool, "counter__put")
	want(t, "prog-1/4 arguments", string(c4.Arguments), `{"key":"[redacted]"}`)
	want(t, "prog-1/4 approval", c4.Approval.State, api.ApprovalApproved)
	want(t, "prog-1/4 result", c4.Result == nil, true)
	want(t, "prog-1/1 result", tl.Call("prog-1/1").Result.Outcome, "ok")
	var out bytes.Buffer
	if err := Render(&out, tl, nil); err != nil {
		t.Fatal(err)
	}
	if r := out.String(); !strings.Contains(r, "program prog-1 still running (4 calls so far)") || strings.Contains(r, "ended") {
		t.Errorf("the rendering does not show prog-1 running:\n%s", r)
	}
}

// TestProgramResultForeignCall: a program's result that lists another
// program's call (or a call ID that is no program call) is a problem, and
// the other program's call is left alone.
func TestProgramResultForeignCall(t *testing.T) {
	h := loadHistory(t, "program_v1_run1")
	dc := converter.GetDefaultDataConverter()
	for _, ev := range h.Events {
		a := ev.GetWorkflowExecutionUpdateCompletedEventAttributes()
		if a == nil || a.GetMeta().GetUpdateId() != "prog-3" {
			continue
		}
		var res api.ProgramResult
		if err := dc.FromPayloads(a.GetOutcome().GetSuccess(), &res); err != nil {
			t.Fatal(err)
		}
		res.Calls = append(res.Calls, api.ProgramCall{CallID: "prog-2/1", Tool: "counter__put", Line: 99, Outcome: api.OutcomeDenied},
			api.ProgramCall{CallID: "not-a-program-call", Outcome: api.OutcomeOK})
		p, err := dc.ToPayloads(res)
		if err != nil {
			t.Fatal(err)
		}
		a.Outcome = &updatepb.Outcome{Value: &updatepb.Outcome_Success{Success: p}}
	}
	tl, err := Build(h, nil)
	if err != nil {
		t.Fatal(err)
	}
	want(t, "problems", len(tl.Problems), 2)
	want(t, "prog-3 calls", strings.Join(tl.Program("prog-3").Calls, " "), "prog-3/1")
	c := tl.Call("prog-2/1")
	want(t, "prog-2/1", fmt.Sprintf("%s line %d %s", c.Program, c.Line, c.Result.Outcome), "prog-2 line 1 ok")
	if tl.Call("not-a-program-call") != nil {
		t.Error("a call was made up from a program's result")
	}
}

// TestProgramSourceSecrets: with the text of counter__echo redacted, the
// literals the source passes are masked in the source, and where a call
// decided on the fast path (whose arguments history does not hold)
// echoes one back in its result.
func TestProgramSourceSecrets(t *testing.T) {
	h := loadHistory(t, "program_v1_run1")
	setProgramSource(t, h, "prog-2", `counter.echo(text="longsecret")`)
	dc := converter.GetDefaultDataConverter()
	found := false
	for _, ev := range h.Events {
		m := ev.GetMarkerRecordedEventAttributes()
		if m == nil || m.GetMarkerName() != markerLocalActivity {
			continue
		}
		var out api.DecideAndCallOutput
		if dc.FromPayloads(m.GetDetails()[markerDetailResult], &out) != nil || out.Decision.CallID != "prog-2/1" {
			continue
		}
		out.Call.Result = json.RawMessage(`{"content":[{"type":"text","text":"echo: longsecret"}]}`)
		p, err := dc.ToPayloads(out)
		if err != nil {
			t.Fatal(err)
		}
		m.GetDetails()[markerDetailResult] = p
		found = true
	}
	if !found {
		t.Fatal("no DecideAndCall marker of prog-2/1")
	}
	tl, err := Build(h, &Options{Redact: map[string][]string{"counter__echo": {"text"}}})
	if err != nil {
		t.Fatal(err)
	}
	want(t, "prog-2 source", tl.Program("prog-2").Source, `counter.echo(text="[redacted]")`)
	want(t, "prog-2/1 result", tl.Call("prog-2/1").Result.Text, "echo: [redacted]")
	if src := tl.Program("prog-1").Source; strings.Contains(src, `"secret"`) || strings.Contains(src, `"one"`) {
		t.Errorf("prog-1 source not masked:\n%s", src)
	}
	js, _ := json.Marshal(tl)
	var r bytes.Buffer
	if err := Render(&r, tl, nil); err != nil {
		t.Fatal(err)
	}
	for what, out := range map[string]string{"JSON": string(js), "rendering": r.String()} {
		if strings.Contains(out, "longsecret") {
			t.Errorf("the %s holds the secret", what)
		}
	}
}

// FuzzMaskSource: any source, however broken, is masked without a panic,
// and what is not a masked literal is left as it was.
func FuzzMaskSource(f *testing.F) {
	for _, s := range []string{"fs.write(token=", ")))(((", "fs.write", "fs.write(", `call(`, `call("fs__write"`, "attempt(fs.write",
		`fs.write(token="abc\`, `fs.write(token='''x`, `fs.write(token=r"\"", token=b'x')`, "fs.write(token=\"a\"\n)#\"", `call('fs__write', token="x")`} {
		f.Add(s)
	}
	paths := map[string][]string{"fs.write": {"token"}, "fs__write": {"token"}}
	f.Fuzz(func(t *testing.T, src string) {
		got, values := maskSource(src, paths)
		if len(values) == 0 && got != src {
			t.Errorf("nothing masked, yet the source changed: %q → %q", src, got)
		}
		if strings.Count(got, `"[redacted]"`) < len(values) {
			t.Errorf("%d values masked, fewer masks in %q", len(values), got)
		}
	})
}
