package api

import (
	"encoding/json"
	"time"
)

// Approve with edits (issue 17 §2): an approver may change a call's
// arguments and approve the changed call. The workflow judges the edited
// call again (schema, path confinement, rules); an edit policy denies is
// refused with the call, and one that needs another group's approval asks
// that group. What runs is the edited call.

// ApprovalEdits are the edit fields of an approval request and of its
// notices.
type ApprovalEdits struct {
	// NoEdits: approvers may not change this request's arguments (the
	// tool's manifest says approval.edits: false, the request already
	// approves an edit, or the task's workflow predates edits).
	NoEdits bool `json:",omitempty"`
	// Edit is the edit an approver made when approving this request.
	Edit *ArgsEdit `json:",omitempty"`
	// EditOf names the request whose approver edited the arguments this
	// request asks about; EditedBy is that approver, who may not approve
	// the edit a second time.
	EditOf   string `json:",omitempty"`
	EditedBy string `json:",omitempty"`
}

// ArgsEdit records who changed a call's arguments, from what to what.
type ArgsEdit struct {
	// RequestID is the request the approver decided on.
	RequestID string
	By        string
	Via       string
	At        time.Time
	Comment   string `json:",omitempty"`
	// Original and OriginalDigest are the arguments the agent sent and
	// the request's digest; Arguments and Digest the edited ones (the
	// digest as RequestDigest computes it, under the same policy
	// version).
	Original       json.RawMessage
	OriginalDigest string
	Arguments      json.RawMessage
	Digest         string
	// Changes lists what changed, with the tool's redact paths masked.
	Changes []ArgChange `json:",omitempty"`
	// Effect is what policy said of the edited call: allow, deny or
	// require_approval; Reason its reason.
	Effect string `json:",omitempty"`
	Reason string `json:",omitempty"`
	// Refused says why the edited call was refused (policy's deny, a
	// schema or path check, or the other group's denial); nothing ran.
	Refused string `json:",omitempty"`
}

// EditNeedsApproval is the ArgsEdit.Effect of an edited call that policy
// sends to an approval of its own (policy's require_approval).
const EditNeedsApproval = "require_approval"

// ArgChange is one changed value: Path is dot separated ("" for the whole
// arguments; list elements by index where a list holds a secret); From
// and To are JSON (absent: the key was added or removed).
type ArgChange struct {
	Path string          `json:"path"`
	From json.RawMessage `json:"from,omitempty"`
	To   json.RawMessage `json:"to,omitempty"`
	// Masked: a secret at Path changed, so From and To (masked) may read
	// the same; the path is what tells the change.
	Masked bool `json:"masked,omitempty"`
}

// EditMetaKey is the _meta key of a call result whose arguments an
// approver changed: its value is the ArgsEdit without the raw arguments
// (changes masked).
const EditMetaKey = "airlock/argumentsEdited"
