package activities

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/manifests"
)

// Decide judges each call with the version Current gives at that moment:
// after a reload the next decision follows the new rules, the new
// manifests and the new approver groups, and records the new policy
// version.
func TestDecideFollowsReloadedJudge(t *testing.T) {
	dir := t.TempDir()
	parse := func(yaml string) *manifests.Manifest {
		m, err := manifests.Parse(filepath.Join(dir, "fs.yaml"), []byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	v1 := parse("server:\n  name: fs\n  stdio: {command: /bin/true}\ntools:\n  write: {side_effects: [write], data_access_level: public, risk: low}\n")
	v2 := parse("server:\n  name: fs\n  stdio: {command: /bin/true}\ntools:\n  write: {side_effects: [write], data_access_level: public, risk: low}\n  purge: {side_effects: [delete], data_access_level: public, risk: low}\n")
	p1, err := policy.Compile(policy.Config{ApprovalGroup: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := policy.Compile(policy.Config{ApprovalGroup: "ops", Rules: []policy.Rule{
		{Name: "review-writes", When: `tool.upstream == "write"`, Effect: api.RequireApproval, Group: "ops"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var cur atomic.Pointer[Judge]
	cur.Store(&Judge{Policy: p1, Catalog: NewCatalog([]*manifests.Manifest{v1}, nil, nil, false), Groups: map[string][]string{"ops": {"olga"}}})
	a := &Activities{Current: cur.Load}
	decide := func(tool string) api.DecideOutput {
		t.Helper()
		out, err := a.Decide(context.Background(), api.DecideInput{TaskID: "t1", CallID: "c-" + tool, Tool: tool, Arguments: json.RawMessage(`{}`), AllowTools: []string{"*"},
			Principal: api.Principal{Name: "alice", Permissions: []string{"*"}, DataLevel: manifests.DataRestricted}})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if d := decide("fs__write"); d.Verdict.Effect != api.Allow || d.Verdict.Version != p1.Version() {
		t.Fatalf("before: %s under %s, want allow under %s", d.Verdict.Effect, d.Verdict.Version, p1.Version())
	}
	if d := decide("fs__purge"); d.Verdict.Effect != api.Deny {
		t.Fatalf("before: fs__purge %s, want deny (no manifest covers it yet)", d.Verdict.Effect)
	}

	cur.Store(&Judge{Policy: p2, Catalog: NewCatalog([]*manifests.Manifest{v2}, nil, nil, false), Groups: map[string][]string{"ops": {"omar"}}})
	d := decide("fs__write")
	if d.Verdict.Effect != api.RequireApproval || d.Verdict.Rule != "review-writes" || d.Verdict.Version != p2.Version() || p2.Version() == p1.Version() {
		t.Fatalf("after: %s by %q under %s, want require_approval by review-writes under the new version %s", d.Verdict.Effect, d.Verdict.Rule, d.Verdict.Version, p2.Version())
	}
	if d.Approval == nil || len(d.Approval.Approvers) != 1 || d.Approval.Approvers[0] != "omar" {
		t.Fatalf("approvers %+v, want the reloaded group [omar]", d.Approval)
	}
	if d := decide("fs__purge"); d.Verdict.Effect != api.Allow {
		t.Fatalf("after: fs__purge %s (%s), want allow (the new manifest covers it)", d.Verdict.Effect, d.Verdict.Reason)
	}
}
