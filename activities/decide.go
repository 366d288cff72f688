package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/metrics"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/internal/upstream"
	"github.com/airlock-run/airlock/manifests"
)

// ToolCatalog resolves an exposed tool name to what the policy needs to
// know about it, on the worker.
type ToolCatalog interface {
	Tool(exposed string) (policy.Tool, bool)
}

// blocked reports why a tool must not run because its upstream definition
// changed since it was pinned ("" when it may run). The gateway hides such
// tools; this is the worker's own check, so a stale gateway cannot slip one
// through, and the refusal is recorded with the call.
func (a *Activities) blocked(cat ToolCatalog, t policy.Tool) string {
	c, ok := cat.(*Catalog)
	if a.Pins == nil || !ok || c.pool == nil || (t.Decl != nil && t.Decl.WASM != nil) {
		return "" // a wasm tool is pinned by its module's sha256 instead
	}
	if err := a.Pins.Verify(t.Server, t.Upstream, c.pool.Status(t.Server).Tools); err != nil {
		return "denied: " + err.Error()
	}
	return ""
}

// DefaultApprovalTimeout is how long a request waits when the manifest sets
// no approval timeout.
const DefaultApprovalTimeout = time.Hour

// Decide judges a call against the worker's policy. The worker is the
// authority: it resolves the tool from its own manifests and the upstream's
// current schema, not from anything the caller sent.
func (a *Activities) Decide(ctx context.Context, in api.DecideInput) (api.DecideOutput, error) {
	j := a.judge() // one version for the whole decision
	if j.Policy == nil || j.Catalog == nil {
		return api.DecideOutput{}, temporal.NewNonRetryableApplicationError("this worker has no policy loaded; it cannot judge calls", api.ErrTypeInternal, nil)
	}
	tool, ok := j.Catalog.Tool(in.Tool)
	var d api.Verdict
	findings, mask := in.Findings, []string(nil)
	if !ok {
		d = api.Verdict{Effect: api.Deny, Check: api.CheckError, Version: j.Policy.Version(),
			Reason: fmt.Sprintf("denied: no manifest on the worker covers %s; the tool may have been removed from the configuration", in.Tool)}
	} else if reason := a.blocked(j.Catalog, tool); reason != "" {
		d = api.Verdict{Effect: api.Deny, Check: api.CheckPin, Version: j.Policy.Version(), Reason: reason}
	} else {
		findings, mask = a.guardArguments(j.Catalog, in) // guard.go
		d = j.Policy.Decide(policy.Input{
			Principal: in.Principal,
			Tool:      tool,
			Args:      in.Arguments,
			Task:      policy.Task{ID: in.TaskID, Calls: in.Calls, Elapsed: in.Elapsed, AllowTools: in.AllowTools, Labels: in.Labels},
			Findings:  findings,
		})
	}
	var external *api.ExternalDecision
	if ok {
		external = a.consultExternal(ctx, j.External, in, tool, &d) // external.go
	}
	var locks []api.LockKey
	var lockTimeout time.Duration
	if ok {
		locks, lockTimeout = a.decideLocks(j.Catalog, in, tool, &d) // locks.go
	}
	metrics.Decisions.WithLabelValues(string(d.Effect), d.Check, d.Rule).Inc()
	a.Audit.Decision(auditstream.Decision{Task: in.TaskID, Call: in.CallID, Tool: in.Tool, Principal: in.Principal.Name,
		Effect: string(d.Effect), Check: d.Check, Rule: d.Rule, PolicyVersion: d.Version, Group: d.Group, Args: in.Arguments, Findings: findingLines(findings),
		External: auditExternal(external)})
	out := api.DecideOutput{Verdict: d, CallID: in.CallID, Locks: locks, LockTimeout: lockTimeout, Findings: findings, External: external}
	if d.Effect == api.RequireApproval {
		out.Approval = approvalSpec(d, tool, j.Groups)
		out.Approval.Redact = append(slices.Clip(out.Approval.Redact), mask...) // the guard's findings, masked for the approver
	}
	if ok && d.Effect != api.Deny {
		// What was judged is what runs (the workflow's changeJudgedRoute):
		// this catalog's route and declaration, not the gateway's copy. A
		// tool this catalog does not know is denied above and gets none.
		out.Route = &api.Route{Server: tool.Server, UpstreamTool: tool.Upstream, Spec: api.SpecFor(tool.Decl)}
	}
	if d.Effect != api.Deny && tool.Decl != nil {
		out.Compensable = tool.Decl.Compensation != nil
		if c, ok := j.Catalog.(*Catalog); ok {
			capture, err := c.capture(in.TaskID, in.CallID, in.Tool, in.Arguments)
			if err != nil {
				out.CaptureError = err.Error()
			}
			out.Capture = capture
		}
	}
	return out, nil
}

