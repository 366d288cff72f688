package api

import "encoding/json"

// Task-scoped state (issue 16 §5): a small JSON document per task that the
// task's agent (or plan) keeps with the built-in tools below. The document
// lives in the task's workflow; each get, set and delete is a call of the
// task, recorded in its history like any other, and a set or delete pushes
// a compensation that restores the previous value.

// Built-in state tools, as MCP clients see them. In a CallRequest, Server is
// StateServer and Tool one of these (exposed names from manifests always
// hold "__", so they cannot collide).
const (
	ToolStateGet    = "airlock_state_get"
	ToolStateSet    = "airlock_state_set"
	ToolStateDelete = "airlock_state_delete"
	// ToolStateRestore is the compensation of a set or delete: it runs
	// inside the workflow (no upstream) and puts the previous value back.
	ToolStateRestore = "airlock_state_restore"
	// StateServer is the Server of the state tools' calls.
	StateServer = "airlock"
)

// DefaultStateMaxBytes bounds a task's state document when the
// configuration does not (task.state.max_bytes).
const DefaultStateMaxBytes = 64 << 10

// MaxStateBytes is the most task.state.max_bytes may be: the document is
// carried whole through continue-as-new and in the results of gets, and
// both are bounded payloads.
const MaxStateBytes = 512 << 10

// StateConfig configures the state of the tasks a gateway starts.
type StateConfig struct {
	// MaxBytes bounds the document's JSON (0: DefaultStateMaxBytes).
	MaxBytes int `json:",omitempty"`
	// Schema, when set, is a JSON schema every document must satisfy
	// (draft 2020-12 or draft-07).
	Schema json.RawMessage `json:",omitempty"`
}

// EffectiveMaxBytes is MaxBytes or its default.
func (c *StateConfig) EffectiveMaxBytes() int {
	if c == nil || c.MaxBytes <= 0 {
		return DefaultStateMaxBytes
	}
	return c.MaxBytes
}

// StateArgs are the arguments of the state tools. Get: Key (optional; the
// whole document without it). Set: Key and Value, or Document (the whole
// document, an object). Delete: Key. The restore compensation: Key (""
// for the whole document), Value and Present (false: the key was absent).
type StateArgs struct {
	Key      string          `json:"key,omitempty"`
	Value    json.RawMessage `json:"value,omitempty"`
	Document json.RawMessage `json:"document,omitempty"`
	Present  bool            `json:"present,omitempty"`
}

// StateSummary is what `airlock tasks show` prints of a task's state.
type StateSummary struct {
	Bytes int
	Keys  []string `json:",omitempty"`
}
