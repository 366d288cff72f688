package jsontool

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/airlock-run/airlock/wasm/internal/guest"
)

// Tools are json.wasm's tools by their argv[1] name.
func Tools() map[string]guest.Tool {
	return map[string]guest.Tool{
		"query":       queryTool,
		"csv_to_json": csvTool,
	}
}

// QueryArgs are the arguments of query.
type QueryArgs struct {
	// JSON is the value to query: any JSON value, or a string holding a
	// JSON text (agents often pass documents they read as text).
	JSON json.RawMessage `json:"json"`
	Path string          `json:"path"`
}

// queryTool answers {"result": value} and the value as indented JSON.
func queryTool(raw json.RawMessage) (guest.Result, error) {
	var a QueryArgs
	if err := guest.Decode(raw, &a); err != nil {
		return guest.Result{}, err
	}
	if a.JSON == nil {
		return guest.Result{}, fmt.Errorf("argument json is required: the JSON value to query, or a string holding a JSON text")
	}
	doc := a.JSON
	if guest.KindOf(doc) == "a string" {
		var text string
		if err := json.Unmarshal(doc, &text); err != nil {
			return guest.Result{}, err
		}
		if err := json.Unmarshal([]byte(text), &doc); err != nil {
			return guest.Result{}, fmt.Errorf("argument json is a string that is not a JSON text (%v); pass the value itself, or a string holding valid JSON", err)
		}
	}
	v, err := Query(doc, a.Path)
	if err != nil {
		return guest.Result{}, err
	}
	var text bytes.Buffer
	if err := json.Indent(&text, v, "", "  "); err != nil {
		return guest.Result{}, err
	}
	return guest.Result{
		Text: text.String(),
		Structured: struct {
			Result json.RawMessage `json:"result"`
		}{v},
	}, nil
}

// CSVArgs are the arguments of csv_to_json.
type CSVArgs struct {
	CSV       *string `json:"csv"`
	Header    *bool   `json:"header"`    // default true
	Delimiter string  `json:"delimiter"` // default ","
}

// csvTool answers {"rows": [...]}; the text is the same JSON with one row
// per line, readable yet half the size of indented JSON (the output limit
// counts both).
func csvTool(raw json.RawMessage) (guest.Result, error) {
	var a CSVArgs
	if err := guest.Decode(raw, &a); err != nil {
		return guest.Result{}, err
	}
	if a.CSV == nil {
		return guest.Result{}, fmt.Errorf("argument csv is required: the CSV text to convert")
	}
	opt := CSVOptions{Header: a.Header == nil || *a.Header}
	var err error
	if opt.Delimiter, err = ParseDelimiter(a.Delimiter); err != nil {
		return guest.Result{}, err
	}
	rows, err := CSVToJSON(*a.CSV, opt)
	if err != nil {
		return guest.Result{}, err
	}
	var text bytes.Buffer
	text.WriteString(`{"rows": [`)
	for i, r := range rows {
		if i > 0 {
			text.WriteByte(',')
		}
		b, err := r.MarshalJSON()
		if err != nil {
			return guest.Result{}, err
		}
		text.WriteString("\n  ")
		text.Write(b)
	}
	if len(rows) > 0 {
		text.WriteByte('\n')
	}
	text.WriteString("]}")
	return guest.Result{
		Text: text.String(),
		Structured: struct {
			Rows []Row `json:"rows"`
		}{rows},
	}, nil
}
