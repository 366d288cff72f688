package testenv

import (
	"errors"
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
	WaitUntil(t, what, d, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

var errNotYet = errors.New("not yet")

// WaitUntil is WaitFor for a condition that can say why it does not hold
// yet: cond returns nil once it holds, else the reason, and t fails with
// the last reason.
func WaitUntil(t testing.TB, what string, d time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	delay := 20 * time.Millisecond
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			if err == errNotYet {
				t.Fatalf("timed out after %s waiting for %s", d, what)
			}
			t.Fatalf("timed out after %s waiting for %s: %v", d, what, err)
		}
		time.Sleep(delay)
		delay = min(delay*3/2, 200*time.Millisecond)
	}
}
