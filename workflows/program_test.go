package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/wasm/program/wire"
)

// useRunner makes r this test's program runner.
func useRunner(t *testing.T, r ProgramRunner) {
	UseProgramRunner(r)
	t.Cleanup(func() { UseProgramRunner(nil) })
}

func progTools() []api.ProgramTool {
	spec := api.ToolSpec{Timeout: time.Minute, Idempotent: true,
		Retry: api.RetrySpec{MaxAttempts: 3, InitialInterval: time.Second, Backoff: 2, MaxInterval: 10 * time.Second}}
	mk := func(fn string) api.ProgramTool {
		return api.ProgramTool{Name: "fs__" + fn, Module: "fs", Function: fn, Server: "fs", UpstreamTool: fn, Spec: spec}
	}
	return []api.ProgramTool{mk("delete"), mk("read"), mk("write")}
}

func progReq(id, src string) api.ProgramRequest {
	return api.ProgramRequest{ProgramID: id, Source: src, Principal: "alice", Tools: progTools(), Limits: api.DefaultProgramLimits}
}

// programAt sends a run_program Update at d; it stores its result or its
// rejection.
func (h *harness) programAt(d time.Duration, r api.ProgramRequest, res *api.ProgramResult, rejected *error) {
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(api.UpdateRunProgram, r.ProgramID, &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) {
				if rejected == nil {
					h.t.Errorf("program %s rejected: %v", r.ProgramID, err)
					return
				}
				*rejected = err
			},
			OnComplete: func(v any, err error) {
				if err != nil {
					h.t.Errorf("program %s failed: %v", r.ProgramID, err)
					return
				}
				if res != nil {
					*res = v.(api.ProgramResult)
				}
			},
		}, r)
	}, d)
}

func callIDs(cs []api.ProgramCall) []string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s %s line %d %s", c.CallID, c.Tool, c.Line, c.Outcome))
	}
	return out
}

func TestProgramCallsGoThroughThePipeline(t *testing.T) {
	// Each tool answers with the path it was given; /a with structured
	// content too.
	echo := func(in api.CallToolInput) (api.CallToolOutput, error) {
		var a struct{ Path string }
		_ = json.Unmarshal(in.Arguments, &a)
		if a.Path == "/a" {
			return okOutput(`{"content":[{"type":"text","text":"/a"}],"structuredContent":{"n":1}}`), nil
		}
		return okOutput(`{"content":[{"type":"text","text":"` + a.Path + `"}]}`), nil
	}
	h := newHarness(t, echo, echo, echo, echo, echo)
	r := &testenv.ScriptRunner{}
	useRunner(t, r)
	var observed []string
	ObservePrograms(func(outcome string, calls int, steps int64, d time.Duration) {
		observed = append(observed, fmt.Sprintf("%s %d calls %v", outcome, calls, d))
	})
	t.Cleanup(func() { ObservePrograms(nil) })
	var res api.ProgramResult
	req := progReq("p1", "call fs__read {\"path\":\"/a\"}\ncall fs__read {\"path\":\"/b\"}\n\ncall fs__write {\"path\":\"/c\"}\npar fs__read {\"path\":\"/d\"} ; fs__read {\"path\":\"/e\"}")
	req.Limits.MemoryBytes = 32 << 20
	h.programAt(time.Second, req, &res, nil)
	// The same program again (a retry with its ID): answered from the
	// task, not run or observed again.
	var again api.ProgramResult
	h.programAt(time.Minute, req, &again, nil)
	h.finishAt(time.Hour)
	out := h.run(baseInput())
	if again.Outcome != api.ProgramOK || string(again.Result) != string(res.Result) {
		t.Errorf("the retry got %+v, want the first result %s", again, res.Result)
	}

	if res.Outcome != api.ProgramOK || res.ProgramID != "p1" {
		t.Fatalf("result %+v", res)
	}
	if got, want := string(res.Result), `[{"n":1},"/b","/c","/d","/e"]`; got != want {
		t.Errorf("result %s, want %s (structured content, else the text)", got, want)
	}
	want := []string{"p1/1 fs__read line 1 ok", "p1/2 fs__read line 2 ok", "p1/3 fs__write line 4 ok", "p1/4 fs__read line 5 ok", "p1/5 fs__read line 5 ok"}
	if got := callIDs(res.Calls); !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}
	// Every call was judged by policy, under its program call ID, and ran.
	var judged, ran []string
	for _, in := range h.policy.seen {
		judged = append(judged, in.CallID+" "+in.Tool+" "+string(in.Arguments))
	}
	for _, in := range h.tools.seen {
		ran = append(ran, in.CallID)
	}
	wantJudged := []string{`p1/1 fs__read {"path":"/a"}`, `p1/2 fs__read {"path":"/b"}`, `p1/3 fs__write {"path":"/c"}`, `p1/4 fs__read {"path":"/d"}`, `p1/5 fs__read {"path":"/e"}`}
	// The parallel pair runs in the order the workflow schedules their
	// coroutines; the program gets their values by call ID all the same.
	slices.Sort(judged[3:])
	slices.Sort(ran[3:])
	if !slices.Equal(judged, wantJudged) {
		t.Errorf("policy judged %q, want %q", judged, wantJudged)
	}
	if !slices.Equal(ran, []string{"p1/1", "p1/2", "p1/3", "p1/4", "p1/5"}) {
		t.Errorf("tools ran %q", ran)
	}
	if out.Calls != 5 || out.State != api.StateFinished {
		t.Errorf("task %+v", out)
	}
	// Observed once, where it ended (the test environment's clock does
	// not move while the calls run).
	if want := []string{"ok 5 calls 0s"}; !slices.Equal(observed, want) {
		t.Errorf("observed %q, want %q", observed, want)
	}
	// The request reached the runner whole: tools, limits, memory cap.
	reqs, memory := r.Requests()
	if len(reqs) != 1 || memory[0] != 32<<20 || len(reqs[0].Tools) != 3 || reqs[0].Tools[2] != (wire.Tool{Name: "fs__write", Module: "fs", Function: "write"}) ||
		reqs[0].Limits.MaxSteps != api.DefaultProgramLimits.MaxSteps || reqs[0].ProgramID != "p1" {
		t.Errorf("runner got %+v, memory %v", reqs, memory)
	}
}

