package engine

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.starlark.net/lib/json"
	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
	"go.starlark.net/syntax"

	"github.com/airlock-run/airlock/wasm/program/wire"
)

// builtins are the names every program has besides the tool modules and
// Starlark's universe.
func (e *engine) builtins() starlark.StringDict {
	return starlark.StringDict{
		"call":     starlark.NewBuiltin("call", e.builtinCall),
		"attempt":  starlark.NewBuiltin("attempt", e.builtinAttempt),
		"parallel": starlark.NewBuiltin("parallel", e.builtinParallel),
		"json":     json.Module,
		"struct":   starlark.NewBuiltin("struct", starlarkstruct.Make),
		"sum":      starlark.NewBuiltin("sum", builtinSum),
		"round":    starlark.NewBuiltin("round", builtinRound),
	}
}

// callError is a tool call that did not end ok: attempt(...) turns it
// into a value, uncaught it fails the program naming the line.
type callError struct {
	tool    *wire.Tool
	line    int
	outcome string
	reason  string
}

func (c *callError) Error() string {
	s := fmt.Sprintf("%s.%s (line %d): %s", c.tool.Module, c.tool.Function, c.line, c.outcome)
	if c.reason != "" {
		s += ": " + c.reason
	}
	return s
}

func (e *engine) toolFunc(tool *wire.Tool) *starlark.Builtin {
	name := tool.Module + "." + tool.Function
	return starlark.NewBuiltin(name, func(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		if len(args) > 0 {
			return nil, fmt.Errorf("%s takes keyword arguments only: pass arguments by name, as %s(name=value, ...)", name, name)
		}
		return e.callTool(th, tool, kwargs)
	})
}

// builtinCall is call(name, **kwargs): a tool by its exposed Name.
func (e *engine) builtinCall(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("call takes the tool's name and keyword arguments: call(\"tool_name\", name=value, ...), got %d positional arguments", len(args))
	}
	name, ok := starlark.AsString(args[0])
	if !ok {
		return nil, fmt.Errorf("call: the tool name must be a string, not %s", args[0].Type())
	}
	tool := e.tools[name]
	if tool == nil {
		return nil, fmt.Errorf("call: no tool %q%s", name, suggest(name, e.toolNames))
	}
	return e.callTool(th, tool, kwargs)
}

// callTool starts one call and blocks the thread until its reply.
func (e *engine) callTool(th *starlark.Thread, tool *wire.Tool, kwargs []starlark.Tuple) (starlark.Value, error) {
	if e.end != nil {
		return nil, e.errAborted()
	}
	line := programLine(th)
	fn := tool.Module + "." + tool.Function
	enc := &encoder{where: fn + " argument "}
	enc.buf.WriteByte('{')
	names := make(map[string]struct{}, len(kwargs))
	for i, kv := range kwargs {
		if i > 0 {
			enc.buf.WriteByte(',')
		}
		k := string(kv[0].(starlark.String))
		// f(path=a, **{"path": b}) reaches a builtin with path twice:
		// the tool would get one value and policy perhaps the other.
		if _, dup := names[k]; dup {
			return nil, fmt.Errorf("%s (line %d): argument %q is given more than once; pass each argument once", fn, line, k)
		}
		names[k] = struct{}{}
		writeString(&enc.buf, k)
		enc.buf.WriteByte(':')
		if err := enc.encode(kv[1], k, 1); err != nil {
			return nil, err
		}
	}
	enc.buf.WriteByte('}')

	t := taskOf(th)
	t.call = &pendingCall{tool: tool, args: bytes.Clone(enc.buf.Bytes()), line: line}
	e.waitCall(t)
	t.call = nil
	if e.end != nil {
		return nil, e.errAborted()
	}
	r := t.reply
	t.reply = wire.Reply{}
	if r.Outcome != "ok" {
		outcome := r.Outcome
		if outcome == "" {
			outcome = "error"
		}
		return nil, &callError{tool: tool, line: line, outcome: outcome, reason: r.Reason}
	}
	v, err := fromJSON(r.Result)
	if err != nil {
		return nil, &callError{tool: tool, line: line, outcome: "error", reason: "its result cannot be read: " + err.Error()}
	}
	return v, nil
}

// builtinAttempt is attempt(f, *args, **kwargs): f's value as
// struct(ok=True, value=v, error=None, outcome="ok"), or its failure (a
// tool call that did not end ok, fail(...), a runtime error) as
// struct(ok=False, value=None, error=message, outcome=...). A stop or a
// limit is not caught.
func (e *engine) builtinAttempt(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if len(args) == 0 {
		return nil, errors.New("attempt needs a function: attempt(fs.read_file, path=p) or attempt(lambda: ...)")
	}
	f, ok := args[0].(starlark.Callable)
	if !ok {
		return nil, fmt.Errorf("attempt: the first argument must be a function, not %s (write attempt(fs.read_file, path=p), not attempt(fs.read_file(path=p)))", args[0].Type())
	}
	v, err := starlark.Call(th, f, args[1:], kwargs)
	if err != nil {
		if e.end != nil {
			return nil, err
		}
		outcome, msg := "error", err.Error()
		var ce *callError
		if errors.As(err, &ce) {
			outcome, msg = ce.outcome, ce.Error()
		}
		return starlarkstruct.FromStringDict(starlarkstruct.Default, starlark.StringDict{
			"ok": starlark.False, "value": starlark.None, "error": starlark.String(msg), "outcome": starlark.String(outcome),
		}), nil
	}
	return starlarkstruct.FromStringDict(starlarkstruct.Default, starlark.StringDict{
		"ok": starlark.True, "value": v, "error": starlark.None, "outcome": starlark.String("ok"),
	}), nil
}

