package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/airlock-run/airlock/api"
)

// printLocks shows, in airlock tasks show, the resource locks a task's
// calls hold and wait for (issue 16 §4), and who holds what it waits for.
func printLocks(w io.Writer, locks []api.TaskLock) {
	if len(locks) == 0 {
		return
	}
	fmt.Fprintln(w, "locks:")
	for _, l := range locks {
		line := fmt.Sprintf("  %-7s %-9s %-32s call %s (%s) since %s", l.State, l.Mode, l.Key, l.CallID, l.Tool, l.Since.Local().Format(time.TimeOnly))
		if l.State == api.LockWaiting && len(l.Holders) > 0 {
			var hs []string
			for _, h := range l.Holders {
				hs = append(hs, fmt.Sprintf("task %s (call %s)", h.TaskID, h.CallID))
			}
			line += "; held by " + strings.Join(hs, ", ")
		}
		fmt.Fprintln(w, line)
	}
}
