package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
)

// Rate limits are token buckets kept as GCRA's theoretical arrival time
// (TAT): one time per window, whole nanoseconds, no floats, so that a
// replay computes the same answers. A window of Calls per Window admits a
// call every Window/Calls, and up to Burst at once.

// interval is the emission interval of l: how much one call moves its
// window's TAT.
func interval(l api.RateLimit) time.Duration {
	if l.Calls < 1 {
		return l.Window
	}
	return max(l.Window/time.Duration(l.Calls), 1)
}

// gcraTake takes one call from a window whose TAT is tat at now: the new
// TAT and true, or the unchanged tat, how long until the call would be
// admitted, and false.
func gcraTake(l api.RateLimit, tat, now time.Time) (time.Time, time.Duration, bool) {
	t := interval(l)
	tolerance := t * time.Duration(l.EffectiveBurst())
	if tat.Before(now) {
		tat = now
	}
	next := tat.Add(t)
	if d := next.Sub(now); d > tolerance {
		return tat, d - tolerance, false
	}
	return next, 0, true
}

// quotaOf is this call's limits, or nil when the task has none (or runs
// code from before changeLimits).
func (t *task) quotaOf(ctx workflow.Context) *api.Quota {
	q := t.in.Quota
	if q == nil || (len(q.Rates) == 0 && q.Budget <= 0) {
		return nil
	}
	if workflow.GetVersion(ctx, changeLimits, workflow.DefaultVersion, 1) < 1 {
		return nil
	}
	return q
}

// windowAt returns the index of the task's own window key, adding it.
func (t *task) windowAt(key string) int {
	for i, w := range t.quota.Windows {
		if w.Key == key {
			return i
		}
	}
	t.quota.Windows = append(t.quota.Windows, api.WindowState{Key: key})
	return len(t.quota.Windows) - 1
}

// takeQuota admits req under the task's rate limits and budget, or
// returns the call's refusal. Admitting takes the call's tokens and
// charges its cost; a refused call takes and charges nothing. The task's
// own windows and budget are decided here, from the task's state; the
// shared windows by their limiters (TakeLimits), after the task's own
// have been reserved, so that a refusal there gives them back.
func (t *task) takeQuota(ctx workflow.Context, req api.CallRequest) *api.CallResult {
	q := t.quotaOf(ctx)
	if q == nil {
		return nil
	}
	now := workflow.Now(ctx)
	// The request's spec: admission comes before the decision, and with
	// it the judged spec (changeJudgedRoute).
	cost := max(req.Spec.Cost, 1)
	if q.Budget > 0 && t.quota.Spent+cost > q.Budget {
		return t.refusal(req, api.LimitHit{Check: api.CheckBudget, Limit: "budget"},
			fmt.Sprintf("%s refused: task %s has spent %d of its budget of %d cost units, and one call of %s costs %d; nothing ran. Finish this task and start a new one, or ask an operator to raise the budget (task.budget, or the role's budget)",
				req.Tool, t.in.TaskID, t.quota.Spent, q.Budget, req.Tool, cost))
	}

	mine, shared, stop := t.ownWindows(q, req, now)
	if stop != nil {
		return stop
	}
	for _, m := range mine {
		t.quota.Windows[m.i].TAT = m.tat
	}
	t.quota.Spent += cost
	giveBack := func() {
		// Other calls may have moved these windows meanwhile: give back
		// one interval rather than restoring the old time.
		for _, m := range mine {
			l := t.windowLimit(q, t.quota.Windows[m.i].Key, req.Tool)
			t.quota.Windows[m.i].TAT = t.quota.Windows[m.i].TAT.Add(-interval(l))
		}
		t.quota.Spent -= cost
	}
	if len(shared) > 0 {
		if stop := t.takeShared(ctx, req, shared, giveBack); stop != nil {
			return stop
		}
	}
	if t.charged == nil {
		t.charged = map[string]int{}
	}
	t.charged[req.CallID] = cost
	return nil
}

// takenWindow is a window of the task's own that admits a call: its index
// in the task's windows and its theoretical arrival time once taken.
type takenWindow struct {
	i   int
	tat time.Time
}

// ownWindows checks req against the task's own windows at now: all admit
// the call, or none is taken (stop is the refusal by the one that makes it
// wait longest). It takes nothing yet; it returns what to take, and the
// shared limits that apply, for their limiters.
func (t *task) ownWindows(q *api.Quota, req api.CallRequest, now time.Time) (mine []takenWindow, shared []api.RateLimit, stop *api.CallResult) {
	var worst *api.RateLimit
	var wait time.Duration
	for _, l := range q.Rates {
		if !l.Applies(req.Tool) {
			continue
		}
		if l.Shared() {
			shared = append(shared, l)
			continue
		}
		i := t.windowAt(l.WindowKey(req.Tool))
		next, retry, ok := gcraTake(l, t.quota.Windows[i].TAT, now)
		if !ok {
			if worst == nil || retry > wait {
				worst, wait = &l, retry
			}
			continue
		}
		mine = append(mine, takenWindow{i, next})
	}
	if worst != nil {
		return nil, nil, t.rateRefusal(req, *worst, wait)
	}
	return mine, shared, nil
}

