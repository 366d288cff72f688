package guard

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// InspectDescription looks for prompt-injection markers in what a tool's
// listing tells the model (guard.descriptions.injection): its title,
// description, annotations' title, and every string of its input and
// output schemas (property descriptions, titles, enum values, defaults,
// examples), as the definition is served. Each rule is reported once per
// path; Action is left for the caller. A schema that does not encode as
// JSON is reported as the finding "injection-unreadable-schema" (what
// cannot be read cannot be cleared).
func InspectDescription(def *mcp.Tool) []Finding {
	if def == nil {
		return nil
	}
	var fs []Finding
	seen := map[[2]string]bool{}
	scan := func(path, s string) string {
		for _, m := range ScanInjection(s) {
			if k := [2]string{m.Rule, path}; !seen[k] {
				seen[k] = true
				fs = append(fs, Finding{Rule: m.Rule, Path: shortPath(path)})
			}
		}
		return s
	}
	scan("title", def.Title)
	scan("description", def.Description)
	if def.Annotations != nil {
		scan("annotations.title", def.Annotations.Title)
	}
	for _, sc := range []struct {
		path   string
		schema any
	}{{"inputSchema", def.InputSchema}, {"outputSchema", def.OutputSchema}} {
		if sc.schema == nil {
			continue
		}
		b, err := json.Marshal(sc.schema)
		var v any
		if err == nil {
			err = json.Unmarshal(b, &v)
		}
		if err != nil {
			fs = append(fs, Finding{Rule: InjectionPrefix + "unreadable-schema", Path: sc.path})
			continue
		}
		walk(sc.path, v, scan)
	}
	return fs
}

// maxPath bounds a finding's path: a hostile upstream's nesting must not
// make every log line, listing and history event it appears in huge.
const maxPath = 200

// shortPath is path, its middle elided when it is longer than maxPath.
func shortPath(path string) string {
	if len(path) <= maxPath {
		return path
	}
	head, tail := maxPath/2, len(path)-maxPath/2+10
	for head > 0 && !utf8.RuneStart(path[head]) { // whole characters only
		head--
	}
	for tail < len(path) && !utf8.RuneStart(path[tail]) {
		tail++
	}
	return path[:head] + "…" + path[tail:]
}
