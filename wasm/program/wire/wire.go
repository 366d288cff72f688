// Package wire is the protocol between airlock's program interpreter (the
// Starlark guest, wasm/program) and its host (internal/program, driven by
// the AgentTask workflow). It imports only the standard library, so the
// guest can use it.
//
// The guest imports two host functions from module "airlock":
//
//	send(ptr, len uint32) int32  hand the host one JSON GuestMessage
//	recv(ptr, cap uint32) int32  block until the host's next JSON message
//	                             (the Request first, then Replies) and copy
//	                             it to memory; the result is its length, or
//	                             -(needed length) when cap is too small
//	                             (the message stays queued)
//
// The guest reads the Request, then for each tool call sends Op "start"
// (the host starts the call and returns at once) and, when every thread
// of the program waits for a call, Op "wait" followed by recv of the next
// Reply (in the host's deterministic order: the workflow's). It ends with
// one Op "done" carrying Done, and exits.
package wire

import "encoding/json"

// Request starts a program. Every value that steers it is here (so it is
// in the task's history): the source, the tool table and the limits.
type Request struct {
	ProgramID string
	Source    string
	Tools     []Tool
	Limits    Limits
	// Inputs, when set, is a JSON object the program reads as the global
	// dict inputs (a plan step's vars and earlier steps' results); absent,
	// the program has no such global.
	Inputs json.RawMessage `json:",omitempty"`
}

// Tool is one callable function: Module.Function calls the tool Name.
type Tool struct {
	Name     string
	Module   string
	Function string
}

// Limits are the interpreter's own limits (the call, data and time limits
// are the host's: it refuses a call past them with Reply.Outcome "limit").
type Limits struct {
	MaxResultBytes       int
	MaxPrintBytes        int
	MaxSteps             int64
	MaxStepsBetweenCalls int64
	MaxParallel          int
}

// Message ops.
const (
	OpStart = "start"
	OpWait  = "wait"
	OpDone  = "done"
)

// GuestMessage is one message from the guest.
type GuestMessage struct {
	Op string
	// ID numbers the call from 1, in start order (OpStart).
	ID   int    `json:",omitempty"`
	Tool string `json:",omitempty"` // the tool's Name
	// Args is the call's arguments, a JSON object.
	Args json.RawMessage `json:",omitempty"`
	// Line is the program line of the call.
	Line int   `json:",omitempty"`
	Done *Done `json:",omitempty"` // OpDone
}

// Outcomes of Done (the api.ProgramOutcome values).
const (
	OutcomeOK      = "ok"
	OutcomeError   = "error"
	OutcomeInvalid = "invalid"
	OutcomeLimit   = "limit"
	OutcomeStopped = "stopped"
)

// Done is how the program ended.
type Done struct {
	Outcome string
	// Result is the returned value as JSON (OutcomeOK).
	Result json.RawMessage `json:",omitempty"`
	Output string          `json:",omitempty"`
	Error  string          `json:",omitempty"`
	Line   int             `json:",omitempty"`
	Steps  int64           `json:",omitempty"`
}

// Reply outcomes besides the call's own api.Outcome values: the program
// must end now, and attempt(...) cannot catch it.
const (
	// ReplyStopped: an operator, a rollback, the task's end or the
	// program's Timeout stopped it (Done outcome "stopped", or "limit"
	// for the Timeout: the host's Reason says which).
	ReplyStopped = "stopped"
	// ReplyProgramLimit: the call would pass one of the program's own
	// limits (calls, data); Done outcome "limit" with Reason.
	ReplyProgramLimit = "program_limit"
)

// Reply is the end of one call. Outcome is the call's api.Outcome ("ok",
// "tool_error", "denied", "limit", ... or ReplyStopped or ReplyProgramLimit); Result is the tool's value as JSON (its structured
// content, else its text); Reason says why it did not end ok.
type Reply struct {
	ID      int
	Outcome string
	Result  json.RawMessage `json:",omitempty"`
	Reason  string          `json:",omitempty"`
}

// Host runs a program's calls. Start begins one and returns at once; Wait
// blocks until one started call has ended and returns its Reply, in an
// order that depends only on the history (the workflow's).
type Host interface {
	Start(m GuestMessage)
	Wait() Reply
}
