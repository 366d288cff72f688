package policy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path"
	"reflect"
	"strconv"
	"strings"
	"time"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/ext"
	"cel.dev/cel-go/interpreter"

	"github.com/airlock-run/airlock/api"
)

// Limits on rule evaluation. The cost limit is what bounds a rule in
// practice and is deterministic; the timeout is a backstop against a cost
// model that underestimates, and only it can make Decide depend on the
// machine's speed.
const (
	ruleCostLimit = 100_000
	// ruleMaxExprBytes bounds the text of one rule.
	ruleMaxExprBytes = 16 << 10
)

// ruleEvalTimeout is a variable only so that a test of the cost limit can
// lift it on a loaded machine, where the backstop would fire first.
var ruleEvalTimeout = 100 * time.Millisecond

// The CEL variables of a rule. They are Go structs exposed through
// ext.NativeTypes, so that the checker knows their fields: a misspelt field
// (principal.rol) is a compile error rather than a runtime deny.
//
//	principal {name, roles, permissions, data_level, slack_user_id}
//	tool      {name, server, upstream, side_effects, data_access_level,
//	           required_permissions, risk, idempotent, covered, open_world}
//	args      map(string, dyn): the call's arguments as decoded JSON;
//	          an integer is an int (a uint above 2^63-1), exactly, and
//	          other numbers are doubles (see jsoncanon.Number)
//	task      {id, calls, elapsed_seconds, read_level, untrusted, egress}
//
// task.read_level, task.untrusted and task.egress are the task's
// information-flow labels (api.Labels): the most sensitive data access
// level its calls read ("" when none), whether it ingested open-world
// content, and the egress tools that ran. level(name) ranks a data access
// level (public 0 … restricted 4; "" -1), so that
// level(task.read_level) > level("internal") reads "has read more than
// internal data"; an unknown name is an error, which denies.
//
// tool.covered is false for a tool no manifest covers; its other fields then
// hold the values assumed for such tools (write, high, restricted, open
// world).
// tool.path_args are the manifest's path_args; paths(tool, args) lists
// every path the call names (rulepaths.go).
type celPrincipal struct {
	Name        string   `cel:"name"`
	Roles       []string `cel:"roles"`
	Permissions []string `cel:"permissions"`
	DataLevel   string   `cel:"data_level"`
	SlackUserID string   `cel:"slack_user_id"`
}

type celTool struct {
	Name                string   `cel:"name"`
	Server              string   `cel:"server"`
	Upstream            string   `cel:"upstream"`
	SideEffects         []string `cel:"side_effects"`
	DataAccessLevel     string   `cel:"data_access_level"`
	RequiredPermissions []string `cel:"required_permissions"`
	Risk                string   `cel:"risk"`
	Idempotent          bool     `cel:"idempotent"`
	Covered             bool     `cel:"covered"`
	PathArgs            []string `cel:"path_args"`
	OpenWorld           bool     `cel:"open_world"`
}

type celTask struct {
	ID             string   `cel:"id"`
	Calls          int64    `cel:"calls"`
	ElapsedSeconds float64  `cel:"elapsed_seconds"`
	ReadLevel      string   `cel:"read_level"`
	Untrusted      bool     `cel:"untrusted"`
	Egress         []string `cel:"egress"`
}

// celTypeName is the name ext.NativeTypes gives a Go struct: the last
// element of its package path, a dot, the type name.
func celTypeName(t reflect.Type) string { return path.Base(t.PkgPath()) + "." + t.Name() }

func newEnv() (*cel.Env, error) {
	pt, tt, kt := reflect.TypeFor[celPrincipal](), reflect.TypeFor[celTool](), reflect.TypeFor[celTask]()
	return cel.NewEnv(
		ext.NativeTypes(pt, tt, kt, ext.ParseStructTags(true)),
		cel.Variable("principal", cel.ObjectType(celTypeName(pt))),
		cel.Variable("tool", cel.ObjectType(celTypeName(tt))),
		cel.Variable("task", cel.ObjectType(celTypeName(kt))),
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		// findings.exists(f, f.rule == "private-key") (guard.go)
		cel.Variable("findings", cel.ListType(cel.MapType(cel.StringType, cel.StringType))),
		// args.?path.orValue("")
		cel.OptionalTypes(),
		// task.elapsed_seconds > 60 (a double against an int literal)
		cel.CrossTypeNumericComparisons(true),
		cel.ParserExpressionSizeLimit(ruleMaxExprBytes),
		pathsFunction(cel.ObjectType(celTypeName(tt))),
		levelFunction(),
	)
}

