package pin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestUIResourcePins: a UI resource is pinned at first use, any change of
// its contents (text, blob, MIME type, _meta) blocks it with a reason
// naming the command that accepts it and nothing of the new contents, and
// only ui:// pointers in tools' _meta are collected.
func TestUIResourcePins(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "pins.json"))
	if err != nil {
		t.Fatal(err)
	}
	const uri = "ui://app/view.html"
	base := func() []*mcp.ResourceContents {
		return []*mcp.ResourceContents{{URI: uri, MIMEType: "text/html;profile=mcp-app", Text: "<p>v1</p>", Meta: mcp.Meta{"ui": map[string]any{"csp": "none"}}}}
	}
	if v, _ := s.Check("apps", UIResource(uri, base())); v != New {
		t.Fatalf("first read: %v, want New", v)
	}
	if v, _ := s.Check("apps", UIResource(uri, base())); v != Pinned {
		t.Fatalf("same contents: %v, want Pinned", v)
	}
	for name, change := range map[string]func(c *mcp.ResourceContents){
		"text":      func(c *mcp.ResourceContents) { c.Text = "<p>v1</p><script>x()</script>" },
		"blob":      func(c *mcp.ResourceContents) { c.Blob = []byte{0, 1, 2} },
		"mime type": func(c *mcp.ResourceContents) { c.MIMEType = "text/html" },
		"_meta":     func(c *mcp.ResourceContents) { c.Meta = mcp.Meta{"ui": map[string]any{"csp": "*"}} },
	} {
		cs := base()
		change(cs[0])
		v, reason := s.Check("apps", UIResource(uri, cs))
		if v != Changed || !strings.Contains(reason, "UI resource "+uri) || !strings.Contains(reason, "airlock manifests pin apps "+uri) || strings.Contains(reason, "script") {
			t.Errorf("%s changed: %v %q", name, v, reason)
		}
	}
	extra := append(base(), &mcp.ResourceContents{URI: uri, Text: "more"})
	if v, _ := s.Check("apps", UIResource(uri, extra)); v != Changed {
		t.Errorf("a content added: %v, want Changed", v)
	}

	tools := []*mcp.Tool{
		{Name: "a", Meta: mcp.Meta{"ui": map[string]any{"resourceUri": uri}, "ui/resourceUri": uri}},
		{Name: "b", Meta: mcp.Meta{"ui/resourceUri": "ui://other"}},
		{Name: "c", Meta: mcp.Meta{"ui": map[string]any{"resourceUri": "https://evil.example/x"}}},
		{Name: "d", Meta: mcp.Meta{"ui": "not an object", "ui/resourceUri": 42}},
		nil,
	}
	if got := UIResourceURIs(tools); strings.Join(got, " ") != uri+" ui://other" {
		t.Errorf("UIResourceURIs = %v", got)
	}
	if IsUIResource("weather") || !IsUIResource(uri) {
		t.Error("IsUIResource")
	}
}

// TestHugeUIResourcePinnedByHash: a UI resource past MaxKeptDefinition is
// pinned by its hash alone (the pins file does not grow with it), and a
// change is still refused.
func TestHugeUIResourcePinnedByHash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pins.json")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	const uri = "ui://big/view.html"
	big := strings.Repeat("<p>x</p>", MaxKeptDefinition/8+1)
	if v, _ := s.Check("apps", UIResource(uri, []*mcp.ResourceContents{{URI: uri, Text: big}})); v != New {
		t.Fatalf("first read: %v", v)
	}
	if p, ok := s.Lookup("apps", uri); !ok || p.SHA256 == "" || len(p.Definition) != 0 {
		t.Fatalf("pin of a huge UI: %d bytes of definition kept, hash %q", len(p.Definition), p.SHA256)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() > 64<<10 {
		t.Fatalf("pins file %v bytes (%v); want it small", fi.Size(), err)
	}
	if v, _ := s.Check("apps", UIResource(uri, []*mcp.ResourceContents{{URI: uri, Text: big + "!"}})); v != Changed {
		t.Fatalf("changed huge UI: %v, want Changed", v)
	}
}