func TestProgramDeniedCall(t *testing.T) {
	h := newHarness(t)
	h.policy.decide = func(in api.DecideInput) (api.Verdict, error) {
		if in.Tool == "fs__delete" {
			return api.Verdict{Effect: api.Deny, Check: api.CheckRule, Rule: "no-deletes", Reason: "denied by rule no-deletes"}, nil
		}
		return api.Verdict{Effect: api.Allow, Check: api.CheckDefault}, nil
	}
	useRunner(t, &testenv.ScriptRunner{})
	var failed, caught api.ProgramResult
	h.programAt(time.Second, progReq("p1", "call fs__read {}\ncall fs__delete {\"path\":\"/a\"}\ncall fs__read {}"), &failed, nil)
	h.programAt(time.Minute, progReq("p2", "try fs__delete {}\ncall fs__read {}"), &caught, nil)
	h.finishAt(time.Hour)
	h.run(baseInput())

	if failed.Outcome != api.ProgramError || failed.Line != 2 || !strings.Contains(failed.Error, "denied by rule no-deletes") {
		t.Fatalf("p1 %+v", failed)
	}
	if got := callIDs(failed.Calls); !slices.Equal(got, []string{"p1/1 fs__read line 1 ok", "p1/2 fs__delete line 2 denied"}) {
		t.Errorf("p1 calls %q", got)
	}
	if failed.Calls[1].Reason != "denied by rule no-deletes" || failed.Result != nil {
		t.Errorf("p1 %+v", failed)
	}
	if caught.Outcome != api.ProgramOK || string(caught.Result) != `[{"outcome":"denied"},"default"]` {
		t.Errorf("p2 %+v (%s)", caught, caught.Result)
	}
	if h.tools.calls() != 2 {
		t.Errorf("tools ran %d times, want 2 (the denied calls never)", h.tools.calls())
	}
}

// writeApprovals makes the approval harness ask for approval of writes
// only.
func writeApprovals(h *approvalHarness) {
	h.policy.decide = func(in api.DecideInput) (api.Verdict, error) {
		if in.Tool == "fs__write" {
			return api.Verdict{Effect: api.RequireApproval, Check: api.CheckDefault, Group: "ops", Quorum: 1, Version: "pv1"}, nil
		}
		return api.Verdict{Effect: api.Allow, Check: api.CheckDefault, Version: "pv1"}, nil
	}
}

