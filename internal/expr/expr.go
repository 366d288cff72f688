// Package expr compiles and evaluates the CEL expressions airlock computes
// tool calls with: the arguments (and conditions) of a tool's capture and
// compensation in a manifest, and the arguments and conditions of the steps
// of a plan. Policy rules are CEL too, but live in internal/policy with
// their own variables.
//
// Each Kind declares its own variables, so that an expression that uses one
// it cannot see fails when the manifest or plan is loaded, not when a
// rollback runs:
//
//	Capture       args   map(string, dyn)  the call's arguments
//	              call   {id, task, tool, slug}
//	              roots  list(string)      the server's expanded path_roots
//	Compensation  the same, and
//	              result dyn               the call's structured result
//	              before dyn               the capture's structured result,
//	                                       null when there was none
//	Step          steps  map(string, {result, outcome, reason})
//	              vars   map(string, dyn)  the plan's variables
//	              task   {id, plan}
//	              state  map(string, dyn)  the task's state document
//	Lock          args, call and roots as Capture, and
//	              principal {name, roles}  who calls (a lock key)
//
// The fields of call, task and a step are checked when the expression
// compiles (call.slg is an error); keys of maps are not (a missing key is an
// evaluation error: guard optional ones with has(args.x) or
// args.?x.orValue("")). JSON numbers are exact, as in policy rules: an
// integer is an int (a uint above 2^63-1), other numbers doubles (see
// JSONValue); numbers of different types compare (args.count > 1.5). The string extension
// (split, join, replace, format, …) and optional types are available.
//
// Values go in as decoded JSON (JSONValue, ResultValue) and come out as
// decoded JSON (see Program.Eval), so results can be marshalled into the
// arguments of an MCP call. A comprehension over a map given as a variable
// visits its keys in sorted order, so that evaluating the same expression
// over the same values gives the same result (plans are evaluated inside
// workflows). Maps an expression builds itself iterate in an unspecified
// order.
//
// Evaluation is bounded by a CEL cost limit and a timeout; it never panics
// (a panic inside cel-go becomes an error). Only the timeout depends on the
// machine's speed; the cost limit is deterministic and is what bounds
// expressions in practice.
//
// Template (template.go) evaluates a JSON value whose strings may hold
// ${{ expr }} placeholders: the arguments of a plan step.
//
// This package is a leaf: it imports cel-go, the standard library and
// internal/jsoncanon (for exact numbers), never
// manifests or plans (they import it), and never logs.
package expr

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/ext"
)

// Kind says where an expression is used, which decides the variables it
// may use.
type Kind int

const (
	// Capture is an argument or condition of a tool's capture call: it sees
	// args, call and roots.
	Capture Kind = iota
	// Compensation is an argument or condition of a compensation (or of its
	// else chain): it sees args, result, before, call and roots.
	Compensation
	// Step is an argument or condition of a plan step: it sees steps, vars,
	// task and state.
	Step
	// Lock is the key of a tool's resource lock (issue 16 §4): it sees
	// args, call, roots and principal.
	Lock
)

// String names the kind as messages do: "capture", "compensation", "step".
func (k Kind) String() string {
	switch k {
	case Capture:
		return "capture"
	case Compensation:
		return "compensation"
	case Step:
		return "step"
	case Lock:
		return "lock"
	}
	return fmt.Sprintf("expr.Kind(%d)", int(k))
}

// Variables lists the variables an expression of kind k may use, in the
// order messages name them.
func (k Kind) Variables() []string {
	switch k {
	case Capture:
		return []string{"args", "call", "roots"}
	case Compensation:
		return []string{"args", "result", "before", "call", "roots"}
	case Step:
		return []string{"steps", "vars", "task", "state"}
	case Lock:
		return []string{"args", "call", "roots", "principal"}
	}
	return nil
}

