package audit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/airlock-run/airlock/approver"
)

// redactArgs is args with the redact paths masked (approver.MaskArguments:
// dot paths, a path through a list applies to each element) and, at any
// depth, _meta and credential-named members removed. Arguments that are
// not JSON are withheld whole: nothing could be masked in them.
func redactArgs(args json.RawMessage, paths []string) json.RawMessage {
	if len(bytes.TrimSpace(args)) == 0 {
		return nil
	}
	v, err := approver.MaskArguments(args, paths)
	if err != nil {
		return quoted(fmt.Sprintf("(%d bytes of arguments withheld: not JSON)", len(args)))
	}
	b, err := marshal(scrub(v))
	if err != nil {
		return quoted(fmt.Sprintf("(%d bytes of arguments withheld: %v)", len(args), err))
	}
	return b
}

func quoted(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// marshal is compact JSON without HTML escaping (arguments are shown to
// people; "<" should read as "<").
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// scrub removes _meta and credential-named members at any depth.
func scrub(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if k == "_meta" || secretName(k) {
				delete(x, k)
				continue
			}
			x[k] = scrub(val)
		}
	case []any:
		for i := range x {
			x[i] = scrub(x[i])
		}
	}
	return v
}

// secretWords are the parts of member names that suggest a credential.
// Matching is on the lowercased name without '-', '_', '.' and spaces, so
// "API-Key", "api_key" and "apiKey" all match "apikey". It errs on the side
// of removing ("max_tokens" goes too).
var secretWords = []string{"token", "secret", "password", "passwd", "authorization", "apikey", "cookie", "credential", "privatekey"}

func secretName(k string) bool {
	n := strings.Map(func(r rune) rune {
		switch r {
		case '-', '_', '.', ' ':
			return -1
		}
		return r
	}, strings.ToLower(k))
	for _, w := range secretWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}