func TestProgramWaitsForApprovalMidProgram(t *testing.T) {
	spec := ops("bob")
	spec.Timeout = 24 * time.Hour
	h := newApprovalHarness(t, spec, 1)
	writeApprovals(h)
	useRunner(t, &testenv.ScriptRunner{})
	var res api.ProgramResult
	args := `{"path":"/a"}`
	req := progReq("p1", "call fs__read {}\ncall fs__write "+args+"\ncall fs__read {}")
	req.Limits.Timeout = 8 * time.Hour
	h.programAt(time.Second, req, &res, nil)
	var st api.Status
	h.statusAt(time.Hour, &st)
	var dres api.DecideResult
	var drej error
	dr := api.DecideRequest{RequestID: "task-1~p1/2", Approver: "bob", Approve: true, Via: "test",
		Digest: api.RequestDigest("task-1", "p1/2", "fs__write", []byte(args), "pv1")}
	h.decideAt(5*time.Hour, "click-1", dr, &dres, &drej)
	h.finishAt(6 * time.Hour)
	in := baseInput()
	in.Limits.IdleTimeout = 2 * time.Hour // the program's wait keeps the task busy
	out := h.run(in)

	if dres.State != api.ApprovalApproved {
		t.Fatalf("decide %+v (%v); program %+v; status %+v", dres, drej, res, st)
	}
	if res.Outcome != api.ProgramOK || len(res.Calls) != 3 || res.Calls[1].Outcome != api.OutcomeOK {
		t.Fatalf("program %+v", res)
	}
	if len(st.Programs) != 1 || st.Programs[0].ProgramID != "p1" || st.Programs[0].Calls != 2 || !slices.Equal(st.InFlight, []string{"p1/2"}) {
		t.Errorf("status while waiting: programs %+v in flight %q", st.Programs, st.InFlight)
	}
	if len(h.notes.posts) != 1 || h.notes.posts[0].Program != "p1" || h.notes.posts[0].Line != 2 || h.notes.posts[0].CallID != "p1/2" {
		t.Errorf("approval notice %+v", h.notes.posts)
	}
	if out.State != api.StateFinished || h.tools.calls() != 3 {
		t.Errorf("task %+v, tools ran %d", out, h.tools.calls())
	}
}

func TestProgramLimits(t *testing.T) {
	t.Run("calls", func(t *testing.T) {
		h := newHarness(t)
		useRunner(t, &testenv.ScriptRunner{})
		var res api.ProgramResult
		req := progReq("p1", "call fs__read {}\ncall fs__read {}\ncall fs__read {}")
		req.Limits.MaxCalls = 2
		h.programAt(time.Second, req, &res, nil)
		h.finishAt(time.Hour)
		h.run(baseInput())
		if res.Outcome != api.ProgramLimit || res.Line != 3 || !strings.Contains(res.Error, "limit of 2 tool calls (Limits.MaxCalls)") ||
			!strings.Contains(res.Error, "ask for less (fields, filters, pages)") {
			t.Fatalf("result %+v", res)
		}
		if got := callIDs(res.Calls); !slices.Equal(got, []string{"p1/1 fs__read line 1 ok", "p1/2 fs__read line 2 ok", "p1/3 fs__read line 3 limit"}) {
			t.Errorf("calls %q", got)
		}
		if h.tools.calls() != 2 || len(h.policy.seen) != 2 {
			t.Errorf("tools ran %d, policy judged %d; want 2 (the third never started)", h.tools.calls(), len(h.policy.seen))
		}
	})
	t.Run("data", func(t *testing.T) {
		big := `{"content":[{"type":"text","text":"` + strings.Repeat("x", 1000) + `"}]}`
		h := newHarness(t, respond(okOutput(big), nil))
		useRunner(t, &testenv.ScriptRunner{})
		var res api.ProgramResult
		req := progReq("p1", "call fs__read {\"path\":\"/a\"}\ncall fs__read {\"path\":\"/b\"}")
		req.Limits.MaxDataBytes = 1000
		h.programAt(time.Second, req, &res, nil)
		h.finishAt(time.Hour)
		h.run(baseInput())
		if res.Outcome != api.ProgramLimit || res.Line != 2 || !strings.Contains(res.Error, "limit of 1000 bytes of arguments and results (Limits.MaxDataBytes") ||
			!strings.Contains(res.Error, "ask for less") {
			t.Fatalf("result %+v", res)
		}
		if h.tools.calls() != 1 {
			t.Errorf("tools ran %d, want 1", h.tools.calls())
		}
	})
	t.Run("arguments alone", func(t *testing.T) {
		h := newHarness(t)
		useRunner(t, &testenv.ScriptRunner{})
		var res api.ProgramResult
		req := progReq("p1", `call fs__read {"path":"`+strings.Repeat("y", 200)+`"}`)
		req.Limits.MaxDataBytes = 100
		h.programAt(time.Second, req, &res, nil)
		h.finishAt(time.Hour)
		h.run(baseInput())
		if res.Outcome != api.ProgramLimit || h.tools.calls() != 0 || len(h.policy.seen) != 0 {
			t.Fatalf("result %+v, tools ran %d", res, h.tools.calls())
		}
	})
}

