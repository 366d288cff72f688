package integration

// Benchmarks of code mode (issue 27) against its goals: the bytes a model
// gets back, the cost of an inner call against a direct one, a program's
// start and the replay of a long program's history. Figures are reported
// with b.ReportMetric and logged on one line each, never asserted: the
// benchmarks assert only that the work was done right.
//
//	go test -run '^$' -bench 'BenchmarkProgram' -benchtime 1x ./integration/

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdkworker "go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/proto"

	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/manifests"
	"github.com/airlock-run/airlock/worker"
)

// msOf is d in milliseconds.
func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// resultBytes is the size of a tool result as the client gets it: its
// JSON.
func resultBytes(t testing.TB, res *mcp.CallToolResult) int {
	t.Helper()
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

// programOK runs source through airlock_run_program and fails unless it
// ended ok with want calls, all ok; it returns the result and its
// structured content.
func programOK(t testing.TB, cs *mcp.ClientSession, source, key string, want int) (*mcp.CallToolResult, map[string]any) {
	t.Helper()
	res, sc := runProgram(t, cs, source, false, key)
	if res.IsError || sc["outcome"] != "ok" {
		t.Fatalf("program: isError=%v %s", res.IsError, text(res))
	}
	calls, _ := sc["calls"].([]any)
	if len(calls) != want {
		t.Fatalf("program made %d calls, want %d", len(calls), want)
	}
	for i, c := range calls {
		if o, _ := c.(map[string]any)["outcome"].(string); o != "ok" {
			t.Fatalf("program call %d: %v, want ok", i+1, c)
		}
	}
	return res, sc
}

// counterProgramStack is a stack over testupstream (echo: the fast path;
// put: an idempotent medium-risk write, the full pipeline) with code mode
// on and no continue-as-new in the way of counting history events.
func counterProgramStack(t testing.TB) (*stack, *mcp.ClientSession) {
	t.Helper()
	m := testupstreamManifest(t, filepath.Join(t.TempDir(), "effects.log"))
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, maxCalls: 1 << 30, continueAsNewAfter: 1 << 20,
		programs: &gateway.ProgramOptions{}})
	cs := s.connect(t, nil)
	waitTools(t, cs, "counter__echo", "counter__put", gateway.ToolRunProgram)
	return s, cs
}

// resultTask is the task a result came from.
func resultTask(t testing.TB, res *mcp.CallToolResult) string {
	t.Helper()
	id, _ := res.Meta[gateway.MetaTask].(string)
	if id == "" {
		t.Fatalf("result without %s: %s", gateway.MetaTask, text(res))
	}
	return id
}

// contextTerm is what BenchmarkProgramContext's files are searched for;
// contextHits are the files that mention it.
const contextTerm = "quarantine"

var contextHits = []int{3, 8, 14}

// contextFile is file i's text: ~10 KB of prose, mentioning contextTerm
// once, in the middle, when i is a hit.
func contextFile(i int) string {
	var b strings.Builder
	words := []string{"ledger", "approval", "workflow", "replay", "history", "budget", "policy", "upstream", "sandbox", "gateway"}
	for w := 0; b.Len() < 10_000; w++ {
		if w == 700 && slices.Contains(contextHits, i) {
			b.WriteString(contextTerm + " ")
		}
		fmt.Fprintf(&b, "%s%d ", words[(w*7+i)%len(words)], w%97)
		if w%16 == 15 {
			b.WriteString("\n")
		}
	}
	return b.String()
}

