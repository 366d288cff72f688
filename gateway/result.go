package gateway

// Decoding a call's recorded result for its answer (issue 28 §3). The
// worker records the upstream's result as the JSON of an
// mcp.CallToolResult; the gateway decodes it to add its _meta and hand
// it to the SDK. mcp.CallToolResult's own UnmarshalJSON makes a fresh
// decoder with a 32 KiB buffer per call, the largest allocation of the
// gateway's own share of a call. Most results are text only: those are
// decoded here with encoding/json into the same values; anything else
// (another content type, annotations, a key spelled otherwise) goes to the
// SDK's decoder, as before.

import (
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// decodeResult decodes raw, a recorded mcp.CallToolResult, into r.
func decodeResult(raw []byte, r *mcp.CallToolResult) error {
	if decodeTextResult(raw, r) {
		return nil
	}
	return json.Unmarshal(raw, r)
}

// decodeTextResult decodes raw into r when it holds nothing but keys
// spelled exactly "content" (text blocks of exactly "type" and "text"),
// "isError", "_meta" and "structuredContent", giving what the SDK's
// decoder gives for them; it reports false, leaving r alone, for
// anything else.
func decodeTextResult(raw []byte, r *mcp.CallToolResult) bool {
	var top map[string]json.RawMessage
	if json.Unmarshal(raw, &top) != nil || top == nil {
		return false
	}
	out := mcp.CallToolResult{Content: []mcp.Content{}} // the SDK's, with no content
	for k, v := range top {
		switch k {
		case "content":
			var items []map[string]json.RawMessage
			if json.Unmarshal(v, &items) != nil {
				return false
			}
			out.Content = make([]mcp.Content, 0, len(items))
			for _, it := range items {
				tr, okType := it["type"]
				xr, okText := it["text"]
				var typ string
				tc := &mcp.TextContent{}
				if len(it) != 2 || !okType || !okText || json.Unmarshal(tr, &typ) != nil || typ != "text" ||
					string(xr) == "null" || json.Unmarshal(xr, &tc.Text) != nil {
					return false
				}
				out.Content = append(out.Content, tc)
			}
		case "isError":
			if json.Unmarshal(v, &out.IsError) != nil {
				return false
			}
		case "_meta":
			if json.Unmarshal(v, &out.Meta) != nil {
				return false
			}
		case "structuredContent":
			if json.Unmarshal(v, &out.StructuredContent) != nil {
				return false
			}
		default:
			return false
		}
	}
	*r = out
	return true
}
