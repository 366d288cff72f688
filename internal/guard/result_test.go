package guard

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func result(t testing.TB) *mcp.CallToolResult {
	var structured any
	if err := json.Unmarshal([]byte(`{"env":{"AWS_ACCESS_KEY_ID":"`+awsKey+`","HOME":"/root"},"list":["plain","`+ghp+`"]}`), &structured); err != nil {
		t.Fatal(err)
	}
	return &mcp.CallToolResult{
		Content: []mcp.Content{
			&mcp.TextContent{Text: "id=" + awsKey + " ok"},
			&mcp.ImageContent{Data: []byte(awsKey), MIMEType: "image/png"},
			&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///k", Text: rsaPEM(t)}},
		},
		StructuredContent: structured,
	}
}

// TestInspectRedact: text, embedded resource text and every string of
// structuredContent are redacted in place; findings name rule and path.
func TestInspectRedact(t *testing.T) {
	res, fs := Inspect(result(t), Redact, "fs_read")
	want := []Finding{
		{Rule: "aws-access-key", Path: "content[0].text", Action: "redact"},
		{Rule: "private-key", Path: "content[2].resource.text", Action: "redact"},
		{Rule: "aws-access-key", Path: "structuredContent.env.AWS_ACCESS_KEY_ID", Action: "redact"},
		{Rule: "github-token", Path: "structuredContent.list[1]", Action: "redact"},
	}
	if diff := cmp.Diff(want, fs); diff != "" {
		t.Fatalf("findings (-want +got):\n%s", diff)
	}
	raw, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	for _, secret := range []string{awsKey, ghp, "PRIVATE KEY"} {
		if strings.Contains(s, secret) {
			t.Errorf("result still holds %q: %s", secret, s)
		}
	}
	for _, kept := range []string{`"id=[REDACTED:aws-access-key] ok"`, `"HOME":"/root"`, `"plain"`, "[REDACTED:private-key]", "[REDACTED:github-token]"} {
		if !strings.Contains(s, kept) {
			t.Errorf("result lacks %s: %s", kept, s)
		}
	}
	if res.IsError {
		t.Error("a redacted result became an error")
	}
}

// TestInspectBlock: the result is replaced by an error result naming the
// kinds and places, never a value.
func TestInspectBlock(t *testing.T) {
	res, fs := Inspect(result(t), Block, "fs_read")
	if len(fs) != 4 || fs[0].Action != "block" {
		t.Fatalf("findings = %v", fs)
	}
	if !res.IsError || len(res.Content) != 1 || res.StructuredContent != nil {
		t.Fatalf("blocked result = %+v", res)
	}
	text := res.Content[0].(*mcp.TextContent).Text
	for _, w := range []string{"fs_read", "aws-access-key at content[0].text", "private-key at content[2].resource.text", "github-token at structuredContent.list[1]"} {
		if !strings.Contains(text, w) {
			t.Errorf("block text lacks %q: %s", w, text)
		}
	}
	if strings.Contains(text, awsKey) || strings.Contains(text, ghp) {
		t.Fatalf("block text holds a secret: %s", text)
	}
}

// TestInspectOffAndClean: off and a clean result leave the result as it
// was, with no findings.
func TestInspectOffAndClean(t *testing.T) {
	in := result(t)
	if res, fs := Inspect(in, Off, "x"); res != in || fs != nil || !strings.Contains(in.Content[0].(*mcp.TextContent).Text, awsKey) {
		t.Fatalf("off changed the result: %v", fs)
	}
	clean := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello"}}}
	if res, fs := Inspect(clean, Block, "x"); res != clean || len(fs) != 0 {
		t.Fatalf("clean result changed: %v", fs)
	}
	if res, fs := Inspect(nil, Block, "x"); res != nil || fs != nil {
		t.Fatal("nil result")
	}
}

// BenchmarkInspect is the cost of inspection per call (README figures):
// a 1 KB and a 1 MiB text result of ordinary prose with one secret.
func BenchmarkInspect(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"1KB", 1 << 10}, {"1MiB", 1 << 20}} {
		prose := strings.Repeat("The quick brown fox jumps over the lazy dog; func main() { x := y[0] }\n", size.n/70+1)[:size.n-len(awsKey)-1]
		text := prose + " " + awsKey
		b.Run(size.name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
				if _, fs := Inspect(res, Redact, "x"); len(fs) != 1 {
					b.Fatal(fs)
				}
			}
		})
	}
}

// TestInspectAnnotate: annotate delivers the result unchanged and
// records every finding; with another category blocking, the block
// result names only the blocking findings.
func TestInspectAnnotate(t *testing.T) {
	r := result(t)
	want, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	res, fs := Inspect(r, Annotate, "fs_read")
	got, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) || res.IsError {
		t.Errorf("annotate changed the result:\n got %s\nwant %s", got, want)
	}
	if len(fs) != 4 || fs[0].Action != "annotate" {
		t.Errorf("findings %+v", fs)
	}
	r = result(t)
	r.Content = append(r.Content, &mcp.TextContent{Text: "mail jane.doe@corp.example.org"})
	res, fs = InspectPolicy(r, Policy{Secrets: Annotate, PersonalData: Block}, "fs_read")
	text := res.Content[0].(*mcp.TextContent).Text
	if !res.IsError || !strings.Contains(text, "email at content[3].text") || strings.Contains(text, "aws-access-key") || len(fs) != 5 {
		t.Errorf("%s %+v", text, fs)
	}
}
