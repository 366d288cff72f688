package upstream

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The test binary is also the hostile upstream of sandbox_test.go: with
// envHostile=1 it serves one tool, attack, that tries what a malicious
// server package would and reports what happened ("ok: …" or
// "failed: …"). Attacks that could kill the server (a fork bomb, eating
// memory) run in a child process (envHostile=forkbomb or eat), as a
// malicious package would start them, so the report gets back.
const envHostile = "AIRLOCK_TEST_HOSTILE"

type attackIn struct {
	Kind   string `json:"kind"`
	Target string `json:"target,omitempty"`
	N      int    `json:"n,omitempty"`
	// CA is a PEM certificate the fetch attack trusts.
	CA string `json:"ca,omitempty"`
}

func runHostileServer(mode string) int {
	switch mode {
	case "forkbomb":
		return forkBomb()
	case "eat":
		return eatMemory()
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "hostile"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "attack"}, func(_ context.Context, _ *mcp.CallToolRequest, in attackIn) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: attack(in)}}}, nil, nil
	})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func attack(in attackIn) string {
	report := func(what string, err error) string {
		if err != nil {
			return "failed: " + err.Error()
		}
		return "ok: " + what
	}
	switch in.Kind {
	case "read":
		b, err := os.ReadFile(in.Target)
		return report(fmt.Sprintf("read %d bytes: %.40q", len(b), b), err)
	case "list":
		es, err := os.ReadDir(in.Target)
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		return report(strings.Join(names, ","), err)
	case "write":
		return report("wrote "+in.Target, os.WriteFile(in.Target, []byte("pwned"), 0o644))
	case "connect":
		c, err := net.DialTimeout("tcp", in.Target, 2*time.Second)
		if err == nil {
			c.Close()
		}
		return report("connected to "+in.Target, err)
	case "resolve":
		addrs, err := net.LookupHost(in.Target)
		return report(strings.Join(addrs, ","), err)
	case "fetch": // GET Target through the proxy the environment names
		proxy, err := url.Parse(os.Getenv("HTTPS_PROXY"))
		if err != nil || proxy.Host == "" {
			return report("", fmt.Errorf("no proxy in HTTPS_PROXY (%q)", os.Getenv("HTTPS_PROXY")))
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM([]byte(in.CA))
		// ProxyURL, not ProxyFromEnvironment, which skips 127.0.0.1.
		c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: roots}}}
		resp, err := c.Get(in.Target)
		if err != nil {
			return report("", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1000))
		return report(fmt.Sprintf("%s %s", resp.Status, b), nil)
	case "fetchloop": // GET plain http Target N times, through HTTP_PROXY when set (BenchmarkEgress)
		tr := &http.Transport{}
		if p := os.Getenv("HTTP_PROXY"); p != "" {
			u, err := url.Parse(p)
			if err != nil {
				return report("", err)
			}
			tr.Proxy = http.ProxyURL(u)
		}
		c := &http.Client{Timeout: 20 * time.Second, Transport: tr}
		defer tr.CloseIdleConnections()
		for i := range in.N {
			resp, err := c.Get(in.Target)
			if err != nil {
				return report("", fmt.Errorf("request %d: %w", i, err))
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return report("", fmt.Errorf("request %d: %s", i, resp.Status))
			}
		}
		return report(fmt.Sprintf("%d requests", in.N), nil)
	case "unix": // connect to the unix socket Target (another server's proxy)
		c, err := net.DialTimeout("unix", in.Target, 2*time.Second)
		if err == nil {
			c.Close()
		}
		return report("connected to "+in.Target, err)
	case "tunnel": // CONNECT Target through the proxy, by hand
		proxy, err := url.Parse(os.Getenv("HTTPS_PROXY"))
		if err != nil || proxy.Host == "" {
			return report("", fmt.Errorf("no proxy in HTTPS_PROXY (%q)", os.Getenv("HTTPS_PROXY")))
		}
		c, err := net.DialTimeout("tcp", proxy.Host, 5*time.Second)
		if err != nil {
			return report("", err)
		}
		defer c.Close()
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", in.Target, in.Target)
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		if err != nil {
			return report("", err)
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1000))
		if resp.StatusCode != http.StatusOK {
			return report("", fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b))))
		}
		return report(resp.Status, nil)
	case "env":
		return "ok: " + strings.Join(os.Environ(), "\n")
	case "forkbomb", "eat":
		cmd := exec.Command("/proc/self/exe")
		cmd.Env = []string{envHostile + "=" + in.Kind, fmt.Sprintf("N=%d", in.N)}
		out, err := cmd.CombinedOutput()
		// The child reports how far it got; err is how it ended.
		last := ""
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "allocated ") || strings.HasPrefix(l, "ok: ") || strings.HasPrefix(l, "failed: ") {
				last = l
			}
		}
		if err != nil {
			return "failed: " + err.Error() + ": " + last
		}
		return last
	}
	return "failed: unknown attack " + in.Kind
}

// forkBomb starts sleeping processes until the kernel refuses (or N are
// running), then kills them and says how many it got.
func forkBomb() int {
	n := atoi(os.Getenv("N"))
	var pids []int
	var ferr error
	for len(pids) < n {
		pid, err := syscall.ForkExec("/bin/sleep", []string{"sleep", "60"}, &syscall.ProcAttr{})
		if err != nil {
			ferr = err
			break
		}
		pids = append(pids, pid)
	}
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(p, &ws, 0, nil)
	}
	if ferr != nil {
		fmt.Printf("failed: started %d processes, then: %v\n", len(pids), ferr)
		return 0
	}
	fmt.Printf("ok: started all %d processes\n", len(pids))
	return 0
}

// eatMemory touches N MiB, 16 MiB at a time, reporting its progress.
func eatMemory() int {
	n := atoi(os.Getenv("N"))
	var keep [][]byte
	for got := 0; got < n; got += 16 {
		b := make([]byte, 16<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		keep = append(keep, b)
		fmt.Printf("allocated %d MiB\n", got+16)
	}
	fmt.Printf("ok: allocated all %d MiB\n", len(keep)*16)
	return 0
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
