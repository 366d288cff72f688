package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/airlock-run/airlock/wasm/program/wire"
)

// ScriptRunner is a workflows.ProgramRunner that needs no interpreter,
// for tests of the task's side of code mode and for recorded histories
// (which replay with it). The source is a script, one step a line, that
// it plays against the host:
//
//	call TOOL ARGS            start the call, wait for it; a call not ok
//	                          fails the program (Done "error")
//	try TOOL ARGS             the same, but a call not ok is a value
//	par TOOL ARGS ; TOOL ARGS start them all, then wait for each
//	fail MESSAGE              the program fails
//
// or in the Starlark the real interpreter runs the same way (so that a
// recorded history replays with either): a line
//
//	module.function(key="value", ...)
//	attempt(module.function, key="value", ...)
//	parallel(lambda: module.function(...), lambda: ...)
//	fail("message")
//
// is call, try, par and fail (keyword arguments only, strings or JSON
// literals; a line starting with # is a comment).
//
// A "stopped" or "program_limit" reply ends it (Done "stopped" or
// "limit"). It ends ok with the list of its calls' values (a failed
// try's is {"outcome": ...}).
type ScriptRunner struct {
	// Err is returned by Run, as a broken runner would.
	Err error

	mu      sync.Mutex
	reqs    []wire.Request
	memory  []int64
	replies []wire.Reply
}

// Requests are the requests Run got, with the memory caps.
func (r *ScriptRunner) Requests() ([]wire.Request, []int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs), slices.Clone(r.memory)
}

func (r *ScriptRunner) Run(_ context.Context, req wire.Request, memoryBytes int64, h wire.Host) (wire.Done, error) {
	r.mu.Lock()
	r.reqs, r.memory = append(r.reqs, req), append(r.memory, memoryBytes)
	r.mu.Unlock()
	if r.Err != nil {
		return wire.Done{}, r.Err
	}
	var values []json.RawMessage
	id := 0
	start := func(step string, line int) {
		tool, args, _ := strings.Cut(strings.TrimSpace(step), " ")
		id++
		h.Start(wire.GuestMessage{Op: wire.OpStart, ID: id, Tool: tool, Args: json.RawMessage(args), Line: line})
	}
	// wait takes n replies and orders them by call ID; a non-nil Done
	// ends the program.
	wait := func(n int, line int, catch bool) *wire.Done {
		got := make([]wire.Reply, 0, n)
		for range n {
			rep := h.Wait()
			r.mu.Lock()
			r.replies = append(r.replies, rep)
			r.mu.Unlock()
			switch rep.Outcome {
			case wire.ReplyStopped:
				return &wire.Done{Outcome: wire.OutcomeStopped, Error: rep.Reason, Line: line}
			case wire.ReplyProgramLimit:
				return &wire.Done{Outcome: wire.OutcomeLimit, Error: rep.Reason, Line: line}
			}
			got = append(got, rep)
		}
		slices.SortFunc(got, func(a, b wire.Reply) int { return a.ID - b.ID })
		for _, rep := range got {
			if rep.Outcome != "ok" {
				if !catch {
					return &wire.Done{Outcome: wire.OutcomeError, Line: line,
						Error: fmt.Sprintf("line %d: call %d: %s: %s", line, rep.ID, rep.Outcome, rep.Reason)}
				}
				b, _ := json.Marshal(map[string]string{"outcome": rep.Outcome})
				values = append(values, b)
				continue
			}
			values = append(values, rep.Result)
		}
		return nil
	}
	for i, ln := range strings.Split(req.Source, "\n") {
		line := i + 1
		op, rest, _ := strings.Cut(strings.TrimSpace(ln), " ")
		if o, r, ok := starlarkStep(strings.TrimSpace(ln), req.Tools); ok {
			op, rest = o, r
		}
		var done *wire.Done
		switch op {
		case "":
			continue
		case "call", "try":
			start(rest, line)
			done = wait(1, line, op == "try")
		case "par":
			steps := strings.Split(rest, ";")
			for _, s := range steps {
				start(s, line)
			}
			done = wait(len(steps), line, false)
		case "fail":
			done = &wire.Done{Outcome: wire.OutcomeError, Error: rest, Line: line}
		default:
			done = &wire.Done{Outcome: wire.OutcomeInvalid, Error: "unknown step " + op, Line: line}
		}
		if done != nil {
			return *done, nil
		}
	}
	b, _ := json.Marshal(values)
	return wire.Done{Outcome: wire.OutcomeOK, Result: b, Output: fmt.Sprintf("%d calls\n", id), Steps: int64(id)}, nil
}

// starlarkStep translates one line of the Starlark subset into a step;
// ok is false when the line is not in it.
func starlarkStep(ln string, tools []wire.Tool) (op, rest string, ok bool) {
	inner := func(prefix string) (string, bool) {
		if !strings.HasPrefix(ln, prefix) || !strings.HasSuffix(ln, ")") {
			return "", false
		}
		return ln[len(prefix) : len(ln)-1], true
	}
	if strings.HasPrefix(ln, "#") {
		return "", "", true
	}
	if in, ok := inner("fail("); ok {
		msg, err := strconv.Unquote(strings.TrimSpace(in))
		return "fail", msg, err == nil
	}
	if in, ok := inner("attempt("); ok {
		fn, kw, _ := strings.Cut(in, ",")
		step, ok := callStep(strings.TrimSpace(fn), kw, tools)
		return "try", step, ok
	}
	if in, ok := inner("parallel("); ok {
		var steps []string
		for _, l := range strings.Split(in, "lambda:")[1:] {
			l = strings.TrimSuffix(strings.TrimSpace(l), ",")
			call, ok := parseCall(strings.TrimSpace(l), tools)
			if !ok {
				return "", "", false
			}
			steps = append(steps, call)
		}
		return "par", strings.Join(steps, ";"), len(steps) > 0
	}
	step, ok := parseCall(ln, tools)
	return "call", step, ok
}

// parseCall reads module.function(kwargs) as the step "NAME ARGS".
func parseCall(s string, tools []wire.Tool) (string, bool) {
	open := strings.IndexByte(s, '(')
	if open < 0 || !strings.HasSuffix(s, ")") {
		return "", false
	}
	return callStep(s[:open], s[open+1:len(s)-1], tools)
}

// callStep is the step calling fn (module.function) with kwargs.
func callStep(fn, kwargs string, tools []wire.Tool) (string, bool) {
	module, function, ok := strings.Cut(fn, ".")
	if !ok {
		return "", false
	}
	i := slices.IndexFunc(tools, func(t wire.Tool) bool { return t.Module == module && t.Function == function })
	if i < 0 {
		return "", false
	}
	args := map[string]json.RawMessage{}
	for _, kv := range strings.Split(kwargs, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return "", false
		}
		v = strings.TrimSpace(v)
		if u, err := strconv.Unquote(v); err == nil {
			b, _ := json.Marshal(u)
			args[strings.TrimSpace(k)] = b
			continue
		}
		switch v {
		case "True":
			v = "true"
		case "False":
			v = "false"
		case "None":
			v = "null"
		}
		if !json.Valid([]byte(v)) {
			return "", false
		}
		args[strings.TrimSpace(k)] = json.RawMessage(v)
	}
	b, _ := json.Marshal(args) // keys sorted, as the interpreter encodes them
	return tools[i].Name + " " + string(b), true
}
