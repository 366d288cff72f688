package gateway

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/manifests"
)

func programGateway(t *testing.T, ft *fakeTemporal, o Options) (*Gateway, *mcp.ClientSession) {
	t.Helper()
	if o.Principal == "" {
		o.Principal = "alice"
	}
	if o.Programs == nil {
		o.Programs = &ProgramOptions{}
	}
	g := newTestGateway(t, ft, o)
	return g, connectMemory(t, g)
}

func programUpdates(ft *fakeTemporal) []sentUpdate {
	var out []sentUpdate
	for _, u := range ft.all() {
		if u.prog != nil {
			out = append(out, u)
		}
	}
	return out
}

// TestRunProgramSendsTheUpdate: the program becomes one run_program
// Update of the caller's task (Update-with-Start, as a first call), its
// ID the key's, with the caller's tools and the configured limits; the
// result comes back as JSON (a number past 2^53 intact) and printed
// output.
func TestRunProgramSendsTheUpdate(t *testing.T) {
	ft := &fakeTemporal{program: func(u sentUpdate) (api.ProgramResult, error) {
		return api.ProgramResult{ProgramID: u.prog.ProgramID, Outcome: api.ProgramOK,
			Result: json.RawMessage(`{"n": 12345678901234567890123}`), Output: "hello\n",
			Calls: []api.ProgramCall{{CallID: u.prog.ProgramID + "/1", Tool: "counter__echo", Line: 2, Outcome: api.OutcomeOK}}}, nil
	}}
	_, cs := programGateway(t, ft, Options{MaxCalls: 9, Programs: &ProgramOptions{Limits: api.ProgramLimits{MaxCalls: 7, Timeout: time.Minute}}})
	src := "def main():\n    return counter.echo(text='hi')\n"
	res := callTool(t, cs, ToolRunProgram, map[string]any{"source": src, "atomic": true, "key": "k1"}, "")
	if res.IsError {
		t.Fatalf("isError: %q", textOf(res))
	}
	ups := programUpdates(ft)
	if len(ups) != 1 || ft.count() != 1 {
		t.Fatalf("%d program updates, %d in all; want one", len(ups), ft.count())
	}
	u := ups[0]
	if !u.withStart || u.update.UpdateName != api.UpdateRunProgram || u.update.UpdateID != "prog-k-k1" ||
		u.update.WaitForStage != client.WorkflowUpdateStageCompleted || u.in.Limits.MaxCalls != 9 || u.start.ID != u.update.WorkflowID {
		t.Errorf("update %+v, start %+v, task input limits %+v", u.update, u.start, u.in.Limits)
	}
	limits := api.DefaultProgramLimits
	limits.MaxCalls, limits.Timeout = 7, time.Minute
	want := api.ProgramRequest{ProgramID: "prog-k-k1", Source: src, Principal: "alice", Limits: limits, Atomic: true,
		Tools: []api.ProgramTool{{Name: "counter__echo", Module: "counter", Function: "echo", Server: "counter", UpstreamTool: "echo",
			Spec: api.SpecFor(counterManifest().Tools["echo"])}}}
	if diff := cmp.Diff(want, *u.prog); diff != "" {
		t.Errorf("program request (-want +got):\n%s", diff)
	}
	if got, want := textOf(res), "{\"n\":12345678901234567890123}\nprinted:\nhello\n"; got != want {
		t.Errorf("text %q, want %q", got, want)
	}
	assertMeta(t, res, u.update.WorkflowID, "prog-k-k1")
	// (The client decodes structuredContent into maps and float64s;
	// TestRenderProgram checks the bytes sent.)
	b, _ := json.Marshal(res.StructuredContent)
	wantSC := `{"calls":[{"line":2,"outcome":"ok","tool":"counter__echo"}],"error":"","line":0,"outcome":"ok","output":"hello\n","result":{"n":1.2345678901234568e+22},"rolledBack":[]}`
	if string(b) != wantSC {
		t.Errorf("structuredContent %s\nwant %s", b, wantSC)
	}

	// Without a key: a generated program ID, never a call's.
	res = callTool(t, cs, ToolRunProgram, map[string]any{"source": "result = 1"}, "")
	u = ft.last(t)
	if res.IsError || !regexp.MustCompile(`^prog-[0-9a-f]{24}$`).MatchString(u.update.UpdateID) || u.prog.Atomic || u.withStart {
		t.Errorf("isError=%v %q, update ID %q, atomic %v, withStart %v", res.IsError, textOf(res), u.update.UpdateID, u.prog.Atomic, u.withStart)
	}
	// The _meta idempotency key serves as the key when there is none.
	callTool(t, cs, ToolRunProgram, map[string]any{"source": "result = 1"}, "m1")
	if id := ft.last(t).update.UpdateID; id != "prog-k-m1" {
		t.Errorf("update ID %q, want prog-k-m1", id)
	}
}

