package testenv

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	n := 0
	if err := Poll("the third try", time.Minute, func() error {
		if n++; n < 3 {
			return errors.New("try again")
		}
		return nil
	}); err != nil || n != 3 {
		t.Fatalf("Poll = %v after %d tries, want nil after 3", err, n)
	}
	err := Poll("never", 50*time.Millisecond, func() error { return errors.New("the reason") })
	if err == nil || !strings.Contains(err.Error(), "waiting for never: the reason") {
		t.Fatalf("Poll of a condition that never holds = %v, want a timeout naming it and the last reason", err)
	}
}
