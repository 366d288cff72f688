package workflows_test

import (
	"path/filepath"
	"testing"

	sdkworker "go.temporal.io/sdk/worker"

	"github.com/airlock-run/airlock/worker"
)

// TestReplayRecordedHistories replays every recorded history in testdata
// against the current workflow code. A failure means a change to workflow
// logic is not behind workflow.GetVersion. Re-record (never overwrite old
// files after a change; add new ones) with:
//
//	go test ./integration/ -run TestRecordHistory -record
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no recorded histories in testdata")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := sdkworker.NewWorkflowReplayer()
			worker.RegisterWorkflows(r)
			if err := r.ReplayWorkflowHistoryFromJSONFile(nil, f); err != nil {
				t.Fatalf("%s does not replay: %v", f, err)
			}
		})
	}
}