func TestRunProgramRendersFailures(t *testing.T) {
	ft := &fakeTemporal{program: func(u sentUpdate) (api.ProgramResult, error) {
		return api.ProgramResult{ProgramID: u.prog.ProgramID, Outcome: api.ProgramError, Line: 3,
			Error: "counter__echo: denied: rule no-echo", Output: "before\n", RolledBack: []string{"undo-p/2", "undo-p/1"},
			Calls: []api.ProgramCall{{CallID: "p/1", Tool: "counter__echo", Line: 3, Outcome: api.OutcomeRejected, Reason: "rule no-echo"}}}, nil
	}}
	_, cs := programGateway(t, ft, Options{})
	res := callTool(t, cs, ToolRunProgram, map[string]any{"source": "x"}, "")
	want := "program error at line 3: counter__echo: denied: rule no-echo\nrolled back: undo-p/2, undo-p/1\nprinted:\nbefore\n"
	if !res.IsError || textOf(res) != want {
		t.Fatalf("isError=%v %q, want %q", res.IsError, textOf(res), want)
	}
	sc, _ := json.Marshal(res.StructuredContent)
	for _, s := range []string{`"outcome":"error"`, `"line":3`, `"rolledBack":["undo-p/2","undo-p/1"]`, `"outcome":"rejected"`, `"result":null`} {
		if !strings.Contains(string(sc), s) {
			t.Errorf("structuredContent %s lacks %s", sc, s)
		}
	}
}

func TestRenderProgram(t *testing.T) {
	for _, tc := range []struct {
		name    string
		res     api.ProgramResult
		text    string
		isError bool
	}{
		{"nothing returned", api.ProgramResult{Outcome: api.ProgramOK}, "null", false},
		{"limit without a line", api.ProgramResult{Outcome: api.ProgramLimit, Error: "200 calls"}, "program limit: 200 calls", true},
		{"invalid", api.ProgramResult{Outcome: api.ProgramInvalid, Line: 1, Error: "got try"}, "program invalid at line 1: got try", true},
		{"no outcome", api.ProgramResult{Error: "?"}, "program error: ?", true},
		{"big number", api.ProgramResult{Outcome: api.ProgramOK, Result: json.RawMessage(`{"big": 12345678901234567890123}`)}, `{"big": 12345678901234567890123}`, false},
		{"undecodable result", api.ProgramResult{Outcome: api.ProgramOK, Result: json.RawMessage(`{"a":`)}, "program error: airlock could not decode the program's result", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := renderProgram("task-1", "prog-1", tc.res)
			if r.IsError != tc.isError || textOf(r) != tc.text {
				t.Errorf("isError=%v %q, want %v %q", r.IsError, textOf(r), tc.isError, tc.text)
			}
			if _, err := json.Marshal(r); err != nil {
				t.Errorf("result does not marshal: %v", err)
			}
			if string(tc.res.Result) == `{"big": 12345678901234567890123}` {
				b, _ := json.Marshal(r.StructuredContent)
				if !strings.Contains(string(b), `"result":{"big":12345678901234567890123}`) {
					t.Errorf("structuredContent %s: the number past 2^53 changed", b)
				}
			}
			assertMeta(t, r, "task-1", "prog-1")
		})
	}
}

