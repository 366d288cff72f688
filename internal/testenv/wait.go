package testenv

import (
	"testing"
	"time"
)

// WaitFor polls cond until it is true, or fails t after d, naming what it
// waited for. It is the one polling loop of the tests: a test that waits on
// something it cannot be told about (a process, a server in the background,
// a visibility index) calls it instead of a deadline loop of its own, and
// never sleeps for a fixed time in the hope that the thing has happened.
//
// cond is first asked at once, then every 20 ms, growing to 200 ms, so a
// quick condition costs no sleep and a slow one no busy loop.
func WaitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	delay := 20 * time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(delay)
		delay = min(delay*3/2, 200*time.Millisecond)
	}
}
