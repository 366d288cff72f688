package redact

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Indent is args as indented JSON, without HTML escaping, with the value at
// each redact path replaced by mask (MaskArguments with another mark:
// Slack shows its own). Empty arguments are "{}". The error says why
// arguments that are not one JSON value cannot be shown; nothing could be
// masked in them, so the caller shows none of them.
func Indent(args json.RawMessage, paths []string, mask string) (string, error) {
	if len(bytes.TrimSpace(args)) == 0 {
		return "{}", nil
	}
	v, err := maskArguments(args, paths, mask)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimRight(b.String(), "\n"), nil
}

// PrettyArguments is the arguments as indented JSON with the redact paths
// masked. Arguments that are not JSON are not shown (nothing could be
// masked in them): a note says how many bytes were withheld and why.
func PrettyArguments(args json.RawMessage, paths []string) string {
	s, err := Indent(args, paths, Mask)
	if err != nil {
		return fmt.Sprintf("(%d bytes of arguments withheld: %v)", len(args), err)
	}
	return s
}
