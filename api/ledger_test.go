package api

import (
	"encoding/json"
	"fmt"
	"testing"
)

func TestLedgerEntries(t *testing.T) {
	var l CallLedger
	l.Add(1, "run-a", "k-1", OutcomeOK)
	l.Add(1, "run-a", "k-2", OutcomeDenied)
	l.Add(3, "run-c", "k-3", OutcomeUnknown)
	l.Add(3, "run-c", "k-4", Outcome("from a newer airlock"))
	tests := []struct {
		i       int
		call    string
		run     int
		runID   string
		outcome Outcome
	}{
		{0, "k-1", 1, "run-a", OutcomeOK},
		{1, "k-2", 1, "run-a", OutcomeDenied},
		{2, "k-3", 3, "run-c", OutcomeUnknown},
		{3, "k-4", 3, "run-c", ""},
	}
	for _, tc := range tests {
		run, o := l.Entry(tc.i)
		if l.Key(tc.i) != LedgerKeyOf(tc.call) || run.N != tc.run || run.ID != tc.runID || o != tc.outcome {
			t.Errorf("entry %d: run %+v outcome %q; want %s in run %d (%s), %q", tc.i, run, o, tc.call, tc.run, tc.runID, tc.outcome)
		}
	}
	if l.Len() != 4 || len(l.Runs) != 2 {
		t.Errorf("%d calls in %d runs, want 4 in 2", l.Len(), len(l.Runs))
	}
	c := l.Clone()
	c.Add(4, "run-d", "k-5", OutcomeOK)
	if l.Len() != 4 || len(l.Runs) != 2 {
		t.Error("Clone shares its slices with the original")
	}
}

// TestLedgerSize: Size tracks the ledger's JSON (what the next run's
// input carries), and a task of MaxTaskCalls calls fits MaxLedgerBytes
// even when it continues as new every 100 calls.
func TestLedgerSize(t *testing.T) {
	var l CallLedger
	for i := range MaxTaskCalls {
		l.Add(1+i/100, fmt.Sprintf("0199b2c4-6a8e-7d1f-9c3b-%012d", i/100), fmt.Sprintf("k-%d", i), OutcomeOK)
	}
	b, err := json.Marshal(&l)
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Size(); got < len(b) || got > len(b)+len(l.Runs)*30 {
		t.Errorf("Size() = %d, JSON is %d bytes", got, len(b))
	}
	if len(b) > MaxLedgerBytes {
		t.Errorf("a full ledger over %d runs is %d bytes of JSON, more than MaxLedgerBytes (%d)", len(l.Runs), len(b), MaxLedgerBytes)
	}
	t.Logf("%d calls in %d runs: %d bytes of JSON, %.1f per call", l.Len(), len(l.Runs), len(b), float64(len(b))/float64(l.Len()))
}
