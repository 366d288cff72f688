package devserver

import (
	"net"
	"strconv"
	"testing"
)

// TestPickPortsBelowTheEphemeralRange: the ports airlock picks are
// distinct, and come from below the kernel's ephemeral range when it
// starts above fixedHigh, so no connection's source port takes one
// before the server binds it. A busy frontend port is an error.
func TestPickPortsBelowTheEphemeralRange(t *testing.T) {
	p, err := pickPorts(loopbackIP, 0)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, port := range []int{p.frontend, p.frontendHTTP, p.history, p.matching, p.worker} {
		if seen[port] || port <= 0 {
			t.Fatalf("ports %+v: want five distinct ports", p)
		}
		seen[port] = true
	}
	if fixedCandidates() != nil {
		for _, port := range []int{p.frontendHTTP, p.history, p.matching, p.worker} {
			if port < fixedLow || port >= fixedHigh {
				t.Errorf("internal port %d outside [%d, %d)", port, fixedLow, fixedHigh)
			}
		}
	}
	l, err := net.Listen("tcp", loopback(0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	busy := l.Addr().(*net.TCPAddr).Port
	if _, err := pickPorts(loopbackIP, busy); err == nil {
		t.Errorf("frontend port %s in use: want an error", strconv.Itoa(busy))
	}
}
