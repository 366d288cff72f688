package api

import "testing"

func TestClaimTaskID(t *testing.T) {
	for _, tc := range []struct {
		id, principal string
		ok            bool
	}{
		{"alice-default", "alice", true},
		{"alice-default", "bob", false},     // squatting alice's default task
		{"alice-default", "alice-x", false}, // a principal whose name extends alice's
		{"alice-x-default", "alice", false}, // ... and the other way round
		{"alice-default-default", "alice-default", true},
		{"-default", "bob", false},
		{"my-task", "bob", true},
		{"default", "bob", true},
		{"alice-defaults", "bob", true},
		{"rollback-alice-default", "alice", false}, // the rollback of a task is airlock's
		{"rollback-x", "bob", false},
	} {
		if err := ClaimTaskID(tc.id, tc.principal); (err == nil) != tc.ok {
			t.Errorf("ClaimTaskID(%q, %q) = %v; want ok=%v", tc.id, tc.principal, err, tc.ok)
		}
	}
	if id := DefaultTaskID("alice"); ClaimTaskID(id, "alice") != nil || ClaimTaskID(id, "bob") == nil {
		t.Errorf("DefaultTaskID(alice) = %q is not alice's alone", id)
	}
}
