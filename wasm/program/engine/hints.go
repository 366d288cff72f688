package engine

import (
	"regexp"
	"strings"
)

// runtimeHints turn the runtime errors Python habits cause into a fix.
var runtimeHints = []struct {
	re   *regexp.Regexp
	hint string
}{
	{regexp.MustCompile(`list has no \.sort field`), `lists have no .sort(): use x = sorted(x, key=lambda v: ..., reverse=True)`},
	{regexp.MustCompile(`format spec features not supported`), `str.format has no format specs: use "%.2f" % x (or "%d", "%5s")`},
	{regexp.MustCompile(`print: unexpected keyword argument`), `print takes sep= only: build the line first, as print(", ".join(parts))`},
	{regexp.MustCompile(`string has no \.contains field`), `use "needle" in text`},
	{regexp.MustCompile(`has no \.(length|size|len|count) field or method`), `use len(x)`},
	{regexp.MustCompile(`list has no \.push field`), `use .append(x)`},
	{regexp.MustCompile(`dict has no \.has_key field`), `use key in d`},
	{regexp.MustCompile(`dict has no \.(\w+) field or method`), `read dict entries as d["key"] or d.get("key")`},
	{regexp.MustCompile(`NoneType has no \.|unhandled index operation NoneType`), `the value is None: check it first (if x != None), or see what the tool returned with print(x)`},
	{regexp.MustCompile(`unknown binary op: string \+ (int|float)|unknown binary op: (int|float) \+ string`), `convert first: "n=" + str(n)`},
}

// runtimeHint is ". hint" for a runtime error message, or "".
func runtimeHint(msg string) string {
	for _, h := range runtimeHints {
		if h.re.MatchString(msg) && !strings.Contains(msg, h.hint) {
			return ". " + h.hint
		}
	}
	return ""
}
