package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
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
