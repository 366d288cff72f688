// Package engine is airlock's program interpreter (code mode, issue 27):
// it runs one Starlark program whose tool calls go to a wire.Host. It
// imports only go.starlark.net, the standard library and wire, so the
// same code runs natively (tests, program.Native) and inside the wasip1
// guest (wasm/program).
//
// Everything the program can observe is derived from the Request and from
// the Replies in the host's order: modules are built in sorted order,
// dicts keep document order, parallel branches are scheduled one at a time
// in a fixed order, and the limits are counted in steps and bytes. So the
// same Request and the same replies give the same messages and the same
// Done, which is what lets the workflow replay a program.
package engine

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"github.com/airlock-run/airlock/wasm/program/wire"
)

// filename is the name the program's positions carry; a backtrace frame
// with another file name is a builtin's.
const filename = "program.star"

// engine is one program's run. Its state is touched by Run's goroutine
// (which also runs the main thread) and, while it is the one running
// thread, by a parallel branch's goroutine; the channel hand-offs
// between them order every access.
type engine struct {
	req wire.Request
	h   wire.Host
	lim wire.Limits

	tools   map[string]*wire.Tool            // by Name (lookups only)
	modules map[string]map[string]*wire.Tool // module → function → tool (lookups only)
	// moduleNames are the predeclared tool modules, sorted.
	moduleNames []string
	// toolNames are all tool Names, sorted (for suggestions).
	toolNames   []string
	predeclared starlark.StringDict

	sched

	// out is the captured print output.
	out     strings.Builder
	outFull bool

	// end, once set, is how the program ends whatever it does next: a
	// stop or limit no attempt(...) can catch.
	end *wire.Done
}

// Run runs req's program, starting its tool calls on h, and returns how
// it ended. It calls h only from its own goroutine.
func Run(req wire.Request, h wire.Host) wire.Done {
	e, done := newEngine(req, h)
	if done != nil {
		return *done
	}
	prog, done := e.compile()
	if done != nil {
		return *done
	}
	return e.run(prog)
}

func newEngine(req wire.Request, h wire.Host) (*engine, *wire.Done) {
	e := &engine{req: req, h: h, lim: req.Limits}
	if d := checkLimits(req.Limits); d != nil {
		return nil, d
	}
	if d := e.buildTools(); d != nil {
		return nil, d
	}
	if len(req.Inputs) > 0 {
		// The global inputs (a plan step's vars and steps): frozen, the
		// program reads it and never changes it; its order is the
		// document's.
		v, err := fromJSON(req.Inputs)
		d, ok := v.(*starlark.Dict)
		if err != nil || !ok {
			return nil, &wire.Done{Outcome: wire.OutcomeInvalid, Error: "request: Inputs must be one JSON object"}
		}
		d.Freeze()
		e.predeclared["inputs"] = d
	}
	return e, nil
}

func checkLimits(l wire.Limits) *wire.Done {
	var bad []string
	if l.MaxResultBytes <= 0 {
		bad = append(bad, "MaxResultBytes")
	}
	if l.MaxPrintBytes <= 0 {
		bad = append(bad, "MaxPrintBytes")
	}
	if l.MaxSteps <= 0 {
		bad = append(bad, "MaxSteps")
	}
	if l.MaxStepsBetweenCalls <= 0 {
		bad = append(bad, "MaxStepsBetweenCalls")
	}
	if l.MaxParallel <= 0 {
		bad = append(bad, "MaxParallel")
	}
	if len(bad) == 0 {
		return nil
	}
	return &wire.Done{Outcome: wire.OutcomeInvalid, Error: "request: Limits." + strings.Join(bad, ", Limits.") + " must be positive (the host fills every limit)"}
}

// reserved are names a tool module may not take: the program's own
// builtins. A tool in such a module is still callable as call(name).
var reserved = map[string]bool{
	"call": true, "attempt": true, "parallel": true, "print": true, "json": true,
	"struct": true, "fail": true, "sum": true, "round": true, "main": true, "result": true,
}

func (e *engine) buildTools() *wire.Done {
	e.tools = make(map[string]*wire.Tool, len(e.req.Tools))
	e.modules = map[string]map[string]*wire.Tool{}
	for i := range e.req.Tools {
		t := &e.req.Tools[i]
		if t.Name == "" {
			return &wire.Done{Outcome: wire.OutcomeInvalid, Error: fmt.Sprintf("request: Tools[%d] has no Name", i)}
		}
		if _, dup := e.tools[t.Name]; dup {
			return &wire.Done{Outcome: wire.OutcomeInvalid, Error: fmt.Sprintf("request: tool %q is listed twice", t.Name)}
		}
		e.tools[t.Name] = t
		e.toolNames = append(e.toolNames, t.Name)
		if !isIdent(t.Module) || !isIdent(t.Function) || reserved[t.Module] || starlark.Universe.Has(t.Module) {
			continue // call(name) only
		}
		fns := e.modules[t.Module]
		if fns == nil {
			fns = map[string]*wire.Tool{}
			e.modules[t.Module] = fns
			e.moduleNames = append(e.moduleNames, t.Module)
		}
		if prev, dup := fns[t.Function]; dup {
			return &wire.Done{Outcome: wire.OutcomeInvalid, Error: fmt.Sprintf("request: tools %q and %q are both %s.%s", prev.Name, t.Name, t.Module, t.Function)}
		}
		fns[t.Function] = t
	}
	sort.Strings(e.moduleNames)
	sort.Strings(e.toolNames)

	e.predeclared = e.builtins()
	for _, m := range e.moduleNames {
		fns := e.modules[m]
		members := make(starlark.StringDict, len(fns))
		for _, name := range sortedKeys(fns) {
			members[name] = e.toolFunc(fns[name])
		}
		e.predeclared[m] = &starlarkstruct.Module{Name: m, Members: members}
	}
	return nil
}

