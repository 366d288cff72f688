package integration

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/manifests"
)

// TestAwaitWaitingWhenAsked (issue 25, medium 7): a 2026-07-28
// airlock_await that is already waiting when the call's upstream elicits
// answers input-required within its timeout_seconds, and answering it
// (an airlock_await with inputResponses and the requestState) lets the
// call finish with the elicited value. Before the fix the await never
// answered and the upstream's request was lost.
func TestAwaitWaitingWhenAsked(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t, "./integration/testupstream")
	y := "server:\n  name: counter\n  protocol_version: \"2025-11-25\"\n  stdio:\n    command: " + bin + "\ntools:\n" +
		"  ask_later: {side_effects: [none], data_access_level: public, risk: low, idempotent: true, elicitation: allow}\n"
	m, err := manifests.Parse(filepath.Join(t.TempDir(), "counter.yaml"), []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if ps := m.Validate(); len(ps) > 0 {
		t.Fatalf("manifest: %v", ps)
	}
	for _, split := range []bool{false, true} {
		name := "worker in the gateway's process"
		if split {
			name = "worker in another process"
		}
		t.Run(name, func(t *testing.T) {
			s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, inlineWait: 6 * time.Second, askTimeout: 2 * time.Minute, split: split})
			waitTools(t, s.connect(t, nil), "counter__ask_later")
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			c := mcp.NewClient(&mcp.Implementation{Name: "airlock-await-ask-test", Version: "1"},
				&mcp.ClientOptions{MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true}})
			hc := &http.Client{Transport: headerRT{headers: map[string]string{"Authorization": "Bearer " + testKey, gateway.HeaderTask: "await-waiting"}}}
			cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.url, HTTPClient: hc}, &mcp.ClientSessionOptions{ProtocolVersion: gateway.StatelessProtocol})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()

			// The call outlives its inline wait (6 s); the upstream asks
			// 7.5 s after it started, while an airlock_await (3 s) waits.
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "counter__ask_later",
				Arguments: map[string]any{"message": "who is awaiting?", "delay_ms": 7500}})
			if err != nil {
				t.Fatal(err)
			}
			call, _ := res.Meta[gateway.MetaCall].(string)
			if sc, _ := res.StructuredContent.(map[string]any); sc["status"] != "pending" || call == "" {
				t.Fatalf("want a pending result (the upstream asks after the inline wait), got %q %v", resultText(res), res.StructuredContent)
			}
			var asked *mcp.CallToolResult
			for asked == nil {
				res, err := awaitOnce(ctx, cs, &mcp.CallToolParams{Name: gateway.ToolAwait, Arguments: map[string]any{"call": call, "timeout_seconds": 3}})
				if err != nil {
					t.Fatalf("airlock_await: %v", err)
				}
				switch sc, _ := res.StructuredContent.(map[string]any); {
				case res.NeedsInput():
					asked = res
				case sc["status"] == "pending":
					// waited out before the upstream asked: wait again
				default:
					t.Fatalf("airlock_await answered %q (error %v) before the upstream's request was answered; want input-required", resultText(res), res.IsError)
				}
			}
			answers := mcp.InputResponseMap{}
			for id, r := range asked.InputRequests {
				if p, ok := r.(*mcp.ElicitParams); !ok || p.Message != "who is awaiting?" {
					t.Fatalf("input request %s: %#v, want the upstream's elicitation", id, r)
				}
				answers[id] = &mcp.ElicitResult{Action: "accept", Content: map[string]any{"username": "awaiter"}}
			}
			if len(answers) != 1 {
				t.Fatalf("%d input requests, want the upstream's one", len(answers))
			}
			args := map[string]any{"call": call, "timeout_seconds": 3}
			for {
				res, err := awaitOnce(ctx, cs, &mcp.CallToolParams{Name: gateway.ToolAwait, Arguments: args, InputResponses: answers, RequestState: asked.RequestState})
				if err != nil {
					t.Fatalf("airlock_await with the answer: %v", err)
				}
				if sc, _ := res.StructuredContent.(map[string]any); sc["status"] == "pending" {
					answers, asked = nil, &mcp.CallToolResult{} // delivered: wait for the result
					continue
				}
				if res.IsError || resultText(res) != "accept username:awaiter" {
					t.Fatalf("the call answered %q (error %v), want the upstream's answer with the elicited username", resultText(res), res.IsError)
				}
				break
			}
		})
	}
}

// awaitOnce calls airlock_await, which waits at most its timeout_seconds
// (3 s here): a minute without an answer is the hang of issue 25.
func awaitOnce(ctx context.Context, cs *mcp.ClientSession, p *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return cs.CallTool(ctx, p)
}
