package workflows

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/policy"
)

// maxStateKeyBytes bounds one key of the state document.
const maxStateKeyBytes = 256

// Decision checks of state calls (api.Decision.Check).
const (
	checkState       = "task_state"
	checkStateArgs   = "state_args"
	checkStateSize   = "state_size"
	checkStateSchema = "state_schema"
)

// taskState is the task-scoped state of one run: the document (key ->
// compact JSON value; nil until first set) and the configured schema,
// resolved on first use.
type taskState struct {
	doc        map[string]json.RawMessage
	schema     *policy.Schema
	schemaErr  error
	schemaDone bool
}

// isStateCall reports whether req is a call of a built-in state tool.
func isStateCall(req api.CallRequest) bool {
	return req.Server == api.StateServer &&
		(req.Tool == api.ToolStateGet || req.Tool == api.ToolStateSet || req.Tool == api.ToolStateDelete)
}

// isStateRestore reports whether a compensation restores the state.
func isStateRestore(u *api.ToolCall) bool {
	return u != nil && u.Server == api.StateServer && u.Tool == api.ToolStateRestore
}

// loadState starts this run's document from the one carried in.
func (s *taskState) load(carried json.RawMessage) {
	if len(carried) == 0 {
		return
	}
	var doc map[string]json.RawMessage
	if json.Unmarshal(carried, &doc) == nil {
		s.doc = doc
	}
}

// encode is the document's JSON (keys sorted: encoding/json sorts map
// keys); nil when the task keeps none.
func (s *taskState) encode() json.RawMessage {
	if s.doc == nil {
		return nil
	}
	b, _ := json.Marshal(s.doc)
	return b
}

// stateCall serves a call of a built-in state tool. It is recorded like
// any call, with a decision whose check is task_state (or why it was
// refused: state_args, state_size, state_schema).
func (t *task) stateCall(ctx workflow.Context, req api.CallRequest, started time.Time) api.CallResult {
	res := t.applyState(ctx, req)
	countStateCall(ctx, req, res)
	t.lastActivity = workflow.Now(ctx)
	return t.record(req, started, t.lastActivity, res)
}

// metricStateCalls counts the state tools' calls by op and result.
const metricStateCalls = "airlock_task_state_calls_total"

// countStateCall counts a state call through the SDK's metrics handler,
// which counts nothing during a replay; it records nothing in the history.
func countStateCall(ctx workflow.Context, req api.CallRequest, res api.CallResult) {
	result := "ok"
	if res.Outcome != api.OutcomeOK {
		result = string(res.Outcome)
		if res.Decision != nil && res.Decision.Check != "" {
			result = res.Decision.Check
		}
	}
	op := strings.TrimPrefix(req.Tool, "airlock_state_")
	workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"op": op, "result": result}).Counter(metricStateCalls).Inc(1)
}

// applyState serves a state call: it decodes the arguments, which every
// state tool shares, and applies the tool's operation to the task's state.
func (t *task) applyState(ctx workflow.Context, req api.CallRequest) api.CallResult {
	var a api.StateArgs
	dec := json.NewDecoder(bytes.NewReader(req.Arguments))
	dec.DisallowUnknownFields()
	if len(bytes.TrimSpace(req.Arguments)) > 0 {
		if err := dec.Decode(&a); err != nil {
			return stateRefused(checkStateArgs, "%s: the arguments are not {key, value, document}: %v", req.Tool, err)
		}
	}
	if len(a.Key) > maxStateKeyBytes {
		return stateRefused(checkStateArgs, "%s: key is %d bytes; keep keys under %d", req.Tool, len(a.Key), maxStateKeyBytes)
	}
	switch req.Tool {
	case api.ToolStateGet:
		return t.stateGet(req, a)
	case api.ToolStateSet:
		return t.stateSet(ctx, req, a)
	case api.ToolStateDelete:
		return t.stateDelete(ctx, req, a)
	}
	return stateRefused(checkStateArgs, "%s is not a state tool", req.Tool)
}

// stateRefused is a state call's refusal, for the reason format says.
func stateRefused(check, format string, args ...any) api.CallResult {
	reason := fmt.Sprintf(format, args...)
	return api.CallResult{Outcome: api.OutcomeDenied, Reason: reason, Attempts: 1,
		Decision: &api.Decision{Effect: "deny", Check: check, Reason: reason}}
}

