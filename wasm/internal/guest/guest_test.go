package guest_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/wasm/internal/guest"
)

type echoArgs struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
	Flag  *bool  `json:"flag"`
}

var tools = map[string]guest.Tool{
	"echo": func(raw json.RawMessage) (guest.Result, error) {
		var a echoArgs
		if err := guest.Decode(raw, &a); err != nil {
			return guest.Result{}, err
		}
		return guest.Result{Text: "hello " + a.Name, Structured: map[string]any{"name": a.Name}}, nil
	},
	"plain": func(json.RawMessage) (guest.Result, error) {
		return guest.Result{Text: "just text"}, nil
	},
	"fail": func(json.RawMessage) (guest.Result, error) {
		return guest.Result{}, errors.New("it went\nwrong  twice")
	},
}

func TestRun(t *testing.T) {
	for _, tt := range []struct {
		name       string
		argv       []string
		stdin      string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{
			name:       "structured",
			argv:       []string{"m.wasm", "echo"},
			stdin:      `{"name":"ada"}`,
			wantStdout: `{"content":[{"type":"text","text":"hello ada"}],"structuredContent":{"name":"ada"}}` + "\n",
		},
		{
			name:       "no HTML escaping",
			argv:       []string{"m.wasm", "echo"},
			stdin:      `{"name":"<a & b>"}`,
			wantStdout: `{"content":[{"type":"text","text":"hello <a & b>"}],"structuredContent":{"name":"<a & b>"}}` + "\n",
		},
		{
			name:       "text only, empty stdin taken as {}",
			argv:       []string{"m.wasm", "plain"},
			wantStdout: `{"content":[{"type":"text","text":"just text"}]}` + "\n",
		},
		{
			name:       "tool error on one line",
			argv:       []string{"m.wasm", "fail"},
			wantCode:   guest.ExitTool,
			wantStderr: "it went wrong twice\n",
		},
		{
			name:       "no tool named",
			argv:       []string{"m.wasm"},
			wantCode:   guest.ExitUsage,
			wantStderr: "no tool named: give one of echo, fail, plain as the first argument (wasm.args in the manifest)\n",
		},
		{
			name:       "unknown tool",
			argv:       []string{"m.wasm", "nope"},
			wantCode:   guest.ExitUsage,
			wantStderr: `unknown tool "nope": give one of echo, fail, plain as the first argument (wasm.args in the manifest)` + "\n",
		},
		{
			name:       "unknown argument",
			argv:       []string{"m.wasm", "echo"},
			stdin:      `{"nam":"ada"}`,
			wantCode:   guest.ExitTool,
			wantStderr: `unknown argument "nam"; this tool takes count, flag, name` + "\n",
		},
		{
			name:       "wrong type",
			argv:       []string{"m.wasm", "echo"},
			stdin:      `{"count":"3"}`,
			wantCode:   guest.ExitTool,
			wantStderr: "argument count must be an integer, got a string\n",
		},
		{
			name:       "wrong type through a pointer",
			argv:       []string{"m.wasm", "echo"},
			stdin:      `{"flag":1}`,
			wantCode:   guest.ExitTool,
			wantStderr: "argument flag must be true or false, got a number\n",
		},
		{
			name:       "not an object",
			argv:       []string{"m.wasm", "echo"},
			stdin:      `[1]`,
			wantCode:   guest.ExitTool,
			wantStderr: "the arguments must be a JSON object, got an array\n",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := guest.Run(tt.argv, strings.NewReader(tt.stdin), &stdout, &stderr, tools)
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d (stderr %q)", code, tt.wantCode, stderr.String())
			}
			if diff := cmp.Diff(tt.wantStdout, stdout.String()); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantStderr, stderr.String()); diff != "" {
				t.Errorf("stderr (-want +got):\n%s", diff)
			}
		})
	}
}
