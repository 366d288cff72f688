package api

import (
	"encoding/json"
	"time"

	"github.com/airlock-run/airlock/manifests"
)

// ToolSpec is what a workflow needs to know of a tool's manifest to run it.
type ToolSpec struct {
	Timeout time.Duration
	// HeartbeatTimeout is the manifest's heartbeat_timeout or its default
	// (manifests.Tool.EffectiveHeartbeatTimeout). Zero (a spec from a
	// gateway older than the field) means the default for Timeout.
	HeartbeatTimeout time.Duration `json:",omitempty"`
	Retry            RetrySpec
	Idempotent       bool
	SideEffects      []string `json:",omitempty"`
	Risk             string   `json:",omitempty"`

	// Cost is what one call counts against the task's budget (the
	// manifest's cost; 0, when it gives none: 1).
	Cost int `json:",omitempty"`
	// MayAsk: the manifest allows sampling or elicitation during a call
	// (mrtr.go); such a call runs as an activity, whose heartbeats carry
	// the upstream's requests, never on the fast path.
	MayAsk bool `json:",omitempty"`

	// Information-flow labels (labels.go): the manifest's
	// data_access_level, and open_world (its results are untrusted
	// content). Empty in specs from before them: such a call raises no
	// read level and no untrusted label.
	DataLevel string `json:",omitempty"`
	OpenWorld bool   `json:",omitempty"`
}

// Route is where a call runs and how: the upstream server and tool an
// exposed name resolves to, and the spec of its declaration.
type Route struct {
	Server       string
	UpstreamTool string
	Spec         ToolSpec
}

// RetrySpec is a manifest retry policy.
type RetrySpec struct {
	MaxAttempts     int
	InitialInterval time.Duration
	MaxInterval     time.Duration
	Backoff         float64
	NonRetryable    []string `json:",omitempty"`
}

// SpecFor turns a manifest declaration into the workflow's view of the
// tool. Tools no manifest declares get the conservative defaults.
func SpecFor(decl *manifests.Tool) ToolSpec {
	if decl == nil {
		return ToolSpec{Timeout: time.Minute, HeartbeatTimeout: manifests.DefaultHeartbeatTimeout(time.Minute), Retry: RetrySpec{MaxAttempts: 3, InitialInterval: time.Second, MaxInterval: 30 * time.Second, Backoff: 2},
			Idempotent: false, SideEffects: []string{string(manifests.SideEffectWrite)}, Risk: string(manifests.RiskHigh),
			DataLevel: string(manifests.DataRestricted), OpenWorld: true}
	}
	r := decl.EffectiveRetry()
	s := ToolSpec{
		Timeout:          decl.EffectiveTimeout(),
		HeartbeatTimeout: decl.EffectiveHeartbeatTimeout(),
		Idempotent:       decl.Idempotent,
		Risk:             string(decl.Risk),
		Cost:             decl.Cost, // 0: the default, 1
		DataLevel:        string(decl.DataAccessLevel),
		OpenWorld:        decl.OpenWorld,
		Retry: RetrySpec{MaxAttempts: r.MaxAttempts, InitialInterval: r.InitialInterval.D(),
			MaxInterval: r.MaxInterval.D(), Backoff: r.Backoff, NonRetryable: r.NonRetryable},
	}
	s.MayAsk = decl.Sampling.Allows() || decl.Elicitation.Allows()
	for _, se := range decl.SideEffects {
		s.SideEffects = append(s.SideEffects, string(se))
	}
	return s
}

// ToolCall is a fully resolved tool call the worker computed: a capture, a
// compensation or a plan step.
type ToolCall struct {
	// Tool is the exposed name ("server__tool").
	Tool         string
	Server       string
	UpstreamTool string
	Arguments    json.RawMessage
	// ArgumentsRef, instead of Arguments, names large arguments kept in
	// the worker's blob store (internal/blob), out of the history.
	ArgumentsRef string `json:",omitempty"`
	Spec         ToolSpec
}