// Call is the variable call: the tool call a capture or compensation
// belongs to. Eval also accepts it as a map with these keys.
type Call struct {
	// ID identifies the call within its task.
	ID string `cel:"id" json:"id"`
	// Task is the ID of the task the call belongs to.
	Task string `cel:"task" json:"task"`
	// Tool is the exposed tool name, "server__tool".
	Tool string `cel:"tool" json:"tool"`
	// Slug is Slug(Task, ID): a short, filename-safe name for the call.
	Slug string `cel:"slug" json:"slug"`
}

// Principal is the variable principal of a lock key: who makes the call.
// Eval also accepts it as a map with these keys (roles a list of strings).
type Principal struct {
	// Name is the principal's name from the configuration.
	Name string `cel:"name" json:"name"`
	// Roles are the principal's role names.
	Roles []string `cel:"roles" json:"roles"`
}

// StepState is one entry of the variable steps: what became of an earlier
// step of a plan. Eval also accepts it as a map with these keys.
type StepState struct {
	// Result is the step's structured result (ResultValue), null when the
	// step made no call or the call failed.
	Result any `cel:"result" json:"result"`
	// Outcome and Reason are what the plan's workflow recorded for the
	// step.
	Outcome string `cel:"outcome" json:"outcome"`
	Reason  string `cel:"reason" json:"reason"`
}

// Task is the variable task of a plan step. Eval also accepts it as a map
// with these keys.
type Task struct {
	ID   string `cel:"id" json:"id"`
	Plan string `cel:"plan" json:"plan"`
}

// Limits on one expression. The cost limit bounds an evaluation
// deterministically; the timeout is a backstop for a cost model that
// underestimates. They are looser than policy's because compensations map
// over whole results (every entity a call created).
const (
	costLimit     = 1_000_000
	maxExprBytes  = 16 << 10
	interruptFreq = 100
)

// evalTimeout is a variable so that tests can shorten it.
var evalTimeout = time.Second

var envs [4]func() (*cel.Env, error)

func init() {
	for k := range envs {
		envs[k] = sync.OnceValues(func() (*cel.Env, error) { return newEnv(Kind(k)) })
	}
}

func newEnv(k Kind) (*cel.Env, error) {
	callT, taskT, stepT, principalT := reflect.TypeFor[Call](), reflect.TypeFor[Task](), reflect.TypeFor[StepState](), reflect.TypeFor[Principal]()
	opts := []cel.EnvOption{
		ext.NativeTypes(callT, taskT, stepT, principalT, ext.ParseStructTags(true)),
		ext.Strings(),
		cel.OptionalTypes(),
		cel.CrossTypeNumericComparisons(true),
		cel.ParserExpressionSizeLimit(maxExprBytes),
		// Must come after NativeTypes, whose adapter it wraps.
		func(e *cel.Env) (*cel.Env, error) {
			return cel.CustomTypeAdapter(sortedAdapter{e.CELTypeAdapter()})(e)
		},
	}
	dyn := cel.DynType
	callType := cel.ObjectType(celTypeName(callT))
	switch k {
	case Capture, Compensation, Lock:
		opts = append(opts,
			cel.Variable("args", cel.MapType(cel.StringType, dyn)),
			cel.Variable("call", callType),
			cel.Variable("roots", cel.ListType(cel.StringType)),
		)
		switch k {
		case Compensation:
			opts = append(opts, cel.Variable("result", dyn), cel.Variable("before", dyn))
		case Lock:
			opts = append(opts, cel.Variable("principal", cel.ObjectType(celTypeName(principalT))))
		}
	case Step:
		opts = append(opts,
			cel.Variable("steps", cel.MapType(cel.StringType, cel.ObjectType(celTypeName(stepT)))),
			cel.Variable("vars", cel.MapType(cel.StringType, dyn)),
			cel.Variable("task", cel.ObjectType(celTypeName(taskT))),
			cel.Variable("state", cel.MapType(cel.StringType, dyn)),
		)
	default:
		return nil, fmt.Errorf("unknown expression kind %d", int(k))
	}
	return cel.NewEnv(opts...)
}

