package timeline

import (
	"bytes"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/api"
)

// TestPrincipalRevocations: the recorded task B (grants_v1_principal) made
// a grant across recorder's tasks with the approval of q5, which recorder
// revoked in the principal's grants workflow (grants_v1_principal_grants).
// Its own history holds no revocation; with the grants workflow's history
// its audit shows the revocation, naming the workflow that recorded it,
// and another task of the same principal shows none.
func TestPrincipalRevocations(t *testing.T) {
	tl := build(t, []string{"grants_v1_principal_run1"}, nil)
	if len(tl.Revocations) != 0 {
		t.Fatalf("task B's own history holds revocations %+v", tl.Revocations)
	}
	pg := loadChain(t, "grants_v1_principal_grants_run1")
	other := *tl
	other.Task = "task-other"
	AddPrincipalRevocations(&other, pg)
	if len(other.Revocations) != 0 {
		t.Errorf("another task shows B's revocation: %+v", other.Revocations)
	}

	AddPrincipalRevocations(tl, pg)
	want := api.PrincipalGrantIDOf("recorder", tl.Task, "q5")
	if len(tl.Revocations) != 1 || len(tl.Problems) != 0 {
		t.Fatalf("revocations %+v, problems %q; want %s's", tl.Revocations, tl.Problems, want)
	}
	r := tl.Revocations[0]
	if r.Grant != want || r.By != "recorder" || r.Reason != "not needed" || r.Refused != "" || r.Workflow != api.PrincipalGrantsID("recorder") || r.At.IsZero() {
		t.Errorf("revocation %+v", r)
	}
	var b bytes.Buffer
	if err := Render(&b, tl, nil); err != nil {
		t.Fatal(err)
	}
	if line := "grant " + want + ` revoked by recorder ("not needed") (a grant across the principal's tasks, recorded in grants-recorder)`; !strings.Contains(b.String(), line) {
		t.Errorf("audit show lacks %q:\n%s", line, b.String())
	}
}