// TestRunProgramRefusesBadInput: each bad input is answered with what is
// wrong, naming the argument, and nothing reaches the task.
func TestRunProgramRefusesBadInput(t *testing.T) {
	ft := &fakeTemporal{}
	_, cs := programGateway(t, ft, Options{Programs: &ProgramOptions{Limits: api.ProgramLimits{MaxSourceBytes: 100}}})
	for _, tc := range []struct {
		name string
		args any
		want string
	}{
		{"no source", map[string]any{}, "source is required"},
		{"empty source", map[string]any{"source": "  \n"}, "source is empty"},
		{"source too big", map[string]any{"source": strings.Repeat("x", 101)}, "source is 101 bytes, more than the 100"},
		{"huge source", map[string]any{"source": strings.Repeat("x", 3<<20)}, "source is 3145728 bytes"},
		{"source a number", json.RawMessage(`{"source": 5}`), "source must be a string"},
		{"source an object", json.RawMessage(`{"source": {"a": 1}}`), "source must be a string"},
		{"source null", json.RawMessage(`{"source": null}`), "source must be a string"},
		{"atomic a string", json.RawMessage(`{"source": "x", "atomic": "yes"}`), "atomic must be true or false"},
		{"atomic a number", json.RawMessage(`{"source": "x", "atomic": 1}`), "atomic must be true or false"},
		{"key a number", json.RawMessage(`{"source": "x", "key": 12345678901234567890}`), "key must be a string"},
		{"key with a slash", map[string]any{"source": "x", "key": "a/1"}, `key must not contain "/"`},
		{"key too long", map[string]any{"source": "x", "key": strings.Repeat("k", 194)}, "key is longer than 193 bytes"},
		{"key with a space", map[string]any{"source": "x", "key": "a b"}, "must not contain spaces"},
		{"key with a no-break space", map[string]any{"source": "x", "key": "a\u00a0b"}, "must not contain spaces"},
		{"key empty", map[string]any{"source": "x", "key": ""}, "key is empty"},
		{"key control", map[string]any{"source": "x", "key": "a\nb"}, "control characters"},
		{"key DEL", map[string]any{"source": "x", "key": "a\u007fb"}, "control characters"},
		{"unknown member", map[string]any{"source": "x", "timeout": 5}, `"timeout" is not an argument`},
		{"case variant", map[string]any{"Source": "x"}, `"Source" is not an argument`},
		{"repeated source", json.RawMessage(`{"source": "print(1)", "source": "delete_all()"}`), "source is given twice"},
		{"repeated deep", json.RawMessage(`{"source": "x", "key": "a", "atomic": false, "atomic": true}`), "atomic is given twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := callTool(t, cs, ToolRunProgram, tc.args, "")
			if !res.IsError || !strings.Contains(textOf(res), tc.want) || !strings.Contains(textOf(res), "Nothing ran") {
				t.Fatalf("isError=%v %.300q; want an error saying %q and that nothing ran", res.IsError, textOf(res), tc.want)
			}
		})
	}
	if n := ft.count(); n != 0 {
		t.Fatalf("%d updates reached the task", n)
	}
	// A key from _meta is checked as well.
	if res := callTool(t, cs, ToolRunProgram, map[string]any{"source": "x"}, "a/b"); !res.IsError || !strings.Contains(textOf(res), MetaIdempotencyKey) {
		t.Errorf("_meta key with a slash: isError=%v %q", res.IsError, textOf(res))
	}
}

