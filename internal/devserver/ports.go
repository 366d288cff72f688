package devserver

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

const loopbackIP = "127.0.0.1"

type ports struct {
	frontend, frontendHTTP, history, matching, worker int
}

func loopback(port int) string {
	return net.JoinHostPort(loopbackIP, strconv.Itoa(port))
}

// pickPorts chooses the frontend's ports on ip and the internal services'
// ports on loopback. The server binds them itself a moment later and, on
// failure, calls log.Fatal, which exits the process; so a busy frontend port
// is reported here as an error instead. All listeners stay open until every
// port is chosen, so the picks are distinct.
func pickPorts(ip string, frontend int) (ports, error) {
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	listen := func(host string, port int) (int, error) {
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return 0, err
		}
		listeners = append(listeners, l)
		addr, ok := l.Addr().(*net.TCPAddr)
		if !ok {
			return 0, fmt.Errorf("listener on %s has no tcp address", host)
		}
		return addr.Port, nil
	}

	var p ports
	var err error
	if p.frontend, err = listen(ip, frontend); err != nil {
		return ports{}, fmt.Errorf("frontend port %d on %s is not available: %w", frontend, ip, err)
	}
	// The ports airlock picks (not the user's frontend port) come from
	// below the kernel's ephemeral range when it can: a port the kernel
	// handed out for :0 is free only until it hands it out again, as the
	// source port of any connection opened before the server binds it,
	// and a bind that fails then exits the process.
	pick := func(host string) (int, error) {
		for _, port := range fixedCandidates() {
			if got, err := listen(host, port); err == nil {
				return got, nil
			}
		}
		return listen(host, 0)
	}
	if p.frontendHTTP, err = pick(ip); err != nil {
		return ports{}, fmt.Errorf("pick frontend http port on %s: %w", ip, err)
	}
	for _, dst := range []*int{&p.history, &p.matching, &p.worker} {
		if *dst, err = pick(loopbackIP); err != nil {
			return ports{}, fmt.Errorf("pick internal port: %w", err)
		}
	}
	return p, nil
}

// The range internal ports are tried in, when it lies below the
// ephemeral range (Linux's default is 32768-60999).
const (
	fixedLow, fixedHigh = 10000, 20000
	fixedTries          = 20
)

// fixedCandidates are up to fixedTries random ports of [fixedLow,
// fixedHigh), or none when the kernel's ephemeral range is unknown or
// reaches into it.
func fixedCandidates() []int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return nil
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return nil
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low < fixedHigh {
		return nil
	}
	out := make([]int, fixedTries)
	for i := range out {
		out[i] = fixedLow + rand.IntN(fixedHigh-fixedLow)
	}
	return out
}
