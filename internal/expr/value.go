package expr

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/airlock-run/airlock/internal/jsoncanon"
)

// JSONValue decodes raw for use as a variable: objects become
// map[string]any, arrays []any, numbers exact as in policy rules
// (jsoncanon.Number: int64 or uint64 for integers, float64 otherwise, and
// an error for a number that has no exact value), so that an ID beyond
// 2^53 in a call's arguments or result reaches a compensation or a lock
// key as it was written. Empty input (nil, or only whitespace) is nil, as
// is JSON null.
func JSONValue(raw json.RawMessage) (any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("decoding JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("decoding JSON: invalid character after the top-level value")
	}
	v, err := jsoncanon.Exact(v)
	if err != nil {
		return nil, fmt.Errorf("decoding JSON: %w", err)
	}
	return v, nil
}

// ResultValue is the structured result of an MCP CallToolResult (given as
// its JSON): its structuredContent when present; otherwise the text of its
// text content items, concatenated, decoded when it is JSON and as a string
// when it is not. It is nil for empty input, for input that is not a
// CallToolResult and for a result without text. It does not look at
// isError: the caller decides what a failed call's result means.
func ResultValue(callToolResult json.RawMessage) any {
	if len(bytes.TrimSpace(callToolResult)) == 0 {
		return nil
	}
	var r struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		StructuredContent json.RawMessage `json:"structuredContent"`
	}
	if err := json.Unmarshal(callToolResult, &r); err != nil {
		return nil
	}
	if sc := bytes.TrimSpace(r.StructuredContent); len(sc) > 0 && string(sc) != "null" {
		if v, err := JSONValue(sc); err == nil {
			return v
		}
	}
	var text strings.Builder
	texts := 0
	for _, c := range r.Content {
		if c.Type == "text" {
			text.WriteString(c.Text)
			texts++
		}
	}
	if texts == 0 {
		return nil
	}
	s := text.String()
	if strings.TrimSpace(s) != "" {
		if v, err := JSONValue(json.RawMessage(s)); err == nil {
			return v
		}
	}
	return s
}

// Slug is a short name for a call that is safe in a file name: the first 16
// hex digits of the SHA-256 of task, a NUL byte and callID. It is the same
// for the same call on every run, so a compensation that names a file after
// it (call.slug) names the same file when it is retried.
func Slug(task, callID string) string {
	sum := sha256.Sum256([]byte(task + "\x00" + callID))
	return hex.EncodeToString(sum[:8])
}

// activation turns the caller's variables into what the program of kind k
// evaluates over.
func activation(k Kind, vars map[string]any) (map[string]any, error) {
	e, err := env(k)
	if err != nil {
		return nil, err
	}
	adapter := e.CELTypeAdapter()
	act := make(map[string]any, len(k.Variables()))
	for _, name := range k.Variables() {
		v, ok := vars[name]
		if !ok {
			continue
		}
		switch name {
		case "args", "vars":
			if v == nil {
				v = map[string]any{} // no arguments, as in policy
			}
		case "call":
			if v, err = toCall(v); err != nil {
				return nil, fmt.Errorf("variable call: %w", err)
			}
		case "principal":
			if v, err = toPrincipal(v); err != nil {
				return nil, fmt.Errorf("variable principal: %w", err)
			}
		case "task":
			if v, err = toTask(v); err != nil {
				return nil, fmt.Errorf("variable task: %w", err)
			}
		case "steps":
			if v, err = toSteps(v, adapter); err != nil {
				return nil, fmt.Errorf("variable steps: %w", err)
			}
		}
		act[name] = v
	}
	return act, nil
}

func toCall(v any) (Call, error) {
	switch v := v.(type) {
	case Call:
		return v, nil
	case *Call:
		if v != nil {
			return *v, nil
		}
		return Call{}, nil
	}
	var c Call
	err := fromStringMap(v, map[string]*string{"id": &c.ID, "task": &c.Task, "tool": &c.Tool, "slug": &c.Slug})
	return c, err
}

