package expr

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Template is a JSON value (decoded: nil, bool, numbers, string, []any,
// map[string]any) whose strings may hold ${{ expr }} placeholders, such as
// the arguments of a plan step:
//
//	path: "${{ vars.dir }}/README.md"    interpolated: "/tmp/x/README.md"
//	names: ${{ steps.a.result.names }}   the whole string: any value
//
// A string that is exactly one placeholder becomes the expression's value,
// of whatever type. A placeholder inside a longer string is replaced by its
// value formatted: a string as it is, anything else as JSON. "$${{" writes
// a literal "${{". Map keys are taken as written.
//
// A placeholder ends at the first "}}" outside string literals and
// brackets, so {"a": {"b": 1}} inside one is fine. A Template is immutable
// and safe for concurrent use.
type Template struct {
	root         tnode
	placeholders []Placeholder
}

// Placeholder is one ${{ expr }} of a template.
type Placeholder struct {
	// Path locates the string inside the template's value: "" for the
	// value itself, "content", "items[0].name".
	Path    string
	Program *Program
}

// TemplateError is a placeholder that does not compile, or a value a
// template cannot hold.
type TemplateError struct {
	// Path is as Placeholder.Path.
	Path string
	// Expr is the placeholder's expression; empty when the problem is not
	// with an expression (an unterminated placeholder, a value that is not
	// JSON).
	Expr string
	Err  error
}

func (e *TemplateError) Error() string {
	var b strings.Builder
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	if e.Expr != "" {
		b.WriteString("${{ " + e.Expr + " }}: ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *TemplateError) Unwrap() error { return e.Err }

// TemplateErrors is every problem CompileTemplate found, in the order of
// the value (map keys sorted).
type TemplateErrors []*TemplateError

func (es TemplateErrors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// CompileTemplate compiles every placeholder in v as an expression of kind
// k. The error, if any, is TemplateErrors, each naming the path inside v:
// `content: ${{ steps.x.result. }}: Syntax error: …`.
func CompileTemplate(k Kind, v any) (*Template, error) {
	c := &tcompiler{kind: k}
	root := c.node(v, "")
	if len(c.errs) > 0 {
		return nil, c.errs
	}
	return &Template{root: root, placeholders: c.placeholders}, nil
}

// Placeholders lists the template's placeholders in the order of the value
// (map keys sorted).
func (t *Template) Placeholders() []Placeholder { return slices.Clone(t.placeholders) }

// References lists, sorted, the step IDs the template's expressions refer
// to as steps.<id> (or steps["id"]), so that a loader can check that a step
// uses only steps before it. An expression that reaches steps otherwise
// (steps[vars.which]) is visible through Placeholders and Program.Fields.
func (t *Template) References() []string {
	var ids []string
	for _, p := range t.placeholders {
		fs, _ := p.Program.Fields("steps")
		ids = append(ids, fs...)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// Eval evaluates the template over vars (as Program.Eval) and returns a new
// value; the template's own value is not changed. The error names the path
// of the placeholder that failed.
func (t *Template) Eval(vars map[string]any) (any, error) { return t.root.eval(vars) }

type tnode interface {
	eval(vars map[string]any) (any, error)
}

// literal is a value without placeholders (strings already unescaped).
type literal struct{ v any }

func (l literal) eval(map[string]any) (any, error) { return l.v, nil }

// whole is a string that is exactly one placeholder.
type whole struct {
	path string
	prg  *Program
}

func (w whole) eval(vars map[string]any) (any, error) {
	v, err := w.prg.Eval(vars)
	if err != nil {
		return nil, &TemplateError{Path: w.path, Expr: w.prg.src, Err: err}
	}
	return v, nil
}

// interpolated is a string with placeholders among text: text[0] prg[0]
// text[1] … prg[n-1] text[n].
type interpolated struct {
	path string
	text []string
	prgs []*Program
}

func (s interpolated) eval(vars map[string]any) (any, error) {
	var b strings.Builder
	for i, p := range s.prgs {
		b.WriteString(s.text[i])
		v, err := p.Eval(vars)
		if err != nil {
			return nil, &TemplateError{Path: s.path, Expr: p.src, Err: err}
		}
		if str, ok := v.(string); ok {
			b.WriteString(str)
			continue
		}
		j, err := json.Marshal(v)
		if err != nil {
			return nil, &TemplateError{Path: s.path, Expr: p.src, Err: err}
		}
		b.Write(j)
	}
	b.WriteString(s.text[len(s.prgs)])
	return b.String(), nil
}

type object struct {
	keys []string
	vals []tnode
}

func (o object) eval(vars map[string]any) (any, error) {
	out := make(map[string]any, len(o.keys))
	for i, k := range o.keys {
		v, err := o.vals[i].eval(vars)
		if err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, nil
}

type array []tnode

func (a array) eval(vars map[string]any) (any, error) {
	out := make([]any, len(a))
	for i, n := range a {
		v, err := n.eval(vars)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

type tcompiler struct {
	kind         Kind
	errs         TemplateErrors
	placeholders []Placeholder
}

func (c *tcompiler) fail(path, expr string, err error) {
	c.errs = append(c.errs, &TemplateError{Path: path, Expr: expr, Err: err})
}

func (c *tcompiler) node(v any, path string) tnode {
	switch v := v.(type) {
	case nil, bool, float64, float32, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, json.Number:
		return literal{v}
	case string:
		return c.str(v, path)
	case map[string]any:
		o := object{keys: slices.Sorted(maps.Keys(v))}
		for _, k := range o.keys {
			o.vals = append(o.vals, c.node(v[k], joinPath(path, k)))
		}
		return o
	case []any:
		a := make(array, len(v))
		for i, el := range v {
			a[i] = c.node(el, fmt.Sprintf("%s[%d]", path, i))
		}
		return a
	}
	c.fail(path, "", fmt.Errorf("a %T is not a JSON value", v))
	return literal{}
}

func joinPath(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

func (c *tcompiler) str(s, path string) tnode {
	text, exprs, err := splitPlaceholders(s)
	if err != nil {
		c.fail(path, "", err)
		return literal{}
	}
	if len(exprs) == 0 {
		return literal{text[0]}
	}
	prgs := make([]*Program, len(exprs))
	ok := true
	for i, src := range exprs {
		p, err := Compile(c.kind, src)
		if err != nil {
			c.fail(path, src, err)
			ok = false
			continue
		}
		prgs[i] = p
		c.placeholders = append(c.placeholders, Placeholder{Path: path, Program: p})
	}
	if !ok {
		return literal{}
	}
	if len(prgs) == 1 && text[0] == "" && text[1] == "" {
		return whole{path: path, prg: prgs[0]}
	}
	return interpolated{path: path, text: text, prgs: prgs}
}

// IsPlaceholder reports whether s is exactly one ${{ expr }}, and returns
// expr. A plan's when may be written either way.
func IsPlaceholder(s string) (string, bool) {
	text, exprs, err := splitPlaceholders(s)
	if err != nil || len(exprs) != 1 || text[0] != "" || text[1] != "" {
		return "", false
	}
	return exprs[0], true
}

// splitPlaceholders splits s into the text around its placeholders
// (unescaped, one more than the expressions) and their expressions
// (trimmed).
func splitPlaceholders(s string) (text, exprs []string, err error) {
	var b strings.Builder
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${{"):
			b.WriteString("${{")
			i += 4
		case strings.HasPrefix(s[i:], "${{"):
			start := i + 3
			end := placeholderEnd(s, start)
			if end < 0 {
				return nil, nil, fmt.Errorf("%q has no closing }}; end the expression with }} (write $${{ for a literal ${{)", s[i:min(len(s), i+40)])
			}
			src := strings.TrimSpace(s[start:end])
			if src == "" {
				return nil, nil, errors.New("${{ }} is empty; write an expression between ${{ and }}")
			}
			text = append(text, b.String())
			b.Reset()
			exprs = append(exprs, src)
			i = end + 2
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	return append(text, b.String()), exprs, nil
}

// placeholderEnd returns the index of the "}}" that closes a placeholder
// whose expression starts at s[start], or -1: the first "}}" outside string
// literals and outside brackets the expression opened.
func placeholderEnd(s string, start int) int {
	depth := 0
	for i := start; i < len(s); i++ {
		switch ch := s[i]; ch {
		case '"', '\'':
			// Skip the literal; a backslash escapes the next byte.
			for i++; i < len(s) && s[i] != ch; i++ {
				if s[i] == '\\' {
					i++
				}
			}
			if i >= len(s) {
				return -1
			}
		case '{', '(', '[':
			depth++
		case ')', ']':
			depth--
		case '}':
			if depth <= 0 && strings.HasPrefix(s[i:], "}}") {
				return i
			}
			depth--
		}
	}
	return -1
}
