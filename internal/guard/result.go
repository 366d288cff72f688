package guard

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Action is what the guard does with a result holding secrets
// (manifests' guard.results.secrets).
type Action string

const (
	// Redact replaces each secret with its Marker and delivers the rest.
	Redact Action = "redact"
	// Block replaces the whole result with an error result naming the
	// kinds of secret and where they were, never the values.
	Block Action = "block"
	// Off delivers the result as the tool returned it.
	Off Action = "off"
	// RequireApproval sends a call whose arguments hold a finding to an
	// approver (arguments only: the worker's decision becomes
	// require_approval; the approver sees the finding, the value masked).
	RequireApproval Action = "require_approval"
	// Annotate delivers the text unchanged and records the finding (any
	// category of a result; secrets and personal data in arguments).
	Annotate Action = "annotate"
)

// Finding is one secret found in a result: the rule that found it, where
// (a path into the CallToolResult) and what was done (an Action). Never
// the value. The worker records it as an api.Finding.
type Finding struct {
	Rule, Path, Action string
}

// Inspect looks for secrets in a tool's result, in every text content
// (text, and the text of embedded resources) and every string of its
// structuredContent, and applies action: res is changed in place
// (Redact), or replaced (Block: the returned result is the error result
// to deliver instead). The findings say what was found where, never the
// value. With Off, or nothing found, res is returned as it was.
//
// Only values are inspected: object keys of structuredContent, _meta and
// binary content (images, audio, blobs) are not (issue 30 §1 leaves them
// for later).
func Inspect(res *mcp.CallToolResult, action Action, tool string) (*mcp.CallToolResult, []Finding) {
	return InspectPolicy(res, Policy{Secrets: action}, tool)
}

// Policy is what the guard does with each category it finds in a result:
// secrets (Rules), personal data (PersonalRules) and prompt-injection
// markers (InjectionRules). "" is Off.
type Policy struct {
	Secrets, PersonalData, Injection Action
}

// on reports whether a inspects at all.
func on(a Action) bool { return a != "" && a != Off }

// withholds reports whether a finding under a keeps its value from
// being delivered: Redact and Block; a RequireApproval in a result is
// treated as Block (validation refuses it there; fail closed).
func withholds(a Action) bool { return a == Redact || a == Block || a == RequireApproval }

// category is one kind of finding: its scanner, what a block message
// calls it and the setting that decides it.
type category struct {
	scan    func(string) []Match
	what    string
	setting string
	// once records one finding per rule and path (a result full of
	// invisible characters is one finding, not a million).
	once bool
}

var categories = [...]category{
	{Scan, "secrets", "guard.results.secrets", false},
	{ScanPersonal, "personal data", "guard.results.personal_data", false},
	{ScanInjection, "prompt-injection markers", "guard.results.injection", true},
}

func (p Policy) actions() [len(categories)]Action {
	return [...]Action{p.Secrets, p.PersonalData, p.Injection}
}

// InspectPolicy is Inspect with an action per category: each category's
// matches are redacted or recorded by its own action, and the result is
// blocked when a category whose action is Block found anything (the
// findings of the other category keep their own action).
func InspectPolicy(res *mcp.CallToolResult, p Policy, tool string) (*mcp.CallToolResult, []Finding) {
	actions := p.actions()
	active := false
	for _, a := range actions {
		active = active || on(a)
	}
	if res == nil || !active {
		return res, nil
	}
	var fs []Finding
	blockedBy := map[int]bool{}
	recorded := map[[2]string]bool{}
	scan := func(path, s string) string {
		var redact []Match
		for c, a := range actions {
			if !on(a) {
				continue
			}
			for _, m := range categories[c].scan(s) {
				switch {
				case a == Redact:
					redact = append(redact, m)
				case withholds(a):
					blockedBy[c] = true
				}
				if k := [2]string{m.Rule, path}; !categories[c].once || !recorded[k] {
					recorded[k] = true
					fs = append(fs, Finding{Rule: m.Rule, Path: shortPath(path), Action: string(a)})
				}
			}
		}
		return RedactText(s, merge(redact))
	}
	for i, c := range res.Content {
		p := "content[" + strconv.Itoa(i) + "]"
		switch c := c.(type) {
		case *mcp.TextContent:
			c.Text = scan(p+".text", c.Text)
		case *mcp.EmbeddedResource:
			if c.Resource != nil {
				c.Resource.Text = scan(p+".resource.text", c.Resource.Text)
			}
		}
	}
	if res.StructuredContent != nil {
		res.StructuredContent = walk("structuredContent", res.StructuredContent, scan)
	}
	if len(blockedBy) == 0 {
		return res, fs
	}
	return blocked(tool, fs, blockedBy), fs
}

// walk applies scan to every string in v (JSON decoded as any), returning
// the value with the strings replaced.
func walk(path string, v any, scan func(path, s string) string) any {
	switch v := v.(type) {
	case string:
		return scan(path, v)
	case []any:
		for i, e := range v {
			v[i] = walk(path+"["+strconv.Itoa(i)+"]", e, scan)
		}
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys) // findings in a stable order
		for _, k := range keys {
			v[k] = walk(path+"."+k, v[k], scan)
		}
	}
	return v
}

// blocked is the error result that replaces a blocked result: it names
// the findings of the categories that block, never a value.
func blocked(tool string, fs []Finding, by map[int]bool) *mcp.CallToolResult {
	var where []string
	seen := map[string]bool{}
	for _, f := range fs {
		w := f.Rule + " at " + f.Path
		if withholds(Action(f.Action)) && f.Action != string(Redact) && !seen[w] {
			seen[w] = true
			where = append(where, w)
		}
	}
	var what, settings []string
	for c := range categories {
		if by[c] {
			what = append(what, categories[c].what)
			settings = append(settings, categories[c].setting)
		}
	}
	text := fmt.Sprintf("airlock withheld the result of %s: it holds %s (%s). The values are not shown; ask the tool for data without them, or ask an operator to change %s for this tool.",
		tool, strings.Join(what, " and "), strings.Join(where, ", "), strings.Join(settings, " and "))
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}
