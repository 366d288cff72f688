package manifests

import (
	"slices"
	"time"
)

// Defaults for fields a manifest may omit.
const (
	DefaultToolTimeout    = 60 * time.Second
	DefaultConnectTimeout = 30 * time.Second
)

// defaultRetry is what EffectiveRetry starts from.
var defaultRetry = Retry{
	MaxAttempts:     3,
	InitialInterval: Duration(time.Second),
	Backoff:         2,
	MaxInterval:     Duration(30 * time.Second),
}

// EffectiveTimeout is the timeout of one attempt: the declared one, or 60s.
func (t *Tool) EffectiveTimeout() time.Duration {
	if t == nil || t.Timeout <= 0 {
		return DefaultToolTimeout
	}
	return t.Timeout.D()
}

// Heartbeat timeouts. A worker sends a running call's heartbeats at most
// once per 0.8 × the heartbeat timeout (the Temporal SDK batches them), so
// a heartbeat may be late by 0.2 × the timeout before Temporal gives the
// call up although its worker is alive: the floor of the default keeps
// that margin at a second; a manifest may go down to MinHeartbeatTimeout.
const (
	MinHeartbeatTimeout        = time.Second
	DefaultHeartbeatTimeoutMin = 5 * time.Second
	DefaultHeartbeatTimeoutMax = 10 * time.Second
)

// DefaultHeartbeatTimeout is the heartbeat timeout of a tool with the
// given timeout that declares none: a third of the timeout, at least 5s
// and at most 10s. Short tools notice a dead worker sooner; long ones keep
// the 10s that costs one heartbeat every 8s per running call.
func DefaultHeartbeatTimeout(timeout time.Duration) time.Duration {
	return min(DefaultHeartbeatTimeoutMax, max(DefaultHeartbeatTimeoutMin, timeout/3))
}

// EffectiveHeartbeatTimeout is the declared heartbeat timeout, or
// DefaultHeartbeatTimeout of the effective timeout.
func (t *Tool) EffectiveHeartbeatTimeout() time.Duration {
	if t != nil && t.HeartbeatTimeout > 0 {
		return t.HeartbeatTimeout.D()
	}
	return DefaultHeartbeatTimeout(t.EffectiveTimeout())
}

// EffectiveRetry is the declared retry policy with every zero field set to
// its default: 3 attempts, 1s initial interval, backoff 2, 30s max interval.
// When only initial_interval is set and it exceeds the default cap, the cap
// is raised to it, because Temporal rejects a maximum below the initial
// interval.
func (t *Tool) EffectiveRetry() Retry {
	r := defaultRetry
	if t == nil || t.Retry == nil {
		return r
	}
	d := t.Retry
	if d.MaxAttempts > 0 {
		r.MaxAttempts = d.MaxAttempts
	}
	if d.InitialInterval > 0 {
		r.InitialInterval = d.InitialInterval
	}
	if d.Backoff >= 1 {
		r.Backoff = d.Backoff
	}
	if d.MaxInterval > 0 {
		r.MaxInterval = d.MaxInterval
	}
	if r.MaxInterval < r.InitialInterval {
		r.MaxInterval = r.InitialInterval
	}
	r.NonRetryable = slices.Clone(d.NonRetryable)
	return r
}

// EffectiveConnectTimeout bounds one connection attempt: the declared
// timeout, or 30s.
func (s Server) EffectiveConnectTimeout() time.Duration {
	if s.ConnectTimeout <= 0 {
		return DefaultConnectTimeout
	}
	return s.ConnectTimeout.D()
}

// EffectiveQuorum is the number of approvals needed: the declared quorum,
// or 1.
func (a *Approval) EffectiveQuorum() int {
	if a == nil || a.Quorum < 1 {
		return 1
	}
	return a.Quorum
}

// EffectiveOnTimeout is what an approval timeout means: "approve" only when
// declared so, otherwise "deny" (fail closed).
func (a *Approval) EffectiveOnTimeout() string {
	if a != nil && a.OnTimeout == "approve" {
		return "approve"
	}
	return "deny"
}

// MaxToolCost bounds a tool's cost (one call's share of a task budget).
const MaxToolCost = 1_000_000

// EffectiveCost is what one call of the tool counts against its task's
// budget: its cost, default 1.
func (t *Tool) EffectiveCost() int {
	if t.Cost > 0 {
		return t.Cost
	}
	return 1
}
