package config

import (
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/manifests"
)

// TaskState configures the JSON document each task keeps with the
// built-in state tools (task.state).
type TaskState struct {
	// MaxBytes bounds one task's document, e.g. "64KiB" (default
	// api.DefaultStateMaxBytes, at most api.MaxStateBytes).
	MaxBytes manifests.ByteSize `yaml:"max_bytes,omitempty"`
	// Schema is a JSON schema every document must satisfy: the path of a
	// JSON file (relative to this file), or the schema itself, inline.
	Schema any `yaml:"schema,omitempty"`

	// SchemaJSON is Schema as JSON, set by the loader once it is checked.
	SchemaJSON json.RawMessage `yaml:"-"`
}

// StateConfig is what tasks are started with (nil when task.state says
// nothing).
func (c *Config) StateConfig() *api.StateConfig {
	s := c.Task.State
	if s.MaxBytes == 0 && len(s.SchemaJSON) == 0 {
		return nil
	}
	return &api.StateConfig{MaxBytes: int(s.MaxBytes), Schema: s.SchemaJSON}
}

// validateState checks task.state, reading and resolving its schema.
func (c *Config) validateState(v *validator) {
	s := &c.Task.State
	if s.MaxBytes < 0 || (s.MaxBytes == 0 && v.lines.Has("task.state.max_bytes")) {
		v.add("task.state.max_bytes", `must be positive, got %s; write a size such as "64KiB", or omit it for %s`, s.MaxBytes, manifests.ByteSize(api.DefaultStateMaxBytes))
	}
	if s.MaxBytes > api.MaxStateBytes {
		v.add("task.state.max_bytes", "is %s, more than the %s a task's state may hold (it is carried whole through continue-as-new); keep large data in a tool, and a reference to it in the state",
			s.MaxBytes, manifests.ByteSize(api.MaxStateBytes))
	}
	var raw []byte
	switch sc := s.Schema.(type) {
	case nil:
		return
	case string:
		path := sc
		if !filepath.IsAbs(path) {
			path = filepath.Join(filepath.Dir(c.File), path)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			v.add("task.state.schema", "cannot read the schema file %s: %v; give the path of a JSON schema file (relative to this file), or write the schema inline", path, err)
			return
		}
		raw = b
	case map[string]any:
		b, err := json.Marshal(sc)
		if err != nil {
			v.add("task.state.schema", "cannot be turned into JSON: %v", err)
			return
		}
		raw = b
	default:
		v.add("task.state.schema", "is a %T; write the path of a JSON schema file, or the schema inline as a mapping", sc)
		return
	}
	if _, err := policy.ResolveSchema(raw); err != nil {
		v.add("task.state.schema", "is not a usable JSON schema: %v; fix it (draft 2020-12 or draft-07)", err)
		return
	}
	var probe map[string]any
	if err := json.Unmarshal(raw, &probe); err != nil {
		v.add("task.state.schema", "is not a JSON object: %v", err)
		return
	}
	s.SchemaJSON = json.RawMessage(raw)
}
