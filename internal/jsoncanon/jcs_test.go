package jsoncanon

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestJCS: the examples of RFC 8785 (§3.2.2 values, §3.2.3 member order)
// encode to the bytes the RFC gives.
func TestJCS(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"RFC 8785 §3.2.2",
			`{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`,
			`{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`},
		{"RFC 8785 §3.2.3 member order",
			`{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}`,
			"{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}"},
		{"U+2028 unescaped, <>& unescaped", `{"a":"\u2028<&>"}`, "{\"a\":\"\u2028<&>\"}"},
		{"numbers", `[-0,1e21,1e-7,123456789012,0.1,-1.5e-300]`, `[0,1e+21,1e-7,123456789012,0.1,-1.5e-300]`},
	} {
		var v any
		if err := json.Unmarshal([]byte(tc.in), &v); err != nil {
			t.Fatal(err)
		}
		got, err := JCS(v)
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: JCS = %s, %v\nwant %s", tc.name, got, err, tc.want)
		}
	}
	// Decode's exact values: an integer no double holds is refused, not
	// rounded.
	for _, in := range []string{`9007199254740993`, `{"a":[18446744073709551615]}`} {
		v, err := Decode([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := JCS(v); err == nil || !strings.Contains(err.Error(), "write it as a string") {
			t.Errorf("JCS(%s) = %s, %v; want it refused", in, got, err)
		}
	}
	if _, err := JCS(map[string]any{"a": "\xff"}); err == nil {
		t.Error("JCS accepted invalid UTF-8")
	}
	if _, err := JCS(map[string]any{"a": struct{}{}}); err == nil {
		t.Error("JCS accepted a Go struct")
	}
}
