package policy

import "testing"

// TestSchemaValidateIsDeterministic: with several wrong keys, the error
// names the same one every time (a workflow records it).
func TestSchemaValidateIsDeterministic(t *testing.T) {
	s, err := ResolveSchema([]byte(`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"},"d":{"type":"integer"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	doc := map[string]any{"d": "x", "c": "x", "b": "x", "a": "x"}
	first := s.Validate(doc)
	if first == nil {
		t.Fatal("a document with four wrong keys validated")
	}
	for range 50 {
		if err := s.Validate(doc); err == nil || err.Error() != first.Error() {
			t.Fatalf("error %v, then %v", first, err)
		}
	}
	if err := s.Validate(map[string]any{"a": 1.0}); err != nil {
		t.Fatalf("a valid document: %v", err)
	}
	if _, err := ResolveSchema([]byte(`{"type":5}`)); err == nil {
		t.Fatal("a schema with type 5 resolved")
	}
}
