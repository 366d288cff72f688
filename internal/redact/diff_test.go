package redact

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestChangesNamesMaskedPaths (issue 25 §11): a change inside a masked
// nested field is named by its path instead of showing as
// "[redacted]" → "[redacted]" for the whole value.
func TestChangesNamesMaskedPaths(t *testing.T) {
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	for _, tc := range []struct {
		name     string
		from, to string
		paths    []string
		want     []string
	}{
		{"a secret in list elements", `{"deletions":[{"path":"a","key":"k1"},{"path":"b","key":"k2"}]}`,
			`{"deletions":[{"path":"a","key":"k1"},{"path":"b","key":"k9"}]}`, []string{"deletions.key"},
			[]string{"deletions.1.key: masked value changed"}},
		{"a visible change beside a secret", `{"deletions":[{"path":"a","key":"k1"}]}`, `{"deletions":[{"path":"z","key":"k1"}]}`,
			[]string{"deletions.key"}, []string{`deletions.0.path: "a" → "z"`}},
		{"a list that grew keeps the secret masked", `{"deletions":[{"path":"a","key":"k1"}]}`, `{"deletions":[{"path":"a","key":"k1"},{"path":"b","key":"k2"}]}`,
			[]string{"deletions.key"}, []string{`deletions: [{"key":"[redacted]","path":"a"}] → [{"key":"[redacted]","path":"a"},{"key":"[redacted]","path":"b"}]`}},
		{"a nested object path", `{"auth":{"token":"s1","user":"u"}}`, `{"auth":{"token":"s2","user":"u"}}`, []string{"auth.token"},
			[]string{"auth.token: masked value changed"}},
		{"a credential-named member without a redact path", `{"opts":[{"api_key":"x","n":1}]}`, `{"opts":[{"api_key":"y","n":1}]}`, nil,
			[]string{"opts.0.api_key: masked value changed"}},
		{"a secret added", `{"a":1}`, `{"a":1,"auth":{"token":"s"}}`, []string{"auth.token"}, []string{`auth: added {"token":"[redacted]"}`}},
		{"plain values, exact numbers", `{"n":9007199254740993,"s":"x"}`, `{"n":9007199254740992,"s":"x"}`, nil,
			[]string{"n: 9007199254740993 → 9007199254740992"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, c := range Changes(raw(tc.from), raw(tc.to), tc.paths) {
				got = append(got, c.Text())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
		})
	}
}
