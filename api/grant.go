package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-run/airlock/internal/jsoncanon"
)

// Approval grants (issue 17 §3): an approver who approves a call may also
// approve the next calls of the same tool in the same task, for a number
// of calls and/or a time, within the tool's manifest approval.max_grant.

// Grant wire names.
const (
	// UpdateRevokeGrant (a RevokeGrantRequest) revokes one grant of the
	// task; its validator refuses unknown and already closed grants.
	UpdateRevokeGrant = "revoke_grant"
	// CheckGrant is the Decision.Check of a call that policy would have
	// sent for approval and that a grant allowed instead.
	CheckGrant = "grant"
)

// Grant scopes.
const (
	GrantScopeTask      = "task"
	GrantScopePrincipal = "principal"
)

// GrantAsk is what an approver asks for with an approval: the next Calls
// calls and/or the next For of the same tool (with the same grant_args
// values), in this task or, with Principal, in every task of the
// principal. The zero GrantAsk asks for nothing.
type GrantAsk struct {
	Calls     int           `json:",omitempty"`
	For       time.Duration `json:",omitempty"`
	Principal bool          `json:",omitempty"`
}

// Empty reports that the ask grants nothing.
func (g *GrantAsk) Empty() bool { return g == nil || (g.Calls == 0 && g.For == 0) }

// String says what the ask grants, for messages ("3 calls, 1h0m0s").
func (g *GrantAsk) String() string {
	if g.Empty() {
		return "once only"
	}
	s := strings.Join(amounts(g.Calls, g.For), " within ")
	if g.Principal {
		s += " for the principal"
	}
	return s
}

// GrantBound is a tool's manifest approval.max_grant as the worker
// resolves it: the most calls and the longest time one grant may cover
// (zero: not offered in that dimension), and whether a grant may span the
// principal's tasks. A nil bound allows no grant.
type GrantBound struct {
	Calls     int           `json:",omitempty"`
	Duration  time.Duration `json:",omitempty"`
	Principal bool          `json:",omitempty"`
}

// Check says why ask exceeds the bound, or "" when it fits.
func (b *GrantBound) Check(tool string, ask *GrantAsk) string {
	if ask.Empty() && (ask == nil || !ask.Principal) {
		return ""
	}
	if b == nil || (b.Calls == 0 && b.Duration == 0) {
		return fmt.Sprintf("%s allows no grant (its manifest sets no approval.max_grant): approve this call once, without grant options", tool)
	}
	switch {
	case ask.Calls < 0 || ask.For < 0:
		return "a grant's calls and duration must not be negative"
	case ask.Empty():
		return fmt.Sprintf("a grant names how many calls or how long it covers; %s allows %s", tool, b)
	case ask.Calls > 0 && b.Calls == 0:
		return fmt.Sprintf("%s allows grants by time only (approval.max_grant: %s); ask for a duration instead of %d calls", tool, b, ask.Calls)
	case ask.Calls > b.Calls:
		return fmt.Sprintf("a grant of %d calls is above %s's approval.max_grant of %s; ask for at most %d calls", ask.Calls, tool, b, b.Calls)
	case ask.For > 0 && b.Duration == 0:
		return fmt.Sprintf("%s allows grants by call count only (approval.max_grant: %s); ask for a number of calls instead of %s", tool, b, ask.For)
	case ask.For > b.Duration:
		return fmt.Sprintf("a grant for %s is above %s's approval.max_grant of %s; ask for at most %s", ask.For, tool, b, b.Duration)
	case ask.Principal && !b.Principal:
		return fmt.Sprintf("%s allows grants in one task only (approval.max_grant.principal is false); grant without --grant-principal", tool)
	case ask.Principal && b.Duration == 0:
		return fmt.Sprintf("%s sets no approval.max_grant.duration, which a grant across tasks needs to end; grant for this task only", tool)
	}
	return ""
}

func (b *GrantBound) String() string {
	if b == nil {
		return "none"
	}
	s := strings.Join(amounts(b.Calls, b.Duration), ", ")
	if b.Principal {
		s += ", principal"
	}
	return s
}

