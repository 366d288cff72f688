package gateway

import (
	"encoding/json"
	"fmt"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/guard"
	"github.com/airlock-run/airlock/internal/metrics"
	"github.com/airlock-run/airlock/manifests"
)

// guardArguments inspects a call's arguments (canonical, as
// callArguments made them) before the call is sent to its task, by the
// tool's guard.arguments (issue 30 §1). A finding under redact or block
// has its value replaced by a marker here, so the task's history (the
// Update's input) never holds it: the call runs with exactly these
// arguments, and the worker refuses a blocked one. The findings (rule,
// path, action; never the value) travel in the call for the policy. A
// finding under require_approval or annotate leaves its value: the
// worker finds it again in what it runs, and decides.
func (g *Gateway) guardArguments(e *toolEntry, args json.RawMessage) (json.RawMessage, []api.Finding, error) {
	m := g.manifestOf(e.server)
	p := guard.Policy{
		Secrets:      guard.Action(m.SecretsInArguments(e.decl)),
		PersonalData: guard.Action(m.PersonalDataInArguments(e.decl)),
	}
	out, found, err := guard.InspectArguments(args, p)
	if err != nil {
		return nil, nil, fmt.Errorf("invalid arguments to %s: %w; send a JSON object. Nothing ran", e.exposed, err)
	}
	var fs []api.Finding
	for _, f := range found {
		if f.Action == string(guard.Redact) || f.Action == string(guard.Block) {
			fs = append(fs, api.Finding{Rule: f.Rule, Path: f.Path, Action: f.Action, Where: api.FindingsInArguments})
			metrics.GuardFindings.WithLabelValues(f.Rule, f.Action).Inc()
		}
	}
	return out, fs, nil
}

// manifestOf is the live manifest of server, nil when none declares it
// (its tools get the defaults: off).
func (g *Gateway) manifestOf(server string) *manifests.Manifest {
	for _, m := range g.cur().Manifests {
		if m.Server.Name == server {
			return m
		}
	}
	return nil
}
