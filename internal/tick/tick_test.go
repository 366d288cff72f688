package tick

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// calls records the ticks f saw.
type calls struct {
	mu sync.Mutex
	ns []int
}

func (c *calls) f(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ns = append(c.ns, n)
}

func (c *calls) seen() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.ns)
}

func TestEveryTicksUntilStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c calls
		stop := Every(t.Context(), time.Second, c.f)
		time.Sleep(3500 * time.Millisecond)
		synctest.Wait()
		if got := c.seen(); !slices.Equal(got, []int{1, 2, 3}) {
			t.Fatalf("after 3.5s f saw %v, want [1 2 3]", got)
		}
		stop()
		time.Sleep(5 * time.Second)
		if got := c.seen(); len(got) != 3 {
			t.Fatalf("f ran after stop: %v", got)
		}
	})
}

func TestEveryEndsWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c calls
		ctx, cancel := context.WithCancel(t.Context())
		stop := Every(ctx, time.Second, c.f)
		time.Sleep(1500 * time.Millisecond)
		cancel()
		time.Sleep(5 * time.Second)
		if got := c.seen(); !slices.Equal(got, []int{1}) {
			t.Fatalf("f saw %v, want [1] (nothing after the context ended)", got)
		}
		stop() // still returns once the goroutine has ended on its own
	})
}

// TestStopWaitsForARunningCall: once stop returns, f is done, and the
// ticks that came while it ran do not run it again (a second call would
// close running twice).
func TestStopWaitsForARunningCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		running := make(chan struct{})
		var finished bool
		stop := Every(t.Context(), time.Second, func(int) {
			close(running)
			time.Sleep(10 * time.Second)
			finished = true
		})
		<-running
		stop()
		if !finished {
			t.Fatal("stop returned while f was running")
		}
	})
}