func toPrincipal(v any) (Principal, error) {
	switch v := v.(type) {
	case Principal:
		return v, nil
	case *Principal:
		if v != nil {
			return *v, nil
		}
		return Principal{}, nil
	case nil:
		return Principal{}, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return Principal{}, fmt.Errorf("a %T, want a map with keys name and roles", v)
	}
	var p Principal
	for k, val := range m {
		switch k {
		case "name":
			s, ok := val.(string)
			if !ok && val != nil {
				return Principal{}, fmt.Errorf("name is a %T, not a string", val)
			}
			p.Name = s
		case "roles":
			switch rs := val.(type) {
			case nil:
			case []string:
				p.Roles = rs
			case []any:
				for _, r := range rs {
					s, ok := r.(string)
					if !ok {
						return Principal{}, fmt.Errorf("roles holds a %T, not a string", r)
					}
					p.Roles = append(p.Roles, s)
				}
			default:
				return Principal{}, fmt.Errorf("roles is a %T, not a list of strings", val)
			}
		default:
			return Principal{}, fmt.Errorf("unknown key %q; the keys are name, roles", k)
		}
	}
	return p, nil
}

func toTask(v any) (Task, error) {
	switch v := v.(type) {
	case Task:
		return v, nil
	case *Task:
		if v != nil {
			return *v, nil
		}
		return Task{}, nil
	}
	var t Task
	err := fromStringMap(v, map[string]*string{"id": &t.ID, "plan": &t.Plan})
	return t, err
}

