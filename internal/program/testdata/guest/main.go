// Command guest is internal/program's test guest: a wasip1 command that
// speaks the airlock host protocol (package wire) and, instead of running
// Starlark, obeys the words of the Request's Source:
//
//	calls N      N calls, one at a time; done with their replies
//	parallel N   start N calls, then wait for each; done with the replies
//	alloc N      keep N MiB live, then done
//	spin N       N iterations of arithmetic, then done
//	env          done with what the guest observes (args, env, clocks, rand, files)
//	exit N       exit with code N before any done
//	panic        panic
//	garbage      send bytes that are not JSON
//	badop        send op "jump"
//	big          send a message past the host's limit
//	recvfirst    recv with no message due
//	waitidle     wait with no call in flight
//	twice        send wait twice, recv once
//	skipid       start call 2 first
//	nodone       send done without a Done
//	tinybuf      receive every message through a 1-byte first try
package main

import (
	"crypto/rand"
	"encoding/json"
	mrand "math/rand"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/airlock-run/airlock/wasm/program/wire"
)

//go:wasmimport airlock send
func send(ptr unsafe.Pointer, n uint32) int32

//go:wasmimport airlock recv
func recv(ptr unsafe.Pointer, c uint32) int32

var first = 4096

func recvBytes() []byte {
	buf := make([]byte, first)
	for {
		n := recv(unsafe.Pointer(&buf[0]), uint32(len(buf)))
		if n >= 0 {
			return buf[:n]
		}
		buf = make([]byte, -n)
	}
}

func sendRaw(b []byte) { send(unsafe.Pointer(&b[0]), uint32(len(b))) }

func sendMsg(m wire.GuestMessage) {
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	sendRaw(b)
}

func done(result any) {
	b, err := json.Marshal(result)
	if err != nil {
		panic(err)
	}
	sendMsg(wire.GuestMessage{Op: wire.OpDone, Done: &wire.Done{Outcome: wire.OutcomeOK, Result: b}})
	os.Exit(0)
}

func wait() wire.Reply {
	sendMsg(wire.GuestMessage{Op: wire.OpWait})
	var r wire.Reply
	if err := json.Unmarshal(recvBytes(), &r); err != nil {
		panic(err)
	}
	return r
}

func start(id int) {
	sendMsg(wire.GuestMessage{Op: wire.OpStart, ID: id, Tool: "t", Args: json.RawMessage(`{"i":` + strconv.Itoa(id) + `}`), Line: id})
}

var sink [][]byte

func main() {
	// What wasm/program's warm-up does for the wire types.
	var warm wire.Request
	_ = json.Unmarshal([]byte(`{"ProgramID":"w","Source":"x","Tools":[{"Name":"a"}],"Limits":{"MaxSteps":1}}`), &warm)
	_, _ = json.Marshal(wire.GuestMessage{Op: "done", Args: json.RawMessage(`{}`), Done: &wire.Done{Result: json.RawMessage(`1`)}})
	var rep wire.Reply
	_ = json.Unmarshal([]byte(`{"ID":1,"Outcome":"ok","Result":{"a":[1]}}`), &rep)
	// A warm instance is parked in this first recv.
	var req wire.Request
	if err := json.Unmarshal(recvBytes(), &req); err != nil {
		panic(err)
	}
	word := append(strings.Fields(req.Source), "")
	arg := 0
	if len(word) > 1 {
		arg, _ = strconv.Atoi(word[1])
	}
	switch word[0] {
	case "calls":
		var got []wire.Reply
		for i := 1; i <= arg; i++ {
			start(i)
			got = append(got, wait())
		}
		done(got)
	case "parallel":
		for i := 1; i <= arg; i++ {
			start(i)
		}
		var got []wire.Reply
		for range arg {
			got = append(got, wait())
		}
		done(got)
	case "tinybuf":
		first = 1
		start(1)
		done([]wire.Reply{wait()})
	case "alloc":
		for range arg {
			b := make([]byte, 1<<20)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1 // touch every page
			}
			sink = append(sink, b)
		}
		done(len(sink))
	case "spin":
		x := 0
		for i := range arg {
			x = x*31 + i
		}
		done(x)
	case "env":
		var rb [8]byte
		_, _ = rand.Read(rb[:])
		t1 := time.Now()
		t2 := time.Now()
		_, dirErr := os.ReadDir("/")
		_, fileErr := os.ReadFile("/etc/passwd")
		done(map[string]any{
			"args":    os.Args,
			"env":     os.Environ(),
			"now":     t1.UnixNano(),
			"elapsed": t2.Sub(t1).Nanoseconds(),
			"crypto":  rb,
			"math":    mrand.Int63(),
			"dir":     dirErr != nil,
			"file":    fileErr != nil,
		})
	case "exit":
		os.Exit(arg)
	case "panic":
		var m map[string]int
		m["boom"] = 1
	case "garbage":
		sendRaw([]byte("not json {"))
	case "badop":
		sendMsg(wire.GuestMessage{Op: "jump"})
	case "big":
		b := make([]byte, 16<<20+1)
		sendRaw(b)
	case "recvfirst":
		recvBytes()
	case "waitidle":
		wait()
	case "twice":
		start(1)
		start(2)
		sendMsg(wire.GuestMessage{Op: wire.OpWait})
		sendMsg(wire.GuestMessage{Op: wire.OpWait})
	case "skipid":
		start(2)
	case "nodone":
		sendMsg(wire.GuestMessage{Op: wire.OpDone})
	}
	// Falling off main: exit 0 without done.
}
