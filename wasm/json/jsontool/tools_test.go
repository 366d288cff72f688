package jsontool_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/wasm/internal/guest"
	"github.com/airlock-run/airlock/wasm/json/jsontool"
)

// TestTools runs each tool as json.wasm would: arguments on stdin, the
// CallToolResult on stdout, the error on stderr.
func TestTools(t *testing.T) {
	for _, tt := range []struct {
		name       string
		tool       string
		args       string
		wantStdout string
		wantStderr string
	}{
		{
			name:       "query a value",
			tool:       "query",
			args:       `{"json": {"a": {"b": [{"c": 1}, {"c": 2}]}}, "path": "a.b[1]"}`,
			wantStdout: `{"content":[{"type":"text","text":"{\n  \"c\": 2\n}"}],"structuredContent":{"result":{"c":2}}}`,
		},
		{
			name:       "query a JSON text",
			tool:       "query",
			args:       `{"json": "{\"a\": [1, 2, 3]}", "path": "a[*]"}`,
			wantStdout: `{"content":[{"type":"text","text":"[\n  1,\n  2,\n  3\n]"}],"structuredContent":{"result":[1,2,3]}}`,
		},
		{
			name:       "query the whole null",
			tool:       "query",
			args:       `{"json": null}`,
			wantStdout: `{"content":[{"type":"text","text":"null"}],"structuredContent":{"result":null}}`,
		},
		{
			name:       "query a string that is no JSON",
			tool:       "query",
			args:       `{"json": "{a: 1}", "path": "a"}`,
			wantStderr: "argument json is a string that is not a JSON text (invalid character 'a' looking for beginning of object key string); pass the value itself, or a string holding valid JSON",
		},
		{
			name:       "query without json",
			tool:       "query",
			args:       `{"path": "a"}`,
			wantStderr: "argument json is required: the JSON value to query, or a string holding a JSON text",
		},
		{
			name:       "query with a misspelt argument",
			tool:       "query",
			args:       `{"json": {}, "query": "a"}`,
			wantStderr: `unknown argument "query"; this tool takes json, path`,
		},
		{
			name:       "csv with a header by default",
			tool:       "csv_to_json",
			args:       `{"csv": "a,b\n1,2\n3,4\n"}`,
			wantStdout: `{"content":[{"type":"text","text":"{\"rows\": [\n  {\"a\":\"1\",\"b\":\"2\"},\n  {\"a\":\"3\",\"b\":\"4\"}\n]}"}],"structuredContent":{"rows":[{"a":"1","b":"2"},{"a":"3","b":"4"}]}}`,
		},
		{
			name:       "csv without a header, pipe-separated",
			tool:       "csv_to_json",
			args:       `{"csv": "a|b\n1|2", "header": false, "delimiter": "|"}`,
			wantStdout: `{"content":[{"type":"text","text":"{\"rows\": [\n  [\"a\",\"b\"],\n  [\"1\",\"2\"]\n]}"}],"structuredContent":{"rows":[["a","b"],["1","2"]]}}`,
		},
		{
			name:       "csv keeps <, > and & as they are",
			tool:       "csv_to_json",
			args:       `{"csv": "<a>\n&", "header": false}`,
			wantStdout: `{"content":[{"type":"text","text":"{\"rows\": [\n  [\"<a>\"],\n  [\"&\"]\n]}"}],"structuredContent":{"rows":[["<a>"],["&"]]}}`,
		},
		{
			name:       "csv with no rows",
			tool:       "csv_to_json",
			args:       `{"csv": "a,b"}`,
			wantStdout: `{"content":[{"type":"text","text":"{\"rows\": []}"}],"structuredContent":{"rows":[]}}`,
		},
		{
			name:       "csv ragged",
			tool:       "csv_to_json",
			args:       `{"csv": "a,b\n1,2\n3\n"}`,
			wantStderr: "CSV line 3 has 1 field but the header (line 1) has 2; every row needs the same number of fields (quote a field that contains the delimiter or a line break)",
		},
		{
			name:       "csv with a two-character delimiter",
			tool:       "csv_to_json",
			args:       `{"csv": "a,b", "delimiter": ", "}`,
			wantStderr: `delimiter ", " is not usable: give one character other than a quote or line break, such as ",", ";", "|" or "\t"`,
		},
		{
			name:       "csv without csv",
			tool:       "csv_to_json",
			args:       `{"header": true}`,
			wantStderr: "argument csv is required: the CSV text to convert",
		},
		{
			name:       "csv with header as a string",
			tool:       "csv_to_json",
			args:       `{"csv": "", "header": "yes"}`,
			wantStderr: "argument header must be true or false, got a string",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := guest.Run([]string{"json.wasm", tt.tool}, strings.NewReader(tt.args), &stdout, &stderr, jsontool.Tools())
			wantCode := guest.ExitOK
			if tt.wantStderr != "" {
				wantCode = guest.ExitTool
				tt.wantStderr += "\n"
			}
			if tt.wantStdout != "" {
				tt.wantStdout += "\n"
			}
			if code != wantCode {
				t.Errorf("exit code %d, want %d", code, wantCode)
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
