package redact

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Mask replaces redacted argument values.
const Mask = "[redacted]"

// MaskArguments decodes JSON arguments and replaces the value at each
// redact path with Mask. A path is dot separated ("auth.token"); a path
// through a list applies to every element ("entities.observations").
// Numbers are kept exact.
func MaskArguments(args json.RawMessage, paths []string) (any, error) {
	return maskArguments(args, paths, Mask)
}

// maskArguments is MaskArguments with the replacement text chosen by the
// caller (Slack shows a different mark).
func maskArguments(args json.RawMessage, paths []string, mask string) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("arguments are not JSON: %w", err)
	}
	if dec.More() {
		return nil, errors.New("arguments are not one JSON value")
	}
	for _, p := range paths {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		v = maskPath(v, strings.Split(p, "."), mask)
	}
	return v, nil
}

func maskPath(v any, path []string, mask string) any {
	switch x := v.(type) {
	case map[string]any:
		child, ok := x[path[0]]
		if !ok {
			return v
		}
		if len(path) == 1 {
			x[path[0]] = mask
		} else {
			x[path[0]] = maskPath(child, path[1:], mask)
		}
	case []any:
		for i := range x {
			x[i] = maskPath(x[i], path, mask)
		}
	}
	return v
}

// Arguments is args with the redact paths masked (as MaskArguments does)
// and, at any depth, _meta and credential-named members removed (Scrub),
// as compact JSON. Arguments that are not JSON are withheld whole: nothing
// could be masked in them; a JSON string says so in their place.
func Arguments(args json.RawMessage, paths []string) json.RawMessage {
	if len(bytes.TrimSpace(args)) == 0 {
		return nil
	}
	v, err := MaskArguments(args, paths)
	if err != nil {
		return quoted(fmt.Sprintf("(%d bytes of arguments withheld: not JSON)", len(args)))
	}
	b, err := marshal(Scrub(v))
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

// Scrub removes _meta and credential-named members (SecretName) at any
// depth of a decoded JSON value, in place, and returns it.
func Scrub(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if k == "_meta" || SecretName(k) {
				delete(x, k)
				continue
			}
			x[k] = Scrub(val)
		}
	case []any:
		for i := range x {
			x[i] = Scrub(x[i])
		}
	}
	return v
}

// secretWords are the parts of member names that suggest a credential.
// Matching is on the lowercased name without '-', '_', '.' and spaces, so
// "API-Key", "api_key" and "apiKey" all match "apikey". It errs on the side
// of removing ("max_tokens" goes too).
var secretWords = []string{"token", "secret", "password", "passwd", "authorization", "apikey", "cookie", "credential", "privatekey"}

// SecretName says whether a member name suggests a credential.
func SecretName(k string) bool {
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

// ValuesAt is the strings found at the redact paths of args (every string
// under a path that leads to an object or a list), longest first, for
// MaskValues and MaskJSON to mask where they show outside the arguments.
// Strings shorter than four characters are left out.
func ValuesAt(args json.RawMessage, paths []string) []string {
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

// MaskValues replaces each secret in s with Mask.
func MaskValues(s string, secrets []string) string {
	for _, x := range secrets {
		s = strings.ReplaceAll(s, x, Mask)
	}
	return s
}

// MaskJSON replaces each secret inside the JSON strings of raw with Mask.
func MaskJSON(raw json.RawMessage, secrets []string) json.RawMessage {
	if len(secrets) == 0 || len(raw) == 0 {
		return raw
	}
	out := []byte(raw)
	for _, x := range secrets {
		enc, err := marshal(x)
		if err != nil {
			continue
		}
		out = bytes.ReplaceAll(out, enc[1:len(enc)-1], []byte(Mask))
	}
	return out
}