func TestProgramTimeoutStopsItAndCancelsItsCall(t *testing.T) {
	spec := ops("bob")
	spec.Timeout = 24 * time.Hour
	h := newApprovalHarness(t, spec, 1)
	writeApprovals(h)
	useRunner(t, &testenv.ScriptRunner{})
	var res api.ProgramResult
	req := progReq("p1", "call fs__read {}\ncall fs__write {}\ncall fs__read {}")
	req.Limits.Timeout = time.Hour
	h.programAt(time.Second, req, &res, nil)
	h.finishAt(3 * time.Hour)
	in := baseInput()
	in.Limits.IdleTimeout = 5 * time.Hour
	h.run(in)
	if res.Outcome != api.ProgramLimit || !strings.Contains(res.Error, "timeout of 1h0m0s (Limits.Timeout)") {
		t.Fatalf("result %+v", res)
	}
	if len(res.Calls) != 2 || res.Calls[1].Outcome != api.OutcomeCancelled {
		t.Errorf("calls %+v: the write waiting for approval must be cancelled", res.Calls)
	}
	if h.tools.calls() != 1 {
		t.Errorf("tools ran %d, want 1", h.tools.calls())
	}
}

func TestProgramStopSignal(t *testing.T) {
	spec := ops("bob")
	spec.Timeout = 24 * time.Hour
	h := newApprovalHarness(t, spec, 1)
	writeApprovals(h)
	useRunner(t, &testenv.ScriptRunner{})
	var res, other api.ProgramResult
	h.programAt(time.Second, progReq("p1", "call fs__write {}\ncall fs__read {}"), &res, nil)
	h.programAt(2*time.Second, progReq("p2", "call fs__read {}"), &other, nil)
	var bare api.ProgramResult
	h.programAt(3*time.Second, progReq("p3", "call fs__write {}"), &bare, nil)
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(api.SignalStopProgram, api.StopProgram{ProgramID: "p1", By: "carol", Reason: "wrong repo"})
		h.env.SignalWorkflow(api.SignalStopProgram, "p3") // a program ID alone
		h.env.SignalWorkflow(api.SignalStopProgram, 42)   // neither: ignored
	}, 10*time.Minute)
	h.finishAt(time.Hour)
	h.run(baseInput())
	if res.Outcome != api.ProgramStopped || !strings.Contains(res.Error, "carol stopped the program: wrong repo") {
		t.Fatalf("result %+v", res)
	}
	if len(res.Calls) != 1 || res.Calls[0].Outcome != api.OutcomeCancelled {
		t.Errorf("calls %+v", res.Calls)
	}
	if bare.Outcome != api.ProgramStopped || bare.Error != "an operator stopped the program" {
		t.Errorf("p3 %+v", bare)
	}
	if other.Outcome != api.ProgramOK {
		t.Errorf("the other program %+v", other)
	}
	if h.tools.calls() != 1 {
		t.Errorf("tools ran %d, want 1 (p2's read)", h.tools.calls())
	}
}

func TestProgramAtomicRollsBackItsOwnCallsNewestFirst(t *testing.T) {
	h := newCompensationHarness(t)
	h.policy.decide = func(in api.DecideInput) (api.Verdict, error) {
		if in.Tool == "fs__delete" {
			return api.Verdict{Effect: api.Deny, Check: api.CheckRule, Rule: "no-deletes", Reason: "denied by rule no-deletes"}, nil
		}
		return api.Verdict{Effect: api.Allow, Check: api.CheckDefault}, nil
	}
	useRunner(t, &testenv.ScriptRunner{})
	h.callAt(time.Second, writeReq("c0"), nil, nil) // the task's own, before the program
	var res api.ProgramResult
	req := progReq("p1", "call fs__write {}\ncall fs__read {}\ncall fs__write {}\ncall fs__delete {}")
	req.Atomic = true
	h.programAt(time.Minute, req, &res, nil)
	var st api.Status
	h.statusAt(30*time.Minute, &st)
	h.finishAt(time.Hour)
	h.run(baseInput())

	if res.Outcome != api.ProgramError || !slices.Equal(res.RolledBack, []string{"p1/3", "p1/1"}) {
		t.Fatalf("result %+v", res)
	}
	seq := h.toolSeq()
	if got := seq[len(seq)-2:]; !slices.Equal(got, []string{`restore{"undo":"p1/3"}`, `restore{"undo":"p1/1"}`}) {
		t.Errorf("tools ran %q: want p1/3 then p1/1 undone last", seq)
	}
	if len(st.Compensations) != 1 || st.Compensations[0].CallID != "c0" {
		t.Errorf("pending compensations after the program: %+v; want c0's only", st.Compensations)
	}
}

func TestProgramNotAtomicKeepsItsCalls(t *testing.T) {
	h := newCompensationHarness(t)
	useRunner(t, &testenv.ScriptRunner{})
	var res api.ProgramResult
	h.programAt(time.Minute, progReq("p1", "call fs__write {}\nfail boom"), &res, nil)
	var st api.Status
	h.statusAt(30*time.Minute, &st)
	h.finishAt(time.Hour)
	h.run(baseInput())
	if res.Outcome != api.ProgramError || res.Error != "boom" || res.RolledBack != nil || len(st.Compensations) != 1 {
		t.Fatalf("result %+v, compensations %+v", res, st.Compensations)
	}
}

