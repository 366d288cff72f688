package gateway

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestRequestState checks that the requestState of an input-required
// result resumes only the call it names, for its own task and caller, and
// only when a gateway with the same session key issued it.
func TestRequestState(t *testing.T) {
	key := []byte(NewSessionKey())
	g := New(Options{SessionKey: key})
	other := New(Options{SessionKey: key})
	stranger := New(Options{})
	asks := []*ask{{id: "ask-1", req: &mcp.ElicitParams{Message: "name?"}}, {id: "ask-2", req: &mcp.ElicitParams{Message: "age?"}, key: []byte("k")}}
	res := g.inputRequired("task-1", "call-1", "alice", "x", asks)
	if len(res.InputRequests) != 2 || res.Content != nil || res.RequestState == "" {
		t.Fatalf("input-required result: %+v", res)
	}
	answers := mcp.InputResponseMap{"ask-1": &mcp.ElicitResult{Action: "accept"}, "ask-2": &mcp.ElicitResult{Action: "decline"}}
	reqFor := func(tool, state string, ans mcp.InputResponseMap) *mcp.CallToolRequest {
		return &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: tool, RequestState: state, InputResponses: ans}}
	}
	req := func(state string, ans mcp.InputResponseMap) *mcp.CallToolRequest { return reqFor("x", state, ans) }

	// Another replica with the same key resumes the same call; the key of
	// the request that waits in another process travels in the state.
	s, err := other.resumeState(req(res.RequestState, answers), "task-1", "alice")
	if err != nil || s.Call != "call-1" || len(s.Asks) != 2 || string(s.Keys["ask-2"]) != "k" || s.Keys["ask-1"] != nil {
		t.Fatalf("resumeState on another replica: %+v, %v", s, err)
	}
	if s, err := g.resumeState(req("", nil), "task-1", "alice"); s != nil || err != nil {
		t.Errorf("a call without requestState resumed %+v (%v)", s, err)
	}

	for _, c := range []struct {
		name            string
		gw              *Gateway
		tool            string
		state           string
		ans             mcp.InputResponseMap
		task, principal string
		want            string
	}{
		{"another key", stranger, "x", res.RequestState, answers, "task-1", "alice", "not issued by this gateway"},
		{"altered", g, "x", strings.Replace(res.RequestState, ".", "x.", 1), answers, "task-1", "alice", "not issued by this gateway"},
		{"another task", g, "x", res.RequestState, answers, "task-2", "alice", "another task or caller"},
		{"another caller", g, "x", res.RequestState, answers, "task-1", "mallory", "another task or caller"},
		{"an answer missing", g, "x", res.RequestState, mcp.InputResponseMap{"ask-1": answers["ask-1"]}, "task-1", "alice", `no answer for "ask-2"`},
		{"answers without state", g, "x", "", answers, "task-1", "alice", "without requestState"},
		// Issue 25: replayed under another tool's name, it resumed the
		// original call.
		{"another tool", g, "y", res.RequestState, answers, "task-1", "alice", `issued for a call of "x", not "y"`},
		{"the await of the call", g, "airlock_await", res.RequestState, answers, "task-1", "alice", `issued for a call of "x", not "airlock_await"`},
	} {
		_, err := c.gw.resumeState(reqFor(c.tool, c.state, c.ans), c.task, c.principal)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one saying %q", c.name, err, c.want)
		}
		if c.want == "not issued by this gateway" && !errors.Is(err, errBadAskState) {
			t.Errorf("%s: err %v is not errBadAskState", c.name, err)
		}
	}

	// An answer for a request that no longer waits is an error the client
	// can act on, not a silent drop.
	if err := g.deliverAnswers(req(res.RequestState, answers), &askState{Task: "task-1", Call: "call-1", Asks: []string{"ask-1"}}); err == nil ||
		!strings.Contains(err.Error(), "no longer waits") {
		t.Errorf("deliverAnswers to a request that does not wait: %v", err)
	}
}

// TestAnswerFindsItsTask checks that a stateless request answering an
// input-required result, naming no task, resumes in the task its
// requestState names — only for the principal it was issued to, and only
// when this gateway's key signed it. (Each stateless request naming no
// task gets a task of its own, so without this the answer landed in a
// fresh task and the call ran twice.)
func TestAnswerFindsItsTask(t *testing.T) {
	key := []byte(NewSessionKey())
	g := New(Options{SessionKey: key})
	stranger := New(Options{})
	res := g.inputRequired("task-1", "call-1", "alice", "x", []*ask{{id: "ask-1", req: &mcp.ElicitParams{Message: "name?"}}})
	req := func(state string) *mcp.CallToolRequest {
		return &mcp.CallToolRequest{
			Params: &mcp.CallToolParamsRaw{Name: "x", RequestState: state, InputResponses: mcp.InputResponseMap{"ask-1": &mcp.ElicitResult{Action: "accept"}}},
			Extra:  &mcp.RequestExtra{Header: http.Header{}},
		}
	}
	tr, err := g.resolveTask(req(res.RequestState), "alice", taskHint{})
	if err != nil || tr.id != "task-1" {
		t.Fatalf("answer of alice: task %q, %v; want task-1", tr.id, err)
	}
	for _, c := range []struct {
		name, principal, state string
		gw                     *Gateway
	}{
		{"another principal", "mallory", res.RequestState, g},
		{"another gateway's key", "alice", res.RequestState, stranger},
		{"altered", "alice", strings.Replace(res.RequestState, ".", "x.", 1), g},
		{"trailing bytes", "alice", res.RequestState + "AA", g},
	} {
		tr, err := c.gw.resolveTask(req(c.state), c.principal, taskHint{})
		if err != nil || tr.id == "task-1" {
			t.Errorf("%s: task %q, %v; want a task of its own", c.name, tr.id, err)
		}
	}
}
