package api

import (
	"fmt"
	"strings"
	"testing"
)

func TestLabelsRiseOnly(t *testing.T) {
	var l Labels
	if !l.Empty() || l.String() != "none" {
		t.Fatalf("zero labels: %+v %q", l, l.String())
	}
	l.Read("internal")
	l.Read("public") // lower: no change
	l.Read("")       // nothing read: no change
	if l.ReadLevel != "internal" {
		t.Fatalf("read level %q, want internal", l.ReadLevel)
	}
	// An unknown level (a manifest from a newer airlock, a typo that
	// slipped past validation) counts as the highest.
	l.Read("top-secret")
	if l.ReadLevel != "restricted" {
		t.Fatalf("an unknown level read as %q, want restricted", l.ReadLevel)
	}
	l.Taint("a (open_world)")
	l.Taint("b (open_world)")
	if !l.Untrusted || l.UntrustedBy != "a (open_world)" {
		t.Fatalf("untrusted by %q, want the first call", l.UntrustedBy)
	}
	before := l.Clone()
	l.Sent("mail__send")
	l.Sent("mail__send")
	if len(l.Egress) != 1 || !l.Raised(before) || l.Raised(l.Clone()) {
		t.Fatalf("egress %v raised=%v", l.Egress, l.Raised(before))
	}
	if got := l.String(); got != "read restricted; untrusted (a (open_world)); egress mail__send" {
		t.Errorf("String() = %q", got)
	}
}

// TestLabelsEgressBounded: a task that calls very many distinct egress
// tools keeps a bounded list and counts the rest, so its labels cannot
// grow the carried state without bound.
func TestLabelsEgressBounded(t *testing.T) {
	var l Labels
	for i := range 10_000 {
		before := l.Clone()
		l.Sent(fmt.Sprintf("s%d__send", i))
		if !l.Raised(before) {
			t.Fatalf("egress %d did not raise the labels", i)
		}
	}
	if len(l.Egress) != maxEgressKept || l.EgressMore != 10_000-maxEgressKept {
		t.Fatalf("egress kept %d, more %d", len(l.Egress), l.EgressMore)
	}
	if !strings.HasSuffix(l.String(), fmt.Sprintf("and %d more", l.EgressMore)) {
		t.Errorf("String() does not count the rest: %q", l.String())
	}
}

func TestResetLabelsRequestCheck(t *testing.T) {
	for _, tc := range []struct {
		r    ResetLabelsRequest
		want string
	}{
		{ResetLabelsRequest{By: "ops", Reason: "reviewed"}, ""},
		{ResetLabelsRequest{Reason: "reviewed"}, "By is empty"},
		{ResetLabelsRequest{By: "ops", Reason: "  \n"}, "Reason is empty"},
		{ResetLabelsRequest{By: "ops", Reason: strings.Repeat("x", MaxResetReasonBytes+1)}, "under 1000 bytes"},
		{ResetLabelsRequest{By: strings.Repeat("x", 1<<20), Reason: "r"}, "under 1000 bytes"},
	} {
		err := tc.r.Check()
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check(%.40v) = %v, want %q", tc.r, err, tc.want)
		}
	}
}

func TestLevelRank(t *testing.T) {
	prev := -2
	for _, l := range append([]string{""}, DataLevels...) {
		r, ok := LevelRank(l)
		if !ok || r <= prev {
			t.Fatalf("LevelRank(%q) = %d, %v after %d", l, r, ok, prev)
		}
		prev = r
	}
	if _, ok := LevelRank("Public"); ok {
		t.Error("levels are case-sensitive, as manifests spell them")
	}
	if !IsEgress([]string{"read", "pay"}) || IsEgress([]string{"write", "exec", "delete"}) {
		t.Error("egress is send and pay")
	}
}
