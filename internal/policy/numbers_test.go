package policy

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/manifests"
)

// TestRulesSeeIntegersExactly: numbers beyond 2^53 (issue 25 item 4). The
// upstream receives the digits as written, so a rule must judge the same
// number: 2^53-1, 2^53 and 2^53+1, and 19-digit IDs that share their
// nearest double, are told apart; a number that has no exact value is
// refused naming its path; a double literal where CEL compares integers
// inexactly does not compile. Rules over small numbers keep working.
func TestRulesSeeIntegersExactly(t *testing.T) {
	tool := Tool{Name: "bank__pay", Server: "bank", Upstream: "pay",
		Decl: &manifests.Tool{SideEffects: []manifests.SideEffect{manifests.SideEffectWrite}, DataAccessLevel: manifests.DataInternal, Risk: manifests.RiskLow}}
	decide := func(t *testing.T, when, raw string) api.Verdict {
		t.Helper()
		p := mustCompile(t, Config{Rules: []Rule{{Name: "r", When: when, Effect: api.Deny, Reason: "matched"}}})
		return p.Decide(Input{Principal: api.Principal{Name: "alice", Permissions: []string{"*"}, DataLevel: manifests.DataRestricted},
			Tool: tool, Args: json.RawMessage(raw), Task: Task{ID: "t1", AllowTools: []string{"*"}}})
	}
	tests := []struct {
		when, args string
		deny       bool
	}{
		// only account 2^53 may be paid
		{`args.account != 9007199254740992`, `{"account":9007199254740993}`, true},
		{`args.account != 9007199254740992`, `{"account":9007199254740991}`, true},
		{`args.account != 9007199254740992`, `{"account":9007199254740992}`, false},
		{`args.account != 9007199254740992`, `{"account":9007199254740992.0}`, false},
		{`args.account == 9007199254740993`, `{"account":9007199254740993}`, true},
		{`args.account == 9007199254740993`, `{"account":9007199254740992}`, false},
		{`args.account > 9007199254740992`, `{"account":9007199254740993}`, true},
		{`args.account in [9007199254740993]`, `{"account":9007199254740992}`, false},
		// 19-digit IDs: both are the double 1234567890123456768
		{`args.id == 1234567890123456789`, `{"id":1234567890123456700}`, false},
		{`args.id == 1234567890123456789`, `{"id":1234567890123456789}`, true},
		{`args.id != 1234567890123456789`, `{"id":1234567890123456700}`, true},
		{`args.?o.?id.orValue(0) == 1234567890123456789`, `{"o":{"id":1234567890123456700}}`, false},
		{`args.ids.exists(i, i == 1234567890123456789)`, `{"ids":[1234567890123456700]}`, false},
		{`args.id == 18446744073709551615u`, `{"id":18446744073709551615}`, true},
		{`args.id == 18446744073709551615u`, `{"id":18446744073709551614}`, false},
		// rules over small numbers, ints and doubles mixed
		{`args.n > 5.0`, `{"n":6}`, true},
		{`args.n > 5`, `{"n":5.5}`, true},
		{`args.n == 5.0`, `{"n":5}`, true},
		{`args.n < 5`, `{"n":4.99}`, true},
		{`args.n * 2 > 10`, `{"n":6}`, true},
		{`args.price * 1.5 > 10.0`, `{"price":7.5}`, true},
	}
	for _, tt := range tests {
		d := decide(t, tt.when, tt.args)
		if got := d.Effect == api.Deny; got != tt.deny || (tt.deny && d.Check != api.CheckRule) {
			t.Errorf("rule %s over %s: %s (%s) %q; want deny=%v by the rule", tt.when, tt.args, d.Effect, d.Check, d.Reason, tt.deny)
		}
	}

	for _, raw := range []string{`{"a":{"b":[1,9007199254740993.5]}}`, `{"a":{"b":[1,1e400]}}`, `{"a":{"b":[1,18446744073709551616]}}`} {
		d := decide(t, `false`, raw)
		if d.Effect != api.Deny || !strings.Contains(d.Reason, "$.a.b[1]") || !strings.Contains(d.Reason, "send it as a string") {
			t.Errorf("%s: %s %q; want a denial naming $.a.b[1]", raw, d.Effect, d.Reason)
		}
	}

	for _, when := range []string{`args.account != 9007199254740992.0`, `args.id == -1.2345678901234568e18`, `args.id < 18446744073709551616.0`} {
		_, err := Compile(Config{Rules: []Rule{{Name: "r", When: when, Effect: api.Deny}}})
		if err == nil || !strings.Contains(err.Error(), "compares integers with it inexactly") {
			t.Errorf("rule %s compiled (%v); want it refused", when, err)
		}
	}
	if _, err := Compile(Config{Rules: []Rule{{Name: "r", When: `args.account != 9007199254740992.0`, Effect: api.Deny}}}); err == nil ||
		!strings.Contains(err.Error(), "write it as an integer literal, 9007199254740992") {
		t.Errorf("the refusal does not say how to write the rule: %v", err)
	}
	for _, when := range []string{`args.x < 9007199254740991.0`, `args.x > 1e300`, `args.x == 0.1`} {
		if _, err := Compile(Config{Rules: []Rule{{Name: "r", When: when, Effect: api.Deny}}}); err != nil {
			t.Errorf("rule %s: %v", when, err)
		}
	}
}