// TestParseProgramInput covers what an MCP client cannot send through
// the SDK (it sends valid JSON objects only), as airlock_call_tool's
// inner arguments or a hand-written body could.
func TestParseProgramInput(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{`{"source": "x"} {"source": "y"}`, "not JSON"},
		{`{"source": "x"}garbage`, "not JSON"},
		{`[{"source": "x"}]`, "must be an object"},
		{`"source"`, "must be an object"},
		{`null`, "source is required"},
		{``, "source is required"},
		{`{"source": "x", "key": "\u0000"}`, "control characters"},
		{`{"source": "\ud800"}`, ""}, // a lone surrogate decodes to U+FFFD: a program like any
		{`{"source": "x", "atomic": ` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`, ""},
		{`{"source": "x", "key": {"a": 1, "a": 2}}`, `the key "a" is given twice at $.key`},
		{`{"source": "x", "atomic": 1e999}`, "atomic must be true or false"},
	} {
		if strings.HasPrefix(tc.raw, `{"source": "x", "atomic": [[`) {
			// Nested past what encoding/json reads: refused, whatever the words.
			if _, err := parseProgramInput(json.RawMessage(tc.raw), 1000); err == nil {
				t.Error("100000 nested arrays accepted")
			}
			continue
		}
		_, err := parseProgramInput(json.RawMessage(tc.raw), 1000)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.raw, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.raw, err, tc.want)
		}
	}
	in, err := parseProgramInput(json.RawMessage(`{"source":"result = 1","atomic":true,"key":"x-1","atomic2":1}`), 1000)
	if err == nil {
		t.Errorf("unknown member accepted: %+v", in)
	}
	// The longest key makes an ID of the 200 bytes the task takes.
	if k := strings.Repeat("k", maxProgramKey); checkProgramKey(k) != nil || len(ProgramIDForKey(k)) != 200 {
		t.Errorf("a %d-byte key: %v, ID of %d bytes; want it taken, and an ID of 200", len(k), checkProgramKey(k), len(ProgramIDForKey(k)))
	}
	in, err = parseProgramInput(json.RawMessage(`{"source":"result = 1","atomic":null,"key":null}`), 1000)
	if err != nil || in.Source != "result = 1" || in.Atomic || in.Key != "" {
		t.Errorf("nulls: %+v, %v; want them taken as omitted", in, err)
	}
}

// TestRunProgramInAnotherPrincipalsTask: bob naming alice's task is
// refused before anything is sent to it, as a call is.
func TestRunProgramInAnotherPrincipalsTask(t *testing.T) {
	ft := aliceSecrets()
	g := newTestGateway(t, ft, Options{Directory: keysDirectory("alice", "bob"), InlineWait: time.Second, Programs: &ProgramOptions{}})
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	bob := connectStatelessHTTP(t, srv.URL, &headerRT{h: map[string]string{"Authorization": "Bearer bob-key", HeaderTask: "alice-task"}})
	assertRefused(t, ToolRunProgram, callTool(t, bob, ToolRunProgram, map[string]any{"source": "result = 1", "key": "k1"}, ""))
	assertRefused(t, ToolAwait+" of a program", callTool(t, bob, ToolAwait, map[string]any{"call": "prog-k-k1", "timeout_seconds": 1}, ""))
	if n := ft.count(); n != 0 {
		t.Fatalf("%d updates sent to alice's task", n)
	}
	// alice herself runs it there.
	alice := connectStatelessHTTP(t, srv.URL, &headerRT{h: map[string]string{"Authorization": "Bearer alice-key", HeaderTask: "alice-task"}})
	if res := callTool(t, alice, ToolRunProgram, map[string]any{"source": "result = 1", "key": "k1"}, ""); res.IsError {
		t.Fatalf("alice: %q", textOf(res))
	}
	if u := ft.last(t); u.prog == nil || u.update.WorkflowID != "alice-task" || u.prog.Principal != "alice" {
		t.Fatalf("alice's program went to %q as %+v", u.update.WorkflowID, u.prog)
	}
}

// TestRunProgramSeesTheCallersTools: the table and the description hold
// the tools the caller may call (tools/list's filter), no others.
func TestRunProgramSeesTheCallersTools(t *testing.T) {
	pol, err := policy.Compile(policy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ft := &fakeTemporal{}
	g, cs := programGateway(t, ft, Options{Policy: pol})
	description := func() string {
		t.Helper()
		res, err := cs.ListTools(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tool := range res.Tools {
			if tool.Name == ToolRunProgram {
				return tool.Description
			}
		}
		t.Fatalf("%s not listed", ToolRunProgram)
		return ""
	}
	g.open.AllowTools = []string{"other__*"}
	if d := description(); !strings.HasPrefix(d, ProgramRules) || strings.Contains(d, "counter.echo") || !strings.Contains(d, "no tools") {
		t.Errorf("description without tools: %q", d)
	}
	callTool(t, cs, ToolRunProgram, map[string]any{"source": "result = 1"}, "")
	if u := ft.last(t); len(u.prog.Tools) != 0 {
		t.Errorf("tools %+v, want none", u.prog.Tools)
	}
	g.open.AllowTools = []string{"counter__*"}
	if d := description(); !strings.Contains(d, "\ncounter.echo() -> any  # [unavailable: upstream counter is not connected yet] Echo it.") {
		t.Errorf("description: %q", d)
	}
	callTool(t, cs, ToolRunProgram, map[string]any{"source": "result = 1"}, "")
	if u := ft.last(t); len(u.prog.Tools) != 1 || u.prog.Tools[0].Name != "counter__echo" {
		t.Errorf("tools %+v, want counter__echo", u.prog.Tools)
	}
	// A tool blocked by its pin is no function of a program.
	g.mu.Lock()
	g.tools["counter__echo"].blocked = true
	g.mu.Unlock()
	if tools := g.programTable(nil, g.open); len(tools) != 0 {
		t.Errorf("blocked tool in the table: %+v", tools)
	}
}

// TestRunProgramDescriptionTooLong: past max_description_bytes the stubs
// give way to a pointer at airlock_find_tools, which full mode then lists.
func TestRunProgramDescriptionTooLong(t *testing.T) {
	_, cs := programGateway(t, &fakeTemporal{}, Options{Programs: &ProgramOptions{MaxDescriptionBytes: len(ProgramRules) + 20}})
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var desc string
	var find bool
	for _, tool := range res.Tools {
		switch tool.Name {
		case ToolRunProgram:
			desc = tool.Description
		case ToolFindTools:
			find = true
		}
	}
	if desc != ProgramRules+programNoStubs || !find {
		t.Fatalf("description %q (find_tools listed: %v); want the rules and the pointer, and %s listed", desc, find, ToolFindTools)
	}
	found := callTool(t, cs, ToolFindTools, map[string]any{"query": "echo", "format": "stubs"}, "")
	if found.IsError || !strings.HasPrefix(textOf(found), "counter.echo(") {
		t.Fatalf("find_tools stubs: isError=%v %q", found.IsError, textOf(found))
	}
}

// TestProgramsInSearchMode: find_tools returns stubs, and airlock_call_tool
// reaches airlock_run_program.
func TestProgramsInSearchMode(t *testing.T) {
	ft := &fakeTemporal{}
	_, cs := programGateway(t, ft, Options{Catalog: CatalogSearch})
	res := callTool(t, cs, ToolFindTools, map[string]any{"query": "echo it", "format": "stubs"}, "")
	var out findToolsOut
	b, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(b, &out)
	if res.IsError || len(out.Stubs) != 1 || !strings.HasPrefix(out.Stubs[0], "counter.echo(") || len(out.Tools) != 1 || out.Tools[0].InputSchema != nil {
		t.Fatalf("stubs: isError=%v %q %s", res.IsError, textOf(res), b)
	}
	if res := callTool(t, cs, ToolFindTools, map[string]any{"query": "echo", "format": "yaml"}, ""); !res.IsError || !strings.Contains(textOf(res), `format "yaml"`) {
		t.Errorf("bad format: isError=%v %q", res.IsError, textOf(res))
	}
	res = callTool(t, cs, ToolCallTool, map[string]any{"name": ToolRunProgram, "arguments": map[string]any{"source": "result = 2", "key": "viaCall"}}, "")
	if res.IsError {
		t.Fatalf("via %s: %q", ToolCallTool, textOf(res))
	}
	if u := ft.last(t); u.prog == nil || u.update.UpdateID != "prog-k-viaCall" {
		t.Fatalf("via %s: update %+v", ToolCallTool, u.update)
	}
	// Its inner arguments are checked as a direct call's are.
	res = callTool(t, cs, ToolCallTool, json.RawMessage(`{"name":"airlock_run_program","arguments":{"source":"a","source":"b"}}`), "")
	if !res.IsError || ft.count() != 1 {
		t.Fatalf("repeated inner source: isError=%v %q, %d updates", res.IsError, textOf(res), ft.count())
	}
}

// TestProgramsOff: without Options.Programs there is no such tool.
func TestProgramsOff(t *testing.T) {
	ft := &fakeTemporal{}
	g := newTestGateway(t, ft, Options{Principal: "alice", Catalog: CatalogSearch})
	cs := connectMemory(t, g)
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range res.Tools {
		if tool.Name == ToolRunProgram {
			t.Fatal("listed with programs off")
		}
	}
	if res := callTool(t, cs, ToolCallTool, map[string]any{"name": ToolRunProgram, "arguments": map[string]any{"source": "x"}}, ""); !res.IsError || ft.count() != 0 {
		t.Fatalf("via %s with programs off: isError=%v %q", ToolCallTool, res.IsError, textOf(res))
	}
}

// programAwait answers airlock_await of a program.
type programAwait struct {
	*fakeTemporal
	res api.ProgramResult
}

func (f programAwait) GetWorkflowUpdateHandle(o client.GetWorkflowUpdateHandleOptions) client.WorkflowUpdateHandle {
	return fakeHandle{val: f.res}
}

// TestRunProgramPendingAndAwait: a program past the inline wait is
// pending (naming its call waiting for approval), and airlock_await
// collects its result.
func TestRunProgramPendingAndAwait(t *testing.T) {
	exp := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	ft := &fakeTemporal{block: true,
		describe: func(string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
			return describedTask("alice", enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING), nil
		},
		queries: map[string]any{api.QueryApprovals: []api.ApprovalRequest{
			{ID: "t~other", CallID: "k-x", Tool: "counter__echo", Group: "ops", State: api.ApprovalPending, ExpiresAt: exp},
			{ID: "t~prog-k-p1/2", CallID: "prog-k-p1/2", Tool: "counter__echo", Group: "admins", Quorum: 1, State: api.ApprovalPending, ExpiresAt: exp},
		}}}
	fa := programAwait{fakeTemporal: ft, res: api.ProgramResult{ProgramID: "prog-k-p1", Outcome: api.ProgramOK, Result: json.RawMessage(`[1,2]`)}}
	g := newTestGatewayWith(t, fa, Options{Principal: "alice", InlineWait: 200 * time.Millisecond, Programs: &ProgramOptions{}})
	cs := connectMemory(t, g)
	res := callTool(t, cs, ToolRunProgram, map[string]any{"source": "x", "key": "p1"}, "")
	text := textOf(res)
	if res.IsError || !strings.Contains(text, "waits for approval of its call prog-k-p1/2 (counter__echo) by \"admins\"") || !strings.Contains(text, `{"call":"prog-k-p1","task":"`+res.Meta[MetaTask].(string)+`"}`) {
		t.Fatalf("pending: isError=%v %q", res.IsError, text)
	}
	if res.Meta[MetaCall] != "prog-k-p1" {
		t.Errorf("_meta %v", res.Meta)
	}
	got := callTool(t, cs, ToolAwait, map[string]any{"call": "prog-k-p1"}, "")
	if got.IsError || textOf(got) != "[1,2]" {
		t.Fatalf("await: isError=%v %q", got.IsError, textOf(got))
	}
}

// TestProgramDescriptionFigures measures airlock_run_program's
// description for the example configuration's tools (airlock.yaml:
// manifests/examples: the npm filesystem and memory servers' real
// schemas, captured in testdata/programs, and the native tools'
// manifest schemas) against the full tools/list JSON of the same tools.
func TestProgramDescriptionFigures(t *testing.T) {
	g := New(Options{Principal: "alice", Programs: &ProgramOptions{}})
	var defs []*mcp.Tool
	add := func(server string, tool *mcp.Tool) {
		def := *tool
		def.Name = server + "__" + tool.Name
		defs = append(defs, &def)
		g.mu.Lock()
		g.tools[def.Name] = &toolEntry{exposed: def.Name, server: server, upstream: tool.Name, def: &def}
		g.mu.Unlock()
	}
	load := func(name string) *manifests.Manifest {
		m, err := manifests.Load(filepath.Join("..", "manifests", "examples", name+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, server := range []string{"filesystem", "memory"} {
		m := load(server)
		for _, tool := range fixtureTools(t, server) {
			// As buildEntries: the manifest's description, if any, is shown.
			if d := m.Tools[tool.Name]; d != nil && d.Description != "" {
				tool.Description = d.Description
			}
			add(server, tool)
		}
	}
	native := load("native")
	for name, decl := range native.Tools {
		if decl.WASM == nil {
			t.Fatalf("native tool %s has no wasm block", name)
		}
		add(native.Server.Name, &mcp.Tool{Name: name, Description: decl.Description, InputSchema: decl.WASM.InputSchema})
	}
	desc := g.programDescription(nil)
	stubs := strings.Join(g.programStubs(g.programTable(nil, g.open)), "\n")
	full, _ := json.Marshal(defs)
	t.Logf("%d tools: stubs %d bytes; description (rules %d + stubs) %d bytes; full tools/list JSON %d bytes", len(defs), len(stubs), len(ProgramRules), len(desc), len(full))
	if !strings.Contains(desc, stubs) || len(desc) > DefaultProgramDescriptionBytes {
		t.Errorf("the example configuration's stubs (%d bytes) should fit the default description bound %d", len(desc), DefaultProgramDescriptionBytes)
	}
	if len(stubs) >= len(full)/2 {
		t.Errorf("stubs %d bytes, full list %d: want stubs well under half", len(stubs), len(full))
	}
}

func TestStatusOfAProgram(t *testing.T) {
	exp := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	ft := &fakeTemporal{
		describe: func(string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
			return describedTask("alice", enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING), nil
		},
		queries: map[string]any{
			api.QueryStatus: api.Status{TaskID: "t", InFlight: []string{"k-other", "prog-k-p1/3", "prog-k-p10/1"},
				Recent: []api.CallRecord{{CallID: "prog-k-p1/1", Tool: "counter__echo", Outcome: api.OutcomeOK}, {CallID: "k-p1/1", Tool: "x", Outcome: api.OutcomeOK}}},
			api.QueryApprovals: []api.ApprovalRequest{{ID: "t~prog-k-p1/2", CallID: "prog-k-p1/2", Tool: "counter__echo", Group: "admins", Quorum: 1, State: api.ApprovalPending, ExpiresAt: exp}},
		}}
	_, cs := programGateway(t, ft, Options{})
	callTool(t, cs, ToolRunProgram, map[string]any{"source": "x", "key": "p1"}, "") // the task exists
	got := textOf(callTool(t, cs, ToolStatus, map[string]any{"call": "prog-k-p1"}, ""))
	for _, want := range []string{"call prog-k-p1/2 (counter__echo) waits for approval by \"admins\"", "call prog-k-p1/3 is running", "call prog-k-p1/1 (counter__echo): ok"} {
		if !strings.Contains(got, want) {
			t.Errorf("status %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "k-other") || strings.Contains(got, "p10") || strings.Contains(got, "(x)") {
		t.Errorf("status %q shows calls of no such program", got)
	}
}

// BenchmarkProgramDescription: the description is made at each
// tools/list, for a catalog of 500 tools (it overflows the default bound,
// so this is also the cost of finding that out).
func BenchmarkProgramDescription(b *testing.B) {
	g := New(Options{Principal: "alice", Programs: &ProgramOptions{}})
	fs := fixtureTools(b, "filesystem")
	for i := range 500 {
		def := *fs[i%len(fs)]
		def.Name = fmt.Sprintf("server%d__%s", i/len(fs), def.Name)
		g.tools[def.Name] = &toolEntry{exposed: def.Name, server: "s", upstream: def.Name, def: &def}
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = g.programDescription(nil)
	}
}

// TestProgramStubCache: an entry keeps its stub's tail across a Refresh
// that finds the same definition, and a changed definition makes a new
// one.
func TestProgramStubCache(t *testing.T) {
	g := newTestGateway(t, &fakeTemporal{}, Options{Principal: "alice", Programs: &ProgramOptions{}})
	first := g.programDescription(nil)
	g.Refresh()
	g.mu.Lock()
	tail := g.tools["counter__echo"].stubTail
	g.tools["counter__echo"] = &toolEntry{exposed: "counter__echo", server: "counter", upstream: "echo",
		def: &mcp.Tool{Name: "counter__echo", Description: "Changed.", InputSchema: json.RawMessage(`{"properties":{"n":{"type":"integer"}}}`)}}
	g.mu.Unlock()
	if !strings.HasPrefix(tail, "() -> any  # [unavailable") || !strings.Contains(first, "counter.echo"+tail) {
		t.Fatalf("tail after Refresh %q; description %q", tail, first)
	}
	if d := g.programDescription(nil); !strings.Contains(d, "counter.echo(n: int = None) -> any  # Changed.") {
		t.Fatalf("description after the definition changed: %q", d)
	}
}

// TestRunProgramTableTooLarge: a caller who may call so many tools that
// the request could not be recorded is told so, and nothing is sent.
func TestRunProgramTableTooLarge(t *testing.T) {
	ft := &fakeTemporal{}
	g, cs := programGateway(t, ft, Options{})
	g.mu.Lock()
	for i := range 6000 {
		name := fmt.Sprintf("server%04d__a_tool_with_a_rather_long_name_%04d", i/100, i)
		g.tools[name] = &toolEntry{exposed: name, server: name[:10], upstream: name[12:], def: &mcp.Tool{Name: name, InputSchema: map[string]any{"type": "object"}}}
	}
	g.mu.Unlock()
	res := callTool(t, cs, ToolRunProgram, map[string]any{"source": "result = 1"}, "")
	if !res.IsError || !strings.Contains(textOf(res), "table of 6001 tools are more than the 1048576 bytes") || ft.count() != 0 {
		t.Fatalf("isError=%v %q, %d updates", res.IsError, textOf(res), ft.count())
	}
}

// TestRunProgramTableKeepsToTheTokensScopes: a tool the token's scopes do
// not cover (tool_scopes: counter__* needs counter:call) is no function of
// its program, nor in the description; with the scope it is.
func TestRunProgramTableKeepsToTheTokensScopes(t *testing.T) {
	o := newOAuthGatewayWith(t, Options{Programs: &ProgramOptions{}})
	run := func(scope string) (api.ProgramRequest, string) {
		t.Helper()
		c := o.p.Claims("alice")
		c["scope"] = scope
		cs, err := connectHTTP(o.url, &headerRT{h: map[string]string{"Authorization": "Bearer " + o.p.Sign(t, c)}})
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		list, err := cs.ListTools(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var desc string
		for _, tool := range list.Tools {
			if tool.Name == ToolRunProgram {
				desc = tool.Description
			}
		}
		if res := callTool(t, cs, ToolRunProgram, map[string]any{"source": "result = 1"}, ""); res.IsError {
			t.Fatalf("scope %q: %q", scope, textOf(res))
		}
		return *o.ft.last(t).prog, desc
	}
	weak, desc := run("openid")
	if len(weak.Tools) != 0 || strings.Contains(desc, "counter.echo") || weak.Principal != "alice@corp" {
		t.Errorf("without counter:call: tools %+v, principal %q, description %q", weak.Tools, weak.Principal, desc)
	}
	strong, desc := run("openid counter:call")
	if len(strong.Tools) != 1 || !strings.Contains(desc, "counter.echo(") {
		t.Errorf("with counter:call: tools %+v, description %q", strong.Tools, desc)
	}
}
