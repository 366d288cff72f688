package main

import (
	"fmt"
	"io"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/redact"
)

// printPrograms lists the task's running programs (code mode): each with
// the calls it has started and when it started. Their calls are in "in
// flight" and "recent calls" like any call; airlock audit show has their
// source and lines.
func printPrograms(w io.Writer, ps []api.ProgramStatus) {
	if len(ps) == 0 {
		return
	}
	fmt.Fprintln(w, "programs running:")
	for _, p := range ps {
		calls := "1 call"
		if p.Calls != 1 {
			calls = fmt.Sprintf("%d calls", p.Calls)
		}
		// A program's ID is the agent's idempotency key: printed
		// escaped, like any text an agent chose.
		fmt.Fprintf(w, "  %-24s %-10s started %s\n", redact.VisibleLine(p.ProgramID), calls, p.Started.Local().Format(time.DateTime))
	}
}
