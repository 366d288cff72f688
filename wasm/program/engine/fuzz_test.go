package engine

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/airlock-run/airlock/wasm/program/wire"
)

// FuzzFromJSON: whatever a tool returns, the result is read as
// encoding/json reads it, or refused with an error (never a panic).
func FuzzFromJSON(f *testing.F) {
	for _, s := range []string{`{"a":1,"a":2}`, `[1,2.5,"x\u00e9",null,true,{}]`, `"\ud800"`, `123456789012345678901234567890`, `-0`, `1e400`, `{"a":[{"b":{}}]}`, "\"\xff\"", ` 7 `, `[`, `{"a" 1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := fromJSON(data)
		var want any
		wantErr := json.Unmarshal(data, &want)
		if err != nil {
			if wantErr == nil && len(data) > 0 {
				// Refusals beyond encoding/json's: depth, digits, huge floats re-encoded.
				t.Logf("refused %q: %v", data, err)
			}
			return
		}
		if wantErr != nil && len(data) > 0 {
			for _, c := range data {
				if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
					t.Fatalf("accepted %q, which encoding/json refuses: %v", data, wantErr)
				}
			}
			return
		}
		out, err := toJSON(v, true, "")
		if err != nil {
			return // e.g. 1e400 is +Inf, which JSON cannot hold
		}
		var got any
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%q re-encoded as %q: %v", data, out, err)
		}
		if !reflect.DeepEqual(got, want) && !containsNumbers(want) {
			t.Fatalf("%q: got %s, want %#v", data, out, want)
		}
	})
}

// containsNumbers: float64 comparisons of big integers differ by
// design (ours are exact).
func containsNumbers(v any) bool {
	switch v := v.(type) {
	case float64:
		return true
	case []any:
		for _, x := range v {
			if containsNumbers(x) {
				return true
			}
		}
	case map[string]any:
		for _, x := range v {
			if containsNumbers(x) {
				return true
			}
		}
	}
	return false
}

// FuzzRun: any source ends (no panic, no hang under small step limits)
// with a valid outcome, the same way twice.
func FuzzRun(f *testing.F) {
	files, _ := filepath.Glob("testdata/corpus/*.star")
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(src))
	}
	f.Add("while True:\n    pass\n")
	f.Add("result = parallel([lambda: fs.stat(path='/a') for i in range(3)])")
	lim := testLimits
	lim.MaxSteps, lim.MaxStepsBetweenCalls = 200_000, 50_000
	f.Fuzz(func(t *testing.T, src string) {
		if len(src) > 64<<10 {
			return
		}
		d1 := runLimits(t, src, newHost(t, fakeFS), lim)
		d2 := runLimits(t, src, newHost(t, fakeFS), lim)
		if !reflect.DeepEqual(d1, d2) {
			t.Fatalf("two runs differ:\n%+v\n%+v", d1, d2)
		}
		switch d1.Outcome {
		case wire.OutcomeOK, wire.OutcomeError, wire.OutcomeInvalid, wire.OutcomeLimit:
		default:
			t.Fatalf("outcome %q", d1.Outcome)
		}
		if d1.Outcome != wire.OutcomeOK && d1.Error == "" {
			t.Fatalf("%s without an error", d1.Outcome)
		}
	})
}
