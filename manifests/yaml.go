package manifests

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Lines maps a field path, as used in Problem.Field ("tools.write_file.risk",
// "tools.write_file.redact[0]"), to the line it was written on. The loader
// keeps it so that problems found after decoding still point into the file.
type Lines map[string]int

// Line returns the line of path or, when the field is absent (a missing
// required field), the line of its nearest ancestor that is present; 0 when
// nothing is known.
func (l Lines) Line(path string) int {
	for {
		if n, ok := l[path]; ok {
			return n
		}
		if path == "" {
			return 0
		}
		path = parentPath(path)
	}
}

// Has reports whether path was written in the file. Validation uses it to
// tell an explicit zero ("quorum: 0") from an omitted field.
func (l Lines) Has(path string) bool {
	_, ok := l[path]
	return ok
}

func parentPath(p string) string {
	if strings.HasSuffix(p, "]") {
		if i := strings.LastIndexByte(p, '['); i >= 0 {
			return p[:i]
		}
	}
	if i := strings.LastIndexByte(p, '.'); i >= 0 {
		return p[:i]
	}
	return ""
}

func joinPath(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// DecodeYAML decodes one YAML document into out (a pointer to a struct with
// yaml tags) strictly: unknown fields, duplicate keys, values of the wrong
// kind and durations without a unit are problems, all of them reported, each
// with its line and field path. It only decodes; validating the values is the
// caller's separate step. The returned Lines locate every field that was
// written. Unless the YAML itself is malformed, out holds whatever could be
// decoded even when there are problems, so that a caller can still validate
// the rest and report everything in one run (see WithoutDecoded).
//
// It is exported because the configuration loader (internal/config) reads
// airlock.yaml with the same rules.
func DecodeYAML(file string, data []byte, out any) (Lines, []Problem) {
	rv := reflect.ValueOf(out)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return nil, []Problem{{File: file, Msg: fmt.Sprintf("internal error: cannot decode into %T", out)}}
	}

	if p, ok := notText(file, data); !ok {
		return nil, []Problem{p}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			// An empty file: every required field is reported missing, at
			// line 1 since there is no better one.
			return Lines{"": 1}, nil
		}
		return nil, []Problem{syntaxProblem(file, err)}
	}
	var second yaml.Node
	if err := dec.Decode(&second); err == nil {
		return nil, []Problem{{File: file, Line: second.Line, Msg: "the file holds more than one YAML document; keep one per file (remove the ---)"}}
	} else if !errors.Is(err, io.EOF) {
		return nil, []Problem{syntaxProblem(file, err)}
	}

	doc := &root
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return Lines{"": 1}, nil
		}
		doc = doc.Content[0]
	}
	d := &decodeState{file: file, lines: Lines{"": doc.Line}}
	d.walk(doc, rv.Type().Elem(), "")
	// yaml.v3 skips values of the wrong type and carries on, so this decodes
	// everything the walk did not object to.
	err := doc.Decode(out)
	if len(d.problems) > 0 {
		return d.lines, d.problems // they say better what err says
	}
	// The walk checks everything yaml.v3 rejects, so this is not expected;
	// if it happens, yaml.v3's messages still carry line numbers.
	if err != nil {
		return d.lines, decodeErrorProblems(file, err)
	}
	return d.lines, nil
}

// WithoutDecoded drops from validated the problems on fields that already
// have a decode problem, or lie under one: a field whose value could not be
// decoded is zero, and "is required" would only repeat the decode problem.
func WithoutDecoded(validated, decoded []Problem) []Problem {
	var out []Problem
next:
	for _, v := range validated {
		for _, d := range decoded {
			if d.File == v.File && d.Field != "" && (v.Field == d.Field ||
				strings.HasPrefix(v.Field, d.Field+".") || strings.HasPrefix(v.Field, d.Field+"[")) {
				continue next
			}
		}
		out = append(out, v)
	}
	return out
}

var yamlLineRE = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

