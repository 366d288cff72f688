package devserver

import (
	"fmt"
	"net"
	"strconv"
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
	if p.frontendHTTP, err = listen(ip, 0); err != nil {
		return ports{}, fmt.Errorf("pick frontend http port on %s: %w", ip, err)
	}
	for _, dst := range []*int{&p.history, &p.matching, &p.worker} {
		if *dst, err = listen(loopbackIP, 0); err != nil {
			return ports{}, fmt.Errorf("pick internal port: %w", err)
		}
	}
	return p, nil
}