// functions lists module m's function names, sorted.
func (e *engine) functions(m string) []string { return sortedKeys(e.modules[m]) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return false
	}
	return !keywords[s]
}

// keywords are Starlark's keywords and reserved words: not usable as a
// module or function name.
var keywords = map[string]bool{
	"and": true, "break": true, "continue": true, "def": true, "elif": true, "else": true,
	"for": true, "if": true, "in": true, "lambda": true, "load": true, "not": true, "or": true,
	"pass": true, "return": true, "while": true, "as": true, "assert": true, "async": true,
	"await": true, "class": true, "del": true, "except": true, "finally": true, "from": true,
	"global": true, "import": true, "is": true, "nonlocal": true, "raise": true, "try": true,
	"with": true, "yield": true, "None": true, "True": true, "False": true,
}

// run executes the compiled program on the scheduler and builds Done.
func (e *engine) run(prog *starlark.Program) wire.Done {
	main := e.newTask("main", func(th *starlark.Thread) (starlark.Value, error) {
		globals, err := prog.Init(th, e.predeclared)
		if err != nil {
			return nil, err
		}
		if m, ok := globals["main"].(starlark.Callable); ok {
			return starlark.Call(th, m, nil, nil)
		}
		if r, ok := globals["result"]; ok {
			return r, nil
		}
		return starlark.None, nil
	}, nil)
	e.runMain(main)

	done := e.finish(main)
	done.Output = e.out.String()
	done.Steps = e.total
	return done
}

func (e *engine) finish(main *task) wire.Done {
	if e.end != nil {
		d := *e.end
		if d.Line == 0 && main.err != nil {
			d.Line = errLine(main.err)
		}
		return d
	}
	if main.err != nil {
		msg := errText(main.err)
		return wire.Done{Outcome: wire.OutcomeError, Error: msg + runtimeHint(msg), Line: errLine(main.err)}
	}
	data, err := toJSON(main.val, true, "the result")
	if err != nil {
		return wire.Done{Outcome: wire.OutcomeError, Error: err.Error() + " (return main()'s value or set result to plain data)"}
	}
	if len(data) > e.lim.MaxResultBytes {
		return wire.Done{Outcome: wire.OutcomeLimit, Error: fmt.Sprintf("return less: the result is %d bytes of JSON, more than the %d allowed; return only the fields and items you need (a count, a summary, the first few)", len(data), e.lim.MaxResultBytes)}
	}
	return wire.Done{Outcome: wire.OutcomeOK, Result: data}
}

// abort ends the program, whatever it does next: no attempt(...) catches
// it. The first abort wins. The running thread (if any) is cancelled so
// it stops at its next step; the others are cancelled as they resume.
func (e *engine) abort(th *starlark.Thread, outcome, reason string, line int) {
	if e.end == nil {
		e.end = &wire.Done{Outcome: outcome, Error: reason, Line: line}
	}
	if th != nil {
		th.Cancel(e.end.Error)
	}
}

// errAborted is how a builtin refuses to go on once the program is ending.
func (e *engine) errAborted() error { return errors.New(e.end.Error) }

// errText is the message for a program error: the innermost Starlark
// error's message (a parallel branch's, a tool call's).
func errText(err error) string {
	var ee *starlark.EvalError
	if errors.As(err, &ee) {
		if len(ee.CallStack) > 2 {
			return ee.Backtrace()
		}
		return ee.Msg
	}
	return err.Error()
}

// errLine is the program line err names: the innermost program frame of
// the innermost Starlark error in its chain (a failing parallel branch's
// rather than the parallel call's).
func errLine(err error) int {
	line := 0
	for ; err != nil; err = errors.Unwrap(err) {
		if ce, ok := err.(*callError); ok {
			return ce.line
		}
		ee, ok := err.(*starlark.EvalError)
		if !ok {
			continue
		}
		for i := len(ee.CallStack) - 1; i >= 0; i-- {
			if p := ee.CallStack[i].Pos; p.Filename() == filename && p.Line > 0 {
				line = int(p.Line)
				break
			}
		}
	}
	return line
}

// programLine is the line of the innermost program frame of th: where a
// builtin was called from.
func programLine(th *starlark.Thread) int {
	for i := 0; i < th.CallStackDepth(); i++ {
		if p := th.CallFrame(i).Pos; p.Filename() == filename {
			return int(p.Line)
		}
	}
	return 0
}