// takeShared asks the shared limits' limiters for req (TakeLimits, a local
// activity); on a refusal, or when they cannot be asked, it calls giveBack
// (the task's own windows and budget) and returns the refusal.
func (t *task) takeShared(ctx workflow.Context, req api.CallRequest, shared []api.RateLimit, giveBack func()) *api.CallResult {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3, InitialInterval: 200 * time.Millisecond},
	})
	var out api.TakeLimitsOutput
	err := workflow.ExecuteLocalActivity(lctx, api.TakeLimitsName, api.TakeLimitsInput{
		TaskID: t.in.TaskID, CallID: req.CallID, Tool: req.Tool, Limits: shared,
	}).Get(ctx, &out)
	if err != nil {
		// Fail closed: a limit that cannot be checked refuses.
		giveBack()
		l := shared[0]
		return t.refusal(req, api.LimitHit{Check: api.CheckRateLimit, Limit: l.Name, Window: l.Window, RetryAfter: time.Second},
			fmt.Sprintf("%s refused: rate limit %s could not be checked (%v); nothing ran. Retry in a moment", req.Tool, l.Name, err))
	}
	if h := out.Hit; h != nil {
		giveBack()
		for _, l := range shared {
			if l.Name == h.Limit {
				return t.rateRefusal(req, l, h.RetryAfter)
			}
		}
		return t.refusal(req, *h, fmt.Sprintf("%s refused by rate limit %s; retry after %s", req.Tool, h.Limit, h.RetryAfter))
	}
	return nil
}

// windowLimit finds the limit whose window key is key.
func (t *task) windowLimit(q *api.Quota, key, tool string) api.RateLimit {
	for _, l := range q.Rates {
		if !l.Shared() && l.WindowKey(tool) == key {
			return l
		}
	}
	return api.RateLimit{}
}

// settleQuota ends a call's charge: a call that never ran (denied by
// policy or approvers, its upstream unavailable) gets its cost back.
func (t *task) settleQuota(callID string, o api.Outcome) {
	cost, ok := t.charged[callID]
	if !ok {
		return
	}
	delete(t.charged, callID)
	if o == api.OutcomeDenied || o == api.OutcomeUnavailable {
		t.quota.Spent -= cost
	}
}

// rateRefusal is the answer to a call over rate limit l.
func (t *task) rateRefusal(req api.CallRequest, l api.RateLimit, retry time.Duration) *api.CallResult {
	retry = retry.Round(time.Millisecond)
	if retry <= 0 {
		retry = time.Millisecond
	}
	whose := "of task " + t.in.TaskID
	switch l.Scope {
	case api.ScopePrincipal:
		whose = fmt.Sprintf("of principal %s, shared by all its tasks", l.Subject)
	case api.ScopeRole:
		whose = fmt.Sprintf("of role %s, shared by every principal with it", l.Subject)
	}
	if l.Tool != "" {
		whose += ", for " + req.Tool
	}
	return t.refusal(req, api.LimitHit{Check: api.CheckRateLimit, Limit: l.Name, Window: l.Window, RetryAfter: retry},
		fmt.Sprintf("%s refused: rate limit %s (%d calls per %s, at most %d at once, %s) is used up; nothing ran. Call again after %s",
			req.Tool, l.Name, l.Calls, l.Window, l.EffectiveBurst(), whose, retry))
}

// refusal records the decision that refused a call over a limit.
func (t *task) refusal(req api.CallRequest, hit api.LimitHit, reason string) *api.CallResult {
	return &api.CallResult{Outcome: api.OutcomeLimit, Reason: reason, Limit: &hit,
		Decision: &api.Decision{Effect: api.Deny, Check: hit.Check, Rule: hit.Limit, Reason: reason}}
}

// metricLimitRefusals is the counter of calls refused by a limit. The
// gateway counts the calls it answers; a plan's steps reach no gateway,
// so the Plan workflow counts their refusals (countStepRefusal) through
// the SDK's metrics handler, which counts nothing during a replay.
const metricLimitRefusals = "airlock_limit_refusals_total"

// countStepRefusal counts a plan step refused by a rate limit or budget.
// It records nothing in the history, so it needs no version.
func countStepRefusal(ctx workflow.Context, res api.CallResult) {
	if h := res.Limit; h != nil {
		workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"check": h.Check, "limit": h.Limit}).
			Counter(metricLimitRefusals).Inc(1)
	}
}

// budget is the task's budget of cost units (0: none).
func (t *task) budget() int {
	if q := t.in.Quota; q != nil {
		return q.Budget
	}
	return 0
}

// carriedQuota is the quota state for the next run (nil: nothing spent).
func (t *task) carriedQuota() *api.QuotaState {
	if t.quota.Spent == 0 && len(t.quota.Windows) == 0 {
		return nil
	}
	q := api.QuotaState{Spent: t.quota.Spent, Windows: append([]api.WindowState(nil), t.quota.Windows...)}
	return &q
}
