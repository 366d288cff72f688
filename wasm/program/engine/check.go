package engine

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"go.starlark.net/resolve"
	"go.starlark.net/starlark"
	"go.starlark.net/syntax"

	"github.com/airlock-run/airlock/wasm/program/wire"
)

// fileOptions are the dialect: Python-like top-level code (loops, ifs,
// reassignment), sets, no recursion (so a thread's stack is bounded by
// the source).
var fileOptions = &syntax.FileOptions{While: true, TopLevelControl: true, GlobalReassign: true, Set: true}

// maxNesting bounds bracket nesting in the source: the parser, resolver
// and compiler recurse on it, and the guest's stack is capped.
const maxNesting = 200

// maxErrors is how many errors an invalid program's message lists.
const maxErrors = 5

// compile parses, resolves and checks the program; an invalid one ends
// here, before any call.
func (e *engine) compile() (*starlark.Program, *wire.Done) {
	src := e.req.Source
	if line, depth := nesting(src); depth > maxNesting {
		return nil, invalid(line, fmt.Sprintf("line %d: brackets nested %d deep, more than the %d allowed; use intermediate variables", line, depth, maxNesting))
	}
	f, err := fileOptions.Parse(filename, src, 0)
	if err != nil {
		var se syntax.Error
		if errors.As(err, &se) {
			line := int(se.Pos.Line)
			return nil, invalid(line, fmt.Sprintf("line %d: %s%s", line, se.Msg, parseHint(sourceLine(src, line), se.Msg)))
		}
		return nil, invalid(0, err.Error())
	}
	prog, err := starlark.FileProgram(f, e.predeclared.Has)
	if err != nil {
		var list resolve.ErrorList
		if !errors.As(err, &list) || len(list) == 0 {
			return nil, invalid(0, err.Error())
		}
		var msgs []string
		for _, re := range list {
			msgs = append(msgs, fmt.Sprintf("line %d: %s%s", re.Pos.Line, re.Msg, e.resolveHint(sourceLine(src, int(re.Pos.Line)), re.Msg)))
		}
		return nil, invalid(int(list[0].Pos.Line), joinErrors(msgs))
	}
	if msgs, line := e.static(f); len(msgs) > 0 {
		return nil, invalid(line, joinErrors(msgs))
	}
	return prog, nil
}

func invalid(line int, msg string) *wire.Done {
	return &wire.Done{Outcome: wire.OutcomeInvalid, Error: msg, Line: line}
}

func joinErrors(msgs []string) string {
	if len(msgs) > maxErrors {
		msgs = append(msgs[:maxErrors], fmt.Sprintf("(and %d more)", len(msgs)-maxErrors))
	}
	return strings.Join(msgs, "\n")
}

func sourceLine(src string, line int) string {
	for i := 1; i < line; i++ {
		j := strings.IndexByte(src, '\n')
		if j < 0 {
			return ""
		}
		src = src[j+1:]
	}
	if j := strings.IndexByte(src, '\n'); j >= 0 {
		src = src[:j]
	}
	return src
}

// Hints for what Python writers reach for first.
const (
	hintTry    = "Starlark has no try/except: use attempt(f, **kwargs), which returns struct(ok, value, error, outcome)"
	hintFStr   = "Starlark has no f-strings: use \"{}\".format(x) or \"%s\" % x"
	hintImport = "Starlark has no imports: the tools are predeclared modules (module.function(name=value)), and json is built in"
	hintClass  = "Starlark has no classes: use dicts or struct(field=value)"
	hintIs     = "Starlark has no 'is': compare with == or != (x == None)"
)

// keywordHints answer a parse error at a Python keyword ("got try, want
// ...").
var keywordHints = map[string]string{
	"try": hintTry, "except": hintTry, "finally": hintTry,
	"import": hintImport, "from": hintImport,
	"class":  hintClass,
	"is":     hintIs,
	"raise":  "Starlark has no raise: use fail(\"message\") to stop the program (attempt(...) catches it)",
	"with":   "Starlark has no with statement: call the tools directly",
	"assert": hintAssert,
	"async":  hintAsync, "await": hintAsync,
	"yield":  "Starlark has no generators: build and return a list",
	"global": hintGlobal, "nonlocal": hintGlobal,
	"del":  "Starlark has no del: remove an item with d.pop(key) or list.remove(x)",
	"'**'": "Starlark has no ** power operator: multiply (x * x), or loop",
}

