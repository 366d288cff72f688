// Package guest is the native-tool protocol as a WASI command module sees
// it: the call's JSON arguments on stdin, an MCP CallToolResult on stdout,
// a one-line error on stderr with a non-zero exit for an isError result,
// and argv[1] naming the tool when one module serves several.
//
// It is shared by the modules under wasm/ and imports only the standard
// library, so it builds for GOOS=wasip1 and, for tests, natively.
package guest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"sort"
	"strings"
)

// Exit codes of Run. Any non-zero exit is an isError result; the two are
// told apart only to make a misconfigured manifest easy to spot.
const (
	ExitOK    = 0
	ExitTool  = 1 // the tool refused the call or failed
	ExitUsage = 2 // argv names no tool of this module, or stdin is unreadable
)

// Result is a tool's successful answer: Text becomes the text content and
// Structured, when not nil, the structuredContent (it must marshal to a
// JSON object).
type Result struct {
	Text       string
	Structured any
}

// Tool handles one call, given its raw JSON arguments ("{}" when stdin
// was empty).
type Tool func(args json.RawMessage) (Result, error)

type textContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type callToolResult struct {
	Content           []textContent `json:"content"`
	StructuredContent any           `json:"structuredContent,omitempty"`
}

// Run serves the tool that argv[1] names and returns the exit code, so a
// module's main is os.Exit(guest.Run(os.Args, os.Stdin, os.Stdout,
// os.Stderr, tools)).
func Run(argv []string, stdin io.Reader, stdout, stderr io.Writer, tools map[string]Tool) int {
	names := make([]string, 0, len(tools))
	for name := range tools {
		names = append(names, name)
	}
	sort.Strings(names)
	if len(argv) < 2 {
		return fail(stderr, ExitUsage, fmt.Errorf("no tool named: give one of %s as the first argument (wasm.args in the manifest)", strings.Join(names, ", ")))
	}
	tool, ok := tools[argv[1]]
	if !ok {
		return fail(stderr, ExitUsage, fmt.Errorf("unknown tool %q: give one of %s as the first argument (wasm.args in the manifest)", argv[1], strings.Join(names, ", ")))
	}
	in, err := io.ReadAll(stdin)
	if err != nil {
		return fail(stderr, ExitUsage, fmt.Errorf("reading the arguments from stdin: %v", err))
	}
	if len(bytes.TrimSpace(in)) == 0 {
		in = []byte("{}")
	}
	res, err := tool(in)
	if err != nil {
		return fail(stderr, ExitTool, err)
	}
	// Not HTML-escaped: "<" as \u003c would take six bytes of the output
	// limit instead of one, and nobody embeds this in a web page.
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(callToolResult{
		Content:           []textContent{{Type: "text", Text: res.Text}},
		StructuredContent: res.Structured,
	}); err != nil {
		// A result that does not marshal is a bug in the tool, not the call.
		return fail(stderr, ExitTool, fmt.Errorf("internal error: encoding the result: %v", err))
	}
	if _, err := stdout.Write(out.Bytes()); err != nil {
		return fail(stderr, ExitTool, fmt.Errorf("writing the result: %v", err))
	}
	return ExitOK
}

// Warm does once what every call's answer would otherwise do first:
// encoding/json's encoder for the result type, built on its first use.
// A reactor calls it in _initialize, so that the snapshot its calls start
// from holds it; it changes nothing a call can see.
func Warm() {
	enc := json.NewEncoder(io.Discard)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(callToolResult{Content: []textContent{{Type: "text"}}, StructuredContent: map[string]any{}})
}

// fail writes err as one line: airlock shows stderr as the error text.
func fail(stderr io.Writer, code int, err error) int {
	msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", " ")), " ")
	fmt.Fprintln(stderr, msg)
	return code
}

// Decode reads the arguments into v, a pointer to a struct with json tags,
// and turns decoding failures into messages an agent can act on: an
// unknown argument lists the known ones, a wrong type names the argument
// and the JSON type it needs. Required arguments are the caller's to
// check (use a pointer or json.RawMessage field to tell absent from zero).
func Decode(args json.RawMessage, v any) error {
	args = bytes.TrimSpace(args)
	if len(args) == 0 || bytes.Equal(args, []byte("null")) {
		args = []byte("{}")
	}
	if args[0] != '{' {
		return fmt.Errorf("the arguments must be a JSON object, got %s", KindOf(args))
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		return nil
	}
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr) && typeErr.Field != "":
		return fmt.Errorf("argument %s must be %s, got %s", typeErr.Field, jsonKind(typeErr.Type), valueKind(typeErr.Value))
	case errors.As(err, &syntaxErr):
		return fmt.Errorf("the arguments are not valid JSON (at byte %d: %v)", syntaxErr.Offset, err)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.TrimPrefix(err.Error(), "json: unknown field ")
		return fmt.Errorf("unknown argument %s; this tool takes %s", field, strings.Join(fieldNames(v), ", "))
	}
	return fmt.Errorf("the arguments do not fit this tool: %v", err)
}

// fieldNames lists the json names of the struct v points to.
func fieldNames(v any) []string {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var names []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
	}
	return slices.Sorted(slices.Values(names))
}

// jsonKind names the JSON type a Go type decodes from, with an article.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a " + t.String()
}

// valueKind gives UnmarshalTypeError.Value ("string", "number 1e400",
// "bool", ...) an article.
func valueKind(v string) string {
	switch kind, _, _ := strings.Cut(v, " "); kind {
	case "bool":
		return "a boolean"
	case "array", "object":
		return "an " + v
	case "number", "string":
		return "a " + v
	}
	return v
}

// KindOf names the JSON type of a raw value from its first byte ("an
// object", "an array", "a string", "a boolean", "null", "a number").
func KindOf(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}
