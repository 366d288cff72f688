package api

import "encoding/json"

// Sampling and elicitation across processes (issue 14, "mrtr"): a worker
// with no gateway in its process publishes an upstream's request in its
// call's heartbeats (CallProgress.Asks); the gateway of the client that
// waits on the call asks the client and sends the answer, sealed to the
// activity's key, to the task (SignalCallInput); the activity reads it
// with QueryCallInput. Only the activity can open it, so the signal
// recorded in the task's history holds no answer in clear; the activity
// records the answer masked by the tool's redact paths (Exchange), as for
// a client in its process.
const (
	// SignalCallInput (a CallInput) carries a client's sealed answer to an
	// upstream's request during a call.
	SignalCallInput = "call_input"
	// QueryCallInput (call ID, ask ID) returns the CallInput received for
	// the ask (an empty one until it arrives).
	QueryCallInput = "call_input"
)

// CallAsk is an upstream's request during a call that waits for the
// client's answer.
type CallAsk struct {
	ID string
	// Kind is "sampling" or "elicitation"; Request the upstream's params.
	Kind    string
	Request json.RawMessage
	// Key is the X25519 public key the answer is sealed to (the private
	// key never leaves the activity's memory).
	Key []byte
}

// CallInput is a client's answer to a CallAsk: Sealed (by Peer, the
// gateway's one-time X25519 public key) or Refused, saying why none comes.
type CallInput struct {
	CallID  string
	AskID   string
	Peer    []byte `json:",omitempty"`
	Sealed  []byte `json:",omitempty"`
	Refused string `json:",omitempty"`
}
