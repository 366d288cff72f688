package timeline

import (
	"fmt"
	"strings"
	"time"

	historypb "go.temporal.io/api/history/v1"

	"github.com/airlock-run/airlock/api"
)

// EventLock is a resource lock a call (or its compensation) asked for,
// and whether and when it was granted (issue 16 §4).
const EventLock = "lock"

// Lock is one resource lock a call asked for, read from its RequestLock
// activity and the lock workflow's answers.
type Lock struct {
	Key  string `json:"key"`
	Mode string `json:"mode"`
	// Compensation: taken for the call's compensation, during a rollback.
	Compensation bool       `json:"undo,omitempty"`
	Requested    time.Time  `json:"requested"`
	Granted      *time.Time `json:"granted,omitempty"`
	// Holders are the tasks the lock workflow said held the lock while
	// the call waited.
	Holders []string `json:"holders,omitempty"`
}

// callOfLock finds the call a lock's owner names: the call itself, or
// the call whose compensation ("undo-<call>") asked.
func (b *builder) callOfLock(callID string) (*callState, bool) {
	if cs, ok := b.calls[callID]; ok {
		return cs, false
	}
	if id, ok := api.CallOfCompensationID(callID); ok {
		if cs, ok := b.calls[id]; ok {
			return cs, true
		}
	}
	return nil, false
}

func (b *builder) lockRequested(at time.Time, a *historypb.ActivityTaskScheduledEventAttributes) {
	var r api.LockRequest
	if err := b.decode(a.GetInput(), &r); err != nil {
		b.problem("lock request: %v", err)
		return
	}
	cs, undo := b.callOfLock(r.Owner.CallID)
	if cs == nil {
		b.problem("lock request for call %s, which the history does not show", r.Owner.CallID)
		return
	}
	cs.c.Locks = append(cs.c.Locks, Lock{Key: r.Key, Mode: r.Mode, Compensation: undo, Requested: at})
}

func (b *builder) lockSignal(at time.Time, a *historypb.WorkflowExecutionSignaledEventAttributes) {
	var g api.LockGrant
	if err := b.decode(a.GetInput(), &g); err != nil {
		b.problem("lock grant: %v", err)
		return
	}
	cs, undo := b.callOfLock(g.CallID)
	if cs == nil {
		return // an answer to a request given up in an earlier run
	}
	for i := len(cs.c.Locks) - 1; i >= 0; i-- {
		l := &cs.c.Locks[i]
		if l.Key != g.Key || l.Compensation != undo || l.Granted != nil {
			continue
		}
		if g.Granted {
			l.Granted = &at
		} else {
			l.Holders = l.Holders[:0]
			for _, h := range g.Holders {
				l.Holders = append(l.Holders, h.TaskID)
			}
		}
		return
	}
}

// lockEvents are a call's lock lines: granted (after how long, behind
// whom) or not granted.
func lockEvents(c *Call, base func(time.Time, int, string, string, map[string]any) event) []event {
	var out []event
	for _, l := range c.Locks {
		f := map[string]any{"key": l.Key, "mode": l.Mode, "granted": l.Granted != nil}
		what := "lock"
		if l.Compensation {
			what, f["compensation"] = "lock for the compensation", true
		}
		behind := ""
		if len(l.Holders) > 0 {
			f["holders"] = l.Holders
			behind = ", behind task " + strings.Join(l.Holders, ", task ")
		}
		at, text := l.Requested, fmt.Sprintf("%s %s (%s): not granted%s", what, l.Key, l.Mode, behind)
		if l.Granted != nil {
			waited := l.Granted.Sub(l.Requested)
			f["waited_ms"] = waited.Milliseconds()
			at, text = *l.Granted, fmt.Sprintf("%s %s (%s): granted after %s%s", what, l.Key, l.Mode, waited.Round(time.Millisecond), behind)
		}
		out = append(out, base(at, 1, EventLock, text, f))
	}
	return out
}
