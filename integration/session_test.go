package integration

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/manifests"
)

// TestSessions covers how MCP sessions map to tasks: reattaching with the
// Airlock-Task header, refusing bad or ended tasks, stateless clients, and
// idempotency keys.
func TestSessions(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end test; skipped with -short")
	}
	log := filepath.Join(t.TempDir(), "effects.log")
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{testupstreamManifest(t, log)}})
	waitTools(t, s.connect(t, nil), "counter__echo", "counter__append")

	t.Run("reattach with header", func(t *testing.T) {
		hdr := map[string]string{gateway.HeaderTask: "t-reattach"}
		first := s.connect(t, hdr)
		r1 := call(t, first, "counter__echo", map[string]any{"text": "one"}, "")
		if got := r1.Meta[gateway.MetaTask]; got != "t-reattach" || r1.IsError {
			t.Fatalf("first client: task %v isError=%v %q, want task t-reattach", got, r1.IsError, text(r1))
		}
		if err := first.Close(); err != nil {
			t.Fatalf("closing the first client: %v", err)
		}

		second := s.connect(t, hdr)
		if got := second.InitializeResult().Meta[gateway.MetaTask]; got != "t-reattach" {
			t.Errorf("initialize _meta %q = %v, want t-reattach", gateway.MetaTask, got)
		}
		r2 := call(t, second, "counter__echo", map[string]any{"text": "two"}, "")
		if got := r2.Meta[gateway.MetaTask]; got != "t-reattach" || r2.IsError {
			t.Fatalf("second client: task %v isError=%v %q, want task t-reattach", got, r2.IsError, text(r2))
		}

		st := taskStatus(t, s, "t-reattach")
		if st.Calls != 2 {
			t.Fatalf("task t-reattach has %d calls, want 2 (one per client)", st.Calls)
		}
		var ids []string
		for _, r := range st.Recent {
			ids = append(ids, r.CallID)
		}
		for _, r := range []*mcp.CallToolResult{r1, r2} {
			if id, _ := r.Meta[gateway.MetaCall].(string); !slices.Contains(ids, id) {
				t.Errorf("call %q is not in the task's recent calls %v", id, ids)
			}
		}
	})

	t.Run("invalid header", func(t *testing.T) {
		cs, err := tryConnect(s.url, map[string]string{gateway.HeaderTask: "bad id!"})
		if err == nil {
			// Connecting may succeed if the client does not initialize;
			// then the call must fail naming the header.
			defer cs.Close()
			res := call(t, cs, "counter__echo", map[string]any{"text": "x"}, "")
			if !res.IsError || !strings.Contains(text(res), gateway.HeaderTask) {
				t.Fatalf("call with header %q: isError=%v %q, want an error naming %s", "bad id!", res.IsError, text(res), gateway.HeaderTask)
			}
			return
		}
		if !strings.Contains(err.Error(), gateway.HeaderTask) || !strings.Contains(err.Error(), "bad id!") {
			t.Fatalf("connect error %q does not name the header %s and its value", err, gateway.HeaderTask)
		}
	})

	t.Run("ended task cannot be reattached", func(t *testing.T) {
		hdr := map[string]string{gateway.HeaderTask: "t-ended"}
		cs := s.connect(t, hdr)
		if res := call(t, cs, "counter__echo", map[string]any{"text": "x"}, ""); res.IsError {
			t.Fatalf("counter__echo: %s", text(res))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.client.SignalWorkflow(ctx, "t-ended", "", api.SignalFinish, nil); err != nil {
			t.Fatal(err)
		}
		var tr api.TaskResult
		if err := s.client.GetWorkflow(ctx, "t-ended", "").Get(ctx, &tr); err != nil {
			t.Fatalf("waiting for t-ended to finish: %v", err)
		}
		if tr.State != api.StateFinished {
			t.Fatalf("t-ended ended %q, want %q", tr.State, api.StateFinished)
		}

		// A new client naming the task is refused.
		if cs2, err := tryConnect(s.url, hdr); err == nil {
			cs2.Close()
			t.Fatal("connecting to an ended task succeeded")
		} else if !strings.Contains(err.Error(), "has ended") || !strings.Contains(err.Error(), "t-ended") {
			t.Fatalf("connect error %q does not say task t-ended has ended", err)
		}
		// The session still attached to it gets a clear error, and the
		// call does not start a new run under the same ID.
		res := call(t, cs, "counter__echo", map[string]any{"text": "late"}, "")
		if !res.IsError || !strings.Contains(text(res), "has ended") {
			t.Fatalf("call in an ended task: isError=%v %q, want a 'has ended' error", res.IsError, text(res))
		}
	})

	t.Run("stateless clients", func(t *testing.T) {
		h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.gw.Server() },
			&mcp.StreamableHTTPOptions{Stateless: true})
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)

		named := connectStateless(t, srv.URL, map[string]string{gateway.HeaderTask: "t-stateless"})
		for _, msg := range []string{"a", "b"} {
			res := call(t, named, "counter__echo", map[string]any{"text": msg}, "")
			if got := res.Meta[gateway.MetaTask]; got != "t-stateless" || res.IsError || text(res) != msg {
				t.Fatalf("stateless call with header: task %v isError=%v %q, want task t-stateless", got, res.IsError, text(res))
			}
		}
		anon := connectStateless(t, srv.URL, nil)
		res := call(t, anon, "counter__echo", map[string]any{"text": "c"}, "")
		anonTask, _ := res.Meta[gateway.MetaTask].(string)
		if !strings.HasPrefix(anonTask, "task-") || res.IsError {
			t.Fatalf("stateless call without header: task %v isError=%v %q, want a task of its own", anonTask, res.IsError, text(res))
		}
		if st := taskStatus(t, s, "t-stateless"); st.Calls != 2 {
			t.Errorf("t-stateless has %d calls, want 2", st.Calls)
		}
		if st := taskStatus(t, s, anonTask); st.Calls != 1 || st.Principal != "tester" {
			t.Errorf("%s: %d calls, principal %q; want 1 call by tester", anonTask, st.Calls, st.Principal)
		}
	})

	t.Run("idempotency key", func(t *testing.T) {
		cs := s.connect(t, nil)
		args := map[string]any{"key": "same-key"}
		r1 := call(t, cs, "counter__append", args, "idem-1")
		r2 := call(t, cs, "counter__append", args, "idem-1")
		if r1.IsError || r2.IsError {
			t.Fatalf("append: %q / %q", text(r1), text(r2))
		}
		if n := sideEffects(t, log, "append", "same-key"); n != 1 {
			t.Fatalf("append ran %d times for two calls with one idempotency key, want 1", n)
		}
		if a, b := mustJSON(t, r1), mustJSON(t, r2); a != b {
			t.Fatalf("the retry's result differs:\nfirst %s\nretry %s", a, b)
		}

		args = map[string]any{"key": "other-key"}
		r3 := call(t, cs, "counter__append", args, "idem-2")
		r4 := call(t, cs, "counter__append", args, "idem-3")
		if r3.IsError || r4.IsError {
			t.Fatalf("append: %q / %q", text(r3), text(r4))
		}
		if n := sideEffects(t, log, "append", "other-key"); n != 2 {
			t.Fatalf("append ran %d times for two calls with different idempotency keys, want 2", n)
		}
	})
}

