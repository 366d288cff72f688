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
	"unsafe"

	"github.com/airlock-run/airlock/wasm/program/engine"
	"github.com/airlock-run/airlock/wasm/program/wire"
)

// host is wire.Host over the host's functions.
type host struct {
	buf []byte // reused for every message received
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

func (h *host) Start(m wire.GuestMessage) {
	m.Op = wire.OpStart
	h.send(m)
}

func (h *host) Wait() wire.Reply {
	h.send(wire.GuestMessage{Op: wire.OpWait})
	var r wire.Reply
	if err := json.Unmarshal(h.receive(), &r); err != nil {
		panic("program: decode the host's reply: " + err.Error())
	}
	return r
}

func main() {
	h := &host{buf: make([]byte, 64<<10)}
	// A warm instance waits here until the host has a program for it.
	var req wire.Request
	if err := json.Unmarshal(h.receive(), &req); err != nil {
		panic("program: decode the host's request: " + err.Error())
	}
	done := engine.Run(req, h)
	h.send(wire.GuestMessage{Op: wire.OpDone, Done: &done})
	os.Exit(0)
}
