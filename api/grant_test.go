package api

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestGrantArgValue(t *testing.T) {
	args := json.RawMessage(`{"repo":{"name":"x","tags":["b","a"]},"n":1,"m":{"b":1,"a":2}}`)
	for path, want := range map[string]string{
		"repo.name": `"x"`, "repo.tags": `["b","a"]`, "n": "1", "m": `{"a":2,"b":1}`, "missing": "", "n.deeper": "", "repo.name.x": "",
	} {
		if got := GrantArgValue(args, path); got != want {
			t.Errorf("GrantArgValue(%q) = %q, want %q", path, got, want)
		}
	}
	g := Grant{Tool: "t", Args: []GrantArg{{Path: "repo.name", Value: `"x"`}, {Path: "missing"}}}
	if !g.Covers("t", json.RawMessage(`{"repo":{"name":"x","other":1}}`)) || g.Covers("t", json.RawMessage(`{"repo":{"name":"y"}}`)) ||
		g.Covers("u", args) || g.Covers("t", json.RawMessage(`{"repo":{"name":"x"},"missing":0}`)) {
		t.Error("Covers: same tool and the same values at the grant's paths (absent stays absent)")
	}
}

func TestGrantBoundCheck(t *testing.T) {
	b := &GrantBound{Calls: 5, Duration: time.Hour}
	for _, tc := range []struct {
		bound *GrantBound
		ask   *GrantAsk
		want  string // "" : fits
	}{
		{b, nil, ""},
		{b, &GrantAsk{Calls: 5, For: time.Hour}, ""},
		{nil, &GrantAsk{Calls: 1}, "allows no grant"},
		{b, &GrantAsk{Calls: 6}, "ask for at most 5 calls"},
		{b, &GrantAsk{For: 2 * time.Hour}, "ask for at most 1h0m0s"},
		{b, &GrantAsk{Calls: 1, Principal: true}, "grants in one task only"},
		{&GrantBound{Calls: 5, Principal: true}, &GrantAsk{Calls: 1, Principal: true}, "needs to end"},
		{&GrantBound{Duration: time.Hour}, &GrantAsk{Calls: 1}, "grants by time only"},
		{&GrantBound{Calls: 3}, &GrantAsk{For: time.Minute}, "grants by call count only"},
		{b, &GrantAsk{Principal: true}, "names how many calls or how long"},
	} {
		got := tc.bound.Check("t", tc.ask)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("Check(%+v, %+v) = %q, want %q", tc.bound, tc.ask, got, tc.want)
		}
	}
	if _, err := ParseGrant("", "", true); err == nil {
		t.Error("ParseGrant: a principal grant without calls or duration was accepted")
	}
	if g, err := ParseGrant("3", "30m", false); err != nil || *g != (GrantAsk{Calls: 3, For: 30 * time.Minute}) {
		t.Errorf("ParseGrant: %+v %v", g, err)
	}
}
