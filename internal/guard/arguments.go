package guard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/airlock-run/airlock/internal/jsoncanon"
)

// ArgumentFinding is a Finding in a call's arguments. Path is a JSONPath
// ("$.env.KEY", `$.items[0]`, `$["a.b"]`) in which a key that itself
// holds a finding is written masked; Keys are the object keys on that
// path, list indexes left out (as manifests' redact paths step through
// lists), for masking the value elsewhere (the approver's view). InKey
// says the finding is in the last key itself, not in its value.
type ArgumentFinding struct {
	Finding
	Keys  []string
	InKey bool
}

// InspectArguments looks for secrets and personal data, each by its
// action in p, in every string of a call's arguments (a JSON object, as
// the gateway canonicalised it) and in every object key. It returns the
// arguments to run: each finding whose action is Redact or Block
// replaced by its Marker (Block too, so that the record of a blocked call
// holds no value; the caller refuses the call), a key holding one renamed
// to its redacted form. Findings under RequireApproval and Annotate leave
// the value as it was. Numbers are kept exactly as written; nothing
// found returns args unchanged (the same bytes).
//
// Arguments that are not one JSON value, or repeat a key, are an error:
// the gateway refuses them before this runs.
func InspectArguments(args json.RawMessage, p Policy) (json.RawMessage, []ArgumentFinding, error) {
	if !on(p.Secrets) && !on(p.PersonalData) || len(args) == 0 {
		return args, nil, nil
	}
	if err := jsoncanon.CheckDuplicates(args); err != nil {
		return nil, nil, fmt.Errorf("arguments: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber() // numbers pass as written: 2^53+1 stays 2^53+1
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, nil, fmt.Errorf("arguments: %w", err)
	}
	w := argWalker{p: p}
	v = w.walk(v)
	if !w.changed {
		return args, w.fs, nil
	}
	out, err := jsoncanon.Marshal(v)
	if err != nil {
		return nil, nil, fmt.Errorf("arguments: %w", err)
	}
	return out, w.fs, nil
}

type argWalker struct {
	p       Policy
	fs      []ArgumentFinding
	changed bool
	// keys caches the scan of each object key: a list of objects repeats
	// the same few keys thousands of times.
	keys map[string]keyScan
	// steps is the path to the value being walked, built into a string
	// only for a finding (most values have none).
	steps []step
}

// step is one step of a path: an object key (its masked form for the
// path, its own for Keys) or a list index.
type step struct {
	shown, key string
	index      int // -1 for a key
}

type keyScan struct {
	ms      []Match
	actions []Action
	shown   string // the key with every match replaced, for paths
	kept    string // the key with the withheld matches replaced
}

func (w *argWalker) scanKey(k string) keyScan {
	if ks, ok := w.keys[k]; ok {
		return ks
	}
	ks := keyScan{shown: k, kept: k}
	ks.ms, ks.actions = w.scan(k)
	if len(ks.ms) > 0 {
		ks.shown, ks.kept = redactAll(k, ks.ms, ks.actions)
	}
	if w.keys == nil {
		w.keys = map[string]keyScan{}
	}
	w.keys[k] = ks
	return ks
}

// scan finds the matches in s, each with the action of its category.
func (w *argWalker) scan(s string) (ms []Match, actions []Action) {
	if on(w.p.Secrets) {
		for _, m := range Scan(s) {
			ms, actions = append(ms, m), append(actions, w.p.Secrets)
		}
	}
	if on(w.p.PersonalData) {
		for _, m := range ScanPersonal(s) {
			ms, actions = append(ms, m), append(actions, w.p.PersonalData)
		}
	}
	return ms, actions
}

// redactAll is s with every match replaced, and s with the matches whose
// action withholds replaced.
func redactAll(s string, ms []Match, actions []Action) (shown, kept string) {
	var withheld []Match
	for i, m := range ms {
		if actions[i] == Redact || actions[i] == Block {
			withheld = append(withheld, m)
		}
	}
	return RedactText(s, merge(append([]Match(nil), ms...))), RedactText(s, merge(withheld))
}

// record adds a finding for each match at the current path.
func (w *argWalker) record(inKey bool, ms []Match, actions []Action) {
	var b strings.Builder
	b.WriteString("$")
	var keys []string
	for _, st := range w.steps {
		if st.index >= 0 {
			b.WriteString("[" + strconv.Itoa(st.index) + "]")
			continue
		}
		b.WriteString(member(st.shown))
		keys = append(keys, st.key)
	}
	for i, m := range ms {
		w.fs = append(w.fs, ArgumentFinding{Finding: Finding{Rule: m.Rule, Path: b.String(), Action: string(actions[i])}, Keys: keys, InKey: inKey})
	}
}

func (w *argWalker) walk(v any) any {
	switch v := v.(type) {
	case string:
		ms, actions := w.scan(v)
		if len(ms) == 0 {
			return v
		}
		w.record(false, ms, actions)
		_, kept := redactAll(v, ms, actions)
		if kept != v {
			w.changed = true
		}
		return kept
	case []any:
		for i, e := range v {
			w.steps = append(w.steps, step{index: i})
			v[i] = w.walk(e)
			w.steps = w.steps[:len(w.steps)-1]
		}
	case map[string]any:
		names := make([]string, 0, len(v))
		for k := range v {
			names = append(names, k)
		}
		sort.Strings(names) // findings in a stable order
		for _, k := range names {
			e := v[k]
			ks := w.scanKey(k)
			w.steps = append(w.steps, step{shown: ks.shown, key: k, index: -1})
			if len(ks.ms) > 0 {
				w.record(true, ks.ms, ks.actions)
			}
			e = w.walk(e)
			w.steps = w.steps[:len(w.steps)-1]
			kept := ks.kept
			if kept != k {
				delete(v, k)
				kept = freeKey(v, kept)
				w.changed = true
			}
			v[kept] = e
		}
	}
	return v
}

// freeKey is key, or key#2, key#3…, whichever m does not hold: two keys
// redacted to the same marker stay two keys.
func freeKey(m map[string]any, key string) string {
	if _, taken := m[key]; !taken {
		return key
	}
	for n := 2; ; n++ {
		k := key + "#" + strconv.Itoa(n)
		if _, taken := m[k]; !taken {
			return k
		}
	}
}

var plainKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// member is the JSONPath step to key (jsoncanon writes paths the same way).
func member(key string) string {
	if plainKey.MatchString(key) {
		return "." + key
	}
	return "[" + strconv.Quote(key) + "]"
}

// BlockedArguments is the refusal of a call whose arguments hold findings
// under Block: it names each finding's kind and path, never a value, and
// the setting that blocks.
func BlockedArguments(tool string, fs []Finding) string {
	var where []string
	seen := map[string]bool{}
	for _, f := range fs {
		w := f.Rule + " at " + f.Path
		if f.Action == string(Block) && !seen[w] {
			seen[w] = true
			where = append(where, w)
		}
	}
	return fmt.Sprintf("denied: the arguments of %s hold %s; nothing ran and the values were not recorded. Send the call without them (a reference or a path instead of the secret), or ask an operator to change guard.arguments for this tool.",
		tool, strings.Join(where, ", "))
}
