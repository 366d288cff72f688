package api

import (
	"path"
	"time"
)

// Rate limits and budgets (issue 16 §3). A task carries the limits that
// apply to it (Quota, from the configuration's task and roles blocks);
// windows scoped to the task and its budget live in the task's own state,
// windows shared by several tasks (a principal's, a role's) in a limiter
// workflow per window (LimiterName), which the task asks through the
// TakeLimits local activity.

// Scopes of a rate limit: whose calls share one window.
const (
	// ScopeTask: each task has its own window.
	ScopeTask = "task"
	// ScopePrincipal: every task of one principal shares the window.
	ScopePrincipal = "principal"
	// ScopeRole: every task of every principal with the role shares it.
	ScopeRole = "role"
)

// Checks that refuse a call over a limit, recorded as Decision.Check
// (beside policy's checks).
const (
	CheckRateLimit = "rate_limit"
	CheckBudget    = "budget"
)

// RateLimit is one token bucket: Calls calls per Window, up to Burst at
// once (default Calls).
type RateLimit struct {
	// Name identifies the limit in refusals, metrics and its window's
	// key: the configured name, else its place in the configuration
	// ("roles.dev.rate_limits[0]").
	Name  string
	Scope string
	// Subject is whose window it is for a shared scope: the principal's
	// or the role's name ("" for ScopeTask).
	Subject string `json:",omitempty"`
	// Tool is a glob over exposed tool names: only calls of matching
	// tools count, and each matching tool has its own window. Empty: every
	// call counts, in one window.
	Tool   string `json:",omitempty"`
	Calls  int
	Window time.Duration
	Burst  int `json:",omitempty"`
}

// Applies reports whether a call of tool counts against the limit.
func (l RateLimit) Applies(tool string) bool {
	if l.Tool == "" {
		return true
	}
	ok, _ := path.Match(l.Tool, tool)
	return ok
}

// WindowKey names the window a call of tool takes from: unique per scope,
// subject, limit and (for a per-tool limit) tool.
func (l RateLimit) WindowKey(tool string) string {
	k := l.Scope + ":" + l.Subject + ":" + l.Name
	if l.Tool != "" {
		k += ":" + tool
	}
	return k
}

// Shared reports whether the window spans tasks.
func (l RateLimit) Shared() bool { return l.Scope != ScopeTask }

// EffectiveBurst is Burst, default Calls.
func (l RateLimit) EffectiveBurst() int {
	if l.Burst > 0 {
		return l.Burst
	}
	return l.Calls
}

// Quota is what limits a task's calls besides Limits.
type Quota struct {
	Rates []RateLimit `json:",omitempty"`
	// Budget is how many cost units (ToolSpec.Cost) the task may spend;
	// 0: no budget.
	Budget int `json:",omitempty"`
}

// QuotaState is a task's spending and its own windows, carried across
// continue-as-new.
type QuotaState struct {
	Spent   int           `json:",omitempty"`
	Windows []WindowState `json:",omitempty"`
}

// WindowState is one window's theoretical arrival time (GCRA): the bucket
// is full again at TAT.
type WindowState struct {
	Key string
	TAT time.Time
}

// LimitHit says which limit refused a call (CallResult.Limit).
type LimitHit struct {
	// Check is CheckRateLimit or CheckBudget.
	Check string
	Limit string
	// Window and RetryAfter are a rate limit's window and how long until
	// it admits the call (zero for a budget: it never does).
	Window     time.Duration `json:",omitempty"`
	RetryAfter time.Duration `json:",omitempty"`
}

// The limiter workflow: one per shared window, its ID LimiterID(key).
const (
	LimiterName = "Limiter"
	// UpdateTake (a TakeRequest) takes one call's token from the window,
	// or gives one back.
	UpdateTake = "take"
	// TakeLimitsName is the local activity through which a task takes its
	// shared windows' tokens (TakeLimitsInput → TakeLimitsOutput).
	TakeLimitsName = "TakeLimits"
	// LimiterPrefix starts every limiter's workflow ID.
	LimiterPrefix = "airlock-limit-"
)

// LimiterID is the workflow ID of the limiter of a window.
func LimiterID(key string) string { return LimiterPrefix + key }

// LimiterInput starts (or continues) a limiter.
type LimiterInput struct {
	Key string
	TAT time.Time `json:",omitempty"`
}

// TakeRequest is one UpdateTake.
type TakeRequest struct {
	Limit RateLimit
	// Refund gives back a token taken for a call that another limit then
	// refused.
	Refund bool `json:",omitempty"`
}

// TakeResult answers a TakeRequest.
type TakeResult struct {
	Allowed    bool
	RetryAfter time.Duration `json:",omitempty"`
}

// TakeLimitsInput asks for one call's tokens from its shared windows.
type TakeLimitsInput struct {
	TaskID string
	CallID string
	Tool   string
	Limits []RateLimit
}

// TakeLimitsOutput is nil Hit when every window admitted the call (its
// tokens taken), else the refusing limit (no token taken from any).
type TakeLimitsOutput struct {
	Hit *LimitHit `json:",omitempty"`
}

// NewQuota is the Quota of a task with these rate limits and budget, nil
// when there are neither (the task then never asks: see changeLimits).
func NewQuota(rates []RateLimit, budget int) *Quota {
	if len(rates) == 0 && budget <= 0 {
		return nil
	}
	return &Quota{Rates: append([]RateLimit(nil), rates...), Budget: max(budget, 0)}
}