func syntaxProblem(file string, err error) Problem {
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		n, _ := strconv.Atoi(m[1])
		return Problem{File: file, Line: n, Msg: "invalid YAML: " + m[2]}
	}
	// yaml.v3 names no line for some errors (bad encodings, mostly caught
	// before by notText); line 1 is where an editor should look first.
	return Problem{File: file, Line: 1, Msg: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
}

// notText finds the first thing that makes data not YAML text, a byte that
// is not UTF-8 or a control character YAML forbids, and reports it at its
// line and column; yaml.v3 reports either without a line. A UTF-16 file,
// which starts with its byte order mark, is left to yaml.v3, which reads it.
func notText(file string, data []byte) (Problem, bool) {
	if bytes.HasPrefix(data, []byte{0xFE, 0xFF}) || bytes.HasPrefix(data, []byte{0xFF, 0xFE}) {
		return Problem{}, true
	}
	line, col := 1, 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			return Problem{File: file, Line: line, Msg: fmt.Sprintf(
				"the file is not UTF-8 text: byte 0x%02X at column %d is not UTF-8; save the file as UTF-8 (a manifest is YAML text, not a binary file)", data[i], col)}, false
		case r == '\n':
			line, col = line+1, 0
		case forbiddenInYAML(r):
			return Problem{File: file, Line: line, Msg: fmt.Sprintf(
				"the file is not YAML text: it holds the control character U+%04X at column %d; remove it (is this a binary file?)", r, col)}, false
		}
		i += size
		col++
	}
	return Problem{}, true
}

// forbiddenInYAML reports the characters YAML 1.2 does not allow in a
// stream (its c-printable production excludes them).
func forbiddenInYAML(r rune) bool {
	switch {
	case r == '\t' || r == '\n' || r == '\r' || r == 0x85:
		return false
	case r < 0x20 || r == 0x7F || (r >= 0x80 && r <= 0x9F):
		return true
	case r >= 0xD800 && r <= 0xDFFF, r == 0xFFFE, r == 0xFFFF:
		return true
	}
	return false
}

func decodeErrorProblems(file string, err error) []Problem {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return []Problem{syntaxProblem(file, err)}
	}
	var ps []Problem
	for _, e := range te.Errors {
		p := Problem{File: file, Line: 1, Msg: e}
		if m := yamlLineRE.FindStringSubmatch(e); m != nil {
			p.Line, _ = strconv.Atoi(m[1])
			p.Msg = m[2]
		}
		ps = append(ps, p)
	}
	return ps
}

type decodeState struct {
	file     string
	lines    Lines
	problems []Problem
	visits   int // nodes walked, aliases counted each time they are used
	// expanding holds the anchors whose aliases are being walked.
	expanding map[*yaml.Node]bool
}

// maxVisits bounds the walk: the walk follows aliases, so a small file of
// nested aliases ("billion laughs") could otherwise expand without end.
// Real manifests walk a few thousand nodes.
const maxVisits = 1_000_000

func (d *decodeState) add(n *yaml.Node, path, format string, args ...any) {
	d.problems = append(d.problems, Problem{File: d.file, Line: n.Line, Field: path, Msg: fmt.Sprintf(format, args...)})
}

var (
	unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()
	durationType    = reflect.TypeFor[Duration]()
	byteSizeType    = reflect.TypeFor[ByteSize]()
	anyType         = reflect.TypeFor[any]()
	lockType        = reflect.TypeFor[Lock]()
	sandboxType     = reflect.TypeFor[Sandbox]()
	networkType     = reflect.TypeFor[SandboxNetwork]()
)

