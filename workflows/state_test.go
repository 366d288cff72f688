package workflows

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/activities"
	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/plans"
)

func stateReq(id, tool, args string) api.CallRequest {
	return api.CallRequest{CallID: id, Tool: tool, Server: api.StateServer, UpstreamTool: strings.TrimPrefix(tool, "airlock_"),
		Arguments: json.RawMessage(args), Spec: api.SpecFor(nil)}
}

// stateCalls sends each request one second after the previous and returns
// their results (by index) once the workflow has run.
func (h *harness) stateCalls(reqs ...api.CallRequest) []api.CallResult {
	out := make([]api.CallResult, len(reqs))
	for i, r := range reqs {
		h.callAt(time.Duration(i+1)*time.Second, r, &out[i], nil)
	}
	return out
}

func (h *harness) rollbackAt(d time.Duration, id string, res *api.RollbackResult) {
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(api.UpdateRollback, id, &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) { h.t.Errorf("rollback rejected: %v", err) },
			OnComplete: func(v any, err error) {
				if err != nil {
					h.t.Errorf("rollback failed: %v", err)
					return
				}
				*res = v.(api.RollbackResult)
			},
		}, api.RollbackRequest{By: "test"})
	}, d)
}

func (h *harness) statusAt(d time.Duration, st *api.Status) {
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(api.QueryStatus)
		if err == nil {
			err = v.Get(st)
		}
		if err != nil {
			h.t.Errorf("status: %v", err)
		}
	}, d)
}

// structured is a state call's structuredContent.
func structured(t *testing.T, r api.CallResult) map[string]any {
	t.Helper()
	var m struct {
		S map[string]any `json:"structuredContent"`
	}
	if err := json.Unmarshal(r.Result, &m); err != nil || m.S == nil {
		t.Fatalf("result %s of %s (%s: %s) has no structuredContent", r.Result, r.CallID, r.Outcome, r.Reason)
	}
	return m.S
}

func TestStateSetGetDelete(t *testing.T) {
	h := newHarness(t)
	res := h.stateCalls(
		stateReq("s1", api.ToolStateSet, `{"key":"checklist","value":["a", "b"]}`),
		stateReq("s2", api.ToolStateSet, `{"key":"step","value":2}`),
		stateReq("g1", api.ToolStateGet, `{"key":"checklist"}`),
		stateReq("d1", api.ToolStateDelete, `{"key":"step"}`),
		stateReq("g2", api.ToolStateGet, `{}`),
		stateReq("g3", api.ToolStateGet, `{"key":"step"}`),
		stateReq("n1", api.ToolStateSet, `{"key":"nothing","value":null}`),
	)
	var st api.Status
	h.statusAt(20*time.Second, &st)
	h.finishAt(time.Minute)
	out := h.run(baseInput())
	for _, r := range res {
		if r.Outcome != api.OutcomeOK || r.Decision == nil || r.Decision.Check != checkState || r.Decision.Effect != "allow" {
			t.Fatalf("%s: %s %s %+v", r.CallID, r.Outcome, r.Reason, r.Decision)
		}
	}
	if got := structured(t, res[2])["value"]; !jsonEqual(got, []any{"a", "b"}) {
		t.Errorf("get checklist = %v", got)
	}
	if got := structured(t, res[4])["state"]; !jsonEqual(got, map[string]any{"checklist": []any{"a", "b"}}) {
		t.Errorf("get whole state = %v", got)
	}
	if got := structured(t, res[5])["found"]; got != false {
		t.Errorf("get of a deleted key: found = %v", got)
	}
	if string(st.TaskState) != `{"checklist":["a","b"],"nothing":null}` {
		t.Errorf("status TaskState = %s", st.TaskState)
	}
	if h.tools.calls() != 0 || len(h.policy.seen) != 0 {
		t.Errorf("state calls reached an upstream (%d) or the policy (%d)", h.tools.calls(), len(h.policy.seen))
	}
	if out.Calls != len(res) {
		t.Errorf("calls = %d, want %d (each state call is a call of the task)", out.Calls, len(res))
	}
	// Three changes, three compensations (a delete of a missing key or a
	// get pushes none).
	if len(st.Compensations) != 4 {
		t.Errorf("%d compensations pending, want 4 (three sets and a delete): %+v", len(st.Compensations), st.Compensations)
	}
}

