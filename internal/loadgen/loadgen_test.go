package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// upstream is an MCP server over streamable HTTP (httptest) that records
// the calls it answers: which endpoint each came to, in order, and the
// idempotency keys they carried.
type upstream struct {
	url string

	mu    sync.Mutex
	order []string // "/a" or "/b" per call answered, in order
	keys  []string
	text  []string // the "text" argument of each echo
	// work is a stand-in for the process's CPU: each echo answered on
	// /a adds 1 ms, on /b 3 ms (TestProcessCPUPerCall).
	work atomic.Int64
}

const keyMeta = "example.com/idempotency-key"

func newUpstream(t *testing.T, echoName string) *upstream {
	t.Helper()
	u := &upstream{}
	type in struct {
		Text    string `json:"text,omitempty"`
		SleepMS int    `json:"sleep_ms,omitempty"`
	}
	server := func(path string) *mcp.Server {
		s := mcp.NewServer(&mcp.Implementation{Name: "upstream", Version: "1"}, nil)
		mcp.AddTool(s, &mcp.Tool{Name: echoName}, func(ctx context.Context, req *mcp.CallToolRequest, a in) (*mcp.CallToolResult, any, error) {
			select {
			case <-time.After(time.Duration(a.SleepMS) * time.Millisecond):
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
			key, _ := req.Params.Meta[keyMeta].(string)
			u.mu.Lock()
			u.order = append(u.order, path)
			u.keys = append(u.keys, key)
			u.text = append(u.text, a.Text)
			u.mu.Unlock()
			u.work.Add(int64(map[string]time.Duration{"/a": time.Millisecond, "/b": 3 * time.Millisecond}[path]))
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: a.Text}}}, nil, nil
		})
		mcp.AddTool(s, &mcp.Tool{Name: "fail"}, func(context.Context, *mcp.CallToolRequest, in) (*mcp.CallToolResult, any, error) {
			return nil, nil, errors.New("the disk is full")
		})
		return s
	}
	mux := http.NewServeMux()
	for _, p := range []string{"/a", "/b"} {
		s := server(p)
		mux.Handle(p, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	}
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	u.url = hs.URL
	return u
}

func (u *upstream) answered() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.order...)
}

// TestRunCounts: a bounded number of calls from several sessions is made
// exactly, every call answered and timed, each with its own idempotency
// key; the warm-up calls reach the server but are not counted.
func TestRunCounts(t *testing.T) {
	u := newUpstream(t, "echo")
	rs, err := Run(context.Background(), []Target{{Name: "a", URL: u.url + "/a", Tool: "echo"}},
		Options{Args: json.RawMessage(`{"text":"hi"}`), Sessions: 4, Calls: 101, Warmup: 2, IdempotencyKeyMeta: keyMeta})
	if err != nil {
		t.Fatal(err)
	}
	r := rs[0]
	want := &Result{Target: "a", URL: u.url + "/a", Tool: "echo", Sessions: 4, Calls: 101, OK: 101}
	if diff := cmp.Diff(want, r, cmpCounts); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	if got := len(u.answered()); got != 101+4*2 {
		t.Errorf("the server answered %d calls, want 101 measured + 8 warm-up", got)
	}
	seen := map[string]bool{}
	for _, k := range u.keys {
		if k == "" || seen[k] {
			t.Fatalf("idempotency key %q missing or repeated", k)
		}
		seen[k] = true
	}
	for _, txt := range u.text {
		if txt != "hi" {
			t.Fatalf("the tool got text %q, want the arguments given", txt)
		}
	}
	l := r.Latency
	if !(0 < l.P50 && l.P50 <= l.P95 && l.P95 <= l.P99 && l.P99 <= l.Max && l.Mean > 0) {
		t.Errorf("latencies not ordered: %+v", l)
	}
	if r.Seconds <= 0 || r.CallsPerSecond <= 0 {
		t.Errorf("seconds %v, calls/s %v: want both > 0", r.Seconds, r.CallsPerSecond)
	}
}

// cmpCounts compares the counts and labels of results, not what timing
// decides.
var cmpCounts = cmp.Options{
	cmp.AllowUnexported(Result{}),
	cmp.FilterPath(func(p cmp.Path) bool {
		switch p.Last().String() {
		case ".samples", ".elapsed", ".Seconds", ".CallsPerSecond", ".Latency":
			return true
		}
		return false
	}, cmp.Ignore()),
}