// walk checks node n against Go type t the way yaml.v3 would decode it, but
// collects every problem with its field path instead of stopping or reporting
// "cannot unmarshal !!str into int", and records the line of every field.
func (d *decodeState) walk(n *yaml.Node, t reflect.Type, path string) {
	if d.visits++; d.visits > maxVisits {
		if d.visits == maxVisits+1 {
			d.add(n, path, "the document expands to too many values (aliases nested too deep); write it out")
		}
		return
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			return
		}
		// An alias inside its own anchor's value would expand without end
		// in a field of type any (a struct's fields run out).
		if d.expanding[n.Alias] {
			d.add(n, path, "the alias *%s is inside the value it refers to; write the value out", n.Value)
			return
		}
		n = n.Alias
	}
	if n.Anchor != "" {
		if d.expanding == nil {
			d.expanding = map[*yaml.Node]bool{}
		}
		d.expanding[n] = true
		defer delete(d.expanding, n)
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return // an explicit null leaves the zero value; validation decides if that is allowed
	}
	if t == lockType { // a key alone, or a mapping (locks.go)
		if n.Kind == yaml.ScalarNode {
			d.leaf(n, reflect.TypeFor[string](), path)
		} else {
			d.walk(n, reflect.TypeFor[lockFields](), path)
		}
		return
	}
	if t == sandboxType { // "off", "on", or a mapping (sandbox.go)
		if n.Kind == yaml.ScalarNode {
			if msg := sandboxScalar(n); msg != "" {
				d.add(n, path, "%s", msg)
			}
		} else {
			d.walk(n, reflect.TypeFor[sandboxFields](), path)
		}
		return
	}
	if t == networkType { // a mode word, or {allow: [...]} (sandbox.go)
		switch n.Kind {
		case yaml.MappingNode:
			d.walk(n, reflect.TypeFor[networkFields](), path)
		case yaml.SequenceNode:
			d.add(n, path, "expected none, host or a mapping, got a list; write the hosts under allow: network: {allow: [\"api.github.com:443\"]}")
		default:
			d.leaf(n, reflect.TypeFor[string](), path)
		}
		return
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		d.leaf(n, t, path)
		return
	}
	switch t.Kind() {
	case reflect.Interface:
		if t.NumMethod() == 0 {
			d.anyValue(n, path)
			return
		}
		d.leaf(n, t, path)
	case reflect.Pointer:
		d.walk(n, t.Elem(), path)
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			d.add(n, path, "expected a mapping (key: value lines), got %s", describeNode(n))
			return
		}
		fields := yamlFields(t)
		d.mapping(n, path, func(key *yaml.Node, val *yaml.Node, p string) {
			ft, ok := fields.types[key.Value]
			if !ok {
				d.add(key, p, "unknown field; %s", fields.suggest(key.Value))
				return
			}
			d.walk(val, ft, p)
		}, func(merged *yaml.Node) { d.walk(merged, t, path) })
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			d.add(n, path, "expected a mapping (key: value lines), got %s", describeNode(n))
			return
		}
		d.mapping(n, path, func(_ *yaml.Node, val *yaml.Node, p string) {
			d.walk(val, t.Elem(), p)
		}, func(merged *yaml.Node) { d.walk(merged, t, path) })
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			if n.Kind == yaml.ScalarNode {
				d.add(n, path, "expected a list, got %q; write [%s]", n.Value, n.Value)
			} else {
				d.add(n, path, "expected a list, got %s", describeNode(n))
			}
			return
		}
		for i, el := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			d.lines[p] = el.Line
			d.walk(el, t.Elem(), p)
		}
	default:
		d.leaf(n, t, path)
	}
}

// anyValue accepts any YAML value for a field of type any (free-form data,
// such as a plan's vars), recording the lines of nested keys and list
// elements so that problems found later can point into it. Mapping keys
// must be strings, so that the value can become JSON.
func (d *decodeState) anyValue(n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.MappingNode:
		d.mapping(n, path, func(key, val *yaml.Node, p string) {
			if key.ShortTag() != "!!str" {
				d.add(key, p, "key %s is not a string; quote it (%q) or use a list", key.Value, key.Value)
				return
			}
			d.walk(val, anyType, p)
		}, func(merged *yaml.Node) { d.walk(merged, anyType, path) })
	case yaml.SequenceNode:
		for i, el := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			d.lines[p] = el.Line
			d.walk(el, anyType, p)
		}
	}
}

