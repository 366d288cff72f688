package activities

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/manifests"
)

// TestDecideLocks checks the lock keys Decide evaluates from a call's
// arguments: sorted by key (the order every task acquires them in), each
// key once with exclusive winning over shared, the tool's lock timeout;
// a key that cannot be computed denies the call with check lock; a denied
// call takes no lock; the fast path never runs a locked call.
func TestDecideLocks(t *testing.T) {
	m, err := manifests.Parse("fs.yaml", []byte(`server:
  name: fs
  stdio: {command: npx}
tools:
  write:
    side_effects: [write]
    data_access_level: internal
    risk: low
    idempotent: true
    locks:
      - '"file:" + args.path'
      - {key: '"repo:" + args.repo', mode: shared}
      - {key: '"file:" + args.path', mode: shared}
      - '"task:" + call.task'
      - '"admin" in principal.roles ? "tenant:*" : "tenant:" + principal.name'
    lock_timeout: 5s
`))
	if err != nil {
		t.Fatal(err)
	}
	if ps := m.Validate(); len(ps) > 0 {
		t.Fatal(ps)
	}
	pol, err := policy.Compile(policy.Config{Rules: []policy.Rule{{Name: "no-secrets", When: `args.?path.orValue("") == "/secret"`, Effect: api.Deny}}})
	if err != nil {
		t.Fatal(err)
	}
	a := &Activities{Policy: pol, Catalog: NewCatalog([]*manifests.Manifest{m}, nil, nil, false)}
	decideAs := func(args string, roles ...string) api.DecideOutput {
		t.Helper()
		out, err := a.Decide(context.Background(), api.DecideInput{TaskID: "t1", CallID: "c1", Tool: "fs__write", Arguments: json.RawMessage(args), AllowTools: []string{"*"},
			Principal: api.Principal{Name: "p", Roles: roles, Permissions: []string{"*"}, DataLevel: manifests.DataRestricted}})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	decide := func(args string) api.DecideOutput { t.Helper(); return decideAs(args, "dev") }

	out := decide(`{"path":"/a","repo":"r"}`)
	want := []api.LockKey{{Key: "file:/a", Mode: api.LockExclusive}, {Key: "repo:r", Mode: api.LockShared}, {Key: "task:t1", Mode: api.LockExclusive}, {Key: "tenant:p", Mode: api.LockExclusive}}
	if diff := cmp.Diff(want, out.Locks); diff != "" || out.LockTimeout != 5*time.Second || out.Effect != api.Allow {
		t.Errorf("locks (-want +got):\n%s\ntimeout %s, effect %s", diff, out.LockTimeout, out.Effect)
	}
	if a.fastPath("fs__write", out) {
		t.Error("a locked call may take the fast path")
	}

	// principal is the caller: its name and roles.
	out = decideAs(`{"path":"/a","repo":"r"}`, "dev", "admin")
	if got := out.Locks[len(out.Locks)-1].Key; got != "tenant:*" {
		t.Errorf("an admin's tenant lock is %q, want tenant:*", got)
	}

	out = decide(`{"path":"/a"}`) // no repo: the key cannot be computed
	if out.Effect != api.Deny || out.Check != api.CheckLock || !strings.Contains(out.Reason, "tools.write.locks[1]") || len(out.Locks) != 0 {
		t.Errorf("a key that cannot be computed: %+v", out)
	}

	out = decide(`{"path":"/` + strings.Repeat("a", 1100) + `","repo":"r"}`)
	if out.Effect != api.Deny || out.Check != api.CheckLock || !strings.Contains(out.Reason, "more than 1024") {
		t.Errorf("a key too long: %+v", out.Verdict)
	}

	out = decide(`{"path":"/secret","repo":"r"}`)
	if out.Effect != api.Deny || out.Check == api.CheckLock || len(out.Locks) != 0 {
		t.Errorf("a denied call: %+v", out)
	}
}