// amounts names the calls and the time a grant covers, those that are set.
func amounts(calls int, d time.Duration) []string {
	var parts []string
	if calls > 0 {
		parts = append(parts, plural(calls, "call"))
	}
	if d > 0 {
		parts = append(parts, d.String())
	}
	return parts
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// GrantArg is one argument a grant is bound to: later calls must have the
// same value (canonical JSON; "" when the approved call had none).
type GrantArg struct {
	Path  string
	Value string `json:",omitempty"`
}

// Grant is a standing approval of later calls of one tool.
type Grant struct {
	// ID is "<task ID>~grant-<call ID>" (the approved call's).
	ID        string
	TaskID    string
	RequestID string
	Tool      string
	Principal string
	Scope     string
	Args      []GrantArg `json:",omitempty"`
	// ExactArgs says Args hold GrantArgValue's exact form; false: the
	// float64 form of LegacyGrantArgValue, as grants made before exact
	// numbers (workflows' changeExactNumbers) recorded them.
	ExactArgs bool `json:",omitempty"`
	GrantedBy []string
	GrantedAt time.Time
	// Group and Approvers are the request's: who may revoke the grant
	// (with the principal).
	Group     string   `json:",omitempty"`
	Approvers []string `json:",omitempty"`
	// Calls is how many calls the grant covers (0: any number until
	// ExpiresAt); Used how many it has allowed.
	Calls     int       `json:",omitempty"`
	Used      int       `json:",omitempty"`
	ExpiresAt time.Time `json:",omitempty"`
	RevokedAt time.Time `json:",omitempty"`
	RevokedBy string    `json:",omitempty"`
	Reason    string    `json:",omitempty"`
}

// grantMark separates a grant ID's workflow ID from the approved call.
const grantMark = "~grant-"

// GrantIDOf is the ID of the grant made with the approval of a call:
// "<task ID>~grant-<call ID>".
func GrantIDOf(taskID, callID string) string { return taskID + grantMark + callID }

// IsGrantID reports whether id has the shape of a grant ID (GrantIDOf,
// PrincipalGrantIDOf).
func IsGrantID(id string) bool { return strings.Contains(id, grantMark) }

// Left is how many calls the grant still covers (-1: not counted).
func (g Grant) Left() int {
	if g.Calls == 0 {
		return -1
	}
	return max(g.Calls-g.Used, 0)
}

// Active reports whether the grant still covers calls at now.
func (g Grant) Active(now time.Time) bool {
	return g.RevokedAt.IsZero() && g.Left() != 0 && (g.ExpiresAt.IsZero() || now.Before(g.ExpiresAt))
}

// State is "active", "used", "expired" or "revoked" at now.
func (g Grant) State(now time.Time) string {
	switch {
	case !g.RevokedAt.IsZero():
		return "revoked"
	case g.Left() == 0:
		return "used"
	case !g.ExpiresAt.IsZero() && !now.Before(g.ExpiresAt):
		return "expired"
	}
	return "active"
}

// Remaining says what is left of the grant ("1 of 2 calls left, until
// 05:00:00Z").
func (g Grant) Remaining() string {
	var parts []string
	if g.Calls > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d calls left", g.Left(), g.Calls))
	}
	if !g.ExpiresAt.IsZero() {
		parts = append(parts, "until "+g.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return strings.Join(parts, ", ")
}

// RevokeGrantRequest is the argument of UpdateRevokeGrant.
type RevokeGrantRequest struct {
	GrantID string
	By      string
	Reason  string `json:",omitempty"`
}

// GrantArgValue is the canonical JSON of args at a dot-separated path
// ("" when it is absent), for comparing a later call's with the approved
// call's: jsoncanon's form, numbers as written, so a grant bound to
// 9007199254740992 does not cover 9007199254740993. Only objects are
// walked: a path through a list compares the whole list.
func GrantArgValue(args json.RawMessage, path string) string {
	if len(args) == 0 || jsoncanon.CheckDuplicates(args) != nil {
		return ""
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return ""
	}
	v, ok := argAt(v, path)
	if !ok {
		return ""
	}
	b, err := jsoncanon.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

// LegacyGrantArgValue is GrantArgValue as grants made before exact numbers
// recorded their values (Grant.ExactArgs false): decoded into float64, so
// it cannot tell numbers apart past 2^53. Only those grants use it.
func LegacyGrantArgValue(args json.RawMessage, path string) string {
	var v any
	if len(args) == 0 || json.Unmarshal(args, &v) != nil {
		return ""
	}
	v, ok := argAt(v, path)
	if !ok {
		return ""
	}
	b, err := json.Marshal(v) // map keys sorted: canonical
	if err != nil {
		return ""
	}
	return string(b)
}

func argAt(v any, path string) (any, bool) {
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

// ArgValue is the value of args at path in the form g's Args hold.
func (g Grant) ArgValue(args json.RawMessage, path string) string {
	if g.ExactArgs {
		return GrantArgValue(args, path)
	}
	return LegacyGrantArgValue(args, path)
}

// ErrTypeGrantRefused is the error type with which the decide Update's
// validator refuses a grant (above approval.max_grant, on a denial, in a
// task that predates grants) and the revoke_grant Update's refuses a
// revocation.
const ErrTypeGrantRefused = "GrantRefused"

// ParseGrant reads the grant options every decision path offers: a count
// of calls ("" or "0": none) and a duration ("" : none; "30m", "1h"). The
// result is nil when neither is given. The workflow checks the tool's
// approval.max_grant.
func ParseGrant(calls, dur string, principal bool) (*GrantAsk, error) {
	var g GrantAsk
	if s := strings.TrimSpace(calls); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > 1000 {
			return nil, fmt.Errorf("grant calls %q: give a whole number of later calls the approval also covers, 1 to 1000", calls)
		}
		g.Calls = n
	}
	if s := strings.TrimSpace(dur); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("grant duration %q: give how long the approval also covers later calls, e.g. 30m or 1h", dur)
		}
		g.For = d
	}
	g.Principal = principal
	if g.Empty() {
		if principal {
			return nil, errors.New("a grant for the principal needs a number of calls or a duration too")
		}
		return nil, nil
	}
	return &g, nil
}

// Grants across a principal's tasks (GrantScopePrincipal) live in one
// PrincipalGrants workflow per principal, started by the first such grant
// and ended once none is active; tasks reach it through activities.
const (
	// PrincipalGrantsName is the workflow type.
	PrincipalGrantsName = "PrincipalGrants"
	// UpdateAddGrant (a Grant) records a grant; UpdateUseGrant (a
	// UseGrantRequest) counts a call against the first active grant that
	// covers it and answers it (a UseGrantResult). The workflow also takes
	// UpdateRevokeGrant.
	UpdateAddGrant = "add_grant"
	UpdateUseGrant = "use_grant"
	// QueryGrants returns the grants ([]Grant).
	QueryGrants = "grants"
	// Activities with which a task adds and uses principal grants.
	AddPrincipalGrantName = "AddPrincipalGrant"
	UsePrincipalGrantName = "UsePrincipalGrant"
)

// PrincipalGrantsID is the workflow ID of a principal's grants.
func PrincipalGrantsID(principal string) string { return "grants-" + principal }

// PrincipalGrantIDOf is the ID of a principal grant made with the approval
// of a call of a task: its workflow ID first, as a task grant's task ID,
// then the request ID of the approved call:
// "grants-<principal>~grant-<task ID>~<call ID>".
func PrincipalGrantIDOf(principal, taskID, callID string) string {
	return PrincipalGrantsID(principal) + grantMark + RequestID(taskID, callID)
}

// PrincipalGrantsInput starts (or continues) a principal's grants.
type PrincipalGrantsInput struct {
	Principal string
	Grants    []Grant `json:",omitempty"`
}

// UseGrantRequest asks whether a grant covers a call, and counts it.
type UseGrantRequest struct {
	Principal string
	TaskID    string
	CallID    string
	Tool      string
	Arguments json.RawMessage `json:",omitempty"`
}

// UseGrantResult is the grant that allowed the call (nil: none), as it is
// after counting the call.
type UseGrantResult struct {
	Grant *Grant `json:",omitempty"`
}

// Covers reports whether g covers a call of tool with args: the same tool
// and the grant's argument values.
func (g Grant) Covers(tool string, args json.RawMessage) bool {
	if g.Tool != tool {
		return false
	}
	for _, a := range g.Args {
		if g.ArgValue(args, a.Path) != a.Value {
			return false
		}
	}
	return true
}
