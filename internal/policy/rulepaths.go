package policy

import (
	"slices"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

// conventionalPathArgs are argument names read as paths by paths(tool,
// args) even when the tool's declaration does not list them (a tool no
// manifest covers, a manifest that forgot one): the names the MCP
// reference filesystem server uses.
var conventionalPathArgs = []string{"path", "paths", "source", "destination"}

// pathsOverload is the one overload of paths, named for the cost estimate
// (cost.go).
const pathsOverload = "paths_tool_args"

// pathsFunction is the rule function paths(tool, args): every path a call
// names, so that a rule about files is written once for every tool and
// argument instead of one args.?x per argument name (a rule on args.path
// alone misses read_multiple_files' paths and move_file's destination).
// It lists the strings of the arguments named in tool.path_args (the
// manifest's path_args) and in conventionalPathArgs: an argument that is a
// string gives itself, a list its string elements; anything else gives
// nothing (the path check refuses it for a declared path argument).
func pathsFunction(toolType *cel.Type) cel.EnvOption {
	return cel.Function("paths",
		cel.Overload(pathsOverload, []*cel.Type{toolType, cel.MapType(cel.StringType, cel.DynType)}, cel.ListType(cel.StringType),
			cel.BinaryBinding(func(tool, args ref.Val) ref.Val {
				t, ok := tool.Value().(celTool)
				if !ok {
					return types.NewErr("paths: the first argument must be tool")
				}
				m, ok := args.(traits.Mapper)
				if !ok {
					return types.NewErr("paths: the second argument must be args")
				}
				return types.DefaultTypeAdapter.NativeToValue(callPaths(t.PathArgs, m))
			})))
}

// callPaths is what paths(tool, args) returns, given the declared path
// arguments.
func callPaths(declared []string, args traits.Mapper) []string {
	names := slices.Concat(declared, conventionalPathArgs)
	out := []string{}
	for i, name := range names {
		if slices.Contains(names[:i], name) {
			continue
		}
		v, found := args.Find(types.String(name))
		if !found {
			continue
		}
		switch v := v.(type) {
		case types.String:
			out = append(out, string(v))
		case traits.Lister:
			it := v.Iterator()
			for it.HasNext() == types.True {
				if s, ok := it.Next().(types.String); ok {
					out = append(out, string(s))
				}
			}
		}
	}
	return out
}
