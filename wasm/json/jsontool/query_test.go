package jsontool_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/wasm/json/jsontool"
)

const doc = `{
  "store": {
    "name": "corner",
    "books": [
      {"title": "A", "price": 8.95, "tags": ["x"]},
      {"title": "B", "price": 12.99},
      {"title": "C", "price": 1e400, "isbn": "0-553-21311-3"}
    ],
    "open": true,
    "z": 1, "a": 2
  },
  "odd.key": {"with ]": "v"},
  "empty": [],
  "n": null,
  "big": 12345678901234567890
}`

func TestQuery(t *testing.T) {
	for _, tt := range []struct {
		path string
		want string
	}{
		{"", `{"store":{"name":"corner","books":[{"title":"A","price":8.95,"tags":["x"]},{"title":"B","price":12.99},{"title":"C","price":1e400,"isbn":"0-553-21311-3"}],"open":true,"z":1,"a":2},"odd.key":{"with ]":"v"},"empty":[],"n":null,"big":12345678901234567890}`},
		{"$", `{"store":{"name":"corner","books":[{"title":"A","price":8.95,"tags":["x"]},{"title":"B","price":12.99},{"title":"C","price":1e400,"isbn":"0-553-21311-3"}],"open":true,"z":1,"a":2},"odd.key":{"with ]":"v"},"empty":[],"n":null,"big":12345678901234567890}`},
		{"store.name", `"corner"`},
		{".store.name", `"corner"`},
		{"$.store.name", `"corner"`},
		{"store.books[1].title", `"B"`},
		{"store.books[-1].isbn", `"0-553-21311-3"`},
		{"store.books[ 0 ].tags[0]", `"x"`},
		// Numbers keep their digits, even beyond float64.
		{"big", `12345678901234567890`},
		{"store.books[2].price", `1e400`},
		{"n", `null`},
		{"store.open", `true`},
		{`["odd.key"]["with ]"]`, `"v"`},
		// Wildcards collect every match in document order, skipping
		// branches without the rest of the path.
		{"store.books[*].title", `["A","B","C"]`},
		{"store.books[*].isbn", `["0-553-21311-3"]`},
		{"store.books[*].tags[*]", `["x"]`},
		{"store.books[*].nope", `[]`},
		{"empty[*]", `[]`},
		{"store.*", `["corner",[{"title":"A","price":8.95,"tags":["x"]},{"title":"B","price":12.99},{"title":"C","price":1e400,"isbn":"0-553-21311-3"}],true,1,2]`},
		{"store[*].title", `[]`},
		{"store.books[*]", `[{"title":"A","price":8.95,"tags":["x"]},{"title":"B","price":12.99},{"title":"C","price":1e400,"isbn":"0-553-21311-3"}]`},
	} {
		t.Run(tt.path, func(t *testing.T) {
			got, err := jsontool.Query(json.RawMessage(doc), tt.path)
			if err != nil {
				t.Fatal(err)
			}
			compact, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, string(compact)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestQueryErrors(t *testing.T) {
	for _, tt := range []struct {
		path string
		want string
	}{
		{"store.title", `path "store.title": store has no field "title" (it has fields "name", "books", "open", "z", "a")`},
		{"store.books[3]", `path "store.books[3]": store.books has 3 elements, so there is no index [3]`},
		{"store.books[-4]", `path "store.books[-4]": store.books has 3 elements, so there is no index [-4]`},
		{"store.name.first", `path "store.name.first": store.name is a string, not an object, so it has no field "first"`},
		{"store[0]", `path "store[0]": store is an object, not an array, so it has no index [0]`},
		{"nope", `path "nope": the value has no field "nope" (it has fields "store", "odd.key", "empty", "n", "big")`},
		{"store..name", `path "store..name": a field name is missing at character 7; write fields as a.b, indexes as [0], every element as [*], odd field names as ["a.b"]`},
		{"store.", `path "store.": a field name is missing at character 7; write fields as a.b, indexes as [0], every element as [*], odd field names as ["a.b"]`},
		{"books[x]", `path "books[x]": [x] is not an index (a whole number) or [*] at character 6; write fields as a.b, indexes as [0], every element as [*], odd field names as ["a.b"]`},
		{"books[1", `path "books[1": "[" is not closed at character 6; write fields as a.b, indexes as [0], every element as [*], odd field names as ["a.b"]`},
		{"books[0]x", `path "books[0]x": "x" where "." or "[" should be at character 9; write fields as a.b, indexes as [0], every element as [*], odd field names as ["a.b"]`},
		{`["a"x]`, `path "[\"a\"x]": "]" is missing after the quoted field name at character 5; write fields as a.b, indexes as [0], every element as [*], odd field names as ["a.b"]`},
		{"a]b", `path "a]b": "]" where "." or "[" should be at character 2; write fields as a.b, indexes as [0], every element as [*], odd field names as ["a.b"]`},
	} {
		t.Run(tt.path, func(t *testing.T) {
			_, err := jsontool.Query(json.RawMessage(doc), tt.path)
			if err == nil {
				t.Fatal("no error")
			}
			if diff := cmp.Diff(tt.want, err.Error()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzQuery checks that no path or document makes Query panic, and that
// whatever it selects is valid JSON.
func FuzzQuery(f *testing.F) {
	for _, p := range []string{"", "$", "a.b[0].c", "a[*].b", `["x.y"][-1]`, "a[", `["`, "..", "[*][*]", ".*", "a]"} {
		f.Add(`{"a":{"b":[{"c":1}]},"x.y":[1,2]}`, p)
	}
	f.Fuzz(func(t *testing.T, doc, path string) {
		if !json.Valid([]byte(doc)) {
			return
		}
		got, err := jsontool.Query(json.RawMessage(doc), path)
		if err == nil && !json.Valid(got) {
			t.Errorf("Query(%q, %q) = %q, not JSON", doc, path, got)
		}
	})
}
