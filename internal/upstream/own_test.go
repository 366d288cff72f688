package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/airlock-run/airlock/internal/testenv"
)

// TestOwnSession checks that a call with Own hooks to an HTTP upstream
// gets what the upstream sends during it (its elicitation, log message and
// progress) while another call to the same upstream is in flight, where a
// call on the shared session has its elicitation refused (TestCallHooks).
func TestOwnSession(t *testing.T) {
	release, holding := make(chan struct{}), make(chan struct{}, 1)
	p := askPool(t, release, holding)
	ctx := context.Background()

	held := make(chan error, 1)
	go func() {
		_, err := p.CallTool(ctx, "ask", "hold", json.RawMessage(`{}`))
		held <- err
	}()
	<-holding
	defer func() {
		close(release)
		if err := <-held; err != nil {
			t.Error(err)
		}
	}()
	var own recorder
	h := own.hooks("tok-own")
	h.Own = true
	res, err := p.CallTool(WithHooks(ctx, h), "ask", "ask", json.RawMessage(`{}`))
	if err != nil || res.IsError || resultText(res) != "tok-own ada" {
		t.Fatalf("ask on its own session beside another call: %v %+v, want the elicitation answered", err, res)
	}
	testenv.WaitFor(t, "the log message and progress of the call on its own session", hang, func() bool {
		own.mu.Lock()
		defer own.mu.Unlock()
		return len(own.logs) == 1 && own.logs[0] == "asking" && len(own.progress) == 1
	})

	// A tool that is not there is not sent.
	if _, err := p.CallTool(WithHooks(ctx, h), "ask", "nope", json.RawMessage(`{}`)); !errors.Is(err, ErrNotSent) {
		t.Errorf("an unknown tool on its own session: %v, want ErrNotSent", err)
	}
}
