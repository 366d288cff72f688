package activities

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/blob"
	"github.com/airlock-run/airlock/manifests"
)

func TestSpecUncoveredToolIsConservative(t *testing.T) {
	got := api.SpecFor(nil)
	want := api.ToolSpec{
		Timeout:          time.Minute,
		HeartbeatTimeout: 10 * time.Second,
		Retry:            api.RetrySpec{MaxAttempts: 3, InitialInterval: time.Second, MaxInterval: 30 * time.Second, Backoff: 2},
		Idempotent:       false,
		SideEffects:      []string{"write"},
		Risk:             "high",
		// Information-flow labels: an uncovered tool is assumed to
		// return restricted, untrusted content.
		DataLevel: "restricted",
		OpenWorld: true,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("SpecFor(nil) (-want +got):\n%s", diff)
	}
}

func TestSpecFromManifest(t *testing.T) {
	for _, tc := range []struct {
		name string
		decl *manifests.Tool
		want api.ToolSpec
	}{
		{
			name: "defaults",
			decl: &manifests.Tool{SideEffects: []manifests.SideEffect{manifests.SideEffectRead}, DataAccessLevel: manifests.DataPublic, Risk: manifests.RiskLow},
			want: api.ToolSpec{
				Timeout:          manifests.DefaultToolTimeout,
				HeartbeatTimeout: 10 * time.Second,
				Retry:            api.RetrySpec{MaxAttempts: 3, InitialInterval: time.Second, MaxInterval: 30 * time.Second, Backoff: 2},
				SideEffects:      []string{"read"},
				Risk:             "low",
				DataLevel:        "public",
			},
		},
		{
			name: "declared",
			decl: &manifests.Tool{
				SideEffects: []manifests.SideEffect{manifests.SideEffectWrite, manifests.SideEffectSend},
				Risk:        manifests.RiskCritical, Idempotent: true, DataAccessLevel: manifests.DataSensitive, OpenWorld: true,
				Timeout: manifests.Duration(5 * time.Minute), Cost: 4,
				Retry: &manifests.Retry{MaxAttempts: 7, InitialInterval: manifests.Duration(2 * time.Second),
					MaxInterval: manifests.Duration(time.Minute), Backoff: 1.5, NonRetryable: []string{"Rejected"}},
			},
			want: api.ToolSpec{
				Timeout:          5 * time.Minute,
				HeartbeatTimeout: 10 * time.Second,
				Retry: api.RetrySpec{MaxAttempts: 7, InitialInterval: 2 * time.Second, MaxInterval: time.Minute,
					Backoff: 1.5, NonRetryable: []string{"Rejected"}},
				Idempotent:  true,
				SideEffects: []string{"write", "send"},
				Risk:        "critical",
				Cost:        4,
				DataLevel:   "sensitive",
				OpenWorld:   true,
			},
		},
		{
			name: "short tool: shorter heartbeat timeout",
			decl: &manifests.Tool{SideEffects: []manifests.SideEffect{manifests.SideEffectRead}, Risk: manifests.RiskLow,
				Timeout: manifests.Duration(6 * time.Second)},
			want: api.ToolSpec{
				Timeout:          6 * time.Second,
				HeartbeatTimeout: 5 * time.Second,
				Retry:            api.RetrySpec{MaxAttempts: 3, InitialInterval: time.Second, MaxInterval: 30 * time.Second, Backoff: 2},
				SideEffects:      []string{"read"},
				Risk:             "low",
			},
		},
		{
			name: "declared heartbeat timeout",
			decl: &manifests.Tool{SideEffects: []manifests.SideEffect{manifests.SideEffectRead}, Risk: manifests.RiskLow,
				Timeout: manifests.Duration(time.Hour), HeartbeatTimeout: manifests.Duration(30 * time.Second)},
			want: api.ToolSpec{
				Timeout:          time.Hour,
				HeartbeatTimeout: 30 * time.Second,
				Retry:            api.RetrySpec{MaxAttempts: 3, InitialInterval: time.Second, MaxInterval: 30 * time.Second, Backoff: 2},
				SideEffects:      []string{"read"},
				Risk:             "low",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, api.SpecFor(tc.decl)); diff != "" {
				t.Fatalf("spec (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOversizedResultIsReplaced(t *testing.T) {
	a := &Activities{Tools: bigTools{}, MaxResultBytes: 1000}
	out, err := a.CallTool(context.Background(), api.CallToolInput{TaskID: "t", CallID: "c", Server: "s", Tool: "big", ExposedName: "s__big"})
	if err != nil {
		t.Fatal(err)
	}
	if !out.IsError || len(out.Result) > 1000 || !strings.Contains(string(out.Result), "s__big ran, but its result is") {
		t.Fatalf("result %d bytes, isError=%v: %.200s", len(out.Result), out.IsError, out.Result)
	}
	small, err := (&Activities{Tools: bigTools{}}).CallTool(context.Background(), api.CallToolInput{Server: "s", Tool: "big"})
	if err != nil || small.IsError || len(small.Result) < 5000 {
		t.Fatalf("under the default limit the result passes: %v %v %d", err, small.IsError, len(small.Result))
	}
}

type bigTools struct{}

func (bigTools) CallTool(context.Context, string, string, json.RawMessage) (*mcp.CallToolResult, error) {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("x", 5000)}}}, nil
}

// recordingTools returns a big result and remembers the arguments it got.
type recordingTools struct{ got *json.RawMessage }

func (r recordingTools) CallTool(_ context.Context, _, _ string, args json.RawMessage) (*mcp.CallToolResult, error) {
	*r.got = args
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("p", 100<<10)}}}, nil
}

