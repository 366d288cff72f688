package web

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
)

// TestWebSaysWhomTheCallActsAs (issue 31 §2): the page shows whom a token
// exchange call acts as, until when, and whether the provider holds the
// grant; a hostile subject is escaped.
func TestWebSaysWhomTheCallActsAs(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC)
	r := api.ApprovalRequest{ID: "t~c", TaskID: "t", Tool: "desk__deploy", Principal: "dave@corp", State: api.ApprovalPending,
		ActsAs: "dave@corp", ActsUntil: now.Add(time.Minute), ActsHeld: true, ExpiresAt: now.Add(time.Hour), Quorum: 1}
	for _, tc := range []struct {
		held bool
		at   time.Time
		want string
	}{
		{true, now, "dave@corp upstream (token exchange); the provider holds their grant (offline): approved after their sign-in ends (2030-01-02 03:01:00 UTC), the call runs as them with a fresh exchange, unless the grant was revoked"},
		{false, now, "dave@corp upstream (token exchange); their sign-in ends 2030-01-02 03:01:00 UTC: approved after that, the call does not run"},
		{false, now.Add(2 * time.Minute), "their sign-in ends 2030-01-02 03:01:00 UTC (ended: approved now, the call does not run)"},
	} {
		r.ActsHeld = tc.held
		it := (&handler{}).item(r, tc.at)
		if !strings.Contains(it.Acts, tc.want) {
			t.Errorf("held=%v: %q, want %q", tc.held, it.Acts, tc.want)
		}
		w := httptest.NewRecorder()
		(&handler{}).render(w, 200, view{Principal: "carol", Requests: []item{it}})
		if !strings.Contains(w.Body.String(), "<dt>acts as</dt>") {
			t.Errorf("the page does not show it:\n%s", w.Body.String())
		}
	}
	r.ActsAs = "<script>x</script>"
	w := httptest.NewRecorder()
	(&handler{}).render(w, 200, view{Principal: "carol", Requests: []item{(&handler{}).item(r, now)}})
	if strings.Contains(w.Body.String(), "<script>x") {
		t.Errorf("the subject is not escaped")
	}
	r.ActsAs = ""
	if it := (&handler{}).item(r, now); it.Acts != "" {
		t.Errorf("a call without token exchange: %q", it.Acts)
	}
}
