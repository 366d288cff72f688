package timeline

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/redact"
)

// EventArgumentsEdited is the line of an approver's edit of a call's
// arguments (approve with edits).
const EventArgumentsEdited = "arguments_edited"

// Edit is an approver's change to a call's arguments, as the call's
// result recorded it. Both argument versions are masked like the call's.
type Edit struct {
	By      string    `json:"by"`
	Via     string    `json:"via"`
	At      time.Time `json:"at"`
	Request string    `json:"request"`
	Comment string    `json:"comment,omitempty"`
	// Original is what the agent sent (as Call.Arguments shows it);
	// Arguments are what ran instead, or were refused.
	Original       json.RawMessage `json:"original"`
	OriginalDigest string          `json:"original_digest"`
	Arguments      json.RawMessage `json:"arguments"`
	Digest         string          `json:"digest"`
	Changes        []api.ArgChange `json:"changes,omitempty"`
	// Effect and Reason are policy's decision on the edited call.
	Effect string `json:"effect,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Refused says why the edited call was refused (nothing ran).
	Refused string `json:"refused,omitempty"`
}

// callOfRequest is the call ID of a request ID of task (api.RequestID, or
// api.EditRequestID of one). It cuts at the "~" after the task, so a call
// ID that itself holds a "~" (an idempotency key with one) comes out
// truncated: a known limitation, left for a change of behaviour of its own.
func callOfRequest(task, id string) string {
	call, _, _ := strings.Cut(strings.TrimPrefix(id, task+"~"), "~")
	call, _ = api.CallOfResultApprovalID(call) // the request to deliver its result
	return call
}

// setEdit keeps the edit a call's result recorded; its arguments are
// masked in finish.
func (b *builder) setEdit(cs *callState, e *api.ArgsEdit) {
	if e == nil {
		return
	}
	cs.edit = e
}

// finishEdit shows the call's edit with paths masked: the edited
// arguments are the call's arguments from then on.
func (b *builder) finishEdit(cs *callState, paths []string) []string {
	e := cs.edit
	if e == nil {
		return nil
	}
	cs.c.Edit = &Edit{By: e.By, Via: e.Via, At: e.At.UTC(), Request: e.RequestID, Comment: e.Comment,
		Original: redact.Arguments(e.Original, paths), OriginalDigest: e.OriginalDigest,
		Arguments: redact.Arguments(e.Arguments, paths), Digest: e.Digest, Changes: changesOf(e, paths),
		Effect: e.Effect, Reason: e.Reason, Refused: e.Refused}
	return redact.ValuesAt(e.Arguments, paths)
}

// changesOf is what an edit changed, computed again from both argument
// versions with paths (the redact paths as they are now): a history
// recorded before changeEditDiff holds a diff that showed a change under
// a masked field as "[redacted]" → "[redacted]".
func changesOf(e *api.ArgsEdit, paths []string) []api.ArgChange {
	if len(e.Original) == 0 || len(e.Arguments) == 0 {
		return e.Changes
	}
	var out []api.ArgChange
	for _, c := range redact.Changes(e.Original, e.Arguments, paths) {
		out = append(out, api.ArgChange{Path: c.Path, From: c.From, To: c.To, Masked: c.Masked})
	}
	return out
}

func editEvents(c *Call, base func(time.Time, int, string, string, map[string]any) event) []event {
	var out []event
	if e := c.Edit; e != nil {
		var parts []string
		for _, ch := range e.Changes {
			parts = append(parts, redact.ChangeText(ch.Path, ch.From, ch.To, ch.Masked))
		}
		text := fmt.Sprintf("arguments edited by %s via %s: %s (digest %s → %s); the edited call was judged again: %s",
			e.By, e.Via, strings.Join(parts, "; "), shortDigest(e.OriginalDigest), shortDigest(e.Digest), e.Effect)
		if e.Refused != "" {
			text += "; the edit was refused (" + e.Refused + "), nothing ran"
		}
		out = append(out, base(e.At, 1, EventArgumentsEdited, text, map[string]any{
			"request": e.Request, "by": e.By, "via": e.Via, "original": e.Original, "original_digest": e.OriginalDigest,
			"arguments": e.Arguments, "digest": e.Digest, "changes": e.Changes, "effect": e.Effect}))
	}
	if ap := c.EditApproval; ap != nil {
		out = append(out, approvalEvents(c, ap, base)...)
	}
	return out
}