// stateOK is a state call's result: text for the model, and structured.
func stateOK(text string, structured any) api.CallResult {
	b, _ := json.Marshal(map[string]any{"content": []any{map[string]any{"type": "text", "text": text}}, "structuredContent": structured})
	return api.CallResult{Outcome: api.OutcomeOK, Result: b, Attempts: 1,
		Decision: &api.Decision{Effect: "allow", Check: checkState}}
}

// stateGet serves api.ToolStateGet: one key, or the whole state.
func (t *task) stateGet(req api.CallRequest, a api.StateArgs) api.CallResult {
	s := &t.st
	if a.Value != nil || a.Document != nil {
		return stateRefused(checkStateArgs, "%s takes only an optional key; to change the state call %s", req.Tool, api.ToolStateSet)
	}
	if a.Key == "" {
		doc := s.encode()
		if doc == nil {
			doc = json.RawMessage(`{}`)
		}
		return stateOK(string(doc), map[string]any{"state": doc, "bytes": len(doc), "keys": s.keys()})
	}
	v, found := s.doc[a.Key]
	if !found {
		return stateOK(fmt.Sprintf("the task's state has no key %q (keys: %s)", a.Key, keyList(s.keys())),
			map[string]any{"key": a.Key, "found": false})
	}
	return stateOK(string(v), map[string]any{"key": a.Key, "found": true, "value": v})
}

// stateSet serves api.ToolStateSet: one key's value, or the whole
// document; it pushes the compensation that restores what it replaced.
func (t *task) stateSet(ctx workflow.Context, req api.CallRequest, a api.StateArgs) api.CallResult {
	s := &t.st
	next := maps.Clone(s.doc)
	if next == nil {
		next = map[string]json.RawMessage{}
	}
	var undo api.StateArgs
	switch {
	case a.Key != "" && a.Document != nil:
		return stateRefused(checkStateArgs, "%s: give key and value, or document, not both", req.Tool)
	case a.Document != nil:
		var doc map[string]json.RawMessage
		if err := json.Unmarshal(a.Document, &doc); err != nil || doc == nil {
			return stateRefused(checkStateArgs, "%s: document must be a JSON object (the whole state); to set one key give key and value", req.Tool)
		}
		next = map[string]json.RawMessage{}
		for k, v := range doc {
			if len(k) > maxStateKeyBytes {
				return stateRefused(checkStateArgs, "%s: document has a key of %d bytes; keep keys under %d", req.Tool, len(k), maxStateKeyBytes)
			}
			next[k] = compact(v)
		}
		undo = api.StateArgs{Document: s.encode(), Present: s.doc != nil}
	case a.Key == "":
		return stateRefused(checkStateArgs, "%s: key is required (or document, to replace the whole state)", req.Tool)
	case a.Value == nil:
		return stateRefused(checkStateArgs, "%s: value is required (any JSON value, null included); to remove key %q call %s", req.Tool, a.Key, api.ToolStateDelete)
	default:
		prev, had := s.doc[a.Key]
		next[a.Key] = compact(a.Value)
		undo = api.StateArgs{Key: a.Key, Value: prev, Present: had}
	}
	if r, bad := t.checkState(req.Tool, next); bad {
		return r
	}
	s.doc = next
	t.pushStateUndo(ctx, req, undo)
	what := "the whole state"
	if a.Key != "" {
		what = fmt.Sprintf("key %q", a.Key)
	}
	n := len(s.encode())
	return stateOK(fmt.Sprintf("set %s; the task's state is %d bytes (keys: %s)", what, n, keyList(s.keys())),
		map[string]any{"bytes": n, "keys": s.keys()})
}

// stateDelete serves api.ToolStateDelete: one key; it pushes the
// compensation that restores it.
func (t *task) stateDelete(ctx workflow.Context, req api.CallRequest, a api.StateArgs) api.CallResult {
	s := &t.st
	if a.Key == "" || a.Value != nil || a.Document != nil {
		return stateRefused(checkStateArgs, "%s takes a key (only)", req.Tool)
	}
	prev, had := s.doc[a.Key]
	if !had {
		return stateOK(fmt.Sprintf("the task's state has no key %q; nothing deleted", a.Key), map[string]any{"key": a.Key, "deleted": false})
	}
	next := maps.Clone(s.doc)
	delete(next, a.Key)
	// Removing a key can still break a schema (a required key).
	if r, bad := t.checkState(req.Tool, next); bad {
		return r
	}
	s.doc = next
	t.pushStateUndo(ctx, req, api.StateArgs{Key: a.Key, Value: prev, Present: true})
	return stateOK(fmt.Sprintf("deleted key %q; the task's state is %d bytes (keys: %s)", a.Key, len(s.encode()), keyList(s.keys())),
		map[string]any{"key": a.Key, "deleted": true})
}

