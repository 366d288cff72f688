package api

import "testing"

// TestIDBytes pins every grammar: recorded histories, approval links and
// clients' task handles carry these exact bytes.
func TestIDBytes(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{RequestID("task-1", "c1"), "task-1~c1"},
		{EditRequestID(RequestID("task-1", "c1")), "task-1~c1~edit"},
		{CallIDForKey("abc"), "k-abc"},
		{CaptureID("k-abc"), "k-abc/capture"},
		{CompensationID("k-abc"), "undo-k-abc"},
		{GrantUseID("task-1", "c1"), "use:task-1~c1"},
		{GrantIDOf("task-1", "c1"), "task-1~grant-c1"},
		{PrincipalGrantIDOf("bob", "task-1", "c1"), "grants-bob~grant-task-1~c1"},
		{CallKey("task-1", "c1"), "task-1/c1"},
		{RefundID("task-1", "c1"), "task-1/c1/refund"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestSplitRequestID(t *testing.T) {
	for _, tc := range []struct {
		id, task, call string
		ok             bool
	}{
		{"task-1~c1", "task-1", "c1", true},
		{"task-1~k-a~b", "task-1", "k-a~b", true}, // a call ID may hold "~"
		{"task-1~c1~edit", "task-1", "c1~edit", true},
		{"task-1~~", "task-1", "~", true},
		{"task-1", "task-1", "", false},
		{"task-1~", "task-1", "", false},
		{"~c1", "", "c1", false},
		{"~", "", "", false},
		{"", "", "", false},
	} {
		task, call, ok := SplitRequestID(tc.id)
		if task != tc.task || call != tc.call || ok != tc.ok {
			t.Errorf("SplitRequestID(%q) = %q, %q, %v; want %q, %q, %v", tc.id, task, call, ok, tc.task, tc.call, tc.ok)
		}
	}
	for _, c := range [][2]string{{"t", "c"}, {"task-1", "k-~x~"}, {"a.b:c_d-e", "k-" + "\x00/é"}} {
		task, call, ok := SplitRequestID(RequestID(c[0], c[1]))
		if !ok || task != c[0] || call != c[1] {
			t.Errorf("RequestID(%q, %q) splits into %q, %q, %v", c[0], c[1], task, call, ok)
		}
	}
}

func TestCallIDGrammars(t *testing.T) {
	for _, key := range []string{"abc", "", "k-x", "a~b", "x/capture", "undo-y"} {
		if got, ok := KeyOfCallID(CallIDForKey(key)); !ok || got != key {
			t.Errorf("KeyOfCallID(CallIDForKey(%q)) = %q, %v", key, got, ok)
		}
	}
	if got, ok := KeyOfCallID("c-123"); ok || got != "c-123" {
		t.Errorf(`KeyOfCallID("c-123") = %q, %v; want "c-123", false`, got, ok)
	}
	for _, call := range []string{"c1", "k-a~b", "undo-c1", "c1/capture", ""} {
		if got, ok := CallOfCaptureID(CaptureID(call)); !ok || got != call {
			t.Errorf("CallOfCaptureID(CaptureID(%q)) = %q, %v", call, got, ok)
		}
		if got, ok := CallOfCompensationID(CompensationID(call)); !ok || got != call {
			t.Errorf("CallOfCompensationID(CompensationID(%q)) = %q, %v", call, got, ok)
		}
	}
	for _, id := range []string{"c1", "k-undo", "capture", "c1/captures", "xundo-c1"} {
		if _, ok := CallOfCaptureID(id); ok {
			t.Errorf("CallOfCaptureID(%q) is a capture", id)
		}
		if _, ok := CallOfCompensationID(id); ok {
			t.Errorf("CallOfCompensationID(%q) is a compensation", id)
		}
	}
	if !IsEditRequestID(EditRequestID("t~c")) || IsEditRequestID("t~c") || IsEditRequestID("t~c~edits") {
		t.Error("IsEditRequestID does not tell edit requests apart")
	}
	if !IsGrantID(GrantIDOf("t", "c")) || !IsGrantID(PrincipalGrantIDOf("p", "t", "c")) || IsGrantID(RequestID("t", "c")) {
		t.Error("IsGrantID does not tell grant IDs apart")
	}
}
