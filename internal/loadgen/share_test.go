package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func result(name string, elapsed time.Duration, samples ...time.Duration) *Result {
	r := &Result{Target: name, Sessions: 1, samples: samples, elapsed: elapsed}
	r.finish()
	return r
}

func ms64(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

// TestShareOf: airlock's share is through − floor at each percentile
// (negative when the floor measured slower), the same at p50 less the
// upstream's own p50 when direct was measured, and the throughput ratio;
// a floor with no calls gives a ratio of 0, not a division by zero.
func TestShareOf(t *testing.T) {
	direct := result("direct", time.Second, ms64(0.5), ms64(1))
	floor := result("floor", time.Second, ms64(6), ms64(8), ms64(30), ms64(40)) // 4/s
	through := result("airlock", time.Second, ms64(10), ms64(12), ms64(20))     // 3/s

	s := ShareOf(direct, floor, through)
	want := LatencyDelta{P50: ms64(12 - 8), P95: ms64(20 - 40), P99: ms64(20 - 40)}
	if s.OverFloor != want {
		t.Errorf("over the floor %+v, want %+v", s.OverFloor, want)
	}
	if s.OwnP50 == nil || *s.OwnP50 != ms64(4-0.5) {
		t.Errorf("own p50 %v, want 3.5ms", s.OwnP50)
	}
	if s.OfFloor != 0.75 {
		t.Errorf("of the floor %v, want 0.75", s.OfFloor)
	}

	if s := ShareOf(nil, floor, through); s.OwnP50 != nil {
		t.Errorf("without direct, own p50 %v, want none", *s.OwnP50)
	}
	empty := result("floor", 0)
	if s := ShareOf(nil, empty, through); s.OfFloor != 0 || s.OverFloor.P50 != through.Latency.P50 {
		t.Errorf("against an empty floor: %+v", s)
	}
}

// TestShareReport: the text table has the three columns and the share,
// signed; the JSON carries it in milliseconds and reads back the same.
func TestShareReport(t *testing.T) {
	direct := result("direct", time.Second, ms64(0.5))
	floor := result("floor", time.Second, ms64(6), ms64(6))
	through := result("airlock", time.Second, ms64(10))
	var buf bytes.Buffer
	WriteShare(&buf, direct, floor, through)
	for _, want := range []string{"direct", "floor", "airlock over floor", "+4.00 ms", "0.50×", "+3.50 ms without the upstream's own 0.500 ms", "one Temporal Update"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("%q missing from:\n%s", want, buf.String())
		}
	}
	buf.Reset()
	WriteShare(&buf, nil, through, floor) // the floor slower: a negative share
	if !strings.Contains(buf.String(), "-4.00 ms") || strings.Contains(buf.String(), "direct") || strings.Contains(buf.String(), "without the upstream") {
		t.Errorf("negative share without direct:\n%s", buf.String())
	}

	s := ShareOf(direct, floor, through)
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	wantJSON := map[string]any{"over_floor_ms": map[string]any{"p50": 4.0, "p95": 4.0, "p99": 4.0}, "own_p50_ms": 3.5, "calls_per_second_of_floor": 0.5}
	if diff := cmp.Diff(wantJSON, m); diff != "" {
		t.Errorf("JSON (-want +got):\n%s", diff)
	}
	var back Share
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.OverFloor != s.OverFloor || back.OfFloor != s.OfFloor || back.OwnP50 == nil || *back.OwnP50 != *s.OwnP50 {
		t.Errorf("JSON round trip: %s\n%+v", b, back)
	}
}

// fakeCaller is a session of a target with Open: it counts its calls and
// fails those failEvery names.
type fakeCaller struct {
	calls     *atomic.Int64
	failEvery int64
	inFlight  atomic.Int32
	overlap   *atomic.Bool
	closed    *atomic.Int32
}

func (c *fakeCaller) Call(context.Context) error {
	if c.inFlight.Add(1) > 1 {
		c.overlap.Store(true)
	}
	defer c.inFlight.Add(-1)
	n := c.calls.Add(1)
	if c.failEvery > 0 && n%c.failEvery == 0 {
		return errors.New("workflow update was aborted")
	}
	return nil
}

func (c *fakeCaller) Close() error { c.closed.Add(1); return nil }

// TestOpenTarget: a target with Open (the floor) is measured beside an MCP
// one in the same rounds: its sessions are opened once, each called back to
// back (never two calls at once on one), its errors counted as transport
// errors with their message, its sessions closed with the Bench. An Open
// that fails or returns the wrong number of sessions fails Open, naming the
// target, with what it did open closed.
func TestOpenTarget(t *testing.T) {
	u := newUpstream(t, "echo")
	var calls atomic.Int64
	var overlap atomic.Bool
	var closed atomic.Int32
	var opened int
	var mu sync.Mutex
	open := func(_ context.Context, n int) ([]Caller, error) {
		mu.Lock()
		opened++
		mu.Unlock()
		out := make([]Caller, n)
		for i := range out {
			out[i] = &fakeCaller{calls: &calls, failEvery: 10, overlap: &overlap, closed: &closed}
		}
		return out, nil
	}
	targets := []Target{{Name: "floor", Open: open}, {Name: "a", URL: u.url + "/a", Tool: "echo"}}
	rs, err := Run(context.Background(), targets, Options{Sessions: 4, Calls: 40, Warmup: 0, Rounds: 4})
	if err != nil {
		t.Fatal(err)
	}
	f := rs[0]
	if f.Calls != 40 || f.TransportErrors != 4 || f.OK != 36 || calls.Load() != 40 || opened != 1 {
		t.Errorf("floor: %d calls (%d made), %d transport errors, %d ok, opened %d times", f.Calls, calls.Load(), f.TransportErrors, f.OK, opened)
	}
	if len(f.Errors) != 1 || f.Errors[0].Message != "workflow update was aborted" || f.Errors[0].Count != 4 {
		t.Errorf("floor errors %+v", f.Errors)
	}
	if overlap.Load() {
		t.Error("two calls at once on one session")
	}
	if closed.Load() != 4 {
		t.Errorf("%d sessions closed, want 4", closed.Load())
	}
	if rs[1].Calls != 40 || rs[1].Errs() != 0 {
		t.Errorf("the MCP target beside it: %+v", rs[1])
	}

	closed.Store(0)
	short := func(_ context.Context, n int) ([]Caller, error) {
		return []Caller{&fakeCaller{calls: &calls, overlap: &overlap, closed: &closed}}, nil
	}
	_, err = Run(context.Background(), []Target{{Name: "floor", Open: short}}, Options{Sessions: 3, Calls: 3})
	if err == nil || !strings.Contains(err.Error(), "opening floor") || !strings.Contains(err.Error(), "opened 1 sessions, want 3") || closed.Load() != 1 {
		t.Errorf("an Open with too few sessions: %v (closed %d)", err, closed.Load())
	}
	failing := func(context.Context, int) ([]Caller, error) { return nil, errors.New("no disk") }
	_, err = Run(context.Background(), []Target{{Name: "floor", Open: failing}}, Options{Sessions: 3, Calls: 3})
	if err == nil || !strings.Contains(err.Error(), "opening floor: no disk") {
		t.Errorf("a failing Open: %v", err)
	}
	// Warm-up calls that fail fail the run, as for an MCP target.
	_, err = Run(context.Background(), []Target{{Name: "floor", Open: open}}, Options{Sessions: 1, Calls: 3, Warmup: 20})
	if err == nil || !strings.Contains(err.Error(), "workflow update was aborted") {
		t.Errorf("failing warm-up: %v", err)
	}
}