func approvalSpec(d api.Verdict, tool policy.Tool, groups map[string][]string) *api.ApprovalSpec {
	spec := &api.ApprovalSpec{Approvers: groups[d.Group], Timeout: DefaultApprovalTimeout, OnTimeout: "deny",
		DataLevel: string(manifests.DataRestricted), Risk: string(manifests.RiskHigh), SideEffects: []string{string(manifests.SideEffectWrite)}}
	if decl := tool.Decl; decl != nil {
		spec.Redact = decl.Redact
		spec.DataLevel, spec.Risk = string(decl.DataAccessLevel), string(decl.Risk)
		spec.SideEffects = nil
		for _, se := range decl.SideEffects {
			spec.SideEffects = append(spec.SideEffects, string(se))
		}
		spec.Timeout = approvalTimeout(decl)
		if ap := decl.Approval; ap != nil {
			spec.EscalateAfter = ap.EscalateAfter.D()
			spec.EscalateTo = ap.EscalateTo
			spec.OnTimeout = ap.EffectiveOnTimeout()
			spec.NoEdits = !ap.EditsAllowed() // approve with edits
			if g := ap.MaxGrant; g != nil {   // approval grants
				spec.MaxGrant = &api.GrantBound{Calls: g.Calls, Duration: g.Duration.D(), Principal: g.Principal}
				spec.GrantArgs = ap.GrantArgs
			}
		}
	}
	if spec.EscalateTo != "" {
		spec.EscalateApprovers = groups[spec.EscalateTo]
	}
	return spec
}

// approvalTimeout is how long a request for the tool waits: the manifest's
// approval.timeout, else DefaultApprovalTimeout.
func approvalTimeout(decl *manifests.Tool) time.Duration {
	if decl != nil && decl.Approval != nil && decl.Approval.Timeout > 0 {
		return decl.Approval.Timeout.D()
	}
	return DefaultApprovalTimeout
}

// Catalog is the worker's ToolCatalog: manifest declarations (with path
// roots expanded) and the input schemas the upstreams serve now.
type Catalog struct {
	tools    map[string]catalogEntry
	pool     *upstream.Pool
	uncover  bool
	manifest map[string]*manifests.Manifest // by server, for uncovered tools
	names    *manifests.Names               // exposed names <-> (server, tool)
	exprs    compiled
}

type catalogEntry struct {
	server, upstream string
	decl             *manifests.Tool
	roots            []string
}

var _ ToolCatalog = (*Catalog)(nil)

// NewCatalog indexes manifests whose servers were expanded into servers
// (same order). exposeUncovered admits tools no manifest declares, judged
// as the policy judges uncovered tools.
func NewCatalog(ms []*manifests.Manifest, servers []manifests.Server, pool *upstream.Pool, exposeUncovered bool) *Catalog {
	c := &Catalog{tools: map[string]catalogEntry{}, pool: pool, uncover: exposeUncovered, manifest: map[string]*manifests.Manifest{}, names: manifests.NewNames(ms)}
	for i, m := range ms {
		roots := m.Server.PathRoots
		if i < len(servers) {
			roots = servers[i].PathRoots
		}
		c.manifest[m.Server.Name] = m
		names := make([]string, 0, len(m.Tools))
		for n := range m.Tools {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			c.tools[m.Exposed(n)] = catalogEntry{server: m.Server.Name, upstream: n, decl: m.Tools[n], roots: roots}
		}
	}
	return c
}

// Tool implements ToolCatalog.
func (c *Catalog) Tool(exposed string) (policy.Tool, bool) {
	e, ok := c.tools[exposed]
	if !ok {
		if !c.uncover {
			return policy.Tool{}, false
		}
		server, tool, found := c.names.Resolve(exposed)
		if !found || c.manifest[server] == nil {
			return policy.Tool{}, false
		}
		e = catalogEntry{server: server, upstream: tool}
	}
	t := policy.Tool{Name: exposed, Server: e.server, Upstream: e.upstream, Decl: e.decl, PathRoots: e.roots}
	if c.pool != nil {
		for _, ut := range c.pool.Status(e.server).Tools {
			if ut.Name == e.upstream && ut.InputSchema != nil {
				if b, err := json.Marshal(ut.InputSchema); err == nil {
					t.InputSchema = b
				}
				break
			}
		}
	}
	return t, true
}

// exposed is the name the gateway exposes server's tool under.
func (c *Catalog) exposed(server, tool string) string { return c.names.Expose(server, tool) }
