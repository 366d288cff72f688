package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/manifests"
)

// A reloaded configuration adds a server (it connects and its tools are
// reported) and removes one: the removed server takes no new call, finishes
// the call it was running, then stops.
func TestApplyAddsAndDrains(t *testing.T) {
	t.Parallel() // its own pool and servers; waits on processes
	fa, fb := newStdioFiles(t), newStdioFiles(t)
	var changed atomic.Value // last server reported
	opts := testOptions()
	opts.OnToolsChanged = func(s string) { changed.Store(s) }
	a := stdioServer(t, "a", fa, nil)
	p := startPool(t, []manifests.Server{a}, opts)
	waitState(t, p, "a", StateConnected)

	ch := p.Apply([]manifests.Server{a, stdioServer(t, "b", fb, nil)}, 0)
	if !slices.Equal(ch.Added, []string{"b"}) || len(ch.Removed)+len(ch.Replaced) != 0 {
		t.Fatalf("changes %+v, want b added", ch)
	}
	st := waitState(t, p, "b", StateConnected)
	if !slices.Contains(toolNames(st.Tools), "echo") {
		t.Fatalf("b's tools %v", toolNames(st.Tools))
	}
	testenv.WaitFor(t, "b's tools to be reported", hang, func() bool { s, _ := changed.Load().(string); return s == "b" })
	res, err := p.CallTool(context.Background(), "b", "echo", json.RawMessage(`{"text":"hi"}`))
	if err != nil || resultText(res) != "hi" {
		t.Fatalf("call on the added server: %v %v", res, err)
	}

	// A call in flight on a, then a is removed.
	done := make(chan error, 1)
	go func() {
		_, err := p.CallTool(context.Background(), "a", "slow", json.RawMessage(`{"ms":1500}`))
		done <- err
	}()
	testenv.WaitFor(t, "the slow call to start", hang, func() bool { return len(readLines(fa.slow)) > 0 })
	pidA := lastPID(t, fa.pid)
	ch = p.Apply([]manifests.Server{stdioServer(t, "b", fb, nil)}, 0)
	// stdioServer gives each call its own Dir: b's configuration changed.
	if !slices.Equal(ch.Removed, []string{"a"}) || !slices.Equal(ch.Replaced, []string{"b"}) {
		t.Fatalf("changes %+v, want a removed and b replaced", ch)
	}
	if _, err := p.CallTool(context.Background(), "a", "echo", json.RawMessage(`{"text":"x"}`)); !errors.Is(err, ErrNotSent) {
		t.Fatalf("new call on the removed server: err %v, want ErrNotSent", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the call in flight on the removed server: %v, want it to finish", err)
	}
	testenv.WaitFor(t, "a's process to exit", hang, func() bool { return processGone(pidA) })
	waitState(t, p, "b", StateConnected)
	if got := p.Statuses(); len(got) != 1 || got[0].Server != "b" {
		t.Fatalf("statuses %+v, want b only", got)
	}
}