func jsonEqual(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

func TestStateRefusals(t *testing.T) {
	schema := `{"type":"object","properties":{"step":{"type":"integer"}},"required":["step"]}`
	tests := []struct {
		name      string
		cfg       *api.StateConfig
		first     string // a set that succeeds first, or ""
		req       api.CallRequest
		check     string
		reasonHas string
	}{
		{"over the size limit", &api.StateConfig{MaxBytes: 40}, "",
			stateReq("x", api.ToolStateSet, `{"key":"notes","value":"`+strings.Repeat("n", 50)+`"}`), checkStateSize, "more than its limit of 40 (task.state.max_bytes)"},
		{"default size limit", nil, "",
			stateReq("x", api.ToolStateSet, `{"key":"big","value":"`+strings.Repeat("n", api.DefaultStateMaxBytes)+`"}`), checkStateSize, "more than its limit of 65536"},
		{"schema type", &api.StateConfig{Schema: json.RawMessage(schema)}, "",
			stateReq("x", api.ToolStateSet, `{"key":"step","value":"two"}`), checkStateSchema, "would not match its schema"},
		{"schema required key deleted", &api.StateConfig{Schema: json.RawMessage(schema)}, `{"key":"step","value":1}`,
			stateReq("x", api.ToolStateDelete, `{"key":"step"}`), checkStateSchema, "would not match its schema"},
		{"set without value", nil, "", stateReq("x", api.ToolStateSet, `{"key":"a"}`), checkStateArgs, "value is required"},
		{"set key and document", nil, "", stateReq("x", api.ToolStateSet, `{"key":"a","value":1,"document":{}}`), checkStateArgs, "not both"},
		{"document not an object", nil, "", stateReq("x", api.ToolStateSet, `{"document":[1]}`), checkStateArgs, "must be a JSON object"},
		{"unknown argument", nil, "", stateReq("x", api.ToolStateSet, `{"key":"a","val":1}`), checkStateArgs, `unknown field "val"`},
		{"delete without key", nil, "", stateReq("x", api.ToolStateDelete, `{}`), checkStateArgs, "takes a key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			in := baseInput()
			in.State = tc.cfg
			var first, res api.CallResult
			var st api.Status
			if tc.first != "" {
				h.callAt(time.Second, stateReq("first", api.ToolStateSet, tc.first), &first, nil)
			}
			h.callAt(2*time.Second, tc.req, &res, nil)
			h.statusAt(3*time.Second, &st)
			h.finishAt(time.Minute)
			h.run(in)
			if tc.first != "" && first.Outcome != api.OutcomeOK {
				t.Fatalf("first set: %s %s", first.Outcome, first.Reason)
			}
			if res.Outcome != api.OutcomeDenied || res.Decision == nil || res.Decision.Check != tc.check || !strings.Contains(res.Reason, tc.reasonHas) {
				t.Fatalf("got %s %q %+v; want denied by %s saying %q", res.Outcome, res.Reason, res.Decision, tc.check, tc.reasonHas)
			}
			wantCompensations := 0
			if tc.first != "" {
				wantCompensations = 1
			}
			if len(st.Compensations) != wantCompensations {
				t.Errorf("a refused change pushed a compensation: %+v", st.Compensations)
			}
			if tc.first == "" && st.TaskState != nil {
				t.Errorf("a refused change changed the state: %s", st.TaskState)
			}
		})
	}
}

func TestStateRollbackRestoresPreviousValues(t *testing.T) {
	h := newHarness(t)
	h.stateCalls(
		stateReq("s1", api.ToolStateSet, `{"key":"a","value":1}`),
		stateReq("s2", api.ToolStateSet, `{"key":"b","value":"x"}`),
	)
	var mid api.Status
	h.statusAt(3*time.Second, &mid)
	// A rollback now undoes both; then new values, a delete and a whole
	// document, undone by a second rollback down to the first's result.
	var rb1, rb2 api.RollbackResult
	h.rollbackAt(4*time.Second, "rb1", &rb1)
	var after1 api.Status
	h.statusAt(5*time.Second, &after1)
	reqs := []api.CallRequest{
		stateReq("s3", api.ToolStateSet, `{"key":"a","value":10}`),
		stateReq("s4", api.ToolStateSet, `{"key":"a","value":11}`),
		stateReq("d1", api.ToolStateDelete, `{"key":"a"}`),
		stateReq("s5", api.ToolStateSet, `{"document":{"z":true}}`),
	}
	res := make([]api.CallResult, len(reqs))
	for i, r := range reqs {
		h.callAt(time.Duration(6+i)*time.Second, r, &res[i], nil)
	}
	var before2 api.Status
	h.statusAt(11*time.Second, &before2)
	h.rollbackAt(12*time.Second, "rb2", &rb2)
	var after2 api.Status
	h.statusAt(13*time.Second, &after2)
	h.finishAt(time.Minute)
	h.run(baseInput())

	if string(mid.TaskState) != `{"a":1,"b":"x"}` {
		t.Fatalf("before the rollback: %s", mid.TaskState)
	}
	if rb1.State != api.StateRolledBack || len(rb1.Compensated) != 2 || rb1.Compensated[0].Compensation.Tool != api.ToolStateRestore {
		t.Fatalf("rollback 1: %+v", rb1)
	}
	if string(after1.TaskState) != `{}` {
		t.Errorf("after rollback 1 the state is %s, want {} (both keys were new)", after1.TaskState)
	}
	for _, r := range res {
		if r.Outcome != api.OutcomeOK {
			t.Fatalf("%s: %s %s", r.CallID, r.Outcome, r.Reason)
		}
	}
	if string(before2.TaskState) != `{"z":true}` {
		t.Fatalf("before rollback 2: %s", before2.TaskState)
	}
	if rb2.State != api.StateRolledBack || len(rb2.Compensated) != 4 {
		t.Fatalf("rollback 2: %+v", rb2)
	}
	if string(after2.TaskState) != `{}` {
		t.Errorf("after rollback 2 the state is %s, want {}", after2.TaskState)
	}
	if h.tools.calls() != 0 {
		t.Errorf("a state compensation reached an upstream (%d calls)", h.tools.calls())
	}
}

