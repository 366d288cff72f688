package main

import (
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

func TestPprofLoopbackOnly(t *testing.T) {
	e := &env{log: zerolog.Nop()}
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:0", "nohost"} {
		if stop, err := servePprof(e, addr); err == nil {
			stop()
			t.Errorf("--pprof %s: served, want refused (loopback only)", addr)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	stop, err := servePprof(e, addr)
	if err != nil {
		t.Fatalf("--pprof %s: %v", addr, err)
	}
	defer stop()
	resp, err := http.Get("http://" + addr + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	n, _ := resp.Body.Read(buf)
	b.Write(buf[:n])
	if resp.StatusCode != http.StatusOK || !strings.Contains(b.String(), "goroutine") {
		t.Fatalf("GET /debug/pprof/: %d %q", resp.StatusCode, b.String())
	}
}
