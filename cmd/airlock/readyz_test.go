package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestReadyzFollowsToolsList: /readyz says ready as soon as the tools it
// reports are served, not before and not after (issue 29 §7: an outside
// test saw 503 "upstreams still connecting for the first time" for ~5 s
// after tools/list listed every upstream's tools). The upstream takes four
// seconds to start; the test polls tools/list and /readyz in turn from
// the moment the listener answers until both agree it is up, and checks
// each step: once tools/list served counter__append, the next /readyz
// answers 200; once /readyz answered 200, the next tools/list serves it.
// Both read the upstream pool's state at the time of the request
// (tools/list republishes the list first), so neither can lag the other.
func TestReadyzFollowsToolsList(t *testing.T) {
	bin := buildTestupstream(t)
	slow := filepath.Join(t.TempDir(), "slow-upstream.sh")
	mustWrite(t, slow, []byte("#!/bin/sh\nsleep 4\nexec "+bin+" \"$@\"\n"))
	if err := os.Chmod(slow, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, _ := drainConfig(t, slow, bin) // the sandboxed script runs bin
	s := inProcess(t, cfg, roles{embedded: true, worker: true, gateway: true})
	ctx := context.Background()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "readyz-test", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + s.addr + "/mcp", HTTPClient: &http.Client{Transport: bearerRT("alice-key")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	served := func() bool {
		res, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatalf("tools/list: %v", err)
		}
		for _, tl := range res.Tools {
			if tl.Name == "counter__append" {
				return !strings.HasPrefix(tl.Description, "[unavailable")
			}
		}
		t.Fatalf("tools/list has no counter__append (served or not): %d tools", len(res.Tools))
		return false
	}
	ready := func() bool {
		code, body, err := get("http://" + s.addr + "/readyz")
		if err != nil {
			t.Fatalf("/readyz: %v", err)
		}
		if code != 200 && !strings.Contains(body, "upstreams still connecting for the first time: counter") {
			t.Fatalf("/readyz = %d %q; want 200, or 503 naming the upstream that connects", code, body)
		}
		return code == 200
	}
	sawBoth, sawNeither := false, false
	deadline := time.Now().Add(60 * time.Second)
	for !sawBoth {
		if time.Now().After(deadline) {
			t.Fatal("the upstream was not served and ready within 60s")
		}
		l := served()
		r := ready()
		if l && !r {
			t.Fatal("tools/list served counter__append, and the /readyz after it answered 503")
		}
		if r && !served() {
			t.Fatal("/readyz answered 200, and the tools/list after it did not serve counter__append")
		}
		sawNeither = sawNeither || (!l && !r)
		sawBoth = l && r
		time.Sleep(20 * time.Millisecond)
	}
	if !sawNeither {
		t.Fatal("the test never saw the upstream connecting (both were up at the first look): it proved nothing")
	}
}