func TestBlobStoreKeepsLargeValuesOutOfHistory(t *testing.T) {
	store, err := blob.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var got json.RawMessage
	a := &Activities{Tools: recordingTools{&got}, Blobs: store}
	// A large capture result goes to the store.
	out, err := a.CallTool(context.Background(), api.CallToolInput{TaskID: "t", CallID: "c1/capture", Server: "s", Tool: "read"})
	if err != nil || out.Result != nil || !strings.HasPrefix(out.ResultRef, blob.Prefix) {
		t.Fatalf("capture: %v, %d bytes inline, ref %q", err, len(out.Result), out.ResultRef)
	}
	if b, err := store.Get(context.Background(), out.ResultRef); err != nil || !strings.Contains(string(b), "ppp") {
		t.Fatalf("stored capture: %v", err)
	}
	// A large result of an ordinary call stays inline (the gateway needs it).
	out, err = a.CallTool(context.Background(), api.CallToolInput{TaskID: "t", CallID: "c2", Server: "s", Tool: "read"})
	if err != nil || out.ResultRef != "" || len(out.Result) < 100<<10 {
		t.Fatalf("ordinary call: %v ref %q, %d bytes", err, out.ResultRef, len(out.Result))
	}
	// Arguments by reference are loaded before the call.
	ref, _ := store.Put(context.Background(), []byte(`{"content":"restored"}`))
	if _, err := a.CallTool(context.Background(), api.CallToolInput{TaskID: "t", CallID: "undo-c1", Server: "s", Tool: "write", ArgumentsRef: ref}); err != nil {
		t.Fatal(err)
	}
	if string(got) != `{"content":"restored"}` {
		t.Fatalf("the tool got %s", got)
	}
	// A reference this worker cannot read: not sent, so it may be retried.
	_, err = a.CallTool(context.Background(), api.CallToolInput{CallID: "undo-c2", Server: "s", Tool: "write", ArgumentsRef: blob.Prefix + strings.Repeat("0", 64)})
	if !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("missing blob: %v", err)
	}
}

func TestHeartbeatEvery(t *testing.T) {
	for _, tc := range []struct {
		hb, configured, want time.Duration
	}{
		{hb: 10 * time.Second, want: 2500 * time.Millisecond},
		{hb: 2 * time.Second, configured: 5 * time.Second, want: 500 * time.Millisecond}, // the timeout wins
		{want: 2 * time.Second},
		{configured: time.Second, want: time.Second},
	} {
		if got := heartbeatEvery(tc.hb, tc.configured); got != tc.want {
			t.Errorf("heartbeatEvery(%s, %s) = %s, want %s", tc.hb, tc.configured, got, tc.want)
		}
		// The SDK sends at most one heartbeat per 0.8 × the timeout: one
		// must be waiting at each send.
		if tc.hb > 0 && heartbeatEvery(tc.hb, tc.configured) >= tc.hb*8/10 {
			t.Errorf("heartbeatEvery(%s, %s) is not well under 0.8 × the timeout", tc.hb, tc.configured)
		}
	}
}