// TestRunErrors: isError results and transport errors are counted apart,
// with their first messages; isError calls are timed (they were answered),
// transport errors are not.
func TestRunErrors(t *testing.T) {
	u := newUpstream(t, "echo")
	target := []Target{{Name: "a", URL: u.url + "/a", Tool: "fail"}}
	rs, err := Run(context.Background(), target, Options{Sessions: 2, Calls: 6})
	if err != nil {
		t.Fatal(err)
	}
	want := &Result{Target: "a", URL: u.url + "/a", Tool: "fail", Sessions: 2, Calls: 6, ToolErrors: 6,
		Errors: []ErrorSample{{Kind: "isError", Message: "the disk is full", Count: 6}}}
	if diff := cmp.Diff(want, rs[0], cmpCounts); diff != "" {
		t.Errorf("isError results (-want +got):\n%s", diff)
	}
	if rs[0].Latency.P50 == 0 {
		t.Error("isError results were not timed")
	}

	// Calls past the call timeout get no result: transport errors.
	target[0].Tool = "echo"
	rs, err = Run(context.Background(), target, Options{Args: json.RawMessage(`{"sleep_ms":600}`), Calls: 2, CallTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r := rs[0]; r.Calls != 2 || r.TransportErrors != 2 || r.OK != 0 || r.Latency.P50 != 0 ||
		len(r.Errors) != 1 || r.Errors[0].Kind != "transport" || r.Errors[0].Count != 2 {
		t.Errorf("timed-out calls: %+v", r)
	}
}

// TestOpenRefuses: a warm-up call that fails, a tool the server does not
// have (naming the one it probably meant), and options past the bounds are
// refused before anything is measured.
func TestOpenRefuses(t *testing.T) {
	u := newUpstream(t, "srv__echo")
	for _, tc := range []struct {
		name   string
		target Target
		opts   Options
		want   string
	}{
		{"warm-up isError", Target{Tool: "fail"}, Options{Calls: 1, Warmup: 1}, "answered isError: the disk is full"},
		{"unknown tool", Target{Tool: "echo"}, Options{Calls: 1}, `did you mean srv__echo?`},
		{"too many calls", Target{Tool: "srv__echo"}, Options{Calls: MaxCalls + 1}, "at most 1000000"},
		{"too long", Target{Tool: "srv__echo"}, Options{Duration: 2 * time.Hour}, "at most 1h0m0s"},
		{"no bound", Target{Tool: "srv__echo"}, Options{}, "a duration or a number of calls"},
		{"arguments", Target{Tool: "srv__echo"}, Options{Calls: 1, Args: json.RawMessage(`[1]`)}, "want a JSON object"},
		{"sessions", Target{Tool: "srv__echo"}, Options{Calls: 1, Sessions: MaxSessions + 1}, "sessions 1001"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.target.Name, tc.target.URL = "a", u.url+"/a"
			b, err := Open(context.Background(), []Target{tc.target}, tc.opts)
			if err == nil {
				b.Close()
				t.Fatalf("Open succeeded, want an error with %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want %q in it", err, tc.want)
			}
		})
	}
	if n := len(u.answered()); n != 0 {
		t.Errorf("the server answered %d echo calls; nothing should have been measured", n)
	}
}

// TestAlternatingRounds: two targets are measured in turn, round by round,
// each for its share of the calls; a duration bounds each target's
// measuring time.
func TestAlternatingRounds(t *testing.T) {
	u := newUpstream(t, "echo")
	targets := []Target{{Name: "a", URL: u.url + "/a", Tool: "echo"}, {Name: "b", URL: u.url + "/b", Tool: "echo"}}
	rs, err := Run(context.Background(), targets, Options{Sessions: 3, Calls: 31, Rounds: 3})
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Calls != 31 || rs[1].Calls != 31 {
		t.Errorf("calls %d and %d, want 31 each", rs[0].Calls, rs[1].Calls)
	}
	var blocks []string
	for _, p := range u.answered() {
		if len(blocks) == 0 || blocks[len(blocks)-1] != p {
			blocks = append(blocks, p)
		}
	}
	if diff := cmp.Diff([]string{"/a", "/b", "/a", "/b", "/a", "/b"}, blocks); diff != "" {
		t.Errorf("order of the calls answered (-want +got):\n%s", diff)
	}

	rs, err = Run(context.Background(), targets, Options{Sessions: 2, Duration: 400 * time.Millisecond, Rounds: 2,
		Args: json.RawMessage(`{"sleep_ms":10}`)})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		// Calls in flight at the deadline finish: at most one call longer.
		if r.Calls == 0 || r.Errs() != 0 || r.Seconds < 0.4 || r.Seconds > 5 {
			t.Errorf("%s over 400ms: %d calls, %d errors, %.3fs", r.Target, r.Calls, r.Errs(), r.Seconds)
		}
	}
}

