package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/wasm/program/wire"
)

// fakeHost is a scripted wire.Host. Each started call is answered by
// answer; Wait hands replies back in FIFO order, or in the order pick
// chooses among the calls in flight. It fails the test if Start or Wait
// is called from any goroutine but Run's, or Wait with nothing in flight.
type fakeHost struct {
	t       testing.TB
	gid     string
	answer  func(m wire.GuestMessage) wire.Reply
	pick    func(inflight []wire.GuestMessage) int
	started []wire.GuestMessage
	waits   int
	flight  []wire.GuestMessage
}

func newHost(t testing.TB, answer func(m wire.GuestMessage) wire.Reply) *fakeHost {
	return &fakeHost{t: t, gid: goid(), answer: answer}
}

func goid() string {
	var b [64]byte
	s := string(b[:runtime.Stack(b[:], false)])
	return strings.Fields(s)[1]
}

func (h *fakeHost) Start(m wire.GuestMessage) {
	if g := goid(); g != h.gid {
		h.t.Errorf("Start called on goroutine %s, Run's is %s", g, h.gid)
	}
	if m.Op != wire.OpStart || m.ID != len(h.started)+1 {
		h.t.Errorf("Start(%+v): want op start, ID %d", m, len(h.started)+1)
	}
	if !json.Valid(m.Args) {
		h.t.Errorf("Start(%+v): args are not JSON", m)
	}
	h.started = append(h.started, m)
	h.flight = append(h.flight, m)
}

func (h *fakeHost) Wait() wire.Reply {
	if g := goid(); g != h.gid {
		h.t.Errorf("Wait called on goroutine %s, Run's is %s", g, h.gid)
	}
	if len(h.flight) == 0 {
		h.t.Fatalf("Wait with no call in flight")
	}
	h.waits++
	i := 0
	if h.pick != nil {
		i = h.pick(h.flight)
	}
	m := h.flight[i]
	h.flight = append(h.flight[:i], h.flight[i+1:]...)
	r := h.answer(m)
	r.ID = m.ID
	return r
}

// ok is a reply with v as its JSON result.
func ok(v any) wire.Reply {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return wire.Reply{Outcome: "ok", Result: data}
}

func rawOK(s string) wire.Reply { return wire.Reply{Outcome: "ok", Result: json.RawMessage(s)} }

var testLimits = wire.Limits{
	MaxResultBytes:       64 << 10,
	MaxPrintBytes:        16 << 10,
	MaxSteps:             10_000_000,
	MaxStepsBetweenCalls: 1_000_000,
	MaxParallel:          16,
}

// fsTools is a tool table like the gateway's: sorted by Name.
var fsTools = []wire.Tool{
	{Name: "fs__list_directory", Module: "fs", Function: "list_directory"},
	{Name: "fs__read_file", Module: "fs", Function: "read_file"},
	{Name: "fs__search_files", Module: "fs", Function: "search_files"},
	{Name: "fs__stat", Module: "fs", Function: "stat"},
	{Name: "fs__write_file", Module: "fs", Function: "write_file"},
	{Name: "gh__list_issues", Module: "gh", Function: "list_issues"},
	{Name: "gh__create_issue", Module: "gh", Function: "create_issue"},
	{Name: "slack__post_message", Module: "slack", Function: "post_message"},
}

// fakeFS answers the fs, gh and slack tools from a small fixed tree:
// paths under /secret are denied, missing ones are tool errors.
func fakeFS(m wire.GuestMessage) wire.Reply {
	var args map[string]any
	if err := json.Unmarshal(m.Args, &args); err != nil {
		return wire.Reply{Outcome: "tool_error", Reason: "bad args: " + err.Error()}
	}
	path, _ := args["path"].(string)
	if strings.HasPrefix(path, "/secret") {
		return wire.Reply{Outcome: "denied", Reason: "rule no-secrets"}
	}
	files := map[string]string{
		"/repo/README.md":     "# Demo\nA demo project.\nTODO: write docs\n",
		"/repo/main.go":       "package main\n\n// TODO: handle errors\nfunc main() {}\n",
		"/repo/go.mod":        "module demo\n\ngo 1.22\n",
		"/repo/docs/guide.md": "Guide\nTODO: more\nTODO: examples\n",
		"/repo/config.json":   `{"name": "demo", "version": 3, "debug": false}`,
	}
	switch m.Tool {
	case "fs__read_file":
		if c, found := files[path]; found {
			return ok(c)
		}
		return wire.Reply{Outcome: "tool_error", Reason: "ENOENT: no such file " + path}
	case "fs__stat":
		if c, found := files[path]; found {
			return ok(map[string]any{"path": path, "size": len(c), "type": "file"})
		}
		return wire.Reply{Outcome: "tool_error", Reason: "ENOENT: no such file " + path}
	case "fs__list_directory":
		var entries []map[string]any
		names := []string{}
		for p := range files {
			names = append(names, p)
		}
		sort.Strings(names)
		dirs := map[string]bool{}
		for _, p := range names {
			rest, found := strings.CutPrefix(p, strings.TrimSuffix(path, "/")+"/")
			if !found {
				continue
			}
			if d, _, sub := strings.Cut(rest, "/"); sub {
				if !dirs[d] {
					dirs[d] = true
					entries = append(entries, map[string]any{"name": d, "type": "directory", "size": 0})
				}
				continue
			}
			entries = append(entries, map[string]any{"name": rest, "type": "file", "size": len(files[p])})
		}
		if entries == nil {
			return wire.Reply{Outcome: "tool_error", Reason: "ENOENT: no such directory " + path}
		}
		return ok(entries)
	case "fs__search_files":
		pat, _ := args["pattern"].(string)
		var hits []string
		for p := range files {
			if strings.Contains(p, strings.Trim(pat, "*")) {
				hits = append(hits, p)
			}
		}
		sort.Strings(hits)
		return ok(hits)
	case "fs__write_file":
		return ok(map[string]any{"written": len(fmt.Sprint(args["content"]))})
	case "gh__list_issues":
		return rawOK(`[{"number": 12, "title": "Crash on start", "state": "open", "labels": ["bug"], "comments": 4},
			{"number": 15, "title": "Add docs", "state": "open", "labels": ["docs"], "comments": 0},
			{"number": 9, "title": "Slow build", "state": "closed", "labels": ["bug", "perf"], "comments": 7}]`)
	case "gh__create_issue":
		return ok(map[string]any{"number": 16, "url": "https://example.com/16"})
	case "slack__post_message":
		return ok(map[string]any{"ok": true, "ts": "1700000000.0001"})
	}
	return wire.Reply{Outcome: "tool_error", Reason: "unknown tool " + m.Tool}
}

func run(t testing.TB, src string, h *fakeHost) wire.Done {
	t.Helper()
	return Run(wire.Request{ProgramID: "p1", Source: src, Tools: fsTools, Limits: testLimits}, h)
}

func runLimits(t testing.TB, src string, h *fakeHost, lim wire.Limits) wire.Done {
	t.Helper()
	return Run(wire.Request{ProgramID: "p1", Source: src, Tools: fsTools, Limits: lim}, h)
}

func compact(s string) string {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		panic(err)
	}
	return b.String()
}
