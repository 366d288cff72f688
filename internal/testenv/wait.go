package testenv

import (
	"errors"
	"fmt"
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

// WaitUntil is WaitFor for a condition that can say why it does not hold
// yet: cond returns nil once it holds, else the reason, and t fails with
// the last reason.
func WaitUntil(t testing.TB, what string, d time.Duration, cond func() error) {
	t.Helper()
	if err := Poll(what, d, cond); err != nil {
		t.Fatal(err)
	}
}

var errNotYet = errors.New("not yet")

// Poll is the loop of WaitFor and WaitUntil, for a goroutine other than the
// test's, which must not call t.Fatal: it returns nil once cond does, or
// after d an error naming what and cond's last reason.
func Poll(what string, d time.Duration, cond func() error) error {
	deadline := time.Now().Add(d)
	delay := 20 * time.Millisecond
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			if err == errNotYet {
				return fmt.Errorf("timed out after %s waiting for %s", d, what)
			}
			return fmt.Errorf("timed out after %s waiting for %s: %w", d, what, err)
		}
		time.Sleep(delay)
		delay = min(delay*3/2, 200*time.Millisecond)
	}
}