// TestTaskCallLimit: a task stops at task.max_calls with an error the model
// can act on.
func TestTaskCallLimit(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end test; skipped with -short")
	}
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{testupstreamManifest(t, filepath.Join(t.TempDir(), "effects.log"))}, maxCalls: 2})
	cs := s.connect(t, nil)
	waitTools(t, cs, "counter__echo")
	for i := range 2 {
		if res := call(t, cs, "counter__echo", map[string]any{"text": "x"}, ""); res.IsError {
			t.Fatalf("call %d: %s", i+1, text(res))
		}
	}
	res := call(t, cs, "counter__echo", map[string]any{"text": "x"}, "")
	if !res.IsError || !strings.Contains(text(res), "limit of 2 tool calls") {
		t.Fatalf("third call: isError=%v %q, want an error about the limit of 2 tool calls", res.IsError, text(res))
	}
}

// tryConnect is connectURL that returns the error instead of failing.
func tryConnect(url string, headers map[string]string) (*mcp.ClientSession, error) {
	hc := &http.Client{Transport: headerRT{headers: headers}}
	c := mcp.NewClient(&mcp.Implementation{Name: "airlock-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: 1}, sessionProtocol)
}

func taskStatus(t *testing.T, s *stack, taskID string) api.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := s.client.QueryWorkflow(ctx, taskID, "", api.QueryStatus)
	if err != nil {
		t.Fatalf("status of %s: %v", taskID, err)
	}
	var st api.Status
	if err := v.Get(&st); err != nil {
		t.Fatal(err)
	}
	return st
}
