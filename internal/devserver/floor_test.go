package devserver

import (
	"context"
	"os"
	"testing"
)

// TestFloor: floor sessions answer every call, each on its own workflow,
// and a session moves to a fresh workflow after FloorCallsPerRun calls
// (the server takes at most 2,000 Updates per run) without a failed call;
// Close ends the workflows, and the server and its directory go with the
// Floor's Close.
func TestFloor(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded Temporal and makes 1,000 Updates; skipped with -short")
	}
	ctx := context.Background()
	f, err := StartFloor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ss, err := f.Open(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if ss[0].run.GetID() == ss[1].run.GetID() {
		t.Fatalf("two sessions share workflow %s", ss[0].run.GetID())
	}
	first := ss[0].run.GetID()
	for i := range FloorCallsPerRun + 3 {
		if err := ss[0].Call(ctx); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	if ss[0].run.GetID() == first || ss[0].n != 3 {
		t.Errorf("after %d calls the session is on %s (call %d), want a fresh workflow after %d", FloorCallsPerRun+3, ss[0].run.GetID(), ss[0].n, FloorCallsPerRun)
	}
	if err := ss[1].Call(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}
	d, err := f.c.DescribeWorkflowExecution(ctx, first, "")
	if err != nil {
		t.Fatal(err)
	}
	if st := d.GetWorkflowExecutionInfo().GetStatus().String(); st != "Terminated" {
		t.Errorf("the session's first workflow is %s after it moved on, want Terminated", st)
	}
	dir := f.dir
	f.Close()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the floor's directory %s is still there after Close: %v", dir, err)
	}
}