func TestProgramStoppedByTaskRollback(t *testing.T) {
	h := newCompensationHarness(t, respond(api.CallToolOutput{}, appErr(api.ErrTypeNotSent)))
	useRunner(t, &testenv.ScriptRunner{})
	var res api.ProgramResult
	// The first read retries after a second; the rollback arrives in the
	// meantime and waits for it; the program is stopped at its next call.
	h.programAt(time.Minute, progReq("p1", "call fs__read {}\ncall fs__write {}"), &res, nil)
	var rb api.RollbackResult
	h.rollbackAt(time.Minute+500*time.Millisecond, "rb-1", &rb)
	h.finishAt(time.Hour)
	h.run(baseInput())
	if res.Outcome != api.ProgramStopped || !strings.Contains(res.Error, "rolled back") || len(res.Calls) != 1 {
		t.Fatalf("result %+v", res)
	}
	if rb.State != api.RollbackNothing {
		t.Errorf("rollback %+v", rb)
	}
}

func TestProgramDuringContinueAsNew(t *testing.T) {
	// The program's first read retries after a second; after it, the run
	// has reached ContinueAsNewAfter and drains: a direct call is refused
	// for the next run, the program's calls are not, and the task
	// continues as new once the program has ended.
	h := newHarness(t, respond(api.CallToolOutput{}, appErr(api.ErrTypeNotSent)))
	useRunner(t, &testenv.ScriptRunner{})
	in := baseInput()
	in.Limits.ContinueAsNewAfter = 1
	var res api.ProgramResult
	var rejected error
	h.programAt(time.Second, progReq("p1", "call fs__read {}\ncall fs__read {}\ncall fs__read {}"), &res, nil)
	h.callAt(1500*time.Millisecond, req("c9", false), nil, &rejected)
	h.env.ExecuteWorkflow(api.AgentTaskName, in)
	var can *workflow.ContinueAsNewError
	if err := h.env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("want continue-as-new, got %v", err)
	}
	if res.Outcome != api.ProgramOK || len(res.Calls) != 3 {
		t.Fatalf("program %+v", res)
	}
	var appErr *temporal.ApplicationError
	if !errors.As(rejected, &appErr) || appErr.Type() != api.ErrTypeContinuingAsNew {
		t.Fatalf("direct call while draining: %v", rejected)
	}
	var next api.TaskInput
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatal(err)
	}
	if len(next.Carried.Programs) != 1 || next.Carried.Programs[0].ProgramID != "p1" || string(next.Carried.Programs[0].Result) != string(res.Result) {
		t.Fatalf("carried programs %+v", next.Carried.Programs)
	}

	// The next run answers p1 from what it carried, runs nothing for it,
	// and refuses a program whose calls it knows but whose result it
	// does not hold.
	h2 := newHarness(t)
	useRunner(t, &testenv.ScriptRunner{})
	var again, fresh api.ProgramResult
	h2.programAt(time.Second, progReq("p1", "call fs__write {}"), &again, nil)
	h2.programAt(2*time.Second, progReq("p2", "call fs__read {}"), &fresh, nil)
	h2.finishAt(time.Hour)
	next.Limits.ContinueAsNewAfter = 100
	h2.run(next)
	if again.Outcome != api.ProgramOK || string(again.Result) != string(res.Result) || len(again.Calls) != 3 {
		t.Fatalf("p1 again %+v", again)
	}
	if fresh.Outcome != api.ProgramOK || h2.tools.calls() != 1 {
		t.Fatalf("p2 %+v, tools ran %d (want 1: p2's)", fresh, h2.tools.calls())
	}

	h3 := newHarness(t)
	useRunner(t, &testenv.ScriptRunner{})
	var forgotten error
	lost, c := next, *next.Carried
	c.Programs = nil
	lost.Carried = &c
	h3.programAt(time.Second, progReq("p1", "call fs__read {}"), nil, &forgotten)
	h3.finishAt(time.Hour)
	h3.run(lost)
	if forgotten == nil || !strings.Contains(forgotten.Error(), "already ran in run 1 (") || h3.tools.calls() != 0 {
		t.Fatalf("a program the task no longer holds: %v, tools ran %d", forgotten, h3.tools.calls())
	}
	// The refusal names the run whose history holds the result, for the
	// gateway to read it there.
	var ran *temporal.ApplicationError
	var where api.Repeat
	if !errors.As(forgotten, &ran) || ran.Type() != api.ErrTypeProgramRanBefore || ran.Details(&where) != nil || where.Run != 1 || where.RunID == "" {
		t.Fatalf("the refusal %v (%T) names run %+v; want an %s naming run 1", forgotten, forgotten, where, api.ErrTypeProgramRanBefore)
	}
}

