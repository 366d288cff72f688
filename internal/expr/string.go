package expr

import (
	"errors"
	"fmt"

	"cel.dev/cel-go/cel"
)

// ErrNotString: CompileString's expression does not give a string.
var ErrNotString = errors.New("not string")

// CompileString compiles src as an expression whose value is a string (a
// resource lock's name): its type must be string, or dyn (EvalString then
// checks it).
func CompileString(k Kind, src string) (*Program, error) {
	p, err := Compile(k, src)
	if err != nil {
		return nil, err
	}
	if !p.out.IsExactType(cel.StringType) && !p.out.IsExactType(cel.DynType) {
		return nil, &compileError{
			msg:      fmt.Sprintf(`the expression is of type %s, not string; make it one, e.g. "file:" + string(args.path)`, p.out),
			mistakes: []error{ErrNotString},
		}
	}
	return p, nil
}

// EvalString evaluates the program and checks that its value is a string.
func (p *Program) EvalString(vars map[string]any) (string, error) {
	v, err := p.Eval(vars)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("the value is %T, not a string", v)
	}
	return s, nil
}
