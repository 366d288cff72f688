package gateway

// Code mode (issue 27): the one-line stubs that show a program's tools to
// the model, e.g.
//
//	filesystem.read_text_file(path: str, head: int = None) -> any  # Read the complete contents of a file as text.
//
// A stub is made from the tool's inputSchema: its top-level properties,
// the required ones first, each in the order the schema's JSON lists
// them (a schema the upstream client decoded into a map lists them
// sorted), with a type (str, int, float, bool, list, dict, any) or an
// enum ("a"|"b"). Whatever a schema holds, a stub is bounded (maxStub*):
// a schema that is not an object of properties, too large or too deep
// gives "(**kwargs)".

import (
	"github.com/airlock-run/airlock/api"

	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

const (
	maxStubSchema  = 256 << 10 // schema JSON bytes read; larger ones are not parsed
	maxStubParams  = 24        // parameters shown; then "..."
	maxStubParam   = 48        // bytes of a parameter's name
	maxStubEnum    = 6         // enum values shown; then |...
	maxStubEnumVal = 24        // bytes of an enum value
	maxStubSummary = 100       // bytes of the summary
	maxStubArgs    = 400       // bytes of the parameter list; then "..."
	maxStubLine    = 600       // bytes of the whole line
)

// stubParam is one parameter of a stub.
type stubParam struct {
	name     string
	typ      string
	required bool
}

// programStub is the stub line of one tool (without a newline).
func programStub(module, function, description string, inputSchema, outputSchema any) string {
	return stubLine(module, function, stubTail(description, inputSchema, outputSchema))
}

// stubLine puts a tool's name before its stub's tail.
func stubLine(module, function, tail string) string {
	return truncateUTF8(module+"."+function+tail, maxStubLine)
}

// stubTail is a stub without the name: "(params) -> type  # summary".
// It depends on the tool's definition alone, so a tool entry keeps it
// (toolEntry.stubTail) while its definition stays the same.
func stubTail(description string, inputSchema, outputSchema any) string {
	var b strings.Builder
	b.WriteByte('(')
	b.WriteString(stubParams(inputSchema))
	b.WriteString(") -> ")
	if hasSchema(outputSchema) {
		b.WriteString("dict")
	} else {
		b.WriteString("any")
	}
	if s := stubSummary(description); s != "" {
		b.WriteString("  # ")
		b.WriteString(s)
	}
	return truncateUTF8(b.String(), maxStubLine)
}

// stubParams renders the parameter list of a schema.
func stubParams(schema any) string {
	params, more, ok := schemaParams(schema)
	if !ok {
		return "**kwargs"
	}
	parts := make([]string, 0, len(params)+1)
	size := 0
	for _, required := range []bool{true, false} {
		for _, p := range params {
			if p.required != required || more && size > maxStubArgs {
				continue
			}
			s := p.name + ": " + p.typ
			if !required {
				s += " = None"
			}
			if size += len(s) + 2; size > maxStubArgs {
				more = true // the rest is left out, the summary kept
				continue
			}
			parts = append(parts, s)
		}
	}
	if more {
		parts = append(parts, "...")
	}
	return strings.Join(parts, ", ")
}

// schemaParams reads the top-level properties of an object schema, in the
// order its JSON lists them; more reports properties past
// maxStubParams. ok is false for anything that is not an object schema
// with readable properties.
func schemaParams(schema any) (params []stubParam, more, ok bool) {
	raw, ok := schemaJSON(schema)
	if !ok {
		return nil, false, false
	}
	var top struct {
		Properties json.RawMessage `json:"properties"`
		Required   []any           `json:"required"`
	}
	if json.Unmarshal(raw, &top) != nil {
		return nil, false, false
	}
	required := map[string]bool{}
	for _, r := range top.Required {
		if s, isStr := r.(string); isStr {
			required[s] = true
		}
	}
	props := bytes.TrimSpace(top.Properties)
	if len(props) == 0 || string(props) == "null" {
		return nil, false, true // no parameters
	}
	dec := json.NewDecoder(bytes.NewReader(props))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false, false
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, false, false
		}
		name, _ := t.(string)
		var prop json.RawMessage
		if err := dec.Decode(&prop); err != nil {
			return nil, false, false
		}
		if seen[name] {
			continue // a repeated key: the first one stands
		}
		seen[name] = true
		if len(params) == maxStubParams {
			more = true
			continue
		}
		params = append(params, stubParam{name: stubParamName(name), typ: stubType(prop), required: required[name]})
	}
	return params, more, true
}

