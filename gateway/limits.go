package gateway

import (
	"math"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/metrics"
)

// The _meta keys of a call refused by a rate limit or budget (issue 16
// §3), beside the text that says the same in words.
const (
	// MetaRetryAfter is how many seconds until the limit admits the call
	// (a number, rounded up; absent for a budget, which never does).
	MetaRetryAfter = "airlock.dev/retry_after"
	// MetaLimit names the limit; MetaLimitCheck is rate_limit or budget.
	MetaLimit      = "airlock.dev/limit"
	MetaLimitCheck = "airlock.dev/limit_check"
)

// taskQuota is a new task's rate limits and budget: the configuration's
// for every task, then its principal's roles'.
func taskQuota(o *Live, pr *identity.Principal) *api.Quota {
	rates := append([]api.RateLimit(nil), o.TaskRateLimits...)
	budget := o.Budget
	if pr != nil {
		rates = append(rates, pr.RateLimits...)
		if pr.Budget > 0 {
			budget = pr.Budget
		}
	}
	return api.NewQuota(rates, budget)
}

// limitMeta puts a refusal's limit into the result's _meta.
func limitMeta(r *mcp.CallToolResult, hit *api.LimitHit) {
	if hit == nil {
		return
	}
	r.Meta[MetaLimit] = hit.Limit
	r.Meta[MetaLimitCheck] = hit.Check
	if hit.Check == api.CheckRateLimit {
		r.Meta[MetaRetryAfter] = math.Ceil(hit.RetryAfter.Seconds()*1000) / 1000
	}
}

// countRefusal counts a call refused by a limit.
func countRefusal(res api.CallResult) {
	if h := res.Limit; h != nil {
		metrics.LimitRefusals.WithLabelValues(h.Check, h.Limit).Inc()
	}
}
