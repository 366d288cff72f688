package oauth

import (
	"context"
	"fmt"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/ext"
)

// roleCostLimit bounds one evaluation of a role condition.
const roleCostLimit = 100000

// roleTimeout bounds one evaluation in time, in case a comprehension slips
// past the cost limit.
const roleTimeout = 100 * time.Millisecond

type compiledRole struct {
	roles []string
	prg   cel.Program
}

var roleEnv = func() *cel.Env {
	env, err := cel.NewEnv(
		cel.Variable("claims", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("scopes", cel.ListType(cel.StringType)),
		cel.Variable("issuer", cel.StringType),
		ext.Strings(),
		cel.OptionalTypes(),
	)
	if err != nil {
		panic(err) // programmer error: the declarations above are fixed
	}
	return env
}()

// CompileRole compiles a role condition: a CEL expression of type bool over
// claims (the token's claims, map(string, dyn)), scopes (list(string)) and
// issuer (the issuer URL).
func CompileRole(when string) (cel.Program, error) {
	ast, iss := roleEnv.Compile(when)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	if ast.OutputType() != cel.BoolType {
		return nil, fmt.Errorf("is of type %s; write a condition (bool), e.g. \"admins\" in claims.groups", ast.OutputType())
	}
	return roleEnv.Program(ast, cel.CostLimit(roleCostLimit), cel.InterruptCheckFrequency(100))
}

func (r compiledRole) eval(ctx context.Context, vars map[string]any) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, roleTimeout)
	defer cancel()
	out, _, err := r.prg.ContextEval(ctx, vars)
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	return ok && b, nil
}
