package guard

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func findingsOf(fs []ArgumentFinding) []Finding {
	var out []Finding
	for _, f := range fs {
		out = append(out, f.Finding)
	}
	return out
}

// TestInspectArgumentsActions: redact and block replace the value by its
// marker (the record of a blocked call holds none); require_approval and
// annotate leave it; every finding names rule, JSONPath and action.
func TestInspectArgumentsActions(t *testing.T) {
	args := `{"env":{"KEY":"` + awsKey + `","HOME":"/root"},"list":["plain","` + ghp + `"],"n":9007199254740993}`
	for _, a := range []Action{Redact, Block, RequireApproval, Annotate} {
		t.Run(string(a), func(t *testing.T) {
			out, fs, err := InspectArguments(json.RawMessage(args), Policy{Secrets: a})
			if err != nil {
				t.Fatal(err)
			}
			want := []Finding{
				{Rule: "aws-access-key", Path: "$.env.KEY", Action: string(a)},
				{Rule: "github-token", Path: "$.list[1]", Action: string(a)},
			}
			if diff := cmp.Diff(want, findingsOf(fs)); diff != "" {
				t.Fatalf("findings (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"env", "KEY"}, fs[0].Keys); diff != "" {
				t.Errorf("keys (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"list"}, fs[1].Keys); diff != "" {
				t.Errorf("keys through a list (-want +got):\n%s", diff)
			}
			s := string(out)
			withheld := a == Redact || a == Block
			if strings.Contains(s, awsKey) == withheld || strings.Contains(s, ghp) == withheld {
				t.Errorf("%s: arguments %s", a, s)
			}
			if withheld && !strings.Contains(s, `"KEY":"[REDACTED:aws-access-key]"`) {
				t.Errorf("no marker: %s", s)
			}
			if !withheld && s != args {
				t.Errorf("%s changed the arguments: %s", a, s)
			}
			if !strings.Contains(s, `"n":9007199254740993`) || !strings.Contains(s, `"HOME":"/root"`) {
				t.Errorf("the rest is not delivered exactly: %s", s)
			}
		})
	}
}

// TestInspectArgumentsCategories: each category by its own action; off
// (or unset) finds nothing and returns the same bytes.
func TestInspectArgumentsCategories(t *testing.T) {
	args := json.RawMessage(`{"to":"jane.doe@corp.example.org","token":"` + ghp + `"}`)
	out, fs, err := InspectArguments(args, Policy{Secrets: Block, PersonalData: Annotate})
	if err != nil {
		t.Fatal(err)
	}
	want := []Finding{{Rule: "email", Path: "$.to", Action: "annotate"}, {Rule: "github-token", Path: "$.token", Action: "block"}}
	if diff := cmp.Diff(want, findingsOf(fs)); diff != "" {
		t.Fatalf("findings (-want +got):\n%s", diff)
	}
	if !strings.Contains(string(out), "jane.doe@corp.example.org") || strings.Contains(string(out), ghp) {
		t.Errorf("arguments: %s", out)
	}
	for _, p := range []Policy{{}, {Secrets: Off, PersonalData: Off}} {
		out, fs, err := InspectArguments(args, p)
		if err != nil || len(fs) != 0 || string(out) != string(args) {
			t.Errorf("%+v: %s %v %v", p, out, fs, err)
		}
	}
}

// TestInspectArgumentsKeys: a key holding a secret is a finding, its path
// shows the key masked (a path never holds the value), redaction renames
// it, and two keys redacted alike stay two keys. Keys differing only in
// case are two keys, both inspected.
func TestInspectArgumentsKeys(t *testing.T) {
	other := "AKIA" + chars(base32, 16, 9)
	args := `{"` + awsKey + `":{"x":"` + ghp + `"},"` + other + `":1,"k":"` + awsKey + `","K":"` + other + `"}`
	out, fs, err := InspectArguments(json.RawMessage(args), Policy{Secrets: Redact})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if strings.Contains(f.Path, awsKey) || strings.Contains(f.Path, other) || strings.Contains(f.Path, ghp) {
			t.Errorf("a path holds the value: %+v", f)
		}
	}
	s := string(out)
	for _, secret := range []string{awsKey, other, ghp} {
		if strings.Contains(s, secret) {
			t.Errorf("redacted arguments hold %s: %s", secret, s)
		}
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	if len(m) != 4 {
		t.Errorf("keys lost: %s", s)
	}
	if _, ok := m["[REDACTED:aws-access-key]#2"]; !ok {
		t.Errorf("colliding keys not kept apart: %s", s)
	}
	var inKey, k, bigK int
	for _, f := range fs {
		switch {
		case f.InKey:
			inKey++
		case f.Path == "$.k":
			k++
		case f.Path == "$.K":
			bigK++
		}
	}
	if inKey != 2 || k != 1 || bigK != 1 {
		t.Errorf("findings %+v", fs)
	}
}

// TestInspectArgumentsHostile: repeated keys and trailing bytes are
// refused; a deeply nested value and a huge one are inspected; numbers
// past 2^53 and odd literals pass exactly as written.
func TestInspectArgumentsHostile(t *testing.T) {
	p := Policy{Secrets: Redact, PersonalData: Redact}
	for _, bad := range []string{`{"a":"x","a":"` + awsKey + `"}`, `{"a":{"b":1,"b":2}}`, `{"a":1} {"b":2}`, `{"a":1}x`, `{"a":`} {
		if _, _, err := InspectArguments(json.RawMessage(bad), p); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
	deep := strings.Repeat(`{"a":`, 5000) + `"` + awsKey + `"` + strings.Repeat("}", 5000)
	out, fs, err := InspectArguments(json.RawMessage(deep), p)
	if err != nil || len(fs) != 1 || strings.Contains(string(out), awsKey) {
		t.Fatalf("deep: %v %d", err, len(fs))
	}
	huge := `{"blob":"` + strings.Repeat("lorem ipsum ", 200_000) + awsKey + `"}`
	out, fs, err = InspectArguments(json.RawMessage(huge), p)
	if err != nil || len(fs) != 1 || strings.Contains(string(out), awsKey) {
		t.Fatalf("huge: %v %v", err, fs)
	}
	nums := `{"a":18446744073709551617,"b":1.00000000000000000001,"c":-0,"d":1e400,"s":"` + awsKey + `"}`
	out, _, err = InspectArguments(json.RawMessage(nums), p)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"a":18446744073709551617,"b":1.00000000000000000001,"c":-0,"d":1e400,"s":"[REDACTED:aws-access-key]"}`
	if string(out) != want {
		t.Errorf("numbers:\n got %s\nwant %s", out, want)
	}
}

// TestBlockedArguments names kind and path of each blocking finding,
// never a value, and the setting.
func TestBlockedArguments(t *testing.T) {
	_, fs, err := InspectArguments(json.RawMessage(`{"env":{"KEY":"`+awsKey+`"},"to":"a.b@corp.example.org"}`), Policy{Secrets: Block, PersonalData: Annotate})
	if err != nil {
		t.Fatal(err)
	}
	msg := BlockedArguments("fs__write", findingsOf(fs))
	if !strings.Contains(msg, "aws-access-key at $.env.KEY") || strings.Contains(msg, "email") || strings.Contains(msg, awsKey) || !strings.Contains(msg, "guard.arguments") {
		t.Error(msg)
	}
}

// BenchmarkInspectArguments: the cost per call of inspecting arguments of
// 1 KB and 1 MiB (both categories on, nothing found: the common case).
func BenchmarkInspectArguments(b *testing.B) {
	for _, size := range []int{1 << 10, 1 << 20} {
		line := `{"path":"/srv/app/config.yaml","line":42,"text":"the quick brown fox jumps over the lazy dog 0123456789"},`
		body := strings.Repeat(line, size/len(line)+1)
		args := json.RawMessage(`{"items":[` + strings.TrimSuffix(body, ",") + `]}`)
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			b.SetBytes(int64(len(args)))
			for b.Loop() {
				if _, _, err := InspectArguments(args, Policy{Secrets: Redact, PersonalData: Redact}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
