package program

import (
	"context"

	"github.com/airlock-run/airlock/wasm/program/engine"
	"github.com/airlock-run/airlock/wasm/program/wire"
)

// Native runs programs in-process with engine.Run, the interpreter the
// guest runs: the same Done for the same request and replies, without the
// compile, the instance or the memory cap. It is for tests of the
// workflow, which need no wazero; a worker runs untrusted programs on a
// Runtime, because Native bounds neither memory nor the time of one step.
type Native struct{}

// Run runs req with engine.Run on the caller's goroutine, which is
// therefore the one that calls h. memoryBytes is not enforced.
func (Native) Run(ctx context.Context, req wire.Request, memoryBytes int64, h wire.Host) (wire.Done, error) {
	if err := ctx.Err(); err != nil {
		return wire.Done{}, err
	}
	if _, err := pagesFor(memoryBytes); err != nil {
		return wire.Done{}, err
	}
	return engine.Run(req, h), nil
}
