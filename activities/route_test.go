package activities

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/manifests"
)

// TestDecisionCarriesTheJudgedRoute: Decide returns the route and spec of
// the declaration it judged, from the worker's catalog (none for a tool it
// denies), and DecideAndCall runs that route whatever the request named,
// so a gateway with another copy of the manifest cannot run another tool.
func TestDecisionCarriesTheJudgedRoute(t *testing.T) {
	m, err := manifests.Parse(filepath.Join(t.TempDir(), "fs.yaml"), []byte(`server:
  name: fs
  stdio: {command: /bin/true}
tools:
  read: {side_effects: [read], data_access_level: public, risk: low, idempotent: true, timeout: 20s, retry: {max_attempts: 4}}
`))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Compile(policy.Config{ApprovalGroup: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	caller := &countingCaller{}
	a := &Activities{Tools: caller, Policy: pol, Catalog: NewCatalog([]*manifests.Manifest{m}, nil, nil, false)}
	decide := func(tool string) api.DecideInput {
		return api.DecideInput{TaskID: "t1", CallID: "c1", Tool: tool, Arguments: json.RawMessage(`{}`), AllowTools: []string{"*"},
			Principal: api.Principal{Name: "alice", Permissions: []string{"*"}, DataLevel: manifests.DataRestricted}}
	}
	want := &api.Route{Server: "fs", UpstreamTool: "read", Spec: api.SpecFor(m.Tools["read"])}
	if want.Spec.Timeout != 20*time.Second || want.Spec.Retry.MaxAttempts != 4 {
		t.Fatalf("the manifest's spec is %+v; the test expects timeout 20s and 4 attempts", want.Spec)
	}

	out, err := a.Decide(context.Background(), decide("fs__read"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, out.Route); diff != "" {
		t.Errorf("Decide's route (-want +got):\n%s", diff)
	}
	if out, err := a.Decide(context.Background(), decide("fs__missing")); err != nil || out.Route != nil {
		t.Errorf("a tool the catalog does not know: route %+v (%v), want none", out.Route, err)
	}

	// The request names another route, as a gateway with a stale copy
	// would: the call runs the judged one.
	fast, err := a.DecideAndCall(context.Background(), api.DecideAndCallInput{
		Decide: decide("fs__read"),
		Call:   api.CallToolInput{TaskID: "t1", CallID: "c1", Attempt: 1, Server: "stale", Tool: "gone", Arguments: json.RawMessage(`{}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !fast.Ran || !slices.Equal(caller.calls, []string{"fs/read"}) {
		t.Fatalf("ran %v, upstream calls %q; want the judged fs/read", fast.Ran, caller.calls)
	}
	if diff := cmp.Diff(want, fast.Decision.Route); diff != "" {
		t.Errorf("DecideAndCall's route (-want +got):\n%s", diff)
	}
}

// TestOldDecisionsDecode: a decision recorded before DecideOutput.Route
// decodes with no route, and one without a route encodes as before.
func TestOldDecisionsDecode(t *testing.T) {
	old := `{"Effect":"allow","Check":"default","Reason":"","Version":"v1","CallID":"c1"}`
	var d api.DecideOutput
	if err := json.Unmarshal([]byte(old), &d); err != nil || d.Route != nil || d.Effect != api.Allow {
		t.Fatalf("decoded %+v (%v)", d, err)
	}
	b, err := json.Marshal(d)
	if err != nil || string(b) != old {
		t.Fatalf("re-encoded %s (%v), want %s", b, err, old)
	}
}
