package approver

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/jsoncanon"
	"github.com/airlock-run/airlock/internal/redact"
)

// Approve with edits (issue 17 §2): every path (CLI --args, the web page's
// "Edit arguments", the Slack modal) shows the arguments masked, so an
// approver edits the masked JSON. EditedArguments turns what they submit
// into the arguments delivered with the approval: a value still equal to
// the mask at a redact path keeps the call's own value, so an approver can
// edit other fields of a call with secrets without seeing them.

// EditedArguments checks submitted edited arguments (a JSON object) and
// restores the masked values of r's redact paths. It returns nil when the
// result equals r's arguments (a plain approval).
func EditedArguments(r api.ApprovalRequest, submitted []byte) (json.RawMessage, error) {
	submitted = bytes.TrimSpace(submitted)
	if len(submitted) == 0 {
		return nil, errors.New("the edited arguments are empty; give a JSON object, e.g. the arguments airlock approvals show prints")
	}
	if len(submitted) > api.MaxArgumentBytes {
		return nil, fmt.Errorf("the edited arguments are %d bytes; keep them under %d", len(submitted), api.MaxArgumentBytes)
	}
	// Refused here as policy would refuse them: a repeated key, and a
	// number that has no exact value.
	var dup *jsoncanon.DuplicateKeyError
	var num *jsoncanon.NumberError
	switch _, err := jsoncanon.Decode(submitted); {
	case errors.As(err, &dup):
		return nil, fmt.Errorf("the edited arguments are ambiguous: %v (JSON parsers disagree on which value counts); give each key once", err)
	case errors.As(err, &num):
		return nil, fmt.Errorf("the edited arguments: %v", err)
	}
	edited, err := decodeNumbers(submitted)
	if err != nil {
		return nil, fmt.Errorf("the edited arguments are not JSON: %v", err)
	}
	if _, ok := edited.(map[string]any); !ok {
		return nil, errors.New(`the edited arguments must be a JSON object, like the call's own ({"name": value, ...})`)
	}
	if r.NoEdits {
		if r.EditOf != "" {
			return nil, fmt.Errorf("request %s already asks about arguments %s edited; approve or deny it as it is", r.ID, r.EditedBy)
		}
		return nil, fmt.Errorf("%s does not allow approvers to change its arguments (its manifest says approval.edits: false); approve or deny it as it is", r.Tool)
	}
	original, err := decodeNumbers(r.Arguments)
	if err != nil {
		original = nil
	}
	for _, p := range r.Redact {
		if p = strings.TrimSpace(p); p != "" {
			edited = unmask(edited, original, strings.Split(p, "."))
		}
	}
	out, err := jsoncanon.Marshal(edited) // the form the gateway forwards, numbers as written
	if err != nil {
		return nil, err
	}
	if orig, err := jsoncanon.Marshal(original); err == nil && bytes.Equal(orig, out) {
		return nil, nil
	}
	return out, nil
}

// unmask puts original's value back wherever edited still holds the mask
// at path.
func unmask(edited, original any, path []string) any {
	switch e := edited.(type) {
	case map[string]any:
		o, _ := original.(map[string]any)
		child, ok := e[path[0]]
		if !ok {
			return edited
		}
		ov, has := o[path[0]]
		if len(path) == 1 {
			if s, isStr := child.(string); isStr && s == redact.Mask && has {
				e[path[0]] = ov
			}
			return edited
		}
		e[path[0]] = unmask(child, ov, path[1:])
	case []any:
		o, _ := original.([]any)
		for i := range e {
			var ov any
			if i < len(o) {
				ov = o[i]
			}
			e[i] = unmask(e[i], ov, path)
		}
	}
	return edited
}

func decodeNumbers(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value")
	}
	return v, nil
}

// EditUpdateID is the Update ID of an approval with edited arguments: the
// approval's with the edit's hash, so the same edit repeated is the same
// Update and another edit (or a plain approval) is a new one that the
// workflow's validator refuses as a second vote.
func EditUpdateID(via, requestID, approver string, args json.RawMessage) string {
	sum := sha256.Sum256(args)
	return UpdateID(via, requestID, approver, true) + ":edit-" + hex.EncodeToString(sum[:8])
}

// EditOutcome says what became of an approval with edited arguments, from
// the decision's result: policy judged the edited call before the
// workflow answered (EditEffect), except in tasks started before it did.
func EditOutcome(res api.DecideResult) string {
	d := ShortDigest(res.EditDigest)
	switch {
	case res.EditRefused != "":
		return fmt.Sprintf("You changed its arguments (edited digest %s), but the edit was refused by policy: %s. Nothing ran, neither the original nor the edited call; the agent is told.", d, res.EditRefused)
	case res.EditEffect == api.EditNeedsApproval:
		return fmt.Sprintf("You changed its arguments (edited digest %s): policy sends the edited call to another approval, and it runs only if that is approved.", d)
	case res.EditEffect != "":
		return fmt.Sprintf("You changed its arguments (edited digest %s): policy allowed the edited call, and it is what runs.", d)
	}
	return fmt.Sprintf("You changed its arguments (edited digest %s): policy checks the edited call again before it runs.", d)
}

// EditableArguments is what an approver is shown to edit: r's arguments
// indented, masked ("" when r may not be edited).
func EditableArguments(r api.ApprovalRequest) string {
	if r.NoEdits {
		return ""
	}
	return redact.PrettyArguments(r.Arguments, r.Redact)
}

// writeEdits adds a request's edit lines to WriteRequest's output.
func writeEdits(line func(k, v string), r api.ApprovalRequest) {
	switch {
	case r.EditOf != "":
		line("edit of", r.EditOf+" (arguments edited by "+r.EditedBy+", who may not approve them again)")
	case r.NoEdits:
		line("edits", "not allowed (approve or deny as it is)")
	default:
		line("edits", "allowed: approve --args FILE runs other arguments (policy judges them again)")
	}
	if e := r.Edit; e != nil {
		var parts []string
		for _, c := range e.Changes {
			parts = append(parts, redact.ChangeText(c.Path, c.From, c.To, c.Masked))
		}
		line("edited", fmt.Sprintf("by %s via %s: %s (digest %s)", e.By, e.Via, strings.Join(parts, "; "), e.Digest))
	}
}