const (
	hintAssert = "Starlark has no assert: write if not cond: fail(\"message\")"
	hintAsync  = "Starlark has no async/await: a tool call blocks; use parallel(f1, f2, ...) to run calls at once"
	hintGlobal = "Starlark has no global/nonlocal: top-level code may reassign globals; inside a function keep state in a dict or list (state[\"n\"] += 1)"
)

var gotToken = regexp.MustCompile(`^got ([^ ]+), want`)

// lineHints answer a parse error by the text of its line.
var lineHints = []struct {
	re   *regexp.Regexp
	hint string
}{
	{regexp.MustCompile(`(^|[^A-Za-z0-9_])[fF][rR]?["']`), hintFStr},
	{regexp.MustCompile(`^\s*(try\s*:|except\b|finally\s*:)`), hintTry},
	{regexp.MustCompile(`^\s*(import\s|from\s+\S+\s+import\b)`), hintImport},
	{regexp.MustCompile(`^\s*assert\b`), hintAssert},
	{regexp.MustCompile(`:=`), "Starlark has no := operator: assign on its own line first"},
}

// parseHint is ". hint" for a parse error on line, or "".
func parseHint(line, msg string) string {
	if m := gotToken.FindStringSubmatch(msg); m != nil {
		if h, ok := keywordHints[m[1]]; ok {
			return ". " + h
		}
	}
	for _, h := range lineHints {
		if h.re.MatchString(line) {
			return ". " + h.hint
		}
	}
	return ""
}

// nameHints answer an undefined name that is a Python builtin or module.
var nameHints = map[string]string{
	"isinstance": `use type(x) == "dict" (or "list", "string", "int", "float", "bool", "NoneType")`,
	"true":       "use True", "false": "use False", "null": "use None", "none": "use None",
	"Exception": "use fail(\"message\") to stop the program, attempt(...) to catch a failure",
	"open":      "programs cannot open files: use the tools",
	"pow":       "multiply (x * x), or loop",
}

var pyModules = map[string]bool{"os": true, "sys": true, "re": true, "math": true, "time": true, "datetime": true, "random": true, "collections": true, "itertools": true, "subprocess": true, "requests": true, "asyncio": true}

// resolveHint adds a suggestion to a resolve error.
func (e *engine) resolveHint(line, msg string) string {
	name, ok := strings.CutPrefix(msg, "undefined: ")
	if !ok {
		return parseHint(line, msg)
	}
	if strings.Contains(name, "(did you mean") {
		return ""
	}
	if h, ok := nameHints[name]; ok {
		return ": " + h
	}
	if strings.HasSuffix(name, "Error") {
		return ": " + nameHints["Exception"]
	}
	if pyModules[name] {
		mods := "none"
		if len(e.moduleNames) > 0 {
			mods = strings.Join(e.moduleNames, ", ")
		}
		return ": there is no standard library; the predeclared tool modules are " + mods
	}
	names := append([]string{}, e.moduleNames...)
	for k := range e.predeclared {
		names = append(names, k)
	}
	names = append(names, starlark.Universe.Keys()...)
	sort.Strings(names)
	return suggest(name, names)
}