// fromStringMap copies the string values of m (map[string]string or
// map[string]any) into fields; a key fields lacks is an error, so that a
// misspelt key is not silently empty.
func fromStringMap(m any, fields map[string]*string) error {
	set := func(k string, v any) error {
		f, ok := fields[k]
		if !ok {
			return fmt.Errorf("unknown key %q; the keys are %s", k, strings.Join(slices.Sorted(maps.Keys(fields)), ", "))
		}
		s, ok := v.(string)
		if !ok && v != nil {
			return fmt.Errorf("%s is a %T, not a string", k, v)
		}
		*f = s
		return nil
	}
	switch m := m.(type) {
	case nil:
		return nil
	case map[string]string:
		for k, v := range m {
			if err := set(k, v); err != nil {
				return err
			}
		}
	case map[string]any:
		for k, v := range m {
			if err := set(k, v); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("a %T, want a map of strings", m)
	}
	return nil
}

func toSteps(v any, adapter types.Adapter) (map[string]StepState, error) {
	out := map[string]StepState{}
	add := func(id string, s any) error {
		var st StepState
		switch s := s.(type) {
		case StepState:
			st = s
		case *StepState:
			if s != nil {
				st = *s
			}
		case map[string]any:
			for k, f := range s {
				var ok bool
				switch k {
				case "result":
					st.Result, ok = f, true
				case "outcome":
					st.Outcome, ok = f.(string)
				case "reason":
					st.Reason, ok = f.(string)
				default:
					return fmt.Errorf("%s: unknown key %q; the keys are outcome, reason, result", id, k)
				}
				if !ok && f != nil {
					return fmt.Errorf("%s: %s is a %T, not a string", id, k, f)
				}
			}
		default:
			return fmt.Errorf("%s: a %T, want a StepState or a map", id, s)
		}
		// Converted here, with this package's adapter, so that maps in the
		// result iterate in sorted order (the native struct's own adapter
		// would not).
		if st.Result != nil {
			st.Result = adapter.NativeToValue(st.Result)
		}
		out[id] = st
		return nil
	}
	switch v := v.(type) {
	case nil:
	case map[string]StepState:
		for id, s := range v {
			if err := add(id, s); err != nil {
				return nil, err
			}
		}
	case map[string]*StepState:
		for id, s := range v {
			if err := add(id, s); err != nil {
				return nil, err
			}
		}
	case map[string]any:
		for id, s := range v {
			if err := add(id, s); err != nil {
				return nil, err
			}
		}
	default:
		return nil, fmt.Errorf("a %T, want a map of step IDs to StepState", v)
	}
	return out, nil
}

// sortedAdapter is the CEL type adapter of every environment: decoded JSON
// objects become maps that iterate in key order (cel-go's own iterate in Go
// map order, which varies from run to run).
type sortedAdapter struct{ types.Adapter }

func (a sortedAdapter) NativeToValue(v any) ref.Val {
	switch v := v.(type) {
	case map[string]any:
		return sortedMap{Mapper: types.NewStringInterfaceMap(a, v), m: v}
	case []any:
		// cel-go's own list would convert elements with its adapter, not
		// this one.
		return types.NewDynamicList(a, v)
	}
	return a.Adapter.NativeToValue(v)
}

// sortedMap is a map[string]any whose iterator visits keys in sorted order.
// Only Iterator is overridden; since sortedMap does not implement
// traits.Foldable, comprehensions use it too.
type sortedMap struct {
	traits.Mapper
	m map[string]any
}

func (s sortedMap) Iterator() traits.Iterator {
	keys := slices.Sorted(maps.Keys(s.m))
	return types.NewStringList(types.DefaultTypeAdapter, keys).Iterator()
}

// maxDepth bounds the nesting of a result, as encoding/json bounds its
// input.
const maxDepth = 10_000

var structValueType = reflect.TypeFor[*structpb.Value]()

// toJSON converts a CEL value to decoded JSON (see Program.Eval).
func toJSON(v ref.Val, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("the result is nested more than %d deep", maxDepth)
	}
	if types.IsUnknownOrError(v) {
		return nil, fmt.Errorf("the result is %v", v)
	}
	switch v := v.(type) {
	case types.Null:
		return nil, nil
	case types.Bool:
		return bool(v), nil
	case types.Int:
		return int64(v), nil
	case types.Uint:
		if uint64(v) > math.MaxInt64 {
			return uint64(v), nil
		}
		return int64(v), nil
	case types.Double:
		f := float64(v)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("%v is not a JSON number", f)
		}
		return f, nil
	case types.String:
		return string(v), nil
	case types.Bytes:
		return base64.StdEncoding.EncodeToString(v), nil
	case types.Timestamp:
		return v.Time.UTC().Format(time.RFC3339Nano), nil
	case types.Duration:
		return v.Duration.String(), nil
	case *types.Optional:
		if !v.HasValue() {
			return nil, nil
		}
		return toJSON(v.GetValue(), depth+1)
	case traits.Mapper:
		out := map[string]any{}
		for it := v.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			ks, ok := k.(types.String)
			if !ok {
				return nil, fmt.Errorf("the result has a map key of type %s (%v); JSON object keys are strings, convert it with string()", k.Type().TypeName(), k)
			}
			val, found := v.Find(k)
			if !found {
				continue
			}
			jv, err := toJSON(val, depth+1)
			if err != nil {
				return nil, err
			}
			out[string(ks)] = jv
		}
		return out, nil
	case traits.Lister:
		out := []any{}
		for it := v.Iterator(); it.HasNext() == types.True; {
			jv, err := toJSON(it.Next(), depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, jv)
		}
		return out, nil
	}
	// Objects (call, task, a step): through protobuf's JSON value, which
	// follows their json tags.
	native, err := v.ConvertToNative(structValueType)
	if err != nil {
		return nil, fmt.Errorf("a value of type %s cannot be represented as JSON", v.Type().TypeName())
	}
	b, err := protojson.Marshal(native.(*structpb.Value))
	if err != nil {
		return nil, fmt.Errorf("a value of type %s cannot be represented as JSON: %w", v.Type().TypeName(), err)
	}
	return JSONValue(b)
}

func describeVal(v ref.Val) string {
	if types.IsUnknownOrError(v) {
		return fmt.Sprint(v)
	}
	return "of type " + v.Type().TypeName()
}
