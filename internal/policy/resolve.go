package policy

import "github.com/google/jsonschema-go/jsonschema"

// ResolveSchema resolves a JSON schema the way tools' input schemas are
// (draft 2020-12 or draft-07, no $ref outside the schema): the schema of a
// task's state (task.state.schema) is checked by the configuration's
// loader and applied by the task's workflow with it.
func ResolveSchema(raw []byte) (*jsonschema.Resolved, error) {
	e := resolveSchema(raw)
	return e.rs, e.err
}

// ValidateSchema validates v (decoded JSON) against rs; a panic inside the
// validator is an error.
func ValidateSchema(rs *jsonschema.Resolved, v any) error { return safeValidate(rs, v) }
