package approver

import (
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver/internal/approvertest"
)

func TestEditedArguments(t *testing.T) {
	r := approvertest.Request("task-1", time.Now())
	for _, tc := range []struct {
		name, submitted, want, err string
		noEdits                    bool
	}{
		{name: "a masked value keeps the call's own", submitted: `{"key":"k2","auth":{"token":"[redacted]"}}`, want: `{"auth":{"token":"s3cret"},"key":"k2"}`},
		{name: "a new secret replaces it", submitted: `{"key":"k1","auth":{"token":"new"}}`, want: `{"auth":{"token":"new"},"key":"k1"}`},
		{name: "unchanged is a plain approval", submitted: "{\n  \"key\": \"k1\", \"auth\": {\"token\": \"[redacted]\"}\n}", want: ""},
		{name: "numbers stay exact", submitted: `{"key":"k1","n":12345678901234567890}`, want: `{"key":"k1","n":12345678901234567890}`},
		{name: "2^53+1 and 19-digit IDs as written", submitted: `{"key":"<k&1>","n":9007199254740993,"m":1234567890123456700}`,
			want: `{"key":"<k&1>","m":1234567890123456700,"n":9007199254740993}`},
		{name: "a number without an exact value", submitted: `{"key":"k1","n":9007199254740993.5}`, err: "$.n cannot be held exactly"},
		{name: "a repeated key", submitted: `{"key":"k1","key":"k2"}`, err: "ambiguous"},
		{name: "not JSON", submitted: `{"key":`, err: "not JSON"},
		{name: "not an object", submitted: `["k1"]`, err: "must be a JSON object"},
		{name: "empty", submitted: ` `, err: "empty"},
		{name: "the tool forbids edits", submitted: `{"key":"k2"}`, noEdits: true, err: "approval.edits: false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := r
			r.NoEdits = tc.noEdits
			got, err := EditedArguments(r, []byte(tc.submitted))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("got %s %v, want %s", got, err, tc.want)
			}
		})
	}
}

// TestRedactedMasksTheEdit: show --json masks both versions of an edit.
func TestRedactedMasksTheEdit(t *testing.T) {
	r := approvertest.Request("task-1", time.Now())
	r.Edit = &api.ArgsEdit{By: "bob", Original: r.Arguments, Arguments: []byte(`{"key":"k2","auth":{"token":"n3w"}}`)}
	got := Redacted(r)
	if strings.Contains(string(got.Edit.Original), "s3cret") || strings.Contains(string(got.Edit.Arguments), "n3w") ||
		!strings.Contains(string(r.Edit.Arguments), "n3w") {
		t.Errorf("redacted edit %s / %s (the request's own must stay as it was)", got.Edit.Original, got.Edit.Arguments)
	}
}
