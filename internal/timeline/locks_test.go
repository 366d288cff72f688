package timeline

import (
	"slices"
	"strings"
	"testing"
)

// TestLocksTimeline renders the recorded tasks that took resource locks
// (issue 16 §4): the holder (its calls and its rollback, whose
// compensation took the lock too) and the waiter, one of whose calls was
// refused naming the lock and its holder (outcome locked). The lock
// traffic (RequestLock activities, grant and release signals) makes no
// problem and no call of its own.
func TestLocksTimeline(t *testing.T) {
	for _, name := range []string{"locks_v1", "locks_v1_waiter"} {
		t.Run(name, func(t *testing.T) {
			tl := build(t, []string{name + "_run1"}, nil)
			for _, c := range tl.Calls {
				if strings.HasPrefix(c.Tool, "RequestLock") || c.Tool == "" {
					t.Errorf("a lock request shows as call %+v", c)
				}
			}
			var waited, undo bool
			for _, c := range tl.Calls {
				for _, l := range c.Locks {
					waited = waited || l.Granted != nil && len(l.Holders) > 0 && !l.Compensation
					undo = undo || l.Compensation && l.Granted != nil
				}
			}
			if name == "locks_v1" && !undo {
				t.Error("the holder's rollback shows no lock taken for its compensation")
			}
			if name == "locks_v1_waiter" && !waited {
				t.Error("the waiter shows no lock granted after waiting behind a holder")
			}
			if name == "locks_v1_waiter" {
				i := slices.IndexFunc(tl.Calls, func(c *Call) bool { return c.Result != nil && c.Result.Outcome == "locked" })
				if i < 0 {
					t.Fatalf("no locked call in the waiter's timeline")
				}
				if r := tl.Calls[i].Result.Reason; !strings.Contains(r, `lock "file:g"`) || !strings.Contains(r, "is held by task ") {
					t.Errorf("locked call's reason %q does not name the lock and its holder", r)
				}
			}
			checkGolden(t, tl, name)
		})
	}
}
