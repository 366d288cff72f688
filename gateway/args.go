package gateway

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/airlock-run/airlock/internal/jsoncanon"
)

// callArguments is what a tools/call's arguments become before anything
// is recorded: absent or null is {}, a JSON object that repeats a key at
// any depth is refused (encoding/json keeps the last value, other parsers
// the first, so policy and the upstream could read different calls), and
// anything else is re-encoded canonically. The task's Update carries these
// bytes: the worker judges them and the upstream receives them, so the
// upstream never acts on a value the policy did not see.
func callArguments(tool string, raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return json.RawMessage("{}"), nil
	}
	canon, err := jsoncanon.Canonical(raw)
	var dup *jsoncanon.DuplicateKeyError
	switch {
	case errors.As(err, &dup):
		return nil, duplicateArgument(tool, dup)
	case err != nil:
		return nil, fmt.Errorf("invalid arguments to %s: not one JSON value (%v); send a JSON object. Nothing ran", tool, err)
	}
	if string(canon) == "null" {
		return json.RawMessage("{}"), nil
	}
	return canon, nil
}

// duplicateArgument is the refusal of arguments to tool that repeat a key.
func duplicateArgument(tool string, dup *jsoncanon.DuplicateKeyError) error {
	return fmt.Errorf("invalid arguments to %s: %w (JSON parsers disagree on which value counts); send each key once. Nothing ran", tool, dup)
}
