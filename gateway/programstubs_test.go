package gateway

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files in testdata/programs")

// fixtureTools reads the tools/list of a real upstream, captured from
// the npm server (version 2026.8.31, the package.json's), decoded as
// the go-sdk client decodes it: schemas as maps, which marshal with
// their keys sorted.
func fixtureTools(t testing.TB, name string) []*mcp.Tool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "programs", name+"_tools.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tools []*mcp.Tool
	if err := json.Unmarshal(b, &tools); err != nil {
		t.Fatal(err)
	}
	return tools
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "programs", name)
	if *updateGolden {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to write it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func TestProgramStubsGolden(t *testing.T) {
	for _, server := range []string{"filesystem", "memory"} {
		t.Run(server, func(t *testing.T) {
			var b strings.Builder
			for _, tool := range fixtureTools(t, server) {
				mod, fn := programName(server + "__" + tool.Name)
				b.WriteString(programStub(mod, fn, tool.Description, tool.InputSchema, tool.OutputSchema))
				b.WriteByte('\n')
			}
			golden(t, server+".stubs", b.String())
		})
	}
}

func TestProgramStubShapes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		schema string // raw JSON: its properties' order is kept
		out    any
		desc   string
		want   string
	}{
		{"required first, in schema order", `{"type":"object","properties":{"tail":{"type":"number"},"path":{"type":"string"},"head":{"type":"integer"}},"required":["path"]}`,
			nil, "Read a file. More words.", `m.f(path: str, tail: float = None, head: int = None) -> any  # Read a file.`},
		{"every type", `{"properties":{"a":{"type":"string"},"b":{"type":"integer"},"c":{"type":"number"},"d":{"type":"boolean"},"e":{"type":"array"},"f":{"type":"object"},"g":{},"h":{"type":["null","string"]},"i":{"type":"weird"}},"required":["a","b","c","d","e","f","g","h","i"]}`,
			nil, "", `m.f(a: str, b: int, c: float, d: bool, e: list, f: dict, g: any, h: str, i: any) -> any`},
		{"enums", `{"properties":{"state":{"type":"string","enum":["open","closed","all"]},"n":{"enum":[1,null,true]}}}`,
			nil, "", `m.f(state: "open"|"closed"|"all" = None, n: 1|None|True = None) -> any`},
		{"output schema", `{"type":"object","properties":{}}`, map[string]any{"type": "object"}, "", `m.f() -> dict`},
		{"empty output schema is none", `{"type":"object"}`, map[string]any{}, "", `m.f() -> any`},
		{"odd names quoted, keywords quoted", `{"properties":{"foo-bar":{"type":"string"},"if":{"type":"string"},"9x":{}},"required":["foo-bar"]}`,
			nil, "", `m.f("foo-bar": str, "if": str = None, "9x": any = None) -> any`},
		{"repeated key: the first", `{"properties":{"a":{"type":"string"},"a":{"type":"integer"}}}`, nil, "", `m.f(a: str = None) -> any`},
		{"not an object", `[1,2,3]`, nil, "", `m.f(**kwargs) -> any`},
		{"properties not an object", `{"properties":[1]}`, nil, "", `m.f(**kwargs) -> any`},
		{"a string", `"object"`, nil, "", `m.f(**kwargs) -> any`},
		{"required not strings", `{"properties":{"a":{}},"required":[1,{"x":1},"a"]}`, nil, "", `m.f(a: any) -> any`},
		{"multi-line description", `{}`, nil, "First line\nsecond line. Third.", `m.f() -> any  # First line`},
		{"summary cut at 100 bytes", `{}`, nil, strings.Repeat("ü", 80), "m.f() -> any  # " + strings.Repeat("ü", 48) + "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := programStub("m", "f", tc.desc, json.RawMessage(tc.schema), tc.out)
			if got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestProgramStubHostileSchemas: whatever a schema holds, the stub is one
// bounded line, made quickly.
func TestProgramStubHostileSchemas(t *testing.T) {
	many := func(n int) string {
		var b strings.Builder
		b.WriteString(`{"type":"object","properties":{`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"p%d":{"type":"string","enum":[%s]}`, i, strings.Repeat(`"v",`, 50)+`"w"`)
		}
		b.WriteString(`},"required":["p0","p9999"]}`)
		return b.String()
	}
	deep := strings.Repeat(`{"a":`, 20000) + "1" + strings.Repeat("}", 20000)
	deepProp := `{"properties":{"x":` + strings.Repeat(`[`, 20000) + strings.Repeat(`]`, 20000) + `}}`
	for name, schema := range map[string]any{
		"10k properties":     json.RawMessage(many(10_000)),
		"200 properties":     json.RawMessage(many(200)),
		"deeply nested":      json.RawMessage(deep),
		"deep property":      json.RawMessage(deepProp),
		"huge property name": json.RawMessage(`{"properties":{"` + strings.Repeat("x", 1<<20) + `":{}}}`),
		"huge enum value":    json.RawMessage(`{"properties":{"e":{"enum":["` + strings.Repeat("é", 1<<16) + `"]}}}`),
		"invalid JSON":       json.RawMessage(`{"properties":{"a":`),
		"trailing bytes":     json.RawMessage(`{"properties":{}} {}`),
		"a Go value":         map[string]any{"properties": map[string]any{"b": map[string]any{"type": "string"}, "a": map[string]any{}}},
		"unmarshalable":      map[string]any{"x": func() {}},
		"nil":                nil,
	} {
		t.Run(name, func(t *testing.T) {
			got := programStub("m", "f", strings.Repeat("desc ", 1000), schema, schema)
			if len(got) > maxStubLine || strings.Contains(got, "\n") {
				t.Fatalf("stub of %d bytes (or with a newline), want one line of at most %d", len(got), maxStubLine)
			}
			if !strings.HasPrefix(got, "m.f(") {
				t.Fatalf("stub %.80q", got)
			}
			t.Logf("%d bytes: %.120s", len(got), got)
		})
	}
	// A map-decoded schema (as the go-sdk client gives it) lists its
	// properties sorted: the same stub every time.
	s := map[string]any{"properties": map[string]any{"b": map[string]any{"type": "string"}, "a": map[string]any{}, "c": map[string]any{"type": "integer"}}}
	if got, want := programStub("m", "f", "", s, nil), "m.f(a: any = None, b: str = None, c: int = None) -> any"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// FuzzProgramStub: any schema and description give one line of at most
// maxStubLine bytes, of valid UTF-8 when the description is.
func FuzzProgramStub(f *testing.F) {
	for _, tool := range fixtureTools(f, "filesystem") {
		in, _ := json.Marshal(tool.InputSchema)
		f.Add(string(in), tool.Description)
	}
	f.Add(`{"properties":{"a":{"enum":["x\n","y"]},"b\nc":{}}}`, "line\nline")
	f.Add(`{"properties":`, "")
	f.Fuzz(func(t *testing.T, schema, desc string) {
		got := programStub("m", "f", desc, json.RawMessage(schema), json.RawMessage(schema))
		if len(got) > maxStubLine || !strings.HasPrefix(got, "m.f(") {
			t.Fatalf("stub %q", got)
		}
		if strings.ContainsAny(got, "\n\r") {
			t.Fatalf("stub with a line break: %q", got)
		}
		if utf8.ValidString(desc) && utf8.ValidString(schema) && !utf8.ValidString(got) {
			t.Fatalf("stub not UTF-8: %q", got)
		}
	})
}
