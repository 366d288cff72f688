package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// benchServer serves one MCP server at /gw (standing for airlock: its tool
// is srv__echo) and one at /up (the upstream: echo), recording the
// Authorization header of the calls each gets.
func benchServer(t *testing.T) (url string, auth func(path string) []string) {
	t.Helper()
	var mu sync.Mutex
	seen := map[string][]string{}
	type in struct {
		Text string `json:"text,omitempty"`
	}
	mux := http.NewServeMux()
	for path, tool := range map[string]string{"/gw": "srv__echo", "/up": "echo"} {
		s := mcp.NewServer(&mcp.Implementation{Name: "bench-test", Version: "1"}, nil)
		mcp.AddTool(s, &mcp.Tool{Name: tool}, func(_ context.Context, req *mcp.CallToolRequest, a in) (*mcp.CallToolResult, any, error) {
			mu.Lock()
			seen[path] = append(seen[path], req.Extra.Header.Get("Authorization"))
			mu.Unlock()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: a.Text}}}, nil, nil
		})
		mux.Handle(path, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	}
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return hs.URL, func(path string) []string {
		mu.Lock()
		defer mu.Unlock()
		return seen[path]
	}
}

// TestBenchJSON: `airlock bench --direct --json` measures both endpoints
// for the calls asked, sends the key from AIRLOCK_API_KEY to --url only,
// finds the direct tool's name by dropping the server prefix, and prints a
// report whose counts add up.
func TestBenchJSON(t *testing.T) {
	url, auth := benchServer(t)
	t.Setenv(envAPIKey, "k-123")
	code, stdout, stderr := runBounded(t, []string{"bench", "--url", url + "/gw", "--tool", "srv__echo", "--args", `{"text":"hi"}`,
		"--sessions", "3", "--calls", "40", "--rounds", "4", "--direct", url + "/up", "--json"})
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("output is not the JSON report: %v\n%s", err, stdout)
	}
	if rep.Airlock == nil || rep.Direct == nil {
		t.Fatalf("airlock or direct result missing:\n%s", stdout)
	}
	for _, r := range []struct {
		got  int
		want int
		what string
	}{
		{rep.Airlock.Calls, 40, "airlock calls"}, {rep.Airlock.OK, 40, "airlock ok"},
		{rep.Direct.Calls, 40, "direct calls"}, {rep.Direct.OK, 40, "direct ok"},
		{rep.Airlock.Errs() + rep.Direct.Errs(), 0, "errors"},
		{len(auth("/gw")), 43, "calls to --url (40 + 3 warm-up)"}, {len(auth("/up")), 43, "calls to --direct"},
	} {
		if r.got != r.want {
			t.Errorf("%s: %d, want %d", r.what, r.got, r.want)
		}
	}
	if rep.Ratio == nil || rep.Ratio.P50 <= 0 || rep.Ratio.CallsPerSecond <= 0 || rep.Direct.Tool != "echo" {
		t.Errorf("ratio %+v, direct tool %q", rep.Ratio, rep.Direct.Tool)
	}
	if a := auth("/gw"); len(a) == 0 || a[0] != "Bearer k-123" {
		t.Errorf("--url got Authorization %q, want the key", a)
	}
	if a := auth("/up"); len(a) == 0 || a[0] != "" {
		t.Errorf("--direct got Authorization %q, want none", a)
	}
}

// TestBenchText: the text report has the table, the ratio table and the
// machine's CPUs; a run with isError results exits 1 and shows the
// message.
func TestBenchText(t *testing.T) {
	url, _ := benchServer(t)
	t.Setenv(envAPIKey, "")
	code, stdout, stderr := runBounded(t, []string{"bench", "--url", url + "/gw", "--tool", "srv__echo", "--calls", "5", "--direct", url + "/up"})
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"target", "direct", "airlock", "p99", "calls/s", "ratio", "CPUs"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("%q missing from:\n%s", want, stdout)
		}
	}
	code, stdout, _ = runBounded(t, []string{"bench", "--url", url + "/gw", "--tool", "srv__echo", "--calls", "3", "--warmup", "0",
		"--args", `{"text":7}`})
	if code != 1 || !strings.Contains(stdout, "3× isError") {
		t.Errorf("isError results: exit %d, want 1 and the message:\n%s", code, stdout)
	}
}

// TestBenchUsage: mistakes in the command line are exit 2 with what is
// wrong, before anything is called.
func TestBenchUsage(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench"}, "--tool is required"},
		{[]string{"bench", "--tool", "x", "--calls", "1000001"}, "at most 1000000"},
		{[]string{"bench", "--tool", "x", "--duration", "2h"}, "at most 1h0m0s"},
		{[]string{"bench", "--tool", "x", "--args", "nope"}, "want a JSON object"},
		{[]string{"bench", "--tool", "x", "--key-file", empty}, "is empty"},
		{[]string{"bench", "--tool", "x", "extra"}, "unexpected argument"},
	} {
		code, _, stderr := runBounded(t, tc.args)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("airlock %s: exit %d, want 2 and %q:\n%s", strings.Join(tc.args, " "), code, tc.want, stderr)
		}
	}
}

// TestBenchHelp: --help says what the floor is and how the share is
// computed, beside the flag.
func TestBenchHelp(t *testing.T) {
	code, stdout, stderr := runBounded(t, []string{"bench", "--help"})
	out := stdout + stderr
	if code != 0 {
		t.Fatalf("bench --help: exit %d\n%s", code, out)
	}
	for _, want := range []string{"-floor", "bare Temporal floor", "one Temporal Update", "one local activity", "embedded Temporal server of its own",
		"minus the floor's", "fraction of the floor's"} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), want) {
			t.Errorf("%q missing from bench --help:\n%s", want, out)
		}
	}
}

// TestBenchFloor: `airlock bench --floor --json` against an MCP server
// starts the floor's own embedded Temporal, measures it in the same rounds
// as the two endpoints, and reports airlock's share over it, computed from
// the figures it printed.
func TestBenchFloor(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded Temporal; skipped with -short")
	}
	url, _ := benchServer(t)
	t.Setenv(envAPIKey, "")
	code, stdout, stderr := runBounded(t, []string{"bench", "--url", url + "/gw", "--tool", "srv__echo", "--args", `{"text":"hi"}`,
		"--sessions", "2", "--calls", "20", "--floor", "--json"})
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("output is not the JSON report: %v\n%s", err, stdout)
	}
	if rep.Floor == nil || rep.Share == nil || rep.Direct != nil || rep.Ratio != nil || rep.Rounds != 5 {
		t.Fatalf("floor or share missing, or direct without --direct, or rounds not 5:\n%s", stdout)
	}
	if rep.Floor.Calls != 20 || rep.Floor.OK != 20 || rep.Floor.Target != "floor" || rep.Airlock.Calls != 20 {
		t.Errorf("floor %d calls (%d ok), airlock %d:\n%s", rep.Floor.Calls, rep.Floor.OK, rep.Airlock.Calls, stdout)
	}
	// The JSON is to the microsecond: a difference of rounded figures may
	// be 1 µs off the rounded difference.
	if d := rep.Share.OverFloor.P99 - (rep.Airlock.Latency.P99 - rep.Floor.Latency.P99); d > 2*time.Microsecond || d < -2*time.Microsecond || rep.Share.OwnP50 != nil ||
		rep.Share.OfFloor != rep.Airlock.CallsPerSecond/rep.Floor.CallsPerSecond {
		t.Errorf("share %+v does not follow from the figures:\n%s", rep.Share, stdout)
	}
}
