package jsontool

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// CSVOptions are CSVToJSON's settings; the zero value is not the default
// (Header is true by default in the tool), so callers set both.
type CSVOptions struct {
	// Header makes the first record the field names of the rows.
	Header bool
	// Delimiter separates fields; 0 means ','.
	Delimiter rune
}

// Row is one CSV record: an object keyed by the header, in the header's
// order, or (without a header) an array of the fields. Fields are strings,
// as written: CSV has no types, and guessing them would turn "007" into 7.
type Row struct {
	keys   []string // nil without a header
	fields []string
}

// MarshalJSON writes the row as an object in header order, or an array.
func (r Row) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	if r.keys == nil {
		b.WriteByte('[')
		for i, f := range r.fields {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(&b, f)
		}
		b.WriteByte(']')
		return b.Bytes(), nil
	}
	b.WriteByte('{')
	for i, k := range r.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		writeString(&b, k)
		b.WriteByte(':')
		writeString(&b, r.fields[i])
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// writeString writes s as a JSON string without HTML escaping, as the
// rest of the output (package guest).
func writeString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)           // a string always encodes
	b.Truncate(b.Len() - 1) // Encode's newline
}

// CSVToJSON parses RFC 4180 CSV (quoted fields may hold delimiters,
// quotes doubled, and newlines; a leading UTF-8 byte-order mark and blank
// lines are ignored). Every record must have as many fields as the first:
// a ragged row is an error naming its line, never a silently shifted row.
func CSVToJSON(text string, opt CSVOptions) ([]Row, error) {
	delim := opt.Delimiter
	if delim == 0 {
		delim = ','
	}
	r := csv.NewReader(strings.NewReader(strings.TrimPrefix(text, "\ufeff")))
	r.Comma = delim
	r.FieldsPerRecord = 0 // the first record sets the count
	var (
		keys      []string
		firstLine int
		rows      = []Row{}
	)
	for {
		rec, err := r.Read()
		if err == io.EOF {
			return rows, nil
		}
		if err != nil {
			// The reader set FieldsPerRecord from the first record.
			return nil, csvError(err, rec, opt.Header, firstLine, r.FieldsPerRecord)
		}
		if firstLine == 0 {
			firstLine, _ = r.FieldPos(0)
			if opt.Header {
				if err := checkHeader(rec); err != nil {
					return nil, err
				}
				keys = rec
				continue
			}
		}
		rows = append(rows, Row{keys: keys, fields: rec})
	}
}

// checkHeader refuses header names that cannot key an object faithfully.
func checkHeader(rec []string) error {
	seen := map[string]int{}
	for i, name := range rec {
		if name == "" {
			return fmt.Errorf("column %d of the header is empty; name every column, or pass header: false to get arrays", i+1)
		}
		if j, ok := seen[name]; ok {
			return fmt.Errorf("the header names column %q twice (columns %d and %d); rename one, or pass header: false to get arrays", name, j+1, i+1)
		}
		seen[name] = i
	}
	return nil
}

// csvError rewrites encoding/csv's errors with the line and a fix.
// want is the number of fields of the first record.
func csvError(err error, rec []string, header bool, firstLine, want int) error {
	var pe *csv.ParseError
	if !errors.As(err, &pe) {
		return fmt.Errorf("reading the CSV: %v", err)
	}
	switch {
	case errors.Is(pe.Err, csv.ErrFieldCount):
		first := fmt.Sprintf("line %d", firstLine)
		if header {
			first = fmt.Sprintf("the header (line %d)", firstLine)
		}
		return fmt.Errorf("CSV line %d has %s but %s has %d; every row needs the same number of fields (quote a field that contains the delimiter or a line break)", pe.StartLine, fields(len(rec)), first, want)
	case errors.Is(pe.Err, csv.ErrBareQuote):
		return fmt.Errorf("CSV line %d, column %d: a \" inside a field that is not quoted; quote the whole field and double the quote inside (\"say \"\"hi\"\"\")", pe.Line, pe.Column)
	case errors.Is(pe.Err, csv.ErrQuote):
		return fmt.Errorf("CSV line %d: a quoted field starting there is not closed properly (seen at line %d, column %d); end it with \" right before the delimiter or line end, and double any \" inside it", pe.StartLine, pe.Line, pe.Column)
	}
	return fmt.Errorf("CSV line %d, column %d: %v", pe.Line, pe.Column, pe.Err)
}

// ParseDelimiter checks a delimiter argument: one character, not a quote
// or line break. "" means ','.
func ParseDelimiter(s string) (rune, error) {
	if s == "" {
		return ',', nil
	}
	d, size := utf8.DecodeRuneInString(s)
	if size != len(s) || d == utf8.RuneError || d == '"' || d == '\r' || d == '\n' {
		return 0, fmt.Errorf("delimiter %q is not usable: give one character other than a quote or line break, such as \",\", \";\", \"|\" or \"\\t\"", s)
	}
	return d, nil
}

func fields(n int) string {
	if n == 1 {
		return "1 field"
	}
	return fmt.Sprintf("%d fields", n)
}