// builtinParallel is parallel(f1, f2, ...) or parallel([f1, f2, ...]):
// each function, called with no arguments, runs on its own thread; their
// calls are in flight together. The results come back in argument order.
// A failing branch fails parallel once every branch has ended.
func (e *engine) builtinParallel(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if len(kwargs) > 0 {
		return nil, errors.New("parallel takes functions, not keyword arguments: parallel(lambda: fs.stat(path=a), lambda: fs.stat(path=b))")
	}
	fns := []starlark.Value(args)
	if len(args) == 1 {
		switch l := args[0].(type) {
		case *starlark.List:
			fns = make([]starlark.Value, l.Len())
			for i := range fns {
				fns[i] = l.Index(i)
			}
		case starlark.Tuple:
			fns = l
		}
	}
	if len(fns) > e.lim.MaxParallel {
		return nil, fmt.Errorf("parallel: %d functions, more than the %d allowed at once; run them in batches of %d", len(fns), e.lim.MaxParallel, e.lim.MaxParallel)
	}
	if e.live+len(fns) > maxThreads {
		return nil, fmt.Errorf("parallel: %d more threads would make %d at once (nested parallel), more than the %d allowed", len(fns), e.live+len(fns), maxThreads)
	}
	for i, f := range fns {
		if _, ok := f.(starlark.Callable); !ok {
			return nil, fmt.Errorf("parallel: argument %d is %s, not a function (wrap a call as lambda: fs.stat(path=p))", i+1, f.Type())
		}
	}
	if len(fns) == 0 {
		return starlark.NewList(nil), nil
	}
	if e.end != nil {
		return nil, e.errAborted()
	}
	t := taskOf(th)
	t.spawn = make([]*task, len(fns))
	for i, f := range fns {
		f := f.(starlark.Callable)
		t.spawn[i] = e.newTask(fmt.Sprintf("%s/parallel %d", t.name, i+1), func(bt *starlark.Thread) (starlark.Value, error) {
			return starlark.Call(bt, f, nil, nil)
		}, t)
	}
	e.waitBranches(t)
	branches := t.spawn
	t.spawn = nil
	if e.end != nil {
		return nil, e.errAborted()
	}
	results := make([]starlark.Value, len(branches))
	for i, b := range branches {
		if b.err != nil {
			return nil, fmt.Errorf("parallel: function %d of %d failed: %w", i+1, len(branches), b.err)
		}
		results[i] = b.val
	}
	return starlark.NewList(results), nil
}

// print captures the output; past MaxPrintBytes it ends the program.
func (e *engine) print(th *starlark.Thread, msg string) {
	if e.outFull {
		return
	}
	if e.out.Len()+len(msg)+1 > e.lim.MaxPrintBytes {
		cut := min(len(msg), e.lim.MaxPrintBytes-e.out.Len())
		for cut > 0 && cut < len(msg) && !utf8.RuneStart(msg[cut]) {
			cut-- // keep the output valid UTF-8
		}
		e.out.WriteString(msg[:cut])
		e.outFull = true
		e.abort(th, wire.OutcomeLimit, fmt.Sprintf("the program printed more than the %d bytes allowed; print less (a count, or a sample such as items[:5])", e.lim.MaxPrintBytes), programLine(th))
		return
	}
	e.out.WriteString(msg)
	e.out.WriteByte('\n')
}

// builtinSum is Python's sum(iterable, start=0).
func builtinSum(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var iterable starlark.Iterable
	var acc starlark.Value = starlark.MakeInt(0)
	if err := starlark.UnpackArgs("sum", args, kwargs, "iterable", &iterable, "start?", &acc); err != nil {
		return nil, err
	}
	it := iterable.Iterate()
	defer it.Done()
	var x starlark.Value
	for it.Next(&x) {
		v, err := starlark.Binary(syntax.PLUS, acc, x)
		if err != nil {
			return nil, fmt.Errorf("sum: %v", err)
		}
		acc = v
	}
	return acc, nil
}

// builtinRound is Python's round(x, ndigits=None): to an int without
// ndigits, else to a float with ndigits decimals; halves go to even, as
// in Python.
func builtinRound(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var x starlark.Value
	var nd starlark.Value = starlark.None
	if err := starlark.UnpackArgs("round", args, kwargs, "x", &x, "ndigits?", &nd); err != nil {
		return nil, err
	}
	if i, ok := x.(starlark.Int); ok {
		return i, nil
	}
	f, ok := starlark.AsFloat(x)
	if !ok {
		return nil, fmt.Errorf("round: want a number, got %s", x.Type())
	}
	if nd == starlark.None {
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("round: cannot round %v to an int", f)
		}
		return starlark.NumberToInt(starlark.Float(math.RoundToEven(f)))
	}
	var n int
	if err := starlark.AsInt(nd, &n); err != nil {
		return nil, fmt.Errorf("round: ndigits: %v", err)
	}
	if n < 0 || n > 15 {
		return nil, fmt.Errorf("round: ndigits must be between 0 and 15, got %d", n)
	}
	r, _ := strconv.ParseFloat(strconv.FormatFloat(f, 'f', n, 64), 64)
	return starlark.Float(r), nil
}

// suggest is " (did you mean X?)" for the nearest candidates, or "".
func suggest(name string, candidates []string) string {
	near := nearest(name, candidates, 3)
	if len(near) == 0 {
		return ""
	}
	return " (did you mean " + strings.Join(near, " or ") + "?)"
}
