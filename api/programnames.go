package api

// Code mode (issue 27): how the tools a caller may see are named inside a
// program, by the gateway (airlock_run_program) and by a plan's program
// step (PrepareStep) alike. An exposed tool "server__tool" is the function tool of the
// Starlark module server; a name without "__" is a function of the module
// "tools". Both parts are made identifiers the interpreter accepts, and
// two tools that end up with the same module.function are told apart by
// a suffix given in the order of their exposed names, so the table is the
// same on every gateway and in every replay.

import (
	"sort"
	"strconv"
	"strings"
)

// ProgramDefaultModule is the module of tools whose exposed name has no
// "__" (no server prefix).
const ProgramDefaultModule = "tools"

// starlarkKeywords are the words the Starlark scanner treats as tokens,
// reserved ones included: neither a module nor a function (an attribute)
// may be spelled so.
var starlarkKeywords = map[string]bool{
	"and": true, "break": true, "continue": true, "def": true, "elif": true, "else": true, "for": true,
	"if": true, "in": true, "lambda": true, "load": true, "not": true, "or": true, "pass": true,
	"return": true, "while": true,
	// Reserved by the spec (a parse error today or tomorrow).
	"as": true, "assert": true, "async": true, "await": true, "class": true, "del": true, "except": true,
	"finally": true, "from": true, "global": true, "import": true, "is": true, "nonlocal": true,
	"raise": true, "try": true, "with": true, "yield": true,
}

// programGlobals are the names a program sees besides the tool modules:
// Starlark's universe and code mode's builtins. A module so named would
// shadow one; a function (a module's attribute) shadows nothing, so only
// modules avoid them.
var programGlobals = map[string]bool{
	// Universe (go.starlark.net/starlark.Universe).
	"None": true, "True": true, "False": true, "abs": true, "any": true, "all": true, "bool": true,
	"bytes": true, "chr": true, "dict": true, "dir": true, "enumerate": true, "fail": true,
	"float": true, "getattr": true, "hasattr": true, "hash": true, "int": true, "len": true,
	"list": true, "max": true, "min": true, "ord": true, "print": true, "range": true, "repr": true,
	"reversed": true, "set": true, "sorted": true, "str": true, "tuple": true, "type": true, "zip": true,
	// Code mode's builtins and the names the runner reads.
	"json": true, "struct": true, "call": true, "attempt": true, "parallel": true, "sum": true,
	"round": true, "main": true, "result": true, "inputs": true,
}

// programIdent makes s an identifier: every character outside
// [A-Za-z0-9_] becomes "_" (one per character, not per byte), a leading
// digit gets a "_" before it, and a keyword (or, for a module, a global
// name) gets a "_" after it.
func programIdent(s string, module bool) string {
	var b strings.Builder
	for _, r := range s {
		if r == '_' || r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	id := b.String()
	switch {
	case id == "":
		return "_"
	case id[0] >= '0' && id[0] <= '9':
		id = "_" + id
	}
	if starlarkKeywords[id] || (module && programGlobals[id]) {
		id += "_"
	}
	return id
}

// ProgramName splits an exposed tool name into its module and function.
func ProgramName(exposed string) (module, function string) {
	server, tool, ok := strings.Cut(exposed, "__")
	if !ok {
		return ProgramDefaultModule, programIdent(exposed, false)
	}
	return programIdent(server, true), programIdent(tool, false)
}

// NameProgramTools names the tools of a program's table (see the file
// comment), sorted by exposed name. Two tools whose module.function is the
// same, ignoring case (the task refuses a table where "FS.Read" and
// "fs.read" both name a function: a model would mix them up), keep it for
// the first in that order; the later ones get "_2", "_3", ... on the
// function (the first free).
func NameProgramTools(tools []ProgramTool) []ProgramTool {
	out := append([]ProgramTool(nil), tools...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	used := make(map[string]bool, len(out))
	for i := range out {
		mod, fn := ProgramName(out[i].Name)
		name := fn
		for n := 2; used[strings.ToLower(mod+"."+name)]; n++ {
			name = fn + "_" + strconv.Itoa(n)
		}
		used[strings.ToLower(mod+"."+name)] = true
		out[i].Module, out[i].Function = mod, name
	}
	return out
}

// IsStarlarkKeyword reports whether s is a Starlark keyword or reserved
// word, which no module, function or keyword argument can be spelled as.
func IsStarlarkKeyword(s string) bool { return starlarkKeywords[s] }
