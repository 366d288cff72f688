package api

import (
	"crypto/sha256"
	"encoding/base64"
	"sort"
)

// CallLedger is the compact record of every call an AgentTask has run, in
// all its runs, carried across continue-as-new. Temporal deduplicates an
// Update ID only within one run and the task carries only its last results
// (Carried.Recent), so the ledger is what lets a later run recognise a
// retried call ID however many runs ago it ran, and answer it instead of
// running the tool again.
//
// A call takes LedgerEntryBytes bytes of Calls (about 17.3 in the JSON of
// the next run's input, which encodes bytes in base64); each run that ran
// calls adds one LedgerRun (about 70 bytes). Calls a task refused before
// counting them (its limits) are not recorded: a retry of one is refused
// the same way.
type CallLedger struct {
	// Runs are the task's runs that ran calls, oldest first.
	Runs []LedgerRun `json:",omitempty"`
	// Calls holds one entry per call, in the order the calls finished:
	// the first LedgerKeyBytes bytes of the SHA-256 of the call ID, then
	// the outcome's code (see outcomeCodes).
	Calls []byte `json:",omitempty"`
}

// LedgerRun is one run of a task in its ledger.
type LedgerRun struct {
	// N is the run's number, 1 for the task's first; 0 stands for runs
	// before the task kept a ledger (calls carried from them by Recent).
	N int `json:",omitempty"`
	// ID is the run ID, for `airlock audit show --run ID TASK`.
	ID string `json:",omitempty"`
	// First is the index of the run's first call in the ledger.
	First int `json:",omitempty"`
}

// Ledger sizes. With 96 bits of hash, the chance that two of MaxTaskCalls
// call IDs share a key (and the second is taken for a repeat) is below
// 10^-20.
const (
	LedgerKeyBytes   = 12
	LedgerEntryBytes = LedgerKeyBytes + 1
	// MaxTaskCalls is the most calls one task can run: its ledger then
	// takes about 435 KB of the next run's input, within
	// MaxLedgerBytes. task.max_calls may not be set above it.
	MaxTaskCalls = 25_000
	// MaxLedgerBytes bounds the ledger's JSON in the next run's input,
	// next to the carried results (256 KiB) and compensations (1 MiB), under
	// Temporal's 2 MiB payload limit.
	MaxLedgerBytes = 512 << 10
)

// LedgerKey identifies a call ID in the ledger.
type LedgerKey [LedgerKeyBytes]byte

// LedgerKeyOf is the ledger key of a call ID.
func LedgerKeyOf(callID string) LedgerKey {
	s := sha256.Sum256([]byte(callID))
	return LedgerKey(s[:LedgerKeyBytes])
}

// outcomeCodes are the outcomes' one-byte codes in a ledger entry: the
// index plus one (0 is an outcome this list does not know). Append only:
// carried ledgers hold these codes.
var outcomeCodes = [...]Outcome{OutcomeOK, OutcomeToolError, OutcomeLimit, OutcomeUnavailable,
	OutcomeUnknown, OutcomeRejected, OutcomeFailed, OutcomeDenied, OutcomeCancelled}

func outcomeCode(o Outcome) byte {
	for i, c := range outcomeCodes {
		if c == o {
			return byte(i + 1)
		}
	}
	return 0
}

// Len is the number of calls in the ledger.
func (l *CallLedger) Len() int { return len(l.Calls) / LedgerEntryBytes }

// Key is the key of call i.
func (l *CallLedger) Key(i int) LedgerKey {
	return LedgerKey(l.Calls[i*LedgerEntryBytes : i*LedgerEntryBytes+LedgerKeyBytes])
}

// Entry is the run and the outcome ("" when unknown) of call i.
func (l *CallLedger) Entry(i int) (LedgerRun, Outcome) {
	var o Outcome
	if c := l.Calls[i*LedgerEntryBytes+LedgerKeyBytes]; c > 0 && int(c) <= len(outcomeCodes) {
		o = outcomeCodes[c-1]
	}
	// The last run that starts at or before i.
	r := sort.Search(len(l.Runs), func(j int) bool { return l.Runs[j].First > i }) - 1
	if r < 0 {
		return LedgerRun{}, o
	}
	return l.Runs[r], o
}

// Add records that callID finished with outcome o in run n (run ID id),
// and returns its index.
func (l *CallLedger) Add(n int, id, callID string, o Outcome) int {
	i := l.Len()
	if k := len(l.Runs); k == 0 || l.Runs[k-1].N != n || l.Runs[k-1].ID != id {
		l.Runs = append(l.Runs, LedgerRun{N: n, ID: id, First: i})
	}
	key := LedgerKeyOf(callID)
	l.Calls = append(append(l.Calls, key[:]...), outcomeCode(o))
	return i
}

// Size is the length of the ledger's JSON, within a few bytes.
func (l *CallLedger) Size() int {
	n := len(`{"Runs":[],"Calls":""}`) + base64.StdEncoding.EncodedLen(len(l.Calls))
	for _, r := range l.Runs {
		n += len(`{"N":,"ID":"","First":},`) + len(r.ID) + 2*10
	}
	return n
}

// Clone is a copy that shares nothing with l.
func (l *CallLedger) Clone() *CallLedger {
	if l == nil {
		return nil
	}
	return &CallLedger{Runs: append([]LedgerRun(nil), l.Runs...), Calls: append([]byte(nil), l.Calls...)}
}