func TestCarriedProgramsKeepWithinBudget(t *testing.T) {
	tk := &task{in: api.TaskInput{TaskID: "task-1"}}
	for i := range programsKept + 4 {
		tk.programsDone = append(tk.programsDone, api.ProgramResult{ProgramID: fmt.Sprint("p", i), Outcome: api.ProgramOK,
			Result: json.RawMessage(`"` + strings.Repeat("r", 40<<10) + `"`)})
	}
	out := tk.carriedPrograms()
	if len(out) != programsKept || out[0].ProgramID != "p4" || out[len(out)-1].ProgramID != fmt.Sprint("p", programsKept+3) {
		t.Fatalf("carried %d programs, from %s", len(out), out[0].ProgramID)
	}
	kept := 0
	for _, r := range out {
		if r.Result != nil {
			kept++
		} else if !strings.Contains(r.Error, "too large to carry") || r.Outcome != api.ProgramOK {
			t.Errorf("dropped %+v", r)
		}
	}
	if kept != carryProgramBudget/(40<<10+2) || out[len(out)-1].Result == nil {
		t.Errorf("kept %d results; want the newest that fit", kept)
	}
}

func TestProgramValidator(t *testing.T) {
	other := progReq("p1", "call fs__read {}")
	other.Principal = "mallory"
	dupName := progReq("p2", "call fs__read {}")
	dupName.Tools = append(dupName.Tools[:2:2], dupName.Tools[1])
	dupName.Tools[2].Function = "read2"
	caseName := progReq("p3", "call fs__read {}")
	caseName.Tools = append([]api.ProgramTool{{Name: "fs__READ", Module: "fs", Function: "shout", Server: "fs", UpstreamTool: "read"}}, caseName.Tools...)
	caseFunc := progReq("p4", "call fs__read {}")
	caseFunc.Tools[0].Function = "READ"
	caseFunc.Tools[1].Function = "read"
	unsorted := progReq("p5", "call fs__read {}")
	unsorted.Tools[0], unsorted.Tools[1] = unsorted.Tools[1], unsorted.Tools[0]
	big := progReq("p6", strings.Repeat("#", 100))
	big.Limits.MaxSourceBytes = 99
	zero := progReq("p7", "call fs__read {}")
	zero.Limits.MaxDataBytes = 0
	noID := progReq("", "call fs__read {}")
	spaceID := progReq("p 8", "call fs__read {}")
	unrouted := progReq("p9", "call fs__read {}")
	unrouted.Tools[1].Server = ""
	badModule := progReq("p10", "call fs__read {}")
	badModule.Tools[1].Module = "fs.x"
	empty := progReq("p11", "  \n")
	longID := progReq(strings.Repeat("p", maxProgramIDBytes+1), "call fs__read {}")
	ctrlID := progReq("p\x0012", "call fs__read {}")
	listInputs := progReq("p13", "call fs__read {}")
	listInputs.Inputs = json.RawMessage(`[1]`)
	bigInputs := progReq("p14", "call fs__read {}")
	bigInputs.Inputs = json.RawMessage(`{"x":"` + strings.Repeat("a", api.MaxProgramInputBytes) + `"}`)
	keyword := progReq("p12", "call fs__read {}")
	keyword.Tools[1].Function = "pass"
	cases := []struct {
		req  api.ProgramRequest
		want string
	}{
		{other, "belongs to another principal"},
		{dupName, `tool "fs__read" is listed twice`},
		{caseFunc, `are both fs.read (Module.Function, case folded)`},
		{unsorted, "not sorted by Name"},
		{big, "the source is 100 bytes, more than the program's limit of 99 (Limits.MaxSourceBytes); send a shorter program"},
		{zero, "Limits.MaxDataBytes is 0; every limit must be positive"},
		{noID, "ProgramID is empty"},
		{spaceID, "holds a space"},
		{unrouted, "must have Name, Server and UpstreamTool"},
		{badModule, "must be identifiers"},
		{empty, "Source is empty"},
		{longID, "ProgramID is 201 bytes; keep it under 200"},
		{ctrlID, "holds a space or a control character"},
		{keyword, "a Starlark keyword cannot name a module or function"},
		{listInputs, "Inputs must be one JSON object"},
		{bigInputs, "Inputs are 1048584 bytes, more than the 1048576"},
	}
	// Names differing only in case are two tools, each with a function of
	// its own (the gateway names the later one fs.read_2).
	if err := checkProgramTools(caseName.Tools); err != nil {
		t.Errorf("tools differing only in case: %v; want them accepted", err)
	}
	h := newHarness(t)
	useRunner(t, &testenv.ScriptRunner{})
	errs := make([]error, len(cases))
	for i, c := range cases {
		id := c.req.ProgramID
		if id == "" {
			id = "noid"
		}
		i := i
		h.env.RegisterDelayedCallback(func() {
			h.env.UpdateWorkflow(api.UpdateRunProgram, id, &testsuite.TestUpdateCallback{
				OnAccept: func() { t.Errorf("case %d (%s) accepted", i, cases[i].want) }, OnReject: func(err error) { errs[i] = err },
				OnComplete: func(any, error) {},
			}, c.req)
		}, time.Duration(i+1)*time.Second)
	}
	h.finishAt(time.Hour)
	h.run(baseInput())
	for i, c := range cases {
		if errs[i] == nil || !strings.Contains(errs[i].Error(), c.want) {
			t.Errorf("case %d: rejection %v; want it to say %q", i, errs[i], c.want)
		}
	}
	if h.tools.calls() != 0 || len(h.policy.seen) != 0 {
		t.Error("a rejected program ran a call")
	}
}

