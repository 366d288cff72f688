package timeline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
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

// minSecretLen is the shortest redacted value masked where it shows
// outside the arguments: shorter ones ("1", "yes") would mask ordinary
// text everywhere.
const minSecretLen = 4

// valuesAt is the strings found at the redact paths of args (every string
// under a path that leads to an object or a list), longest first.
func valuesAt(args json.RawMessage, paths []string) []string {
	if len(paths) == 0 || len(bytes.TrimSpace(args)) == 0 {
		return nil
	}
	var v any
	if err := json.Unmarshal(args, &v); err != nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	var leaves func(v any)
	leaves = func(v any) {
		switch x := v.(type) {
		case string:
			if len([]rune(x)) >= minSecretLen && !seen[x] {
				seen[x] = true
				out = append(out, x)
			}
		case map[string]any:
			for _, e := range x {
				leaves(e)
			}
		case []any:
			for _, e := range x {
				leaves(e)
			}
		}
	}
	var walk func(v any, path []string)
	walk = func(v any, path []string) {
		switch x := v.(type) {
		case map[string]any:
			child, ok := x[path[0]]
			if !ok {
				return
			}
			if len(path) == 1 {
				leaves(child)
				return
			}
			walk(child, path[1:])
		case []any:
			for _, e := range x {
				walk(e, path)
			}
		}
	}
	for _, p := range paths {
		if p = strings.TrimSpace(p); p != "" {
			walk(v, strings.Split(p, "."))
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// maskValues replaces each secret in s with the mask.
func maskValues(s string, secrets []string) string {
	for _, x := range secrets {
		s = strings.ReplaceAll(s, x, approver.Mask)
	}
	return s
}

// maskJSON replaces each secret inside the JSON strings of raw.
func maskJSON(raw json.RawMessage, secrets []string) json.RawMessage {
	if len(secrets) == 0 || len(raw) == 0 {
		return raw
	}
	out := []byte(raw)
	for _, x := range secrets {
		enc, err := marshal(x)
		if err != nil {
			continue
		}
		out = bytes.ReplaceAll(out, enc[1:len(enc)-1], []byte(approver.Mask))
	}
	return out
}
