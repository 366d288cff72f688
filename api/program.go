package api

import (
	"encoding/json"
	"time"
)

// Code mode (issue 27): an agent sends a Starlark program; the task runs it
// and every tool call it makes goes through the task's call pipeline like a
// direct call. The program is an Update of the AgentTask (UpdateRunProgram)
// whose ID is the program's idempotency key; its input, a ProgramRequest,
// carries everything that steers the program (source, tool table, limits),
// so a replay runs it the same way whatever the worker's code defaults are.

// UpdateRunProgram runs one program in a task; its Update ID is the
// program's ID (ProgramRequest.ProgramID).
const UpdateRunProgram = "run_program"

// ProgramRequest is the input of UpdateRunProgram.
type ProgramRequest struct {
	// ProgramID is the idempotency key; it is also the Update ID and the
	// prefix of its calls' IDs (ProgramCallID).
	ProgramID string
	// Source is the Starlark program.
	Source string
	// Principal is the caller; only the task's own principal may run one.
	Principal string `json:",omitempty"`
	// Tools are the functions the program may call, sorted by Name: the
	// tools the caller may see, each as module.function.
	Tools []ProgramTool
	// Limits are the program's effective limits (never zero fields: the
	// gateway fills them from configuration and DefaultProgramLimits).
	Limits ProgramLimits
	// Atomic asks for the program's own compensable calls to be rolled
	// back, newest first, when it fails.
	Atomic bool `json:",omitempty"`
	// Inputs, when set, is a JSON object the program reads as the global
	// dict inputs: a plan step's {"vars", "steps", "task"} (PrepareStep).
	// At most MaxProgramInputBytes.
	Inputs json.RawMessage `json:",omitempty"`
	// Subject, when a tool of the table's upstreams acts as the user
	// (token exchange) and the caller signed in with a token, is that
	// token sealed to the worker (Subject); each such call carries it.
	Subject *Subject `json:",omitempty"`
}

// MaxProgramInputBytes bounds ProgramRequest.Inputs (it is in history).
const MaxProgramInputBytes = 1 << 20

// ProgramTool is one tool as a program sees it: Module.Function, called
// as the exposed tool Name on Server's UpstreamTool with Spec.
type ProgramTool struct {
	Name         string // exposed name, as a direct call's Tool
	Module       string // Starlark module name ("filesystem")
	Function     string // function in the module ("read_text_file")
	Server       string
	UpstreamTool string
	Spec         ToolSpec
}

// ProgramLimits bound one program. Each is counted deterministically (in
// steps, calls and bytes, never in time measured by the interpreter), so a
// replay stops at the same place; Timeout is workflow time.
type ProgramLimits struct {
	MaxSourceBytes int
	// MaxCalls is the most tool calls one program may make.
	MaxCalls int
	// MaxDataBytes bounds the arguments plus results of all its calls
	// (they all land in the task's history).
	MaxDataBytes int
	// MaxResultBytes bounds the returned value (JSON); MaxPrintBytes the
	// print output.
	MaxResultBytes int
	MaxPrintBytes  int
	// MaxSteps bounds the interpreter steps of the whole program,
	// MaxStepsBetweenCalls those between two tool calls (an endless loop
	// is stopped there, long before the SDK's deadlock detector).
	MaxSteps             int64
	MaxStepsBetweenCalls int64
	// MaxParallel is the most functions one parallel(...) may run.
	MaxParallel int
	// MemoryBytes is the interpreter's hard memory cap.
	MemoryBytes int64
	// Timeout bounds the program's workflow time, approval waits included.
	Timeout time.Duration
}

// DefaultProgramLimits are the limits a program gets where configuration
// says nothing.
var DefaultProgramLimits = ProgramLimits{
	MaxSourceBytes: 64 << 10,
	MaxCalls:       200,
	MaxDataBytes:   4 << 20,
	MaxResultBytes: 64 << 10,
	MaxPrintBytes:  16 << 10,
	MaxSteps:       10_000_000,
	// 300k steps are ~0.1 s of the wasm guest (3.4M steps/s) and ~0.4 s on
	// a loaded 2-core machine: well under the SDK's deadlock detector,
	// which a stretch without a call must never reach.
	MaxStepsBetweenCalls: 300_000,
	MaxParallel:          16,
	MemoryBytes:          64 << 20,
	Timeout:              time.Hour,
}

