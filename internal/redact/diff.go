package redact

import (
	"bytes"
	"encoding/json"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Change is one value that differs between two JSON documents: Path is
// dot separated ("" for the whole document; list elements by index),
// From and To are JSON (absent: added or removed), secrets masked. Masked
// says the mask hides the difference: a secret at Path changed, so From
// and To may read the same while the values differ.
type Change struct {
	Path   string
	From   json.RawMessage
	To     json.RawMessage
	Masked bool
}

// Changes lists what differs between from and to, objects compared key
// by key (sorted). A value under a redact path (or named like a
// credential, see SecretName) shows as Mask; a list or object holding one
// is compared element by element, so a change hidden by the mask is still
// named by its path ("deletions.0.token"). Numbers are kept exact.
func Changes(from, to json.RawMessage, paths []string) []Change {
	a, _ := decode(from)
	b, _ := decode(to)
	var split [][]string
	for _, p := range paths {
		if p = strings.TrimSpace(p); p != "" {
			split = append(split, strings.Split(p, "."))
		}
	}
	var out []Change
	var walk func(shown, keys []string, a, b any, hasA, hasB bool)
	walk = func(shown, keys []string, a, b any, hasA, hasB bool) {
		if hasA && hasB {
			ma, okA := a.(map[string]any)
			mb, okB := b.(map[string]any)
			if okA && okB {
				names := make([]string, 0, len(ma)+len(mb))
				for k := range ma {
					names = append(names, k)
				}
				for k := range mb {
					if _, ok := ma[k]; !ok {
						names = append(names, k)
					}
				}
				sort.Strings(names)
				for _, k := range names {
					va, ia := ma[k]
					vb, ib := mb[k]
					walk(append(slices.Clone(shown), k), append(slices.Clone(keys), k), va, vb, ia, ib)
				}
				return
			}
			la, okA := a.([]any)
			lb, okB := b.([]any)
			if okA && okB && len(la) == len(lb) && (holdsSecret(keys, split) || hasSecretName(la) || hasSecretName(lb)) {
				for i := range la {
					walk(append(slices.Clone(shown), strconv.Itoa(i)), keys, la[i], lb[i], true, true)
				}
				return
			}
		}
		ja, _ := marshal(a)
		jb, _ := marshal(b)
		if hasA == hasB && bytes.Equal(ja, jb) {
			return
		}
		c := Change{Path: strings.Join(shown, ".")}
		covered := coveredBy(keys, split)
		if hasA {
			c.From = maskedValue(a, ja, keys, split, covered)
		}
		if hasB {
			c.To = maskedValue(b, jb, keys, split, covered)
		}
		c.Masked = covered || hasA && hasB && bytes.Equal(c.From, c.To)
		out = append(out, c)
	}
	walk(nil, nil, a, b, true, true)
	return out
}

// Text is one change as people read it: "path: from → to", "path: added
// to", "path: removed (was from)", with "(masked value changed)" where
// the mask hides the difference.
func (c Change) Text() string {
	return ChangeText(c.Path, c.From, c.To, c.Masked)
}

// ChangeText is Change.Text for a change held in another type.
func ChangeText(path string, from, to json.RawMessage, masked bool) string {
	if path == "" {
		path = "(arguments)"
	}
	switch {
	case len(from) == 0:
		return path + ": added " + string(to)
	case len(to) == 0:
		return path + ": removed (was " + string(from) + ")"
	case masked && bytes.Equal(from, to):
		return path + ": masked value changed"
	}
	return path + ": " + string(from) + " → " + string(to)
}

func decode(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// coveredBy reports whether a redact path is keys or a prefix of it, or
// keys ends in a credential-named member: the whole value is secret.
func coveredBy(keys []string, paths [][]string) bool {
	if len(keys) > 0 && SecretName(keys[len(keys)-1]) {
		return true
	}
	for _, p := range paths {
		if len(p) <= len(keys) && slices.Equal(p, keys[:len(p)]) {
			return true
		}
	}
	return false
}

// holdsSecret reports whether the value at keys is secret or holds a
// secret further down (a redact path runs through it).
func holdsSecret(keys []string, paths [][]string) bool {
	if coveredBy(keys, paths) {
		return true
	}
	for _, p := range paths {
		if len(p) > len(keys) && slices.Equal(p[:len(keys)], keys) {
			return true
		}
	}
	return false
}

// maskedValue is v's JSON with its secrets masked: Mask when the value is
// secret, else the redact paths inside it masked and credential-named
// members scrubbed.
func maskedValue(v any, raw []byte, keys []string, paths [][]string, covered bool) json.RawMessage {
	if covered {
		m, _ := json.Marshal(Mask)
		return m
	}
	if !holdsSecret(keys, paths) && !hasSecretName(v) {
		return raw
	}
	var rel []string
	for _, p := range paths {
		if len(p) > len(keys) && slices.Equal(p[:len(keys)], keys) {
			rel = append(rel, strings.Join(p[len(keys):], "."))
		}
	}
	mv, err := MaskArguments(raw, rel)
	if err != nil {
		m, _ := json.Marshal(Mask)
		return m
	}
	b, err := marshal(maskNames(mv))
	if err != nil {
		m, _ := json.Marshal(Mask)
		return m
	}
	return b
}

// maskNames replaces credential-named members' values with Mask and
// drops _meta, at any depth (Scrub, but keeping that the member changed).
func maskNames(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			switch {
			case k == "_meta":
				delete(x, k)
			case SecretName(k):
				x[k] = Mask
			default:
				x[k] = maskNames(val)
			}
		}
	case []any:
		for i := range x {
			x[i] = maskNames(x[i])
		}
	}
	return v
}

// hasSecretName reports whether a decoded value has a credential-named
// member at any depth.
func hasSecretName(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if SecretName(k) || hasSecretName(val) {
				return true
			}
		}
	case []any:
		return slices.ContainsFunc(x, hasSecretName)
	}
	return false
}
