package api

import (
	"encoding/json"
	"testing"
)

// Numbers beyond 2^53 (issue 25 item 4): at 2^53-1, 2^53, 2^53+1 and with
// 19-digit IDs that share their nearest double, a grant covers only the
// number it was bound to and two requests that differ only there have
// different digests. The legacy forms, which old task runs keep using,
// could not tell them apart.
var nearNumbers = [][2]string{
	{"9007199254740992", "9007199254740993"},
	{"9007199254740991", "9007199254740992"},
	{"1234567890123456789", "1234567890123456700"},
	{"-9007199254740993", "-9007199254740992"},
	{"18446744073709551615", "18446744073709551614"},
}

func TestGrantsBindNumbersExactly(t *testing.T) {
	for _, pair := range nearNumbers {
		bound, other := pair[0], pair[1]
		args := func(n string) json.RawMessage { return json.RawMessage(`{"account":{"id":` + n + `},"note":"<a&b>"}`) }
		v := GrantArgValue(args(bound), "account.id")
		if v != bound {
			t.Errorf("GrantArgValue of %s = %q; want the number as written", bound, v)
		}
		g := Grant{Tool: "bank__pay", ExactArgs: true, Args: []GrantArg{{Path: "account.id", Value: v}, {Path: "note", Value: GrantArgValue(args(bound), "note")}}}
		if !g.Covers("bank__pay", args(bound)) {
			t.Errorf("a grant bound to %s does not cover %s", bound, bound)
		}
		if g.Covers("bank__pay", args(other)) {
			t.Errorf("a grant bound to %s covers %s", bound, other)
		}
		// A grant recorded before exact numbers keeps its own form.
		legacy := Grant{Tool: "bank__pay", Args: []GrantArg{{Path: "account.id", Value: LegacyGrantArgValue(args(bound), "account.id")}}}
		if !legacy.Covers("bank__pay", args(bound)) {
			t.Errorf("a legacy grant bound to %s does not cover it", bound)
		}
	}
	if got := GrantArgValue(json.RawMessage(`{"a":{"b":1.50,"c":"<&>"}}`), "a"); got != `{"b":1.50,"c":"<&>"}` {
		t.Errorf("GrantArgValue = %s; want jsoncanon's form", got)
	}
	if got := GrantArgValue(json.RawMessage(`{"a":1,"a":2}`), "a"); got != "" {
		t.Errorf("GrantArgValue of a repeated key = %q; want none", got)
	}
}

func TestRequestDigestTellsNumbersApart(t *testing.T) {
	for _, pair := range nearNumbers {
		a := RequestDigest("t", "c", "bank__pay", json.RawMessage(`{"id":`+pair[0]+`}`), "pv")
		b := RequestDigest("t", "c", "bank__pay", json.RawMessage(`{"id":`+pair[1]+`}`), "pv")
		if a == b {
			t.Errorf("requests with id %s and %s have the same digest", pair[0], pair[1])
		}
	}
	spaced := RequestDigest("t", "c", "x", json.RawMessage(`{ "b": 1, "a": [9007199254740993] }`), "pv")
	if canon := RequestDigest("t", "c", "x", json.RawMessage(`{"a":[9007199254740993],"b":1}`), "pv"); spaced != canon {
		t.Error("the digest is not of the canonical form")
	}
}