// Or is l with each field that is zero or negative taken from d: how
// configuration, and a plan step's overrides, lay over
// DefaultProgramLimits. A limit is never meant to be zero (a program that
// may make no call or print nothing is a configuration mistake, not a
// policy), so zero can mean "not said".
func (l ProgramLimits) Or(d ProgramLimits) ProgramLimits {
	or := func(v, d int) int {
		if v > 0 {
			return v
		}
		return d
	}
	or64 := func(v, d int64) int64 {
		if v > 0 {
			return v
		}
		return d
	}
	return ProgramLimits{
		MaxSourceBytes:       or(l.MaxSourceBytes, d.MaxSourceBytes),
		MaxCalls:             or(l.MaxCalls, d.MaxCalls),
		MaxDataBytes:         or(l.MaxDataBytes, d.MaxDataBytes),
		MaxResultBytes:       or(l.MaxResultBytes, d.MaxResultBytes),
		MaxPrintBytes:        or(l.MaxPrintBytes, d.MaxPrintBytes),
		MaxSteps:             or64(l.MaxSteps, d.MaxSteps),
		MaxStepsBetweenCalls: or64(l.MaxStepsBetweenCalls, d.MaxStepsBetweenCalls),
		MaxParallel:          or(l.MaxParallel, d.MaxParallel),
		MemoryBytes:          or64(l.MemoryBytes, d.MemoryBytes),
		Timeout:              time.Duration(or64(int64(l.Timeout), int64(d.Timeout))),
	}
}

// ProgramOutcome classifies how a program ended.
type ProgramOutcome string

const (
	// ProgramOK: the program ran to its end; Result is its value.
	ProgramOK ProgramOutcome = "ok"
	// ProgramError: the program failed (a tool call it did not catch, or
	// fail(...), or a runtime error); Error and Line say where.
	ProgramError ProgramOutcome = "error"
	// ProgramInvalid: the program did not parse or resolve, or the
	// request was invalid; no tool ran.
	ProgramInvalid ProgramOutcome = "invalid"
	// ProgramLimit: a limit (steps, calls, data, memory, sizes, time)
	// stopped it.
	ProgramLimit ProgramOutcome = "limit"
	// ProgramStopped: an operator, a rollback or the task's end stopped
	// it at a call.
	ProgramStopped ProgramOutcome = "stopped"
)

// ProgramResult is the output of UpdateRunProgram.
type ProgramResult struct {
	ProgramID string
	Outcome   ProgramOutcome
	// Result is the program's return value (main()'s, or the global
	// result) as JSON; null when it returned nothing.
	Result json.RawMessage `json:",omitempty"`
	// Output is what it printed.
	Output string `json:",omitempty"`
	// Error says why it did not end ok; Line is the line it names (0:
	// none).
	Error string `json:",omitempty"`
	Line  int    `json:",omitempty"`
	// Calls are the tool calls it made, in the order they started.
	Calls []ProgramCall `json:",omitempty"`
	// Steps is the interpreter steps it ran.
	Steps int64 `json:",omitempty"`
	// RolledBack lists the call IDs an atomic program's failure rolled
	// back, newest first.
	RolledBack []string `json:",omitempty"`

	// Findings are what the worker's content guard found in the return
	// value (paths "result…") and in what the program printed ("output"),
	// by airlock.yaml's guard.results tightened by the principal's roles
	// (issue 30 §1), recorded here, with the outcome; never a value.
	// Result and Output are as the guard left them (redacted). Guarded:
	// the worker inspected them (tasks since changeProgramGuard), so the
	// gateway does not again.
	Findings []Finding `json:",omitempty"`
	Guarded  bool      `json:",omitempty"`
	// Withheld, when set, is why the guard withheld the program's result
	// (a finding under block): Result and Output are then empty.
	Withheld string `json:",omitempty"`
}

// ProgramDone answers QueryProgram: the program's result when the task
// holds it; else, for a program of an earlier run whose result it no
// longer carries, Repeat names that run (its history records the
// result). Both nil: the task has no record of it finishing.
type ProgramDone struct {
	Result *ProgramResult `json:",omitempty"`
	Repeat *Repeat        `json:",omitempty"`
}

// ProgramCall is one tool call a program made.
type ProgramCall struct {
	CallID  string
	Tool    string
	Line    int `json:",omitempty"`
	Outcome Outcome
	Reason  string `json:",omitempty"`
	// Labels are the task's information-flow labels after the call, when
	// it raised them (CallResult.Labels).
	Labels *Labels `json:",omitempty"`
}

// SignalStopProgram (a StopProgram) stops a running program of the task
// at its next call: the call it waits for, or the next it starts, is
// answered "stopped", and its running calls are cancelled like
// SignalCancelCall's. A program that is not running is not affected.
const SignalStopProgram = "stop_program"

// StopProgram is the payload of SignalStopProgram.
type StopProgram struct {
	ProgramID string
	// By and Reason say who stopped it and why (in the program's Error).
	By     string `json:",omitempty"`
	Reason string `json:",omitempty"`
}

// ProgramStatus is a running program in the task's Status.
type ProgramStatus struct {
	ProgramID string
	// Calls is how many tool calls it has started.
	Calls   int
	Started time.Time
}
