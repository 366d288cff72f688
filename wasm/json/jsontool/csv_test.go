package jsontool_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/wasm/json/jsontool"
)

func TestCSVToJSON(t *testing.T) {
	for _, tt := range []struct {
		name string
		csv  string
		opt  jsontool.CSVOptions
		want string
	}{
		{
			name: "header keys in header order, values as strings",
			csv:  "name,zip,age\nada,007,36\nbob,,40\n",
			opt:  jsontool.CSVOptions{Header: true},
			want: `[{"name":"ada","zip":"007","age":"36"},{"name":"bob","zip":"","age":"40"}]`,
		},
		{
			name: "no header gives arrays",
			csv:  "a,b\nc,d",
			opt:  jsontool.CSVOptions{},
			want: `[["a","b"],["c","d"]]`,
		},
		{
			name: "quoted delimiters, quotes and line breaks",
			csv:  "k,v\r\nx,\"1,2\"\r\ny,\"say \"\"hi\"\"\"\r\nz,\"two\nlines\"\r\n",
			opt:  jsontool.CSVOptions{Header: true},
			want: `[{"k":"x","v":"1,2"},{"k":"y","v":"say \"hi\""},{"k":"z","v":"two\nlines"}]`,
		},
		{
			name: "other delimiter",
			csv:  "a;b\n1;2,3\n",
			opt:  jsontool.CSVOptions{Header: true, Delimiter: ';'},
			want: `[{"a":"1","b":"2,3"}]`,
		},
		{
			name: "tab",
			csv:  "a\tb\n1\t2\n",
			opt:  jsontool.CSVOptions{Header: true, Delimiter: '\t'},
			want: `[{"a":"1","b":"2"}]`,
		},
		{
			name: "byte-order mark and blank lines dropped",
			csv:  "\ufeffa,b\n\n1,2\n\n",
			opt:  jsontool.CSVOptions{Header: true},
			want: `[{"a":"1","b":"2"}]`,
		},
		{
			name: "header only",
			csv:  "a,b\n",
			opt:  jsontool.CSVOptions{Header: true},
			want: `[]`,
		},
		{
			name: "empty",
			csv:  "",
			opt:  jsontool.CSVOptions{Header: true},
			want: `[]`,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rows, err := jsontool.CSVToJSON(tt.csv, tt.opt)
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.Marshal(rows)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestCSVToJSONErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		csv  string
		opt  jsontool.CSVOptions
		want string
	}{
		{
			name: "short row",
			csv:  "a,b,c\n1,2,3\n\n4,5\n",
			opt:  jsontool.CSVOptions{Header: true},
			want: "CSV line 4 has 2 fields but the header (line 1) has 3; every row needs the same number of fields (quote a field that contains the delimiter or a line break)",
		},
		{
			name: "long row after a leading blank line, no header",
			csv:  "\n1,2\n3,4,5\n",
			opt:  jsontool.CSVOptions{},
			want: "CSV line 3 has 3 fields but line 2 has 2; every row needs the same number of fields (quote a field that contains the delimiter or a line break)",
		},
		{
			name: "line numbers count line breaks inside quotes",
			csv:  "a,b\n\"x\ny\",1\n2\n",
			opt:  jsontool.CSVOptions{Header: true},
			want: "CSV line 4 has 1 field but the header (line 1) has 2; every row needs the same number of fields (quote a field that contains the delimiter or a line break)",
		},
		{
			name: "bare quote",
			csv:  "a,b\n1,say \"hi\"\n",
			opt:  jsontool.CSVOptions{Header: true},
			want: `CSV line 2, column 7: a " inside a field that is not quoted; quote the whole field and double the quote inside ("say ""hi""")`,
		},
		{
			name: "unclosed quote",
			csv:  "a,b\n1,\"open\n2,3\n",
			opt:  jsontool.CSVOptions{Header: true},
			want: `CSV line 2: a quoted field starting there is not closed properly (seen at line 3, column 5); end it with " right before the delimiter or line end, and double any " inside it`,
		},
		{
			name: "empty header name",
			csv:  "a,,c\n1,2,3\n",
			opt:  jsontool.CSVOptions{Header: true},
			want: "column 2 of the header is empty; name every column, or pass header: false to get arrays",
		},
		{
			name: "duplicate header name",
			csv:  "id,name,id\n1,2,3\n",
			opt:  jsontool.CSVOptions{Header: true},
			want: `the header names column "id" twice (columns 1 and 3); rename one, or pass header: false to get arrays`,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := jsontool.CSVToJSON(tt.csv, tt.opt)
			if err == nil {
				t.Fatal("no error")
			}
			if diff := cmp.Diff(tt.want, err.Error()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