func TestProgramRefusedWithoutRunnerAndWhileFinishing(t *testing.T) {
	h := newHarness(t)
	var off, finishing error
	h.programAt(time.Second, progReq("p1", "call fs__read {}"), nil, &off)
	h.env.RegisterDelayedCallback(func() { useRunner(t, &testenv.ScriptRunner{}) }, 2*time.Second)
	// A call that retries keeps the task running while it finishes.
	h.tools.script = []func(api.CallToolInput) (api.CallToolOutput, error){respond(api.CallToolOutput{}, appErr(api.ErrTypeNotSent))}
	h.callAt(3*time.Second, req("c1", false), nil, nil)
	h.finishAt(3*time.Second + 100*time.Millisecond)
	h.programAt(3*time.Second+200*time.Millisecond, progReq("p2", "call fs__read {}"), nil, &finishing)
	h.run(baseInput())
	if off == nil || !strings.Contains(off.Error(), "code mode is not enabled on this worker") {
		t.Errorf("without a runner: %v", off)
	}
	var appErr *temporal.ApplicationError
	if !errors.As(finishing, &appErr) || appErr.Type() != api.ErrTypeFinishing {
		t.Errorf("while finishing: %v; want the call validator's %s", finishing, api.ErrTypeFinishing)
	}
}

func TestProgramRunnerErrorFailsTheWorkflowTask(t *testing.T) {
	h := newHarness(t)
	useRunner(t, &testenv.ScriptRunner{Err: errors.New("guest module did not load")})
	completed := false
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(api.UpdateRunProgram, "p1", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { t.Errorf("rejected: %v", err) },
			OnComplete: func(v any, err error) {
				if err == nil {
					completed = true
				}
			},
		}, progReq("p1", "call fs__read {}"))
	}, time.Second)
	h.finishAt(time.Hour)
	h.env.ExecuteWorkflow(api.AgentTaskName, baseInput())
	err := h.env.GetWorkflowError()
	var panicErr *temporal.PanicError
	if !errors.As(err, &panicErr) || !strings.Contains(panicErr.Error(), "the program runner failed: guest module did not load") {
		t.Fatalf("workflow error %v; want the workflow task to fail (a panic), not a recorded outcome", err)
	}
	if completed {
		t.Error("the program's Update completed with a result: a runner failure was recorded as its outcome")
	}
}

// A program's denied call under rollback_on_deny rolls the task back
// while the program waits for that call: the rollback must not wait for
// the program (it is in no inFlight), and the program is stopped.
func TestProgramRollbackOnDenyDoesNotDeadlock(t *testing.T) {
	h := newCompensationHarness(t)
	h.policy.decide = func(in api.DecideInput) (api.Verdict, error) {
		if in.Tool == "fs__delete" {
			return api.Verdict{Effect: api.Deny, Check: api.CheckRule, Rule: "no-deletes", Reason: "denied by rule no-deletes"}, nil
		}
		return api.Verdict{Effect: api.Allow, Check: api.CheckDefault}, nil
	}
	useRunner(t, &testenv.ScriptRunner{})
	var res api.ProgramResult
	h.programAt(time.Second, progReq("p1", "call fs__write {}\ncall fs__delete {}\ncall fs__read {}"), &res, nil)
	h.finishAt(time.Hour)
	in := baseInput()
	in.RollbackOnDeny = true
	out := h.run(in)
	if res.Outcome != api.ProgramStopped || !strings.Contains(res.Error, "rolled back") {
		t.Fatalf("result %+v", res)
	}
	if len(res.Calls) != 2 || res.Calls[1].Outcome != api.OutcomeDenied || !strings.Contains(res.Calls[1].Reason, "rollback_on_deny") {
		t.Errorf("calls %+v", res.Calls)
	}
	if seq := h.toolSeq(); seq[len(seq)-1] != `restore{"undo":"p1/1"}` {
		t.Errorf("tools ran %q; want p1/1 undone last", seq)
	}
	if out.State != api.StateFinished {
		t.Errorf("task %+v", out)
	}
}

