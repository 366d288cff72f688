package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/manifests"
)

// TestUnavailableUpstream: an upstream that cannot start does not keep the
// gateway or the other upstreams down; its tools are listed as unavailable
// with the reason, and calling one fails with a sentence saying it did not
// run. A declared tool the upstream does not offer is listed the same way,
// naming the manifest to fix.
func TestUnavailableUpstream(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end test; skipped with -short")
	}
	counter := testupstreamManifest(t, filepath.Join(t.TempDir(), "effects.log"))
	counter.Tools["nope"] = &manifests.Tool{
		Description:     "A tool testupstream does not have.",
		SideEffects:     []manifests.SideEffect{manifests.SideEffectNone},
		DataAccessLevel: manifests.DataPublic, Risk: manifests.RiskLow, Idempotent: true,
	}
	broken, err := manifests.Parse(filepath.Join(t.TempDir(), "broken.yaml"), []byte(`server:
  name: broken
  stdio:
    command: /nonexistent/x
tools:
  thing: {description: "Does a thing.", side_effects: [read], data_access_level: public, risk: low, idempotent: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	// An upstream that fails only after a while (as an npx download that
	// ends in an error does): the reason becomes known after the gateway
	// first published the tool list.
	slow, err := manifests.Parse(filepath.Join(t.TempDir(), "slow.yaml"), []byte(`server:
  name: slow
  stdio:
    command: /bin/sh
    args: ["-c", "sleep 1; echo cannot reach the database >&2; exit 3"]
tools:
  thing: {side_effects: [read], data_access_level: public, risk: low, idempotent: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{counter, broken, slow}})
	cs := s.connect(t, nil)

	// The working upstream works.
	waitTools(t, cs, "counter__echo")
	if res := call(t, cs, "counter__echo", map[string]any{"text": "still here"}, ""); res.IsError || text(res) != "still here" {
		t.Fatalf("counter__echo next to a broken upstream: isError=%v %q", res.IsError, text(res))
	}

	// The broken upstream's tool is listed, marked unavailable, with why.
	desc := waitDescription(t, cs, "broken__thing", func(d string) bool {
		return strings.Contains(d, "/nonexistent/x") || strings.Contains(d, "no such file")
	})
	if !strings.HasPrefix(desc, "[unavailable:") || !strings.Contains(desc, "broken") {
		t.Fatalf("broken__thing description %q: want it to start with [unavailable: and name the upstream", desc)
	}

	desc = waitDescription(t, cs, "slow__thing", func(d string) bool { return strings.Contains(d, "cannot reach the database") })
	if !strings.HasPrefix(desc, "[unavailable:") {
		t.Fatalf("slow__thing description %q: want it to start with [unavailable:", desc)
	}

	// Calling it fails, and says it did not run.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "broken__thing", Arguments: map[string]any{}})
	if err != nil {
		t.Fatalf("broken__thing did not answer within 60s: %v", err)
	}
	if msg := text(res); !res.IsError || !strings.Contains(msg, "did not run") || !strings.Contains(msg, "unavailable") || !strings.Contains(msg, "broken") {
		t.Fatalf("broken__thing: isError=%v %q; want an error saying it did not run because the upstream is unavailable", res.IsError, msg)
	}

	// A declared tool the upstream does not offer names the manifest.
	desc = waitDescription(t, cs, "counter__nope", func(d string) bool { return strings.Contains(d, counter.File) })
	if !strings.HasPrefix(desc, "[unavailable:") || !strings.Contains(desc, `"nope"`) {
		t.Fatalf("counter__nope description %q: want [unavailable: ...] naming the tool and %s", desc, counter.File)
	}
}

// waitDescription waits until tools/list shows tool with a description for
// which ok holds, and returns it.
func waitDescription(t *testing.T, cs *mcp.ClientSession, tool string, ok func(string) bool) string {
	t.Helper()
	last := "(not listed)"
	waitUntil(t, "tools/list to describe "+tool+" as wanted", 30*time.Second, func() error {
		res, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			return err
		}
		for _, tl := range res.Tools {
			if tl.Name == tool {
				last = tl.Description
			}
		}
		if !ok(last) {
			return fmt.Errorf("described %q", last)
		}
		return nil
	})
	return last
}
