package api

import (
	"strconv"
	"strings"
)

// Wire identifiers built from other identifiers. Each grammar has one
// constructor and, where a reader takes an ID apart, one parser here, so
// that the bytes a history records are built in one place. The grammars
// must never change: recorded histories, approval links, audit lines and
// clients' MCP task handles carry them.
//
// A task ID never contains "~" (the gateway's task ID shape allows letters,
// digits and . _ : -), so a request ID splits at its first "~"; a call ID
// may contain anything, "~" included.

const (
	requestSep       = "~"
	editSuffix       = "~edit"
	keyPrefix        = "k-"
	captureSuffix    = "/capture"
	compensationPref = "undo-"
	grantUsePrefix   = "use:"
)

// RequestID is "<task ID>~<call ID>": the ID of a call's approval request
// and the MCP task handle of a call (tasks/get, tasks/result).
func RequestID(taskID, callID string) string { return taskID + requestSep + callID }

// SplitRequestID takes a request ID apart at its first "~". ok reports that
// there is one and that neither part is empty; task and call are the parts
// around it either way (as strings.Cut returns them).
func SplitRequestID(id string) (task, call string, ok bool) {
	task, call, found := strings.Cut(id, requestSep)
	return task, call, found && task != "" && call != ""
}

// EditRequestID is the ID of the request that asks about an approver's
// edit of the request requestID: "<task>~<call>~edit".
func EditRequestID(requestID string) string { return requestID + editSuffix }

// IsEditRequestID reports whether id names the request about an edit.
func IsEditRequestID(id string) bool { return strings.HasSuffix(id, editSuffix) }

// CallIDForKey is the call ID of a call the client named with an
// idempotency key (_meta "airlock/idempotency_key"): "k-<key>".
func CallIDForKey(key string) string { return keyPrefix + key }

// KeyOfCallID is the idempotency key a call ID was made from; ok is false
// (and key is id) when id was not made from one (as strings.CutPrefix).
func KeyOfCallID(id string) (key string, ok bool) { return strings.CutPrefix(id, keyPrefix) }

// CaptureID is the call ID of the pre-image read made before call runs:
// "<call ID>/capture".
func CaptureID(callID string) string { return callID + captureSuffix }

// CallOfCaptureID is the call whose capture id is; ok is false (and call
// is id) when id is not a capture's.
func CallOfCaptureID(id string) (call string, ok bool) { return strings.CutSuffix(id, captureSuffix) }

// CompensationID is the call ID of the compensation of call:
// "undo-<call ID>".
func CompensationID(callID string) string { return compensationPref + callID }

// CallOfCompensationID is the call whose compensation id is; ok is false
// (and call is id) when id is not a compensation's.
func CallOfCompensationID(id string) (call string, ok bool) {
	return strings.CutPrefix(id, compensationPref)
}

// GrantUseID is the Update ID with which a call of a task counts against
// its principal's grants (UpdateUseGrant): "use:<task ID>~<call ID>", so a
// retried activity counts the call once.
func GrantUseID(taskID, callID string) string {
	return grantUsePrefix + RequestID(taskID, callID)
}

// CallKey is "<task ID>/<call ID>": the idempotency key every attempt of a
// call sends its upstream, and the Update ID with which the call takes a
// token of a rate limit (UpdateTake), so that a retry takes it once.
func CallKey(taskID, callID string) string { return taskID + "/" + callID }

// RefundID is the Update ID with which a call gives back the token it took
// under CallKey: "<task ID>/<call ID>/refund".
func RefundID(taskID, callID string) string { return CallKey(taskID, callID) + "/refund" }

// ProgramCallID is "<program ID>/<n>": the call ID of a program's n-th tool
// call (from 1).
func ProgramCallID(programID string, n int) string {
	return programID + "/" + strconv.Itoa(n)
}

// SplitProgramCallID takes a program call ID apart at its last "/"; ok is
// false when id has no "/" followed by a positive decimal number.
func SplitProgramCallID(id string) (program string, n int, ok bool) {
	i := strings.LastIndexByte(id, '/')
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(id[i+1:])
	if err != nil || n < 1 || strconv.Itoa(n) != id[i+1:] {
		return "", 0, false
	}
	return id[:i], n, true
}