// checkState checks a would-be document against the size limit and the
// schema.
func (t *task) checkState(tool string, next map[string]json.RawMessage) (api.CallResult, bool) {
	b, _ := json.Marshal(next)
	if limit := t.in.State.EffectiveMaxBytes(); len(b) > limit {
		return stateRefused(checkStateSize, "%s refused: the task's state would be %d bytes, more than its limit of %d (task.state.max_bytes); keep less in it (delete keys you no longer need) or ask an operator to raise the limit",
			tool, len(b), limit), true
	}
	rs, err := t.stateSchema()
	if err != nil {
		return stateRefused(checkStateSchema, "%s refused: the configured state schema (task.state.schema) cannot be used: %v; ask an operator to fix it", tool, err), true
	}
	if rs == nil {
		return api.CallResult{}, false
	}
	var v any
	_ = json.Unmarshal(b, &v)
	if err := rs.Validate(v); err != nil {
		return stateRefused(checkStateSchema, "%s refused: the task's state would not match its schema (task.state.schema): %v; nothing was changed", tool, err), true
	}
	return api.CallResult{}, false
}

// stateSchema resolves the configured schema once per run.
func (t *task) stateSchema() (*policy.Schema, error) {
	s := &t.st
	if s.schemaDone {
		return s.schema, s.schemaErr
	}
	s.schemaDone = true
	if t.in.State == nil || len(t.in.State.Schema) == 0 {
		return nil, nil
	}
	s.schema, s.schemaErr = policy.ResolveSchema(t.in.State.Schema)
	return s.schema, s.schemaErr
}

// pushStateUndo pushes the compensation of a set or delete: restore the
// previous value (or the previous whole document), inside the workflow.
func (t *task) pushStateUndo(ctx workflow.Context, req api.CallRequest, undo api.StateArgs) {
	if !compensationsOn(ctx) {
		return
	}
	args, _ := json.Marshal(undo)
	t.compensations = append(t.compensations, api.CompensationEntry{CallID: req.CallID, Tool: req.Tool, At: workflow.Now(ctx), State: api.CompensationPending,
		Compensation: &api.ToolCall{Tool: api.ToolStateRestore, Server: api.StateServer, UpstreamTool: "state_restore", Arguments: args,
			Spec: api.ToolSpec{Idempotent: true}}})
}

// restoreState runs a state compensation: no upstream, no limits (it puts
// back a value the state held).
func (t *task) restoreState(u *api.ToolCall) api.CallResult {
	var a api.StateArgs
	if err := json.Unmarshal(u.Arguments, &a); err != nil {
		return api.CallResult{Outcome: api.OutcomeFailed, Attempts: 1, Reason: "the state's previous value could not be read: " + err.Error()}
	}
	s := &t.st
	switch {
	case a.Key == "":
		s.doc = nil
		if a.Present {
			s.load(a.Document)
			if s.doc == nil {
				s.doc = map[string]json.RawMessage{}
			}
		}
	case a.Present:
		if s.doc == nil {
			s.doc = map[string]json.RawMessage{}
		}
		s.doc[a.Key] = a.Value
	default:
		delete(s.doc, a.Key)
	}
	b, _ := json.Marshal(map[string]any{"content": []any{map[string]any{"type": "text", "text": "state restored"}}})
	return api.CallResult{Outcome: api.OutcomeOK, Result: b, Attempts: 1}
}

// keys are the document's keys, sorted.
func (s *taskState) keys() []string {
	return slices.Sorted(maps.Keys(s.doc))
}

func keyList(keys []string) string {
	if len(keys) == 0 {
		return "none"
	}
	return strings.Join(keys, ", ")
}

func compact(v json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		return v
	}
	return b.Bytes()
}
