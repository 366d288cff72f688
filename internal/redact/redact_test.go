package redact

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestMaskArguments(t *testing.T) {
	cases := []struct {
		name, args string
		redact     []string
		want       string
	}{
		{"top level", `{"path":"/a","content":"secret"}`, []string{"content"}, `{"content":"[redacted]","path":"/a"}`},
		{"nested", `{"auth":{"token":"t","user":"u"}}`, []string{"auth.token"}, `{"auth":{"token":"[redacted]","user":"u"}}`},
		{"through a list", `{"entities":[{"name":"a","observations":["x"]},{"name":"b","observations":["y"]},"plain"]}`,
			[]string{"entities.observations"}, `{"entities":[{"name":"a","observations":"[redacted]"},{"name":"b","observations":"[redacted]"},"plain"]}`},
		{"whole object", `{"auth":{"token":"t"},"n":1}`, []string{"auth"}, `{"auth":"[redacted]","n":1}`},
		{"missing path unchanged", `{"a":{"b":1}}`, []string{"a.c", "x.y", "a.b.c", ""}, `{"a":{"b":1}}`},
		{"several paths", `{"a":"1","b":"2","c":"3"}`, []string{"a", "c"}, `{"a":"[redacted]","b":"2","c":"[redacted]"}`},
		{"big numbers kept exact", `{"n":12345678901234567890,"s":"x"}`, []string{"s"}, `{"n":12345678901234567890,"s":"[redacted]"}`},
		{"no paths", `{"a":[1,2]}`, nil, `{"a":[1,2]}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, err := MaskArguments(json.RawMessage(c.args), c.redact)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(v)
			if string(got) != c.want {
				t.Errorf("got %s\nwant %s", got, c.want)
			}
		})
	}
	for _, bad := range []string{`{"a":`, `{"a":1} {"b":2}`, `not json`} {
		if _, err := MaskArguments(json.RawMessage(bad), []string{"a"}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestPrettyArgumentsWithholdsWhatCannotBeMasked(t *testing.T) {
	cases := []struct {
		name, args string
		redact     []string
		want       string // exact, or a part when withheld
		withheld   bool
	}{
		{"masked, no HTML escaping", `{"password": "hunter2", "user": "<b>"}`, []string{"password"}, "{\n  \"password\": \"[redacted]\",\n  \"user\": \"<b>\"\n}", false},
		{"not JSON", `password=hunter2`, []string{"password"}, "withheld", true},
		{"two values", `{"a":1} {"password":"hunter2"}`, []string{"password"}, "withheld", true},
		{"no arguments", ``, nil, "{}", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := PrettyArguments(json.RawMessage(c.args), c.redact)
			if c.withheld {
				if strings.Contains(got, "hunter2") || !strings.Contains(got, c.want) {
					t.Errorf("arguments shown: %s", got)
				}
				return
			}
			if got != c.want {
				t.Errorf("pretty:\n%s\nwant:\n%s", got, c.want)
			}
		})
	}
}

func TestIndentTakesTheMask(t *testing.T) {
	got, err := Indent(json.RawMessage(`{"a":{"b":"x"},"c":2}`), []string{"a.b"}, "•••")
	if want := "{\n  \"a\": {\n    \"b\": \"•••\"\n  },\n  \"c\": 2\n}"; err != nil || got != want {
		t.Errorf("Indent = %q, %v; want %q", got, err, want)
	}
	if _, err := Indent(json.RawMessage(`{"a":`), nil, "•••"); err == nil {
		t.Error("Indent of invalid JSON: no error")
	}
}

func TestArguments(t *testing.T) {
	cases := []struct{ name, args, want string }{
		{"masked and scrubbed", `{"text":"<hi>","_meta":{"progressToken":"p"},"auth":{"token":"t","user":"u"},"items":[{"name":"n","Password":"pw"}]}`,
			`{"auth":{"user":"[redacted]"},"items":[{"name":"n"}],"text":"<hi>"}`},
		{"not JSON", `key=value`, `"(9 bytes of arguments withheld: not JSON)"`},
		{"empty", ` `, ``},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := string(Arguments(json.RawMessage(c.args), []string{"auth.user"})); got != c.want {
				t.Errorf("got %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestSecretName(t *testing.T) {
	for k, want := range map[string]bool{
		"token": true, "access_token": true, "X-Api-Key": true, "apiKey": true, "Authorization": true, "password": true,
		"client.secret": true, "privateKey": true, "cookie": true, "credentials": true,
		"text": false, "key": false, "author": false, "path": false, "name": false,
	} {
		if got := SecretName(k); got != want {
			t.Errorf("SecretName(%q) = %v, want %v", k, got, want)
		}
	}
}

func TestValuesAt(t *testing.T) {
	args := json.RawMessage(`{"a":{"b":"secret-1","n":12345},"list":[{"x":"secret-2"},{"x":"abc"},{"y":"other"}],` +
		`"obj":{"deep":["secret-3",{"k":"secret-4"}]},"short":"ab"}`)
	got := ValuesAt(args, []string{"a.b", "a.n", "list.x", "obj", "short", "missing.path"})
	want := []string{"secret-1", "secret-2", "secret-3", "secret-4"}
	if diff := cmp.Diff(want, got, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("ValuesAt (-want +got):\n%s", diff)
	}
	if m := string(MaskJSON(json.RawMessage(`{"t":"id secret-1 and \"secret-2\""}`), got)); m != `{"t":"id [redacted] and \"[redacted]\""}` {
		t.Errorf("MaskJSON = %s", m)
	}
	if m := MaskValues("error: secret-3 refused", got); m != "error: [redacted] refused" {
		t.Errorf("MaskValues = %s", m)
	}
}

func TestVisibleEscapesHiddenCharacters(t *testing.T) {
	cases := []struct {
		name, in        string
		visible, online string // Visible, VisibleLine
	}{
		{"bidi, zero width, escape, separator", "ok\u202eevil\u200b\x1b[2Jdone\u2028",
			`ok\u202eevil\u200b\u001b[2Jdone\u2028`, `ok\u202eevil\u200b\u001b[2Jdone\u2028`},
		{"newline and tab", "a\tb\nc\r", "a\tb\nc\\u000d", "a\tb\\u000ac\\u000d"},
		{"replacement character", "x\uFFFDy", `x\ufffdy`, `x\ufffdy`},
		{"plain text", "héllo, wörld", "héllo, wörld", "héllo, wörld"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Visible(c.in); got != c.visible {
				t.Errorf("Visible = %q, want %q", got, c.visible)
			}
			if got := VisibleLine(c.in); got != c.online {
				t.Errorf("VisibleLine = %q, want %q", got, c.online)
			}
		})
	}
}
