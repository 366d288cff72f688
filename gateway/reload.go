package gateway

import (
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/manifests"
)

// Live are the options that a reloaded configuration changes while the
// gateway runs (Reload). Each request reads them once. The others (the
// listener, Temporal, the session key, the catalog mode, page size) are
// fixed for the process.
type Live struct {
	Manifests       []*manifests.Manifest
	Policy          *policy.Policy
	Local           *identity.Principal
	ExposeUncovered bool
	// The defaults of new tasks; running tasks keep the limits they were
	// started with.
	MaxCalls       int
	DeadlineAfter  time.Duration
	IdleTimeout    time.Duration
	RollbackOnDeny bool
	RollbackNotify string
	// State is the size limit and schema of new tasks' task-scoped state.
	State *api.StateConfig
	// TaskRateLimits and Budget: every new task's rate limits and budget
	// (issue 16 §3).
	TaskRateLimits []api.RateLimit
	Budget         int
}

func liveOf(o Options) *Live {
	return &Live{Manifests: o.Manifests, Policy: o.Policy, Local: o.Local, ExposeUncovered: o.ExposeUncovered,
		MaxCalls: o.MaxCalls, DeadlineAfter: o.DeadlineAfter, IdleTimeout: o.IdleTimeout,
		RollbackOnDeny: o.RollbackOnDeny, RollbackNotify: o.RollbackNotify, State: o.State,
		TaskRateLimits: o.TaskRateLimits, Budget: o.Budget}
}

// Reload switches the gateway to a reloaded configuration and republishes
// the tool list: connected clients get notifications/tools/list_changed
// when tools appear, disappear or change. A call already running keeps the
// entry it started with; the next call sees the new one. The principals
// themselves reload through the Directory (identity.Directory.Replace).
func (g *Gateway) Reload(l Live) {
	g.reloaded.Store(&l)
	g.Refresh()
}

// cur is the configuration in force.
func (g *Gateway) cur() *Live { return g.reloaded.Load() }

// entry is the current entry of the tool e was published as (a reload may
// have replaced its declaration without changing its definition), else e.
func (g *Gateway) entry(e *toolEntry) *toolEntry {
	g.mu.Lock()
	defer g.mu.Unlock()
	if cur := g.tools[e.exposed]; cur != nil {
		return cur
	}
	return e
}