// Finishing the task stops a running program at its next call; the task
// ends once the program (and the call it was running) has.
func TestProgramStoppedByFinish(t *testing.T) {
	h := newHarness(t, respond(api.CallToolOutput{}, appErr(api.ErrTypeNotSent)))
	useRunner(t, &testenv.ScriptRunner{})
	var res api.ProgramResult
	h.programAt(time.Second, progReq("p1", "call fs__read {}\ncall fs__read {}"), &res, nil)
	h.finishAt(1500 * time.Millisecond) // while the first read waits to retry
	out := h.run(baseInput())
	if res.Outcome != api.ProgramStopped || !strings.Contains(res.Error, "the task is finishing") {
		t.Fatalf("result %+v", res)
	}
	if len(res.Calls) != 1 || res.Calls[0].Outcome != api.OutcomeOK {
		t.Errorf("calls %+v: the running read finishes", res.Calls)
	}
	if out.State != api.StateFinished || out.Calls != 1 || h.tools.calls() != 2 {
		t.Errorf("task %+v, tools ran %d (the read and its retry)", out, h.tools.calls())
	}
}

// The recorded program histories are written in the Starlark the real
// interpreter runs; testenv.ScriptRunner plays that subset the same way.
func TestScriptRunnerPlaysStarlark(t *testing.T) {
	h := newHarness(t)
	useRunner(t, &testenv.ScriptRunner{})
	var res api.ProgramResult
	src := `# a comment
fs.read(path="/a", n=2)
parallel(lambda: fs.read(path="/b"), lambda: fs.write(path="/c", force=True))
attempt(fs.delete, path="/d")`
	h.programAt(time.Second, progReq("p1", src), &res, nil)
	h.finishAt(time.Hour)
	h.run(baseInput())
	if res.Outcome != api.ProgramOK {
		t.Fatalf("result %+v", res)
	}
	var got []string
	for _, in := range h.policy.seen {
		got = append(got, in.Tool+" "+string(in.Arguments))
	}
	slices.Sort(got[1:3])
	want := []string{`fs__read {"n":2,"path":"/a"}`, `fs__read {"path":"/b"}`, `fs__write {"force":true,"path":"/c"}`, `fs__delete {"path":"/d"}`}
	if !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}
}

// TestProgramCallWithRepeatedKeyIsRefused: a call whose arguments repeat
// a key (at any depth) or are not an object is refused by the host with
// the call's line, never judged or run: policy and the upstream could
// read different values (changeProgramArgs). The interpreter never sends
// them; a broken one could.
func TestProgramCallWithRepeatedKeyIsRefused(t *testing.T) {
	ok := func(api.CallToolInput) (api.CallToolOutput, error) {
		return okOutput(`{"content":[{"type":"text","text":"ran"}]}`), nil
	}
	h := newHarness(t, ok)
	useRunner(t, &testenv.ScriptRunner{})
	var res api.ProgramResult
	h.programAt(time.Second, progReq("p1", "try fs__write {\"path\":\"/ok\",\"path\":\"/secret\"}\ntry fs__write {\"a\":{\"b\":1,\"b\":2}}\ntry fs__write [1]\ncall fs__read {\"path\":\"/a\"}"), &res, nil)
	h.finishAt(time.Hour)
	h.run(baseInput())

	if res.Outcome != api.ProgramOK {
		t.Fatalf("result %+v", res)
	}
	want := []string{"p1/1 fs__write line 1 rejected", "p1/2 fs__write line 2 rejected", "p1/3 fs__write line 3 rejected", "p1/4 fs__read line 4 ok"}
	if got := callIDs(res.Calls); !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}
	for _, c := range res.Calls[:2] {
		if !strings.Contains(c.Reason, "appears more than once") || !strings.Contains(c.Reason, "Nothing ran") {
			t.Errorf("%s: reason %q, want the repeated key named", c.CallID, c.Reason)
		}
	}
	if !strings.Contains(res.Calls[2].Reason, "not a JSON object") {
		t.Errorf("p1/3: reason %q", res.Calls[2].Reason)
	}
	// Only the sound call was judged and ran.
	if len(h.policy.seen) != 1 || h.policy.seen[0].CallID != "p1/4" || len(h.tools.seen) != 1 {
		t.Errorf("judged %d, ran %d; want only p1/4", len(h.policy.seen), len(h.tools.seen))
	}
}
