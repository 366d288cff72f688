package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/expr"
	"github.com/airlock-run/airlock/manifests"
)

// PlanCompensation computes a compensation on the worker, which holds the
// manifests: the workflow records the concrete call it returns.
func (a *Activities) PlanCompensation(ctx context.Context, in api.CompensationInput) (api.CompensationOutput, error) {
	if in.BeforeRef != "" {
		b, err := a.blob(ctx, in.BeforeRef)
		if err != nil {
			return api.CompensationOutput{CallID: in.CallID, Error: "the captured pre-image cannot be read: " + err.Error()}, nil
		}
		in.Before = b
	}
	out, err := a.planCompensation(ctx, in)
	out.CallID = in.CallID
	// Large compensations (a restored file's content) stay out of the
	// history and of what continue-as-new carries.
	if u := out.Compensation; u != nil && a.Blobs != nil && len(u.Arguments) > a.blobThreshold() {
		ref, perr := a.Blobs.Put(ctx, u.Arguments)
		if perr != nil {
			return api.CompensationOutput{CallID: in.CallID, Error: "the compensation could not be stored: " + perr.Error()}, nil
		}
		u.Arguments, u.ArgumentsRef = nil, ref
	}
	return out, err
}

func (a *Activities) planCompensation(_ context.Context, in api.CompensationInput) (api.CompensationOutput, error) {
	c, ok := a.judge().Catalog.(*Catalog)
	if !ok || c == nil {
		return api.CompensationOutput{}, temporal.NewNonRetryableApplicationError("this worker has no manifests loaded; it cannot compute compensations", api.ErrTypeInternal, nil)
	}
	e, ok := c.tools[in.Tool]
	if !ok || e.decl == nil || e.decl.Compensation == nil {
		return api.CompensationOutput{Error: fmt.Sprintf("no manifest on this worker declares a compensation for %s", in.Tool)}, nil
	}
	vars := map[string]any{"call": callVars(in.TaskID, in.CallID, in.Tool), "roots": rootVars(e.roots)}
	var err error
	if vars["args"], err = expr.JSONValue(in.Arguments); err != nil {
		return api.CompensationOutput{Error: "the call's arguments are not JSON: " + err.Error()}, nil
	}
	vars["result"] = expr.ResultValue(in.Result)
	vars["before"] = expr.ResultValue(in.Before)
	call, skipped, err := c.evalCall(e, "compensation", e.decl.Compensation, expr.Compensation, vars)
	switch {
	case err != nil:
		return api.CompensationOutput{Error: err.Error()}, nil
	case call == nil:
		return api.CompensationOutput{Skipped: skipped}, nil
	}
	return api.CompensationOutput{Compensation: call}, nil
}

// capture computes the capture call of a tool before it runs (nil when the
// tool declares none).
func (c *Catalog) capture(taskID, callID, tool string, args json.RawMessage) (*api.ToolCall, error) {
	e, ok := c.tools[tool]
	if !ok || e.decl == nil || e.decl.Capture == nil {
		return nil, nil
	}
	a, err := expr.JSONValue(args)
	if err != nil {
		return nil, fmt.Errorf("the arguments are not JSON: %w", err)
	}
	vars := map[string]any{"args": a, "call": callVars(taskID, callID, tool), "roots": rootVars(e.roots)}
	call, _, err := c.evalCall(e, "capture", e.decl.Capture, expr.Capture, vars)
	return call, err
}

func callVars(taskID, callID, tool string) map[string]any {
	return map[string]any{"id": callID, "task": taskID, "tool": tool, "slug": expr.Slug(taskID, callID)}
}

func rootVars(roots []string) []any {
	out := make([]any, len(roots))
	for i, r := range roots {
		out[i] = r
	}
	return out
}

// evalCall follows a call's when/else chain and evaluates the arguments of
// the branch taken. It returns nil and why when no branch applies.
func (c *Catalog) evalCall(e catalogEntry, field string, call *manifests.Call, kind expr.Kind, vars map[string]any) (*api.ToolCall, string, error) {
	exposed := c.exposed(e.server, e.upstream)
	for call != nil {
		if call.When != "" {
			ok, err := c.program(kind, call.When).evalBool(vars)
			if err != nil {
				return nil, "", fmt.Errorf("%s: tools.%s.%s.when: %w", e.server, e.upstream, field, err)
			}
			if !ok {
				if call.Else == nil {
					return nil, fmt.Sprintf("%s.when (%s) is false: nothing to undo", field, call.When), nil
				}
				call, field = call.Else, field+".else"
				continue
			}
		}
		args := map[string]any{}
		for name, src := range call.Args {
			v, err := c.program(kind, src).eval(vars)
			if err != nil {
				return nil, "", fmt.Errorf("%s: tools.%s.%s.args.%s: %w", e.server, e.upstream, field, name, err)
			}
			args[name] = v
		}
		raw, err := json.Marshal(args)
		if err != nil {
			return nil, "", fmt.Errorf("%s: tools.%s.%s.args: %w", e.server, e.upstream, field, err)
		}
		target := c.exposed(e.server, call.Tool)
		te, ok := c.tools[target]
		if !ok {
			return nil, "", fmt.Errorf("%s: tools.%s.%s.tool: %s is not declared on this worker", e.server, e.upstream, field, target)
		}
		return &api.ToolCall{Tool: target, Server: te.server, UpstreamTool: te.upstream, Arguments: raw, Spec: api.SpecFor(te.decl)}, "", nil
	}
	return nil, "no " + field + " declared for " + exposed, nil
}

// compiled caches compiled expressions by kind and source; manifests are
// validated at load, so a compile error here is only reported, never
// expected.
type compiled struct {
	mu    sync.Mutex
	progs map[string]*program
}

type program struct {
	p   *expr.Program
	err error
}

func (p *program) eval(vars map[string]any) (any, error) {
	if p.err != nil {
		return nil, p.err
	}
	return p.p.Eval(vars)
}

func (p *program) evalBool(vars map[string]any) (bool, error) {
	if p.err != nil {
		return false, p.err
	}
	return p.p.EvalBool(vars)
}

func (c *Catalog) program(kind expr.Kind, src string) *program {
	c.exprs.mu.Lock()
	defer c.exprs.mu.Unlock()
	key := fmt.Sprintf("%d\x00%s", kind, src)
	if p, ok := c.exprs.progs[key]; ok {
		return p
	}
	if c.exprs.progs == nil {
		c.exprs.progs = map[string]*program{}
	}
	p := &program{}
	p.p, p.err = expr.Compile(kind, src)
	c.exprs.progs[key] = p
	return p
}
