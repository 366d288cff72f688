package timeline

import (
	"strings"
	"testing"

	"github.com/airlock-run/airlock/api"
)

// TestGrantsTimeline: the recorded grants history (grants_v1) shows the
// grant an approval made, the calls it allowed (check grant, naming it),
// and its revocation.
func TestGrantsTimeline(t *testing.T) {
	tl := build(t, []string{"grants_v1_run1", "grants_v1_run2"}, nil)
	p1 := tl.Call("p1")
	if p1 == nil || p1.Approval == nil || len(p1.Approval.Votes) != 1 || p1.Approval.Votes[0].Grant != "3 calls" ||
		!strings.Contains(p1.Approval.Votes[0].Result, "with a grant of 3 calls") {
		t.Fatalf("p1 approval %+v", p1)
	}
	for _, id := range []string{"p2", "p4", "p5"} {
		c := tl.Call(id)
		if c == nil || c.Decision == nil || c.Decision.Check != api.CheckGrant || c.Decision.Effect != "allow" ||
			c.Decision.Grant != api.GrantIDOf("record-grants", "p1") || c.Approval != nil {
			t.Errorf("%s: %+v", id, c)
		}
	}
	if c := tl.Call("p3"); c == nil || c.Decision == nil || c.Decision.Check == api.CheckGrant || c.Approval == nil {
		t.Errorf("p3 (another key) asked: %+v", c)
	}
	if len(tl.Revocations) != 1 || tl.Revocations[0].Grant != api.GrantIDOf("record-grants", "p6") || tl.Revocations[0].By != "bob" ||
		tl.Revocations[0].Reason != "done for today" {
		t.Errorf("revocations %+v", tl.Revocations)
	}
	var b strings.Builder
	if err := Render(&b, tl, nil); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"policy: allow (grant", "allowed by grant record-grants~grant-p1", "grant record-grants~grant-p6 revoked by bob"} {
		if !strings.Contains(out, want) {
			t.Errorf("audit show lacks %q:\n%s", want, out)
		}
	}
}