// ruleVars are the variables of the rules for one call, converted to CEL
// values once here rather than by every rule that reads them.
func ruleVars(a types.Adapter, in Input, facts toolFacts, args map[string]any) (*ruleActivation, error) {
	vars := &ruleActivation{
		principal: a.NativeToValue(celPrincipal{
			Name:        in.Principal.Name,
			Roles:       in.Principal.Roles,
			Permissions: in.Principal.Permissions,
			DataLevel:   string(in.Principal.DataLevel),
			SlackUserID: in.Principal.SlackUserID,
		}),
		tool: a.NativeToValue(celTool{
			Name:                in.Tool.Name,
			Server:              in.Tool.Server,
			Upstream:            in.Tool.Upstream,
			SideEffects:         facts.sideEffects,
			DataAccessLevel:     string(facts.level),
			RequiredPermissions: facts.perms,
			Risk:                string(facts.risk),
			Idempotent:          facts.idempotent,
			Covered:             facts.covered,
			PathArgs:            facts.pathArgs,
			OpenWorld:           facts.openWorld,
		}),
		task:     a.NativeToValue(taskVar(in.Task)),
		findings: a.NativeToValue(celFindings(in.Findings)),
	}
	var err error
	if vars.args, err = celArgs(a, args); err != nil {
		return nil, fmt.Errorf("args: %w", err)
	}
	for _, name := range ruleVariables {
		v, _ := vars.ResolveName(name)
		if err, ok := v.(*types.Err); ok {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return vars, nil
}

// taskVar is the task variable: its counters and its labels (none
// raised when it keeps none). Egress is never nil, so size(task.egress)
// is 0 rather than an error.
func taskVar(t Task) celTask {
	v := celTask{ID: t.ID, Calls: int64(t.Calls), ElapsedSeconds: t.Elapsed.Seconds(), Egress: []string{}}
	if l := t.Labels; l != nil {
		v.ReadLevel, v.Untrusted = l.ReadLevel, l.Untrusted
		if len(l.Egress) > 0 {
			v.Egress = l.Egress
		}
	}
	return v
}

// levelOverload is the one overload of level(string).
const levelOverload = "level_string"

// levelFunction declares level(name): a data access level's rank
// (api.LevelRank), for comparing task.read_level, tool.data_access_level
// and principal.data_level by order.
func levelFunction() cel.EnvOption {
	return cel.Function("level",
		cel.Overload(levelOverload, []*cel.Type{cel.StringType}, cel.IntType,
			cel.UnaryBinding(func(v ref.Val) ref.Val {
				s, ok := v.Value().(string)
				if !ok {
					return types.NewErr("level: the argument must be a string")
				}
				r, ok := api.LevelRank(s)
				if !ok {
					return types.NewErr("level: %q is not a data access level (%s)", s, strings.Join(api.DataLevels, ", "))
				}
				return types.Int(r)
			})))
}

// ruleActivation holds the ruleVariables of one call. A struct rather than
// a map: every rule resolves its variables by name, and a switch over four
// names is cheaper than hashing.
type ruleActivation struct {
	principal, tool, task, findings ref.Val
	args                            map[string]any
}

var _ interpreter.Activation = (*ruleActivation)(nil)

func (a *ruleActivation) ResolveName(name string) (any, bool) {
	switch name {
	case "args":
		return a.args, true
	case "tool":
		return a.tool, true
	case "principal":
		return a.principal, true
	case "task":
		return a.task, true
	case "findings":
		return a.findings, true
	}
	return nil, false
}

func (a *ruleActivation) Parent() interpreter.Activation { return nil }

// celArgs converts the arguments. A map[string]any is the one map that
// cel-go's field selection reads directly (args.path, args.?path); its
// top-level scalars are converted to CEL values once here rather than
// every time a rule reads them. Lists and objects stay as decoded and are
// converted as they are read.
func celArgs(a types.Adapter, args map[string]any) (map[string]any, error) {
	m := make(map[string]any, len(args))
	for k, v := range args {
		switch v.(type) {
		case []any, map[string]any:
			m[k] = v
		default:
			cv := a.NativeToValue(v)
			if err, ok := cv.(*types.Err); ok {
				return nil, err
			}
			m[k] = cv
		}
	}
	return m, nil
}

type compiledRule struct {
	Rule
	// tracked counts the cost of an evaluation and stops it at
	// ruleCostLimit; fast does not, and is used only for inputs within
	// sizeBound, where the cost is bounded before evaluation (see cost.go).
	// fast is nil when sizeBound is 0.
	tracked, fast cel.Program
	sizeBound     uint64
	// loops is true when the condition has a comprehension (all, exists,
	// map, filter...). Comprehensions are the only part of an evaluation
	// that checks the context, so only these rules are given one.
	loops bool
	// restricted is true when the rule can match only the tools named by
	// tools (see index.go).
	restricted bool
	tools      toolNames
	// chain, on the first rule of a run of chainable rules, evaluates
	// the run as one program (see chain.go).
	chain *ruleChain
	// countsTask is true when the condition reads the task's counters
	// (task.calls, task.elapsed_seconds, or task as a whole), which a
	// workflow task that is dropped and retried may see otherwise
	// (Policy.ReadsTaskCounters).
	countsTask bool
}

// compileRule parses and type-checks one condition, which must be a bool.
func compileRule(env *cel.Env, r Rule) (compiledRule, error) {
	ast, iss := env.Compile(r.When)
	if iss.Err() != nil {
		return compiledRule{}, iss.Err()
	}
	if !ast.OutputType().IsExactType(cel.BoolType) {
		return compiledRule{}, fmt.Errorf("condition is of type %s, not bool; compare it, e.g. args.?force.orValue(false) == true", ast.OutputType())
	}
	if err := inexactDouble(ast.NativeRep()); err != nil {
		return compiledRule{}, err
	}
	opts := []cel.ProgramOption{cel.EvalOptions(cel.OptOptimize), cel.InterruptCheckFrequency(100)}
	cr := compiledRule{Rule: r, sizeBound: staticSizeBound(env, ast)}
	var err error
	if cr.tracked, err = env.Program(ast, append(opts, cel.CostLimit(ruleCostLimit))...); err != nil {
		return compiledRule{}, err
	}
	if cr.sizeBound > 0 {
		if cr.fast, err = env.Program(ast, opts...); err != nil {
			return compiledRule{}, err
		}
	}
	nav := celast.NavigateAST(ast.NativeRep())
	cr.loops = len(celast.MatchDescendants(nav, celast.KindMatcher(celast.ComprehensionKind))) > 0
	cr.tools, cr.restricted = ruleToolNames(ast.NativeRep().Expr())
	cr.countsTask = readsTaskCounters(nav)
	return cr, nil
}

// readsTaskCounters reports whether an expression reads task.calls or
// task.elapsed_seconds, or uses task other than by selecting its id (a
// comprehension variable named task counts too: the answer errs towards
// true).
func readsTaskCounters(nav celast.NavigableExpr) bool {
	for _, e := range celast.MatchDescendants(nav, celast.KindMatcher(celast.IdentKind)) {
		if e.AsIdent() != "task" {
			continue
		}
		parent, ok := e.Parent()
		if !ok || parent.Kind() != celast.SelectKind || parent.AsSelect().FieldName() != "id" {
			return true
		}
	}
	return false
}

// inexactDouble refuses a double literal from 2^53 to 2^64: cel-go compares
// an int with a double by converting the int to a double (common/types/
// compare.go), which rounds above 2^53, so args.account !=
// 9007199254740992.0 would be false for the integer 9007199254740993.
// Arguments hold such integers exactly (jsoncanon.Number), and never such
// doubles; an integer literal compares with them exactly.
func inexactDouble(a *celast.AST) error {
	for _, e := range celast.MatchDescendants(celast.NavigateAST(a), celast.ConstantValueMatcher()) {
		d, ok := e.AsLiteral().(types.Double)
		f := math.Abs(float64(d))
		if !ok || f < 1<<53 || f > 1<<64 {
			continue
		}
		write := "a string"
		if f < 1<<63 || (d > 0 && f < 1<<64) {
			write = "an integer literal, " + strconv.FormatFloat(float64(d), 'f', -1, 64)
		}
		return fmt.Errorf("the double %s is at or beyond 2^53, where CEL compares integers with it inexactly (9007199254740993 == 9007199254740992.0 is true); write it as %s",
			strconv.FormatFloat(float64(d), 'g', -1, 64), write)
	}
	return nil
}

// eval evaluates the rule's condition over vars. size is the input's
// inputSizeBound. ctx bounds the time of comprehensions and is used only by
// a rule with loops. A panic inside cel-go is turned into an error so that
// it denies like any other evaluation failure.
func (r *compiledRule) eval(ctx context.Context, vars *ruleActivation, size uint64) (matched bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			matched, err = false, fmt.Errorf("internal error in the CEL evaluator: %v", r)
		}
	}()
	prg := r.tracked
	if r.fast != nil && size <= r.sizeBound {
		prg = r.fast
	}
	var out ref.Val
	if r.loops {
		out, _, err = prg.ContextEval(ctx, vars)
	} else {
		out, _, err = prg.Eval(vars)
	}
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, errors.New("condition did not produce a bool")
	}
	return b, nil
}
