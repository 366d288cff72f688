package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/manifests"
)

// TestDuplicateArgumentKeysNeverReachTheUpstream: the parser differential
// of issue 13 item 1. A deny rule on args.path is in force; a call whose
// arguments carry "path" twice (one value the rule denies, one it allows,
// in either order, at the top or nested) is refused at the gateway, and
// the upstream, which logs the raw bytes it gets, never sees it. A call
// without duplicates reaches the upstream as exactly the canonical bytes
// the worker judged, and a call the rule denies does not reach it.
func TestDuplicateArgumentKeysNeverReachTheUpstream(t *testing.T) {
	t.Parallel()
	rawLog := filepath.Join(t.TempDir(), "raw.log")
	bin := buildBinary(t, "./integration/testupstream")
	yaml := `server:
  name: counter
  stdio:
    command: ` + bin + `
    env:
      RAW_ARGS_LOG: ` + rawLog + `
tools:
  rawargs: {side_effects: [read], data_access_level: public, risk: low, idempotent: true}
`
	m, err := manifests.Parse(filepath.Join(t.TempDir(), "counter.yaml"), []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, policy: &policy.Config{
		Rules: []policy.Rule{{Name: "no-env-files", When: `args.?path.orValue("").endsWith(".env") || args.?opts.?path.orValue("").endsWith(".env")`,
			Effect: api.Deny, Reason: ".env files hold secrets"}},
	}})
	cs := s.connect(t, nil)
	waitTools(t, cs, "counter__rawargs")

	for _, args := range []string{
		`{"path":"secret.env","path":"ok.txt"}`,
		`{"path":"ok.txt","path":"secret.env"}`,
		`{"path":"secret.env","\u0070ath":"ok.txt"}`,
		`{"opts":{"path":"ok.txt","path":"secret.env"}}`,
	} {
		res := call(t, cs, "counter__rawargs", json.RawMessage(args), "")
		if !res.IsError || !strings.Contains(text(res), "more than once") {
			t.Errorf("%s: isError=%v %q; want it refused for the repeated key", args, res.IsError, text(res))
		}
	}
	if res := call(t, cs, "counter__rawargs", json.RawMessage(`{"path":"secret.env"}`), ""); !res.IsError || !strings.Contains(text(res), "no-env-files") {
		t.Errorf("the deny rule did not deny: isError=%v %q", res.IsError, text(res))
	}
	res := call(t, cs, "counter__rawargs", json.RawMessage(`{ "path" : "ok.txt", "b": {"y": 1, "x": 2.50} }`), "")
	const canonical = `{"b":{"x":2.50,"y":1},"path":"ok.txt"}`
	if res.IsError || text(res) != canonical {
		t.Fatalf("allowed call: isError=%v, the upstream got %q; want the canonical %s", res.IsError, text(res), canonical)
	}

	got, err := os.ReadFile(rawLog)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != canonical+"\n" {
		t.Fatalf("the upstream received:\n%s\nwant only the allowed call, %s", got, canonical)
	}
}