// celTypeName is the name ext.NativeTypes gives a Go struct.
func celTypeName(t reflect.Type) string {
	pkg := t.PkgPath()
	return pkg[strings.LastIndexByte(pkg, '/')+1:] + "." + t.Name()
}

func env(k Kind) (*cel.Env, error) {
	if k < 0 || int(k) >= len(envs) {
		return nil, fmt.Errorf("unknown expression kind %d", int(k))
	}
	e, err := envs[k]()
	if err != nil {
		// The environments are fixed by this package: failing here is a bug.
		return nil, fmt.Errorf("building the CEL environment for %s expressions: %w", k, err)
	}
	return e, nil
}

// Program is a compiled expression. It is immutable and safe for
// concurrent use.
type Program struct {
	kind Kind
	src  string
	out  *cel.Type
	prg  cel.Program
	refs refs
}

// Check compiles and type-checks src as an expression of kind k. The
// error, if any, has no positions (the caller knows where src came from):
// e.g. "undeclared reference to 'before'".
func Check(k Kind, src string) error {
	_, err := Compile(k, src)
	return err
}

// Compile compiles src as an expression of kind k. Errors are as Check's.
// Programs are cached by kind and source, so compiling the same expression
// again is cheap.
func Compile(k Kind, src string) (*Program, error) {
	return compile(k, src, costLimit)
}

// compile is Compile with a cost limit (0: none), which tests lower.
func compile(k Kind, src string, limit uint64) (*Program, error) {
	key := cacheKey{k, src, limit}
	if p := cache.get(key); p != nil {
		return p, nil
	}
	e, err := env(k)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(src) == "" {
		return nil, errors.New("the expression is empty")
	}
	ast, iss := e.Compile(src)
	if iss.Err() != nil {
		return nil, issuesError(iss)
	}
	popts := []cel.ProgramOption{
		cel.EvalOptions(cel.OptOptimize),
		cel.InterruptCheckFrequency(interruptFreq),
	}
	if limit > 0 {
		popts = append(popts, cel.CostLimit(limit))
	}
	prg, err := e.Program(ast, popts...)
	if err != nil {
		return nil, err
	}
	p := &Program{kind: k, src: src, out: ast.OutputType(), prg: prg, refs: collectRefs(ast.NativeRep())}
	cache.put(key, p)
	return p, nil
}

// CompileBool compiles src as a condition: its type must be bool, or dyn
// (a value only known at run time, such as args.force; EvalBool then
// checks it).
func CompileBool(k Kind, src string) (*Program, error) {
	p, err := Compile(k, src)
	if err != nil {
		return nil, err
	}
	if !p.out.IsExactType(cel.BoolType) && !p.out.IsExactType(cel.DynType) {
		return nil, &compileError{
			msg:      fmt.Sprintf("the condition is of type %s, not bool; compare it, e.g. %s", p.out, boolExample[k]),
			mistakes: []error{ErrNotBool},
		}
	}
	return p, nil
}

// boolExample is a condition of each kind, for messages.
var boolExample = map[Kind]string{
	Capture:      `args.path != ""`,
	Compensation: "before != null",
	Step:         `steps.write.outcome == "ok"`,
	Lock:         `"admin" in principal.roles`,
}

// Mistakes a compile error may name, for callers that add a hint to it;
// test for them with errors.Is. One error may name several.
var (
	// ErrUndeclaredReference: the expression uses a variable its kind does
	// not have.
	ErrUndeclaredReference = errors.New("undeclared reference")
	// ErrUndefinedField: the expression selects a field the type of call,
	// task, principal or a step does not have.
	ErrUndefinedField = errors.New("undefined field")
	// ErrNotBool: CompileBool's expression is not a condition.
	ErrNotBool = errors.New("not bool")
)

// compileError has the message of a compile failure and matches, with
// errors.Is, the mistakes it names.
type compileError struct {
	msg      string
	mistakes []error
}