// TestProcessCPUPerCall: with Options.ProcessCPU each target's CPU per
// call is what its own rounds used, over its answered calls: the rounds
// of the other target (here three times as costly) and the warm-up are
// not counted in it. Without the option it stays 0.
func TestProcessCPUPerCall(t *testing.T) {
	u := newUpstream(t, "echo")
	targets := []Target{{Name: "a", URL: u.url + "/a", Tool: "echo"}, {Name: "b", URL: u.url + "/b", Tool: "echo"}}
	cpu := func() time.Duration { return time.Duration(u.work.Load()) }
	rs, err := Run(context.Background(), targets, Options{Sessions: 3, Calls: 31, Rounds: 3, Warmup: 2, ProcessCPU: cpu})
	if err != nil {
		t.Fatal(err)
	}
	if got := []time.Duration{rs[0].CPUPerCall, rs[1].CPUPerCall}; got[0] != time.Millisecond || got[1] != 3*time.Millisecond {
		t.Errorf("CPU per call %v, want [1ms 3ms] (each target's own rounds, warm-up excluded)", got)
	}
	if u.work.Load() != int64(31+3*2)*int64(time.Millisecond)+int64(31+3*2)*int64(3*time.Millisecond) {
		t.Errorf("the stand-in CPU is %v: the warm-up and measured calls did not all reach the upstream", time.Duration(u.work.Load()))
	}
	rs, err = Run(context.Background(), targets[:1], Options{Calls: 5})
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].CPUPerCall != 0 {
		t.Errorf("CPU per call %v without Options.ProcessCPU, want 0", rs[0].CPUPerCall)
	}
}

// TestInterrupt: cancelling the context stops the run at once; what was
// measured is returned, the calls cut short counted apart, not as errors.
func TestInterrupt(t *testing.T) {
	u := newUpstream(t, "echo")
	ctx, cancel := context.WithCancel(context.Background())
	b, err := Open(ctx, []Target{{Name: "a", URL: u.url + "/a", Tool: "echo"}},
		Options{Sessions: 2, Duration: time.Minute, Args: json.RawMessage(`{"sleep_ms":20}`)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	time.AfterFunc(300*time.Millisecond, cancel)
	t0 := time.Now()
	r := b.Run(ctx)[0]
	if took := time.Since(t0); took > 10*time.Second {
		t.Errorf("Run took %s after the interruption at 300ms", took)
	}
	if !r.Interrupted || r.Calls == 0 || r.Errs() != 0 || r.Calls != r.OK {
		t.Errorf("interrupted run: %+v", r)
	}
}

// TestReport: the text tables and the JSON carry the figures.
func TestReport(t *testing.T) {
	direct := &Result{Target: "direct", Sessions: 8, samples: []time.Duration{400 * time.Microsecond, 500 * time.Microsecond}, elapsed: time.Second / 1000}
	through := &Result{Target: "airlock", Sessions: 8, samples: []time.Duration{20 * time.Millisecond, 40 * time.Millisecond}, elapsed: time.Second / 31,
		TransportErrors: 1, Errors: []ErrorSample{{Kind: "transport", Message: "connection\nreset", Count: 1}}}
	direct.finish()
	through.finish()
	q := Compare(direct, through)
	if q.P50 != 50 || q.P99 != 80 {
		t.Errorf("ratio %+v, want p50 50, p99 80", q)
	}
	var buf bytes.Buffer
	WriteTable(&buf, []*Result{direct, through})
	WriteRatio(&buf, direct, through)
	for _, want := range []string{"0.400 ms", "20.0 ms", "40.0 ms", "airlock: 1× transport: connection reset", "50×", "80×", "1/32", "2000"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("%q missing from:\n%s", want, buf.String())
		}
	}
	b, err := json.Marshal(through)
	if err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Latency != through.Latency || back.Calls != 3 || back.OK != 2 || back.TransportErrors != 1 {
		t.Errorf("JSON round trip: %s\n%+v", b, back)
	}
}
