package policy

// Schema is a resolved JSON schema, resolved the way tools' input schemas
// are (draft 2020-12 or draft-07, no $ref outside the schema). The schema
// of a task's state (task.state.schema) is checked by the configuration's
// loader and applied by the task's workflow with it.
type Schema struct{ e schemaEntry }

// ResolveSchema resolves raw, a JSON schema.
func ResolveSchema(raw []byte) (*Schema, error) {
	e := resolveSchema(raw)
	if e.err != nil {
		return nil, e.err
	}
	return &Schema{e: e}, nil
}

// Validate validates v (decoded JSON). For an object, the error names the
// same failure whatever Go's map order (see validateArgs), so that a
// workflow records the same words on every run; a panic inside the
// validator is an error.
func (s *Schema) Validate(v any) error {
	if m, ok := v.(map[string]any); ok {
		return validateArgs(s.e, m)
	}
	return safeValidate(s.e.rs, v)
}
