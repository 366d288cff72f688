package bwrap

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The egress forwarder (issue 32). A server with an egress allowlist has
// a network namespace with loopback only; airlock's proxy listens on a
// unix socket outside, bound into the sandbox at egressSocket. The
// forwarder is airlock's own executable, bound at relayProgram and run
// with relayEnv set: it listens on ProxyAddr, starts the server as its
// child (same stdin, stdout and stderr), and copies each TCP connection
// to the socket. It enforces nothing; the proxy outside does, so a
// server that kills it or dials the socket itself gains nothing.
const (
	// ProxyAddr is where the server finds its proxy, inside its own
	// network namespace (nothing else listens there).
	ProxyAddr = "127.0.0.1:3128"

	relayEnv     = "AIRLOCK_BWRAP_RELAY"
	relayDir     = "/run/airlock"
	relayProgram = relayDir + "/relay"
	egressSocket = relayDir + "/egress.sock"
	// relayConns bounds the forwarder's connections (the proxy has its
	// own, smaller bound, 64 by default; this keeps the forwarder within
	// its own RLIMIT_NOFILE, relayFiles).
	relayConns = 128
	// relayFiles: a connection holds its two sockets, and each direction
	// being copied may hold a pipe pair (Go splices TCP to the unix
	// socket through one): six each, and the runtime's own.
	relayFiles = 6*relayConns + 64
)

// init runs the forwarder when this executable was started as one: any
// binary that imports this package (airlock, and test binaries) can be
// the forwarder, as docker's pkg/reexec does it.
func init() {
	if v, ok := os.LookupEnv(relayEnv); ok {
		os.Exit(relayMain(v, os.Args[1:]))
	}
}

// ProxyEnv is the environment that points a server's HTTP clients at
// its proxy: both spellings of HTTP_PROXY, HTTPS_PROXY and ALL_PROXY
// (curl, Go, Python, undici's EnvHttpProxyAgent), NO_PROXY for the
// sandbox's own loopback (a server talking to a helper it started), and
// NODE_USE_ENV_PROXY=1 (Node 24 and 22.21 honour the variables for
// fetch and http then; older Node ignores them and reaches nothing).
// They override the manifest's: other values would only break the server.
func ProxyEnv() map[string]string {
	u := "http://" + ProxyAddr
	env := map[string]string{"NODE_USE_ENV_PROXY": "1"}
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"} {
		env[k], env[strings.ToLower(k)] = u, u
	}
	env["NO_PROXY"], env["no_proxy"] = "localhost,127.0.0.1,::1", "localhost,127.0.0.1,::1"
	return env
}

// relayExecutable is the forwarder's program on the host: this
// executable, through its symlinks.
func relayExecutable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("the egress forwarder: %w", err)
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	return exe, nil
}

// relayMain is the forwarder: v is "listen,socket", args the server's
// command line. Its exit status is the server's.
func relayMain(v string, args []string) int {
	_ = os.Unsetenv(relayEnv)
	listen, sock, ok := strings.Cut(v, ",")
	if !ok || len(args) == 0 {
		fmt.Fprintf(os.Stderr, "airlock egress forwarder: started with %s=%q and %d arguments; it is started by airlock's sandbox only\n", relayEnv, v, len(args))
		return 126
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock egress forwarder: %v\n", err)
		return 126
	}
	go relayAccept(ln, sock)

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "airlock egress forwarder: starting the server: %v\n", err)
		return 127
	}
	// Bounded after the server started: rlimits are inherited, and the
	// server's prlimit could not raise a hard limit lowered here.
	if err := limitSelf(); err != nil {
		fmt.Fprintf(os.Stderr, "airlock egress forwarder: %v\n", err)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	if err != nil && cmd.ProcessState.ExitCode() < 0 {
		return 127
	}
	return cmd.ProcessState.ExitCode()
}

// relayAccept copies each connection on ln to the unix socket sock.
func relayAccept(ln net.Listener, sock string) {
	sem := make(chan struct{}, relayConns)
	for {
		c, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// Out of file descriptors (RLIMIT_NOFILE is the server's):
			// wait for connections to close rather than stop forwarding.
			time.Sleep(50 * time.Millisecond)
			continue
		}
		select {
		case sem <- struct{}{}:
		default:
			c.Close()
			continue
		}
		go func() {
			defer func() { <-sem }()
			up, err := net.Dial("unix", sock)
			if err != nil {
				c.Close()
				return
			}
			relayPipe(c, up)
		}()
	}
}

// relayPipe copies both ways, passing on each half-close, then closes both.
func relayPipe(a, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	cp := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
	a.Close()
	b.Close()
}

// limitSelf bounds the forwarder, which runs outside the server's
// prlimit: its open files to what relayConns need, its data memory to
// what it has mapped plus relayDataHeadroom, no core files. Soft and
// hard limits alike, so that a server that took it over (ptrace, where
// the kernel allows it between processes of one user) cannot raise them.
func limitSelf() error {
	data, err := vmData()
	if err != nil {
		return err
	}
	for _, l := range []struct {
		res int
		max uint64
	}{
		{syscall.RLIMIT_NOFILE, relayFiles},
		{syscall.RLIMIT_DATA, data + relayDataHeadroom},
		{syscall.RLIMIT_CORE, 0},
	} {
		var cur syscall.Rlimit
		if err := syscall.Getrlimit(l.res, &cur); err != nil {
			return fmt.Errorf("getrlimit %d: %w", l.res, err)
		}
		lim := syscall.Rlimit{Cur: min(cur.Cur, l.max), Max: min(cur.Max, l.max)}
		if err := syscall.Setrlimit(l.res, &lim); err != nil {
			return fmt.Errorf("setrlimit %d: %w", l.res, err)
		}
	}
	return nil
}

// vmData is this process's data mappings (VmData in /proc/self/status),
// in bytes: what RLIMIT_DATA counts.
func vmData() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmData:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmData %q: %w", v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("no VmData in /proc/self/status")
}