// static checks tool uses the resolver cannot: module.function exists,
// tool calls pass keyword arguments, call("literal") names a tool. It
// returns the messages and the first one's line.
func (e *engine) static(f *syntax.File) ([]string, int) {
	var msgs []string
	first := 0
	add := func(pos syntax.Position, msg string) {
		if first == 0 {
			first = int(pos.Line)
		}
		msgs = append(msgs, fmt.Sprintf("line %d: %s", pos.Line, msg))
	}
	module := func(x syntax.Expr) (string, bool) {
		id, ok := x.(*syntax.Ident)
		if !ok {
			return "", false
		}
		b, ok := id.Binding.(*resolve.Binding)
		if !ok || b.Scope != resolve.Predeclared || e.modules[id.Name] == nil {
			return "", false
		}
		return id.Name, true
	}
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.LoadStmt:
			add(n.Load, "load is not available. "+hintImport)
		case *syntax.DotExpr:
			m, ok := module(n.X)
			if !ok {
				break
			}
			if e.modules[m][n.Name.Name] == nil {
				fns := e.functions(m)
				near := nearest(n.Name.Name, fns, 3)
				msg := fmt.Sprintf("module %s has no function %s", m, n.Name.Name)
				if len(near) > 0 {
					msg += " (did you mean " + m + "." + strings.Join(near, " or "+m+".") + "?)"
				}
				if len(fns) <= 12 {
					msg += "; its functions are " + strings.Join(fns, ", ")
				}
				add(n.Name.NamePos, msg)
			}
		case *syntax.CallExpr:
			if dot, ok := n.Fn.(*syntax.DotExpr); ok {
				if m, ok := module(dot.X); ok && e.modules[m][dot.Name.Name] != nil && positional(n.Args) > 0 {
					name := m + "." + dot.Name.Name
					add(n.Lparen, fmt.Sprintf("%s takes keyword arguments only: pass arguments by name, as %s(name=value, ...)", name, name))
				}
			}
			if id, ok := n.Fn.(*syntax.Ident); ok && id.Name == "call" && len(n.Args) > 0 {
				if b, ok := id.Binding.(*resolve.Binding); ok && b.Scope == resolve.Predeclared {
					if positional(n.Args) > 1 {
						add(n.Lparen, `call takes the tool's name, then keyword arguments only: call("tool_name", name=value, ...)`)
					}
					if lit, ok := n.Args[0].(*syntax.Literal); ok && lit.Token == syntax.STRING {
						if name, _ := lit.Value.(string); e.tools[name] == nil {
							add(lit.TokenPos, fmt.Sprintf("call: no tool %q%s", name, suggest(name, e.toolNames)))
						}
					}
				}
			}
		}
		return true
	})
	return msgs, first
}

// positional counts the positional arguments of a call (x and *x).
func positional(args []syntax.Expr) int {
	n := 0
	for _, a := range args {
		if b, ok := a.(*syntax.BinaryExpr); ok && b.Op == syntax.EQ {
			continue
		}
		if u, ok := a.(*syntax.UnaryExpr); ok && u.Op == syntax.STARSTAR {
			continue
		}
		n++
	}
	return n
}

// nesting is the deepest bracket nesting in src outside strings and
// comments, and its line. It is a cheap guard run before the parser.
func nesting(src string) (line, depth int) {
	cur, ln := 0, 1
	for i := 0; i < len(src); i++ {
		switch c := src[i]; c {
		case '\n':
			ln++
		case '#':
			for i < len(src) && src[i] != '\n' {
				i++
			}
			i--
		case '(', '[', '{':
			cur++
			if cur > depth {
				depth, line = cur, ln
			}
		case ')', ']', '}':
			if cur > 0 {
				cur--
			}
		case '"', '\'':
			q := string(c)
			if strings.HasPrefix(src[i:], q+q+q) {
				q = q + q + q
			}
			j := i + len(q)
			for j < len(src) && !strings.HasPrefix(src[j:], q) {
				if src[j] == '\\' {
					j++
				} else if src[j] == '\n' {
					if len(q) == 1 {
						break // unterminated: the parser reports it
					}
					ln++
				}
				j++
			}
			if j < len(src) && src[j] == '\n' {
				i = j - 1 // the outer loop counts the newline
			} else {
				i = j + len(q) - 1
			}
		}
	}
	return line, depth
}

// nearest returns up to n candidates closest to name by edit distance
// (case folded), nearest first, ties in candidates' (sorted) order; only
// those within about a third of the name's length.
func nearest(name string, candidates []string, n int) []string {
	type cand struct {
		s string
		d int
	}
	var cs []cand
	max := 1 + len(name)/3
	lname := strings.ToLower(name)
	for _, c := range candidates {
		lc := strings.ToLower(c)
		d := levenshtein(lname, lc)
		if strings.Contains(lc, lname) || strings.Contains(lname, lc) && len(lc) >= 3 {
			d = min(d, 1)
		}
		if d <= max && c != name {
			cs = append(cs, cand{c, d})
		}
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].d < cs[j].d })
	var out []string
	for i := 0; i < len(cs) && i < n; i++ {
		out = append(out, cs[i].s)
	}
	return out
}

func levenshtein(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 1 << 20
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