// mapping visits the entries of a mapping node, recording lines, reporting
// duplicate keys, and handing "<<" merge keys to merge.
func (d *decodeState) mapping(n *yaml.Node, path string, entry func(key, val *yaml.Node, p string), merge func(*yaml.Node)) {
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		if key.Kind != yaml.ScalarNode {
			d.add(key, path, "keys must be plain strings, got %s", describeNode(key))
			continue
		}
		if key.ShortTag() == "!!merge" {
			if val.Kind == yaml.SequenceNode {
				for _, m := range val.Content {
					merge(m)
				}
			} else {
				merge(val)
			}
			continue
		}
		p := joinPath(path, key.Value)
		if first, dup := seen[key.Value]; dup {
			d.add(key, p, "defined twice (first at line %d); keep one", first)
			continue
		}
		seen[key.Value] = key.Line
		d.lines[p] = key.Line
		entry(key, val, p)
	}
}

// leaf checks a scalar by decoding it alone into a fresh value of type t, so
// the rules are exactly yaml.v3's (and Duration's) own.
func (d *decodeState) leaf(n *yaml.Node, t reflect.Type, path string) {
	if n.Kind != yaml.ScalarNode {
		d.add(n, path, "expected %s, got %s", describeType(t), describeNode(n))
		return
	}
	err := n.Decode(reflect.New(t).Interface())
	if err == nil {
		return
	}
	var te *yaml.TypeError
	if (t == durationType || t == byteSizeType) && errors.As(err, &te) && len(te.Errors) > 0 {
		msg := te.Errors[0]
		if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
			msg = m[2]
		}
		d.add(n, path, "%s", msg)
		return
	}
	d.add(n, path, "expected %s, got %s", describeType(t), describeNode(n))
}

func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return strconv.Quote(n.Value)
	}
	return "nothing"
}

func describeType(t reflect.Type) string {
	if t == durationType {
		return `a duration such as "30s"`
	}
	if t == byteSizeType {
		return `a size such as "64MiB"`
	}
	switch t.Kind() {
	case reflect.Pointer:
		return describeType(t.Elem())
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a single value"
	case reflect.Slice:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping (key: value lines)"
	}
	return "a " + t.String()
}

type structFields struct {
	names []string // in declaration order, for messages
	types map[string]reflect.Type
}

func yamlFields(t reflect.Type) structFields {
	f := structFields{types: map[string]reflect.Type{}}
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(sf.Name) // yaml.v3's default
		}
		f.names = append(f.names, name)
		f.types[name] = sf.Type
	}
	return f
}

// suggest names the closest known field for a typo, or lists them all.
func (f structFields) suggest(unknown string) string {
	if best := Closest(strings.ToLower(unknown), f.names); best != "" {
		return fmt.Sprintf("did you mean %q?", best)
	}
	return "known fields are " + strings.Join(f.names, ", ")
}

// Closest returns the entry of known that s is most likely a typo of (at
// most two edits away), or "". Problems use it to suggest a fix.
func Closest(s string, known []string) string {
	best, bestDist := "", 3 // more than two edits away is not a typo
	for _, k := range known {
		if d := editDistance(s, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

func editDistance(a, b string) int {
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

// UnmarshalYAML reads a Go duration string ("30s", "5m", "1h30m"). A bare
// number is rejected rather than guessed at: 30 could mean seconds or, as
// yaml.v3 would read it into a time.Duration, 30 nanoseconds.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, msg := parseDurationNode(n)
	if msg != "" {
		// A *yaml.TypeError lets yaml.v3 keep decoding and report the line.
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %s", n.Line, msg)}}
	}
	*d = v
	return nil
}

// MarshalYAML writes the duration as a string, so a snapshot dumped to YAML
// reads back.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

var (
	_ yaml.Unmarshaler = (*Duration)(nil)
	_ yaml.Marshaler   = Duration(0)
)

func parseDurationNode(n *yaml.Node) (Duration, string) {
	if n.Kind != yaml.ScalarNode {
		return 0, fmt.Sprintf(`expected a duration such as "30s", got %s`, describeNode(n))
	}
	if n.ShortTag() == "!!null" {
		return 0, ""
	}
	s := strings.TrimSpace(n.Value)
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return 0, fmt.Sprintf(`%s has no unit; write a duration such as "%ss" (s, m or h)`, s, s)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Sprintf(`%q is not a duration; write a number with a unit, such as "30s", "5m" or "1h30m"`, n.Value)
	}
	return Duration(v), ""
}
