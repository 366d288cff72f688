package relay

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestSampleAnswer decodes the two shapes a client's sampling answer comes
// back in: a CreateMessageResult (a session client's, through the task)
// and the with-tools shape a go-sdk client sends by multi round trip.
func TestSampleAnswer(t *testing.T) {
	for _, c := range []struct {
		name, raw, want string
		fails           bool
	}{
		{"one block", `{"role":"assistant","model":"m","content":{"type":"text","text":"hi"}}`, "hi", false},
		{"with tools, one block", `{"role":"assistant","model":"m","content":[{"type":"text","text":"hey"}]}`, "hey", false},
		{"with tools, two blocks", `{"role":"assistant","model":"m","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}`, "", true},
		{"not JSON", `{`, "", true},
	} {
		r, err := SampleAnswer([]byte(c.raw))
		if c.fails {
			if err == nil {
				t.Errorf("%s: decoded %+v, want an error", c.name, r)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if tc, ok := r.Content.(*mcp.TextContent); !ok || tc.Text != c.want || r.Model != "m" || r.Role != "assistant" {
			t.Errorf("%s: %+v, want text %q from model m", c.name, r, c.want)
		}
	}
}
