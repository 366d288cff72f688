package program

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/tetratelabs/wazero/sys"

	"github.com/airlock-run/airlock/wasm/program/wire"
)

// Run runs one program in a fresh instance with a memory cap of
// memoryBytes (rounded up to 64 KiB pages; 0 means DefaultMemoryBytes)
// and returns how it ended.
//
// It calls h.Start and h.Wait only on its caller's goroutine, for each
// start and wait the guest sends. Whatever the guest does, the Done is
// the same for the same request and cap: its death for lack of memory is
// Outcome "limit", any other death (a crash, an exit without done, a
// broken protocol) Outcome "error", with an error that names no time and
// no address. The error return is for what is not the program's doing: a
// module that did not compile or instantiate, ctx ended, Close.
//
// Run waits for the compilation (see Ready), and with Options.Lazy starts
// it. When ctx ends, Run returns
// at once, before the guest's next message, and the guest is stopped.
func (r *Runtime) Run(ctx context.Context, req wire.Request, memoryBytes int64, h wire.Host) (wire.Done, error) {
	pages, err := pagesFor(memoryBytes)
	if err != nil {
		return wire.Done{}, err
	}
	if err := ctx.Err(); err != nil {
		return wire.Done{}, err
	}
	r.load()
	select {
	case <-r.ready:
	case <-ctx.Done():
		return wire.Done{}, ctx.Err()
	}
	if r.err != nil {
		return wire.Done{}, r.err
	}
	if r.minPages > pages {
		return wire.Done{Outcome: wire.OutcomeLimit, Error: fmt.Sprintf(
			"the program's memory limit, %s, is below the %s its interpreter starts with; raise the limit",
			mib(int64(pages)*pageSize), mib(int64(r.minPages)*pageSize))}, nil
	}
	b, err := json.Marshal(req)
	if err != nil {
		return wire.Done{}, fmt.Errorf("program: encode the request: %w", err)
	}
	inst, err := r.take(pages)
	if err != nil {
		return wire.Done{}, err
	}
	defer inst.stop()
	inst.toGuest <- b // the channel is empty: the guest is owed only this
	for {
		// First, so that a ctx that ended during Start or Wait ends Run
		// before the guest's next message.
		if err := ctx.Err(); err != nil {
			return wire.Done{}, err
		}
		select {
		case m := <-inst.fromGuest:
			switch m.Op {
			case wire.OpStart:
				h.Start(*m)
			case wire.OpWait:
				rep := h.Wait()
				b, err := json.Marshal(rep)
				if err != nil {
					return wire.Done{}, fmt.Errorf("program: encode the reply to call %d: %w", rep.ID, err)
				}
				// Never blocks: the guest is owed only this reply
				// (hostSend refuses a wait while one is owed).
				inst.toGuest <- b
			case wire.OpDone:
				return *m.Done, nil
			}
		case <-inst.exited:
			if r.isClosed() {
				return wire.Done{}, ErrClosed
			}
			if ctx.Err() != nil {
				return wire.Done{}, ctx.Err()
			}
			return inst.death(), nil
		case <-ctx.Done():
			return wire.Done{}, ctx.Err()
		}
	}
}

// pagesFor is a memory cap in pages.
func pagesFor(memoryBytes int64) (uint32, error) {
	switch {
	case memoryBytes == 0:
		memoryBytes = DefaultMemoryBytes
	case memoryBytes < 0:
		return 0, fmt.Errorf("program: memory limit %d bytes is negative", memoryBytes)
	case memoryBytes > maxPages*pageSize:
		return 0, fmt.Errorf("program: memory limit %d bytes is over the 4 GiB a wasm32 guest can address", memoryBytes)
	}
	return uint32((memoryBytes + pageSize - 1) / pageSize), nil
}

// death is the Done of a guest that ended without sending one.
func (inst *instance) death() wire.Done {
	fail := func(format string, args ...any) wire.Done {
		return wire.Done{Outcome: wire.OutcomeError, Error: fmt.Sprintf(format, args...)}
	}
	var exit *sys.ExitError
	switch {
	case inst.fault != "":
		return fail("the program's interpreter broke its protocol with airlock (an airlock bug; please report it): %s", inst.fault)
	case inst.stderr.outOfMemory():
		return wire.Done{Outcome: wire.OutcomeLimit, Error: fmt.Sprintf(
			"the program used more than its %s of memory; work on less data at a time", mib(int64(inst.pages)*pageSize))}
	case inst.exitErr == nil:
		return fail("the program's interpreter returned without a result (an airlock bug; please report it)")
	case errors.As(inst.exitErr, &exit) && exit.ExitCode() == 0:
		return fail("the program's interpreter exited without a result (an airlock bug; please report it)")
	case errors.As(inst.exitErr, &exit):
		msg := crashLine(string(inst.stderr.buf))
		if msg == "" {
			return fail("the program's interpreter exited with code %d without a result (an airlock bug; please report it)", exit.ExitCode())
		}
		return fail("the program's interpreter crashed (an airlock bug; please report it): %s", msg)
	default:
		return fail("the program's interpreter crashed (an airlock bug; please report it): %s", trapLine(inst.exitErr.Error()))
	}
}

// maxDetail bounds the crash detail a Done quotes.
const maxDetail = 300

var hexNumber = regexp.MustCompile(`0x[0-9a-fA-F]+`)

// sanitize cuts a crash detail to one bounded line with its hexadecimal
// numbers (addresses, program counters) masked: they describe the
// guest's memory, not the program.
func sanitize(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	s = hexNumber.ReplaceAllString(strings.TrimSpace(s), "0x…")
	if len(s) > maxDetail {
		s = strings.ToValidUTF8(s[:maxDetail], "") + "…"
	}
	return s
}

// crashLine is the line of a Go runtime's crash report that says what
// happened ("panic: ...", "fatal error: ..."), else its first line.
func crashLine(stderr string) string {
	first := ""
	for line := range strings.Lines(stderr) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") {
			return sanitize(line)
		}
		if first == "" {
			first = line
		}
	}
	return sanitize(first)
}

// trapLine is what a wazero trap says, without the function wazero names
// first ("module[] function[_start] failed: ") and the stack after it.
func trapLine(s string) string {
	if _, rest, ok := strings.Cut(s, "failed: "); ok {
		s = rest
	}
	return sanitize(s)
}

func mib(b int64) string {
	if b%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", b>>20)
	}
	return fmt.Sprintf("%d bytes", b)
}