// BenchmarkProgramContext: the context goal. In the npm
// filesystem server's sandbox, 20 files of ~10 KB, three mentioning a
// term; the task is to read them all, keep those that mention it and
// write a summary file listing them. Done call by call, as a model would
// (read_text_file ×20, write_file), every result comes back to the
// client; done by one airlock_run_program, only the program's result
// does. It reports the bytes of both (the JSON of each CallToolResult)
// and the reduction, and the tool-description bytes: airlock_run_program's
// (rules and one stub per tool) against the full tools/list JSON of the
// same tools.
func BenchmarkProgramContext(b *testing.B) {
	sandbox, err := filepath.EvalSymlinks(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	trash, err := filepath.EvalSymlinks(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	fsm := loadExample(b, "filesystem.yaml", "server-filesystem", []string{sandbox, trash}, nil)
	s := newStack(b, stackOptions{manifests: []*manifests.Manifest{fsm}, maxCalls: 1 << 30, programs: &gateway.ProgramOptions{}})
	cs := s.connect(b, nil)
	waitTools(b, cs, "filesystem__read_text_file", "filesystem__write_file", gateway.ToolRunProgram)

	const files = 20
	paths := make([]string, files)
	var want []string
	for i := range paths {
		paths[i] = filepath.Join(sandbox, fmt.Sprintf("doc%02d.txt", i))
		if err := os.WriteFile(paths[i], []byte(contextFile(i)), 0o644); err != nil {
			b.Fatal(err)
		}
		if slices.Contains(contextHits, i) {
			want = append(want, paths[i])
		}
	}
	wantSummary := strings.Join(want, "\n")
	checkSummary := func(path string) {
		b.Helper()
		got, err := os.ReadFile(path)
		if err != nil || string(got) != wantSummary {
			b.Fatalf("%s: %q (%v), want %q", path, got, err, wantSummary)
		}
		_ = os.Remove(path)
	}

	// The tool descriptions the model is given.
	list, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		b.Fatal(err)
	}
	var progTool *mcp.Tool
	var same []*mcp.Tool
	for _, tool := range list.Tools {
		switch {
		case tool.Name == gateway.ToolRunProgram:
			progTool = tool
		case strings.HasPrefix(tool.Name, "filesystem__"):
			same = append(same, tool)
		}
	}
	if progTool == nil || len(same) == 0 {
		b.Fatalf("tools/list has no %s or no filesystem tools: %d tools", gateway.ToolRunProgram, len(list.Tools))
	}
	fullList, _ := json.Marshal(same)
	progJSON, _ := json.Marshal(progTool)
	if !strings.Contains(progTool.Description, "filesystem.read_text_file(") {
		b.Fatalf("%s's description has no stub of read_text_file:\n%s", gateway.ToolRunProgram, progTool.Description)
	}

	src := fmt.Sprintf(`paths = %s
term = %q

def main():
    kept = [p for p in paths if term in filesystem.read_text_file(path=p)["content"]]
    filesystem.write_file(path=%q, content="\n".join(kept))
    return kept
`, mustJSON(b, paths), contextTerm, filepath.Join(sandbox, "summary-program.txt"))

	var direct, prog int
	var dDirect, dProg time.Duration
	b.ResetTimer()
	for range b.N {
		// (a) call by call.
		t0 := time.Now()
		n, kept := 0, []string{}
		for _, p := range paths {
			res := call(b, cs, "filesystem__read_text_file", map[string]any{"path": p}, "")
			if res.IsError {
				b.Fatalf("reading %s: %s", p, text(res))
			}
			n += resultBytes(b, res)
			if strings.Contains(text(res), contextTerm) {
				kept = append(kept, p)
			}
		}
		summary := filepath.Join(sandbox, "summary-direct.txt")
		res := call(b, cs, "filesystem__write_file", map[string]any{"path": summary, "content": strings.Join(kept, "\n")}, "")
		if res.IsError {
			b.Fatalf("writing the summary: %s", text(res))
		}
		n += resultBytes(b, res)
		dDirect += time.Since(t0)
		checkSummary(summary)
		direct = n

		// (b) one program.
		t0 = time.Now()
		res, sc := programOK(b, cs, src, "", files+1)
		dProg += time.Since(t0)
		if got := mustJSON(b, sc["result"]); got != mustJSON(b, want) {
			b.Fatalf("program kept %s, want %s", got, mustJSON(b, want))
		}
		checkSummary(filepath.Join(sandbox, "summary-program.txt"))
		prog = resultBytes(b, res)
	}
	b.StopTimer()
	reduction := 100 * (1 - float64(prog)/float64(direct))
	descReduction := 100 * (1 - float64(len(progJSON))/float64(len(fullList)))
	b.ReportMetric(float64(direct), "bytes_direct")
	b.ReportMetric(float64(prog), "bytes_program")
	b.ReportMetric(reduction, "reduction_%")
	b.ReportMetric(float64(len(progTool.Description)), "desc_bytes_program")
	b.ReportMetric(float64(len(progJSON)), "tool_bytes_program")
	b.ReportMetric(float64(len(fullList)), "tools_list_bytes")
	b.ReportMetric(descReduction, "desc_reduction_%")
	b.ReportMetric(msOf(dDirect)/float64(b.N), "ms_direct")
	b.ReportMetric(msOf(dProg)/float64(b.N), "ms_program")
	b.Logf("context: %d files of ~10 KB: %d bytes back call by call, %d by one program (%.1f%% less; goal ≥ 90%%); descriptions: %s %d bytes (its tool JSON %d) against tools/list of the %d same tools %d bytes (%.1f%% less)",
		files, direct, prog, reduction, gateway.ToolRunProgram, len(progTool.Description), len(progJSON), len(same), len(fullList), descReduction)
}

// innerCallN is how many calls BenchmarkProgramInnerCall makes each way,
// per tool and round (at most a program's 200).
const innerCallN = 50

// BenchmarkProgramInnerCall: the cost goal. In one task, N direct
// calls of a tool, each its own tools/call, against one program making N
// calls of the same tool, in alternating rounds: put (an idempotent
// medium-risk write: the full pipeline, Decide then CallTool) and echo (the
// fast path). It reports milliseconds per direct call and per inner call
// (the whole program's time over its calls), their ratio, and the task's
// history events per call each way.
func BenchmarkProgramInnerCall(b *testing.B) {
	s, _ := counterProgramStack(b)
	for _, tool := range []string{"put", "echo"} {
		b.Run(tool, func(b *testing.B) { benchInnerCall(b, s, tool, false) })
	}
	// The same calls, ten at a time in parallel(...) inside the program
	// (the direct calls stay one at a time, as one agent makes them):
	// calls off the fast path share workflow tasks.
	b.Run("put-parallel", func(b *testing.B) { benchInnerCall(b, s, "put", true) })
}

// innerParallel is how many calls one parallel(...) of
// BenchmarkProgramInnerCall/put-parallel runs.
const innerParallel = 10

func benchInnerCall(b *testing.B, s *stack, tool string, par bool) {
	arg := map[string]string{"put": "key", "echo": "text"}[tool]
	// A task of its own (a session each): the task's history is this
	// run's only, so it stays short of Temporal's continue-as-new
	// suggestion as long as it can.
	cs := s.connect(b, nil)
	// Warm up both ways (and learn the task).
	res := call(b, cs, "counter__"+tool, map[string]any{arg: "warm"}, "")
	if res.IsError {
		b.Fatalf("%s: %s", tool, text(res))
	}
	task := resultTask(b, res)
	programOK(b, cs, fmt.Sprintf("counter.%s(%s=\"warm\")\n", tool, arg), "", 1)
	tasks := map[string]bool{task: true}

	var dDirect, dProg time.Duration
	// History events are counted over the rounds in which the task did
	// not continue as new (its history restarted).
	var evDirect, evProg int64
	evRounds := 0
	b.ResetTimer()
	for r := range b.N {
		before := historyLengths(b, s.client, tasks)
		t0 := time.Now()
		for i := range innerCallN {
			res := call(b, cs, "counter__"+tool, map[string]any{arg: fmt.Sprintf("d%d-%d", r, i)}, "")
			if res.IsError {
				b.Fatalf("direct %s %d: %s", tool, i, text(res))
			}
		}
		dDirect += time.Since(t0)
		mid := historyLengths(b, s.client, tasks)

		src := fmt.Sprintf(`def main():
    for i in range(%d):
        counter.%s(%s="p%d-%%d" %% i)
    return %d
`, innerCallN, tool, arg, r, innerCallN)
		if par {
			src = fmt.Sprintf(`def main():
    for j in range(%d):
        parallel([lambda i=i: counter.%s(%s="p%d-%%d-%%d" %% (j, i)) for i in range(%d)])
    return %d
`, innerCallN/innerParallel, tool, arg, r, innerParallel, innerCallN)
		}
		t0 = time.Now()
		res, sc := programOK(b, cs, src, "", innerCallN)
		dProg += time.Since(t0)
		if got := mustJSON(b, sc["result"]); got != fmt.Sprint(innerCallN) || resultTask(b, res) != task {
			b.Fatalf("program: result %s in task %s, want %d in %s", got, resultTask(b, res), innerCallN, task)
		}
		after := historyLengths(b, s.client, tasks)
		d, ok1 := eventsAdded(before, mid)
		p, ok2 := eventsAdded(mid, after)
		if ok1 && ok2 {
			evDirect, evProg, evRounds = evDirect+d, evProg+p, evRounds+1
		}
	}
	b.StopTimer()
	calls := float64(b.N * innerCallN)
	direct, inner := msOf(dDirect)/calls, msOf(dProg)/calls
	b.ReportMetric(direct, "ms/direct-call")
	b.ReportMetric(inner, "ms/inner-call")
	b.ReportMetric(inner/direct, "inner/direct")
	name := tool
	if par {
		name += fmt.Sprintf(" (in the program %d at a time in parallel)", innerParallel)
	}
	summary := fmt.Sprintf("%s: %d calls each way: %.2f ms per direct call, %.2f ms per inner call (ratio %.2f; goal ≤ 0.5)", name, b.N*innerCallN, direct, inner, inner/direct)
	if evRounds > 0 {
		n := float64(evRounds * innerCallN)
		b.ReportMetric(float64(evDirect)/n, "events/direct-call")
		b.ReportMetric(float64(evProg)/n, "events/inner-call")
		summary += fmt.Sprintf("; history events %.2f per direct call, %.2f per inner call (goal ≤ 6)", float64(evDirect)/n, float64(evProg)/n)
	} else {
		summary += "; the task continued as new in every round: no events per call"
	}
	b.Logf("%s", summary)
}

// BenchmarkProgramStart: what starting a program costs through airlock.
// A program that calls no tool against a direct echo call, alternating,
// each its own tools/call: the p50 of each, their difference and ratio.
// (The interpreter's own start, instantiation included, is
// internal/program's BenchmarkStart.)
func BenchmarkProgramStart(b *testing.B) {
	_, cs := counterProgramStack(b)
	const samples = 30
	programOK(b, cs, "result = 1\n", "", 0) // warm up
	call(b, cs, "counter__echo", map[string]any{"text": "warm"}, "")
	var progs, echoes []time.Duration
	b.ResetTimer()
	for range b.N {
		for i := range samples {
			t0 := time.Now()
			_, sc := programOK(b, cs, fmt.Sprintf("result = %d\n", i), "", 0)
			progs = append(progs, time.Since(t0))
			if got := mustJSON(b, sc["result"]); got != fmt.Sprint(i) {
				b.Fatalf("program result %s, want %d", got, i)
			}
			t0 = time.Now()
			res := call(b, cs, "counter__echo", map[string]any{"text": "ping"}, "")
			echoes = append(echoes, time.Since(t0))
			if res.IsError || !strings.Contains(text(res), "ping") {
				b.Fatalf("echo: %s", text(res))
			}
		}
	}
	b.StopTimer()
	p, e := pct(progs, 50), pct(echoes, 50)
	b.ReportMetric(msOf(p), "program-p50-ms")
	b.ReportMetric(msOf(e), "echo-p50-ms")
	b.ReportMetric(msOf(p-e), "program-minus-echo-ms")
	b.ReportMetric(float64(p)/float64(e), "program/echo-p50")
	b.Logf("start: a no-call program p50 %.2f ms, a direct echo p50 %.2f ms (ratio %.2f, %d samples each)", msOf(p), msOf(e), float64(p)/float64(e), len(progs))
}

// replayCalls is BenchmarkProgramReplay's program's calls: the 200
// (a program's default maximum).
const replayCalls = 200

// BenchmarkProgramReplay: the replay goal. A program of 200 calls
// runs in a task, of echo (the fast path) and of put (the full pipeline);
// then the task's history is replayed against the current workflow code
// with the real interpreter (newStack set it), as a worker replays it
// after a crash or a cache eviction; the replay is timed.
func BenchmarkProgramReplay(b *testing.B) {
	s, cs := counterProgramStack(b)
	for _, tool := range []string{"echo", "put"} {
		b.Run(tool, func(b *testing.B) { benchReplay(b, s, cs, tool) })
	}
}

func benchReplay(b *testing.B, s *stack, cs *mcp.ClientSession, tool string) {
	arg := map[string]string{"put": "key", "echo": "text"}[tool]
	// Its own task: the history holds this program only.
	cs = s.connect(b, map[string]string{gateway.HeaderTask: "replay-" + tool})
	src := fmt.Sprintf(`def main():
    n = 0
    for i in range(%d):
        counter.%s(%s="call %%d" %% i)
        n += 1
    return n
`, replayCalls, tool, arg)
	t0 := time.Now()
	res, sc := programOK(b, cs, src, "", replayCalls)
	ran := time.Since(t0)
	if got := mustJSON(b, sc["result"]); got != fmt.Sprint(replayCalls) {
		b.Fatalf("program result %s, want %d", got, replayCalls)
	}
	task := resultTask(b, res)
	run := historyLengths(b, s.client, map[string]bool{task: true})[task].run
	hist := fetchHistory(b, s.client, task, run)
	histBytes := 0
	types := map[string]int{}
	for _, ev := range hist.Events {
		histBytes += proto.Size(ev)
		types[strings.TrimPrefix(ev.GetEventType().String(), "EVENT_TYPE_")]++
	}
	replayer := sdkworker.NewWorkflowReplayer()
	worker.RegisterWorkflows(replayer)
	var d time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if err := replayer.ReplayWorkflowHistory(nil, hist); err != nil {
			b.Fatalf("replaying the %d-call program's history: %v", replayCalls, err)
		}
		d += time.Since(t0)
	}
	b.StopTimer()
	ms := msOf(d) / float64(b.N)
	b.ReportMetric(ms, "replay-ms")
	b.ReportMetric(float64(len(hist.Events)), "history-events")
	b.ReportMetric(float64(histBytes), "history-bytes")
	b.ReportMetric(msOf(ran), "run-ms")
	b.Logf("replay: a %d-call program of %s (ran in %.0f ms) leaves %d history events, %d bytes; replayed in %.1f ms (goal < 1000 ms)",
		replayCalls, tool, msOf(ran), len(hist.Events), histBytes, ms)
	b.Logf("replay: %s program's history by event type: %v", tool, types)
}
