package gateway

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/internal/jsoncanon"
)

// TestCallRefusesDuplicateArgumentKeys: a tools/call whose arguments repeat
// a key, at the top or nested, is an isError result naming the key and where
// it is, and nothing is sent to the task (so nothing is recorded, judged or
// run); arguments without one reach the task canonical.
func TestCallRefusesDuplicateArgumentKeys(t *testing.T) {
	for _, tc := range []struct {
		name, args string
		want       []string // in the error, or
		canonical  string   // the arguments the task gets
	}{
		{name: "top level", args: `{"path":"secret.env","path":"ok.txt"}`, want: []string{`"path"`, "at $"}},
		{name: "first value benign", args: `{"path":"ok.txt","path":"secret.env"}`, want: []string{`"path"`, "at $"}},
		{name: "escaped spelling", args: `{"path":"secret.env","\u0070ath":"ok.txt"}`, want: []string{`"path"`, "at $"}},
		{name: "nested", args: `{"text":"x","opts":{"path":"secret.env","path":"ok.txt"}}`, want: []string{`"path"`, "at $.opts"}},
		{name: "in an array", args: `{"text":"x","edits":[{"a":1},{"a":1,"a":2}]}`, want: []string{`"a"`, "at $.edits[1]"}},
		{name: "no duplicate: canonical", args: `{ "text" : "hi", "b":{"y":1,"x":[1, 2.50]} }`, canonical: `{"b":{"x":[1,2.50],"y":1},"text":"hi"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ft := &fakeTemporal{}
			cs := connectMemory(t, newTestGateway(t, ft, Options{Principal: "alice"}))
			res := callTool(t, cs, "counter__echo", json.RawMessage(tc.args), "")
			if tc.canonical != "" {
				if res.IsError {
					t.Fatalf("refused: %s", textOf(res))
				}
				if got := string(ft.last(t).req.Arguments); got != tc.canonical {
					t.Fatalf("the task got arguments %s, want %s", got, tc.canonical)
				}
				return
			}
			if !res.IsError {
				t.Fatalf("accepted %s: %q", tc.args, textOf(res))
			}
			for _, w := range append(tc.want, "more than once", "Nothing ran") {
				if !strings.Contains(textOf(res), w) {
					t.Errorf("error %q does not say %q", textOf(res), w)
				}
			}
			if n := ft.count(); n != 0 {
				t.Fatalf("%d updates sent to the task; want none", n)
			}
		})
	}
}

// FuzzToolsCallArguments feeds raw tools/call argument bytes through the
// gateway's argument handling (what call does before the Update). It never
// panics; what it accepts is canonical (its own canonical form, no
// duplicate key) and decodes, as the worker's policy decodes it, to what
// the raw arguments decode to; what it refuses carries an error that says
// nothing ran.
func FuzzToolsCallArguments(f *testing.F) {
	for _, s := range []string{
		`{"path":"secret.env","path":"ok.txt"}`,
		`{"path":"ok.txt","path":"secret.env"}`,
		`{"path":"secret.env","\u0070ath":"ok.txt"}`,
		`{"opts":{"path":"secret.env","path":"ok.txt"}}`,
		`{"edits":[{"oldText":"a","oldText":"b"}]}`,
		`{"path":"a","PATH":"b"}`,
		"{\"path\":\"\xff\"}",
		`{"n":1e400}`, `{"n":9007199254740993}`,
		`{}`, `null`, ``, `[]`, `"x"`, `{"a":1} {"a":2}`, `{"a":`,
		`{"a":` + strings.Repeat(`[`, 200) + strings.Repeat(`]`, 200) + `}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		args, err := callArguments("counter__echo", raw)
		if err != nil {
			if !strings.Contains(err.Error(), "Nothing ran") {
				t.Fatalf("refusal %q does not say that nothing ran", err)
			}
			if json.Valid(raw) && jsoncanon.CheckDuplicates(raw) == nil && len(raw) > 0 {
				t.Fatalf("refused %q, which is one JSON value without a repeated key: %v", raw, err)
			}
			return
		}
		if jsoncanon.CheckDuplicates(args) != nil {
			t.Fatalf("accepted %q as %s, which repeats a key", raw, args)
		}
		if again, err := jsoncanon.Canonical(args); err != nil || string(again) != string(args) {
			t.Fatalf("accepted %q as %s, which is not canonical (%s, %v)", raw, args, again, err)
		}
		var policySees, rawMeans any
		if err := json.Unmarshal(args, &policySees); err != nil {
			if json.Unmarshal(raw, &rawMeans) == nil {
				t.Fatalf("%s does not decode (%v) but the raw %q does", args, err, raw)
			}
			return // e.g. 1e400: the worker's policy denies both alike
		}
		if len(raw) == 0 || string(raw) == "null" {
			rawMeans = map[string]any{}
		} else if err := json.Unmarshal(raw, &rawMeans); err != nil {
			t.Fatalf("accepted %q, which does not decode: %v", raw, err)
		}
		if !reflect.DeepEqual(policySees, rawMeans) {
			t.Fatalf("policy sees %#v in %s; the raw %q means %#v", policySees, args, raw, rawMeans)
		}
	})
}