func (e *compileError) Error() string   { return e.msg }
func (e *compileError) Unwrap() []error { return e.mistakes }

// issuesError joins the messages of iss without their positions. cel-go
// reports what its checker found as text only, so the mistakes are told
// apart here, once, by the checker's wording.
func issuesError(iss *cel.Issues) error {
	var msgs []string
	var mistakes []error
	for _, e := range iss.Errors() {
		msg := strings.TrimSuffix(e.Message, " (in container '')")
		msgs = append(msgs, msg)
		for _, m := range []error{ErrUndeclaredReference, ErrUndefinedField} {
			if strings.Contains(msg, m.Error()) && !slices.Contains(mistakes, m) {
				mistakes = append(mistakes, m)
			}
		}
	}
	if len(msgs) == 0 {
		return iss.Err()
	}
	return &compileError{msg: strings.Join(msgs, "; "), mistakes: mistakes}
}

// Kind is the kind the program was compiled for.
func (p *Program) Kind() Kind { return p.kind }

// Source is the expression's text.
func (p *Program) Source() string { return p.src }

// Uses reports whether the expression refers to the variable name.
func (p *Program) Uses(name string) bool { return p.refs.idents[name] > 0 }

// Fields lists, sorted, the keys or fields the expression selects on the
// variable name by a constant: steps.a, steps["b"], steps.?c give a, b, c.
// dynamic is true when the expression also uses the variable otherwise
// (steps[vars.which], steps.map(…)), so that the list may be incomplete.
func (p *Program) Fields(name string) (fields []string, dynamic bool) {
	fs := p.refs.fields[name]
	return fs, p.refs.idents[name] > p.refs.selects[name]
}

// Eval evaluates the program over vars, which maps variable names to values:
// decoded JSON (nil, bool, float64, string, []any, map[string]any) or other
// Go values CEL understands; call, task and the entries of steps as Call,
// Task and StepState or as maps with their keys. Variables the kind does
// not declare are ignored; a declared one that is missing is an error only
// when the expression uses it.
//
// The result is decoded JSON: nil, bool, int64 (a CEL int, or a uint up
// to 2^63-1), uint64 (a larger uint), float64 (a CEL double), string, []any or map[string]any. Bytes become base64 strings,
// timestamps RFC 3339 strings and durations Go duration strings ("1m30s");
// an optional value is its value, or nil when absent. NaN, infinities and
// maps with keys other than strings are errors, since JSON cannot hold
// them.
func (p *Program) Eval(vars map[string]any) (any, error) {
	v, err := p.eval(vars)
	if err != nil {
		return nil, err
	}
	return toJSON(v, 0)
}

// EvalBool evaluates a condition; a result other than a bool is an error.
func (p *Program) EvalBool(vars map[string]any) (bool, error) {
	v, err := p.eval(vars)
	if err != nil {
		return false, err
	}
	b, ok := v.(types.Bool)
	if !ok {
		return false, fmt.Errorf("the condition is %s, not a bool", describeVal(v))
	}
	return bool(b), nil
}

func (p *Program) eval(vars map[string]any) (out ref.Val, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("internal error in the CEL evaluator: %v", r)
		}
	}()
	act, err := activation(p.kind, vars)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), evalTimeout)
	defer cancel()
	v, _, err := p.prg.ContextEval(ctx, act)
	if err != nil {
		return nil, err
	}
	return v, nil
}

// cache holds compiled programs. Manifests and plans compile a few hundred
// expressions at most; the bound only keeps a long-running process that
// compiles generated expressions from growing without end.
var cache = &programCache{m: map[cacheKey]*Program{}}

const maxCached = 4096

type cacheKey struct {
	kind  Kind
	src   string
	limit uint64
}

type programCache struct {
	mu sync.Mutex
	m  map[cacheKey]*Program
}

func (c *programCache) get(k cacheKey) *Program {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k]
}

func (c *programCache) put(k cacheKey, p *Program) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxCached {
		clear(c.m)
	}
	c.m[k] = p
}