func TestStateSurvivesContinueAsNew(t *testing.T) {
	h := newHarness(t)
	in := baseInput()
	in.Limits.ContinueAsNewAfter = 2
	in.State = &api.StateConfig{MaxBytes: 1000}
	h.stateCalls(
		stateReq("s1", api.ToolStateSet, `{"key":"done","value":["plan"]}`),
		stateReq("s2", api.ToolStateSet, `{"key":"done","value":["plan","write"]}`),
	)
	next := h.continued(in)
	if string(next.Carried.State) != `{"done":["plan","write"]}` || next.State == nil || next.State.MaxBytes != 1000 {
		t.Fatalf("carried state %s, config %+v", next.Carried.State, next.State)
	}

	// The next run reads it, and its rollback restores across the runs.
	h2 := newHarness(t)
	var got api.CallResult
	var rb api.RollbackResult
	var after api.Status
	h2.callAt(time.Second, stateReq("g1", api.ToolStateGet, `{"key":"done"}`), &got, nil)
	h2.rollbackAt(2*time.Second, "rb", &rb)
	h2.statusAt(3*time.Second, &after)
	h2.finishAt(time.Minute)
	next.Limits.ContinueAsNewAfter = 100
	h2.run(next)
	if v := structured(t, got)["value"]; !jsonEqual(v, []any{"plan", "write"}) {
		t.Fatalf("get after continue-as-new: %v", v)
	}
	if rb.State != api.StateRolledBack || len(rb.Compensated) != 2 || string(after.TaskState) != `{}` {
		t.Fatalf("rollback after continue-as-new: %+v, state %s", rb, after.TaskState)
	}
}

// TestPlanReadsAndSetsState runs a plan whose steps set the task's state
// and read it back with ${{ state.x }}, prepared by the worker's own
// PrepareStep (the plan is loaded and validated as `airlock run` does).
func TestPlanReadsAndSetsState(t *testing.T) {
	p, err := plans.Parse("state.yaml", []byte(`name: remember
steps:
  - id: start
    tool: airlock_state_set
    args: {key: dir, value: /srv/x}
  - id: copy
    tool: airlock_state_set
    args: {key: readme, value: "${{ state.dir }}/README.md"}
  - id: read
    tool: airlock_state_get
    when: has(state.readme)
    args: {key: readme}
`))
	if err != nil {
		t.Fatal(err)
	}
	if probs := p.Validate([]string{"fs__write"}); len(probs) > 0 {
		t.Fatalf("plan problems: %v", probs)
	}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(Plan, workflow.RegisterOptions{Name: api.PlanName})
	env.RegisterActivityWithOptions((&activities.Activities{}).PrepareStep, activity.RegisterOptions{Name: api.PrepareStepName})
	env.ExecuteWorkflow(api.PlanName, api.PlanInput{TaskID: "plan-1", Principal: "alice", Limits: api.Limits{MaxCalls: 10}, Plan: p,
		State: &api.StateConfig{MaxBytes: 1000}})
	var out api.TaskResult
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	v, err := env.QueryWorkflow(api.QueryStatus)
	if err != nil {
		t.Fatal(err)
	}
	var st api.Status
	if err := v.Get(&st); err != nil {
		t.Fatal(err)
	}
	if out.State != api.StateCompleted || stepStates(st)[2] != "read=ok" {
		t.Fatalf("plan %s, steps %v", out.State, stepStates(st))
	}
	if string(st.TaskState) != `{"dir":"/srv/x","readme":"/srv/x/README.md"}` {
		t.Fatalf("plan's state %s", st.TaskState)
	}
}
