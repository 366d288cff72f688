// Command program is airlock's program interpreter as a wasip1 command
// (wasm/program.wasm): it runs one Starlark program with engine.Run,
// talking to its host (internal/program) over the two functions the host
// module "airlock" exports (see package wire): it receives the Request,
// sends each call's start and wait, receives each Reply, sends the Done
// and exits 0.
//
// It has nothing else: no files, no environment, fixed clocks and random
// numbers (the host's), so that the program runs the same way on every
// replay. A program that takes more memory than the host's cap ends with
// the Go runtime's "out of memory", which the host reports as the
// program's memory limit.
package main

import (
	"encoding/json"
	"os"
	"strconv"
	"unsafe"

	"github.com/airlock-run/airlock/wasm/program/engine"
	"github.com/airlock-run/airlock/wasm/program/wire"
)

// host is wire.Host over the host's functions.
type host struct {
	buf []byte // reused for every message received
	out []byte // reused for every start sent
}

// receive returns the host's next message, growing buf when the host says
// it needs more room (the message stays queued until it fits).
func (h *host) receive() []byte {
	for {
		n := recv(unsafe.Pointer(unsafe.SliceData(h.buf)), uint32(len(h.buf)))
		if n >= 0 {
			return h.buf[:n]
		}
		h.buf = make([]byte, -n)
	}
}

func (h *host) send(m wire.GuestMessage) {
	b, err := json.Marshal(m)
	if err != nil {
		// Every field is a plain value or JSON the engine made; a failure
		// is a bug, and the host reports the crash.
		panic("program: encode the message to the host: " + err.Error())
	}
	send(unsafe.Pointer(unsafe.SliceData(b)), uint32(len(b)))
}

// Start sends op start, encoded by hand: encoding/json's reflection, and
// its re-validation of Args, cost more in the guest than the rest of a
// call. Args is the engine's JSON; the host decodes the message with
// encoding/json and refuses it if it is not.
func (h *host) Start(m wire.GuestMessage) {
	b := append(h.out[:0], `{"Op":"start","ID":`...)
	b = strconv.AppendInt(b, int64(m.ID), 10)
	b = append(b, `,"Tool":`...)
	b = appendString(b, m.Tool)
	if len(m.Args) > 0 {
		b = append(b, `,"Args":`...)
		b = append(b, m.Args...)
	}
	b = append(b, `,"Line":`...)
	b = strconv.AppendInt(b, int64(m.Line), 10)
	b = append(b, '}')
	h.out = b
	send(unsafe.Pointer(unsafe.SliceData(b)), uint32(len(b)))
}

// appendString appends s as a JSON string: as it is when it needs no
// escape (tool names do not), else as encoding/json writes it.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

var waitMessage = []byte(`{"Op":"wait"}`)

func (h *host) Wait() wire.Reply {
	send(unsafe.Pointer(unsafe.SliceData(waitMessage)), uint32(len(waitMessage)))
	var r wire.Reply
	if err := json.Unmarshal(h.receive(), &r); err != nil {
		panic("program: decode the host's reply: " + err.Error())
	}
	return r
}

// warmHost answers the warm-up program's calls at once, in order.
type warmHost struct{ queue []int }

func (w *warmHost) Start(m wire.GuestMessage) { w.queue = append(w.queue, m.ID) }

func (w *warmHost) Wait() wire.Reply {
	id := w.queue[0]
	w.queue = w.queue[1:]
	return wire.Reply{ID: id, Outcome: "ok", Result: json.RawMessage(`{"n":1}`)}
}

// warmUp runs the first use of everything a program needs before the
// first recv, so that a warm instance (one the host started ahead of its
// program) has paid for it: encoding/json builds its codec of a type at
// the type's first use, which in the guest took most of a millisecond
// for the wire types alone, and the interpreter has its own first-use
// paths. Every instance does the same, so what a program observes does
// not depend on it.
func warmUp() {
	var req wire.Request
	_ = json.Unmarshal([]byte(`{"ProgramID":"w","Source":"x = 1","Tools":[{"Name":"w__f","Module":"w","Function":"f"}],"Limits":{"MaxResultBytes":1,"MaxPrintBytes":1,"MaxSteps":1,"MaxStepsBetweenCalls":1,"MaxParallel":1}}`), &req)
	var rep wire.Reply
	_ = json.Unmarshal([]byte(`{"ID":1,"Outcome":"ok","Result":{"a":[1,"b",null,true,1.5]},"Reason":"r"}`), &rep)
	_, _ = json.Marshal(wire.GuestMessage{Op: wire.OpStart, ID: 1, Tool: "w__f", Args: json.RawMessage(`{"i":1}`), Line: 1})
	_, _ = json.Marshal(wire.GuestMessage{Op: wire.OpDone, Done: &wire.Done{Outcome: wire.OutcomeOK, Result: json.RawMessage(`{"r":1}`), Output: "o", Error: "e", Line: 1, Steps: 1}})
	engine.Run(wire.Request{
		ProgramID: "warm-up",
		Source:    "def main():\n    r = [w.f(i = i) for i in range(3)]\n    print(r)\n    return {\"r\": r}\n",
		Tools:     []wire.Tool{{Name: "w__f", Module: "w", Function: "f"}},
		Limits:    wire.Limits{MaxResultBytes: 1 << 10, MaxPrintBytes: 1 << 10, MaxSteps: 1 << 20, MaxStepsBetweenCalls: 1 << 20, MaxParallel: 1},
	}, &warmHost{})
}

func main() {
	h := &host{buf: make([]byte, 64<<10)}
	warmUp()
	// A warm instance waits here until the host has a program for it.
	var req wire.Request
	if err := json.Unmarshal(h.receive(), &req); err != nil {
		panic("program: decode the host's request: " + err.Error())
	}
	done := engine.Run(req, h)
	h.send(wire.GuestMessage{Op: wire.OpDone, Done: &done})
	os.Exit(0)
}
