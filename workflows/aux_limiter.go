package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
)

// The Limiter workflow: the authority of one shared rate-limit window. A
// task's side of rate limits and budgets (its own windows, TakeLimits,
// interval and gcraTake, which the limiter shares) is in limits.go.

// limiterLinger is how long a limiter whose window is full again waits for
// another call before it ends (a later call starts a new one, which
// starts full: nothing is lost).
const limiterLinger = time.Minute

// limiterContinueAfter is the number of takes after which a limiter
// continues as new, keeping its history short.
const limiterContinueAfter = 1000

// Limiter is the authority of one shared window (a principal's, a role's,
// per tool or not): every replica's tasks take their tokens from it
// through an Update, so the window holds however many gateways and
// workers there are. It ends when its window is full again and no call
// came for limiterLinger.
func Limiter(ctx workflow.Context, in api.LimiterInput) error {
	tat := in.TAT
	takes := 0
	err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateTake,
		func(ctx workflow.Context, r api.TakeRequest) (api.TakeResult, error) {
			takes++
			now := workflow.Now(ctx)
			if r.Refund {
				tat = tat.Add(-interval(r.Limit))
				return api.TakeResult{Allowed: true}, nil
			}
			next, retry, ok := gcraTake(r.Limit, tat, now)
			if ok {
				tat = next
			}
			return api.TakeResult{Allowed: ok, RetryAfter: retry}, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(r api.TakeRequest) error {
			if r.Limit.Calls < 1 || r.Limit.Window <= 0 {
				return fmt.Errorf("limiter %s: limit %q has %d calls per %s; both must be positive", in.Key, r.Limit.Name, r.Limit.Calls, r.Limit.Window)
			}
			return nil
		}})
	if err != nil {
		return err
	}
	for {
		seen := takes
		wait := max(tat.Sub(workflow.Now(ctx)), 0) + limiterLinger
		cond := func() bool {
			return takes >= limiterContinueAfter || workflow.GetInfo(ctx).GetContinueAsNewSuggested()
		}
		if _, err := workflow.AwaitWithTimeout(ctx, wait, cond); err != nil {
			return err
		}
		if cond() {
			if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
				return err
			}
			return workflow.NewContinueAsNewError(ctx, api.LimiterName, api.LimiterInput{Key: in.Key, TAT: tat})
		}
		if takes == seen && !workflow.Now(ctx).Before(tat) {
			return workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
		}
	}
}