// schemaJSON is a schema's JSON, when it is an object of bounded size.
func schemaJSON(schema any) (json.RawMessage, bool) {
	var raw []byte
	switch s := schema.(type) {
	case nil:
		return nil, false
	case json.RawMessage:
		raw = s
	case []byte:
		raw = s
	default:
		b, err := json.Marshal(s)
		if err != nil {
			return nil, false
		}
		raw = b
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' || len(raw) > maxStubSchema {
		return nil, false
	}
	return raw, true
}

func hasSchema(schema any) bool {
	raw, ok := schemaJSON(schema)
	return ok && string(raw) != "{}" && json.Valid(raw)
}

// stubParamName is a parameter as a keyword argument: an identifier as it
// is; a name no keyword argument can spell ("foo-bar", "from") quoted, so
// that the model sees what the tool takes rather than a name that would
// be wrong.
func stubParamName(name string) string {
	name = truncateUTF8(name, maxStubParam)
	if isIdent(name) && !api.IsStarlarkKeyword(name) {
		return name
	}
	return strconv.Quote(name)
}

func isIdent(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// stubType is a property schema as a stub type: its enum, else its
// (first non-null) JSON type.
func stubType(prop json.RawMessage) string {
	var p struct {
		Type json.RawMessage `json:"type"`
		Enum []any           `json:"enum"`
	}
	if json.Unmarshal(prop, &p) != nil {
		return "any"
	}
	if len(p.Enum) > 0 {
		var vals []string
		for i, v := range p.Enum {
			if i == maxStubEnum {
				vals = append(vals, "...")
				break
			}
			switch v := v.(type) {
			case string:
				vals = append(vals, strconv.Quote(truncateUTF8(v, maxStubEnumVal)))
			case nil:
				vals = append(vals, "None")
			case bool:
				vals = append(vals, map[bool]string{true: "True", false: "False"}[v])
			default:
				b, _ := json.Marshal(v)
				vals = append(vals, truncateUTF8(string(b), maxStubEnumVal))
			}
		}
		return strings.Join(vals, "|")
	}
	var one string
	if json.Unmarshal(p.Type, &one) != nil {
		var many []string
		if json.Unmarshal(p.Type, &many) == nil {
			for _, t := range many {
				if t != "null" {
					one = t
					break
				}
			}
		}
	}
	switch one {
	case "string":
		return "str"
	case "integer":
		return "int"
	case "number":
		return "float"
	case "boolean":
		return "bool"
	case "array":
		return "list"
	case "object":
		return "dict"
	}
	return "any"
}

// stubSummary is the first sentence (or line) of a description, at most
// maxStubSummary bytes.
func stubSummary(desc string) string {
	desc = strings.TrimSpace(desc)
	if i := strings.IndexAny(desc, "\r\n"); i >= 0 {
		desc = desc[:i]
	}
	for i := 0; i+1 < len(desc); i++ {
		if (desc[i] == '.' || desc[i] == '!' || desc[i] == '?') && desc[i+1] == ' ' {
			desc = desc[:i+1]
			break
		}
	}
	desc = strings.Join(strings.Fields(desc), " ")
	if len(desc) > maxStubSummary {
		desc = truncateUTF8(desc, maxStubSummary-len("…")) + "…"
	}
	return desc
}

// truncateUTF8 cuts s to at most n bytes at a character boundary.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
