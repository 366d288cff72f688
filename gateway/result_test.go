package gateway

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// resultCorpus: recorded results the text path takes (fast true) and
// those it leaves to the SDK's decoder.
var resultCorpus = []struct {
	raw  string
	fast bool
}{
	{`{"content":[{"type":"text","text":"hello"}]}`, true},
	{`{"content":[{"type":"text","text":""},{"type":"text","text":"é \u00e9 \ud83d\ude00 \"q\" <b>"}],"isError":true}`, true},
	{`{"content":[],"_meta":{"a":1,"big":9007199254740993,"n":{"x":[1,"2",null,true]}}}`, true},
	{`{"content":null}`, true},
	{`{"content":[{"type":"text","text":"x"}],"structuredContent":{"n":12345678901234567890,"s":"v","l":[1.5,-0,1e400]}}`, false}, // 1e400 fails encoding/json: SDK path
	{`{"content":[{"type":"text","text":"x"}],"structuredContent":{"n":12345678901234567890,"s":"v","l":[1.5,-0]}}`, true},
	{`{"content":[{"type":"text","text":"x"}],"isError":null,"_meta":null,"structuredContent":null}`, true},
	{`{}`, true},
	// Left to the SDK: other content, annotations, other spellings, other keys.
	{`{"content":[{"type":"image","data":"aGk=","mimeType":"image/png"}]}`, false},
	{`{"content":[{"type":"text","text":"x","annotations":{"priority":1}}]}`, false},
	{`{"content":[{"type":"text","text":"x","_meta":{"k":"v"}}]}`, false},
	{`{"content":[{"type":"TEXT","text":"x"}]}`, false},
	{`{"content":[{"Type":"text","text":"x"}]}`, false},
	{`{"content":[{"type":"text","Text":"x"}]}`, false},
	{`{"Content":[{"type":"text","text":"x"}]}`, false},
	{`{"content":[{"type":"text","text":null}]}`, false},
	{`{"content":[{"type":"text"}]}`, false},
	{`{"content":[null]}`, false},
	{`{"content":[{"type":"text","text":"x"}],"resultType":"complete"}`, false},
	{`{"content":[{"type":"text","text":"x"}],"requestState":"s"}`, false},
	{`{"content":"text"}`, false},
	{`{"content":[{"type":"text","text":"x"}]} trailing`, false},
	{`null`, false},
	{`[]`, false},
}

func TestDecodeTextResultMatchesTheSDK(t *testing.T) {
	for _, c := range resultCorpus {
		var fast mcp.CallToolResult
		ok := decodeTextResult([]byte(c.raw), &fast)
		if ok != c.fast {
			t.Errorf("%s: text path %v, want %v", c.raw, ok, c.fast)
		}
		if !ok {
			if !reflect.DeepEqual(fast, mcp.CallToolResult{}) {
				t.Errorf("%s: refused, but changed the result: %+v", c.raw, fast)
			}
			continue
		}
		var sdk mcp.CallToolResult
		if err := json.Unmarshal([]byte(c.raw), &sdk); err != nil {
			t.Errorf("%s: the text path took what the SDK refuses (%v)", c.raw, err)
			continue
		}
		if !reflect.DeepEqual(fast, sdk) {
			t.Errorf("%s:\n text path %#v\n SDK       %#v", c.raw, fast, sdk)
		}
		a, err1 := json.Marshal(&fast)
		b, err2 := json.Marshal(&sdk)
		if err1 != nil || err2 != nil || string(a) != string(b) {
			t.Errorf("%s: re-encoded %s (%v), the SDK's %s (%v)", c.raw, a, err1, b, err2)
		}
	}
}

// decodeResult gives what the SDK's decoder gives, on either path, and the
// same error where the SDK has one.
func TestDecodeResult(t *testing.T) {
	for _, c := range resultCorpus {
		var got, want mcp.CallToolResult
		err := decodeResult([]byte(c.raw), &got)
		werr := json.Unmarshal([]byte(c.raw), &want)
		if (err != nil) != (werr != nil) {
			t.Errorf("%s: error %v, the SDK's %v", c.raw, err, werr)
			continue
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got  %#v\n want %#v", c.raw, got, want)
		}
	}
	// Deep and large text results decode the same.
	deep := `{"content":[{"type":"text","text":"x"}],"_meta":{"d":` + strings.Repeat(`[`, 500) + strings.Repeat(`]`, 500) + `}}`
	big := `{"content":[{"type":"text","text":"` + strings.Repeat("ab", 1<<19) + `"}]}`
	for _, raw := range []string{deep, big} {
		var got, want mcp.CallToolResult
		err, werr := decodeResult([]byte(raw), &got), json.Unmarshal([]byte(raw), &want)
		if (err != nil) != (werr != nil) || err == nil && !reflect.DeepEqual(got, want) {
			t.Errorf("%.40s…: error %v, the SDK's %v, or a different result", raw, err, werr)
		}
	}
}

// BenchmarkDecodeResult: a typical text result through the text path and
// through the SDK's decoder (allocs and bytes per call).
func BenchmarkDecodeResult(b *testing.B) {
	raw := []byte(`{"content":[{"type":"text","text":"ping"}],"_meta":{"airlock.dev/upstream":"counter"}}`)
	for _, path := range []struct {
		name   string
		decode func([]byte, *mcp.CallToolResult) error
	}{{"text_path", decodeResult}, {"sdk", func(raw []byte, r *mcp.CallToolResult) error { return json.Unmarshal(raw, r) }}} {
		b.Run(path.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var r mcp.CallToolResult
				if err := path.decode(raw, &r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
