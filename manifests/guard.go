package manifests

import "fmt"

// Guard is a tool's content guard (issue 30 §1), and the global default
// of airlock.yaml's guard: what airlock does with secrets and personal
// data it finds in the tool's arguments (at the gateway, before the call
// enters its task) and results (in the worker's activity, before the
// result leaves it; internal/guard).
//
//	guard:
//	  arguments:
//	    secrets: block          # or redact, require_approval, annotate, off
//	    personal_data: annotate
//	  results:
//	    secrets: redact         # or block, require_approval, annotate, off
//	    personal_data: redact   # (e-mail, cards, IBANs, phones)
//	    injection: annotate     # or block, redact, off (prompt-injection markers)
//	  descriptions:
//	    injection: annotate     # or block, off: the tool's listed definition
type Guard struct {
	Arguments *GuardResults `yaml:"arguments,omitempty" json:"arguments,omitempty"`
	Results   *GuardResults `yaml:"results,omitempty" json:"results,omitempty"`
	// Descriptions is what the gateway does with the tool's definition
	// (description, title, schemas) when it lists it.
	Descriptions *GuardDescriptions `yaml:"descriptions,omitempty" json:"descriptions,omitempty"`
}

// GuardDescriptions is what the gateway does with prompt-injection
// markers in a tool's definition as it is served (guard.InspectDescription).
type GuardDescriptions struct {
	// Injection: annotate (listed; the finding logged, counted and shown
	// in the listing's _meta), block (not listed, and calls refused with
	// an error naming the finding) or off. Omitted: the configuration's
	// guard, else off.
	Injection GuardAction `yaml:"injection,omitempty" json:"injection,omitempty"`
}

// GuardResults is what the guard does with each category it finds in a
// result, or (as guard.arguments) in a call's arguments.
type GuardResults struct {
	// Secrets: redact (each secret replaced by [REDACTED:<rule>], the rest
	// delivered), block (an error result naming the kinds and where,
	// never the values), require_approval (in arguments: the call goes
	// to an approver, who sees the finding with the value masked; in a
	// result: the call runs and its result is held, sealed, until an
	// approver approves delivering it), annotate (delivered unchanged,
	// the finding recorded) or off.
	// Omitted: the configuration's guard, else off.
	Secrets GuardAction `yaml:"secrets,omitempty" json:"secrets,omitempty"`
	// PersonalData: the same for personal data (e-mail addresses, payment
	// card numbers, IBANs, E.164 phone numbers; guard.PersonalRules).
	// Omitted: the configuration's guard, else off.
	PersonalData GuardAction `yaml:"personal_data,omitempty" json:"personal_data,omitempty"`
	// Injection: the same for prompt-injection markers
	// (guard.InjectionRules), in results only (guard.arguments refuses
	// it). Omitted: the configuration's guard, else off.
	Injection GuardAction `yaml:"injection,omitempty" json:"injection,omitempty"`
}

// GuardAction is one of GuardActions.
type GuardAction string

const (
	GuardRedact          GuardAction = "redact"
	GuardBlock           GuardAction = "block"
	GuardRequireApproval GuardAction = "require_approval"
	GuardAnnotate        GuardAction = "annotate"
	GuardOff             GuardAction = "off"
)

// GuardActions lists the valid actions for arguments, for messages.
var GuardActions = []GuardAction{GuardRedact, GuardBlock, GuardRequireApproval, GuardAnnotate, GuardOff}

// GuardResultActions lists the valid actions for results; under
// require_approval the call runs and its result is held until an approver
// approves delivering it.
var GuardResultActions = []GuardAction{GuardRedact, GuardBlock, GuardRequireApproval, GuardAnnotate, GuardOff}

// InjectionActions are the valid actions of guard.results.injection.
var InjectionActions = []GuardAction{GuardAnnotate, GuardBlock, GuardRedact, GuardRequireApproval, GuardOff}

// DescriptionActions are the valid actions of guard.descriptions.injection.
var DescriptionActions = []GuardAction{GuardAnnotate, GuardBlock, GuardOff}

// OneOf reports whether a is one of as.
func (a GuardAction) OneOf(as []GuardAction) bool {
	for _, b := range as {
		if a == b {
			return true
		}
	}
	return false
}

// Valid reports whether a is one of GuardActions.
func (a GuardAction) Valid() bool {
	switch a {
	case GuardRedact, GuardBlock, GuardRequireApproval, GuardAnnotate, GuardOff:
		return true
	}
	return false
}

// ValidForResults reports whether a is one of GuardResultActions.
func (a GuardAction) ValidForResults() bool { return a.OneOf(GuardResultActions) }

// GuardDefaults are airlock.yaml's guard, for tools that declare none
// (set by internal/config).
type GuardDefaults struct {
	ArgumentSecrets, ArgumentPersonalData GuardAction
}

func pick(own, def GuardAction) GuardAction {
	if own != "" {
		return own
	}
	if def != "" {
		return def
	}
	return GuardOff
}

func (g *GuardResults) secrets() GuardAction {
	if g == nil {
		return ""
	}
	return g.Secrets
}

func (g *GuardResults) personalData() GuardAction {
	if g == nil {
		return ""
	}
	return g.PersonalData
}

func (t *Tool) guard() *Guard {
	if t == nil || t.Guard == nil {
		return &Guard{}
	}
	return t.Guard
}

func (g *GuardResults) injection() GuardAction {
	if g == nil {
		return ""
	}
	return g.Injection
}

func (g *GuardDescriptions) injection() GuardAction {
	if g == nil {
		return ""
	}
	return g.Injection
}

// InjectionInResults is what the worker does with prompt-injection
// markers in a result of the tool (nil: undeclared): the tool's
// guard.results.injection, else the configuration's (InjectionDefault),
// else off.
func (m *Manifest) InjectionInResults(t *Tool) GuardAction {
	var def GuardAction
	if m != nil {
		def = m.InjectionDefault
	}
	return pick(t.guard().Results.injection(), def)
}

// InjectionInDescriptions is what the gateway does with prompt-injection
// markers in the tool's served definition (nil: a tool the manifest does
// not declare): the tool's guard.descriptions.injection, else the
// configuration's (DescriptionInjectionDefault), else off.
func (m *Manifest) InjectionInDescriptions(t *Tool) GuardAction {
	var def GuardAction
	if m != nil {
		def = m.DescriptionInjectionDefault
	}
	return pick(t.guard().Descriptions.injection(), def)
}

// PersonalDataInResults is what the worker does with personal data in a
// result of the tool (nil: undeclared): the tool's
// guard.results.personal_data, else the configuration's
// (PersonalDataDefault), else off.
func (m *Manifest) PersonalDataInResults(t *Tool) GuardAction {
	var def GuardAction
	if m != nil {
		def = m.PersonalDataDefault
	}
	return pick(t.guard().Results.personalData(), def)
}

// SecretsInResults is what the worker does with secrets in a result of
// the tool (nil: a tool the manifest does not declare): the tool's
// guard.results.secrets, else the configuration's (GuardDefault), else off.
func (m *Manifest) SecretsInResults(t *Tool) GuardAction {
	var def GuardAction
	if m != nil {
		def = m.GuardDefault
	}
	return pick(t.guard().Results.secrets(), def)
}

// SecretsInArguments is what airlock does with secrets in the arguments
// of a call to the tool (nil: undeclared): the tool's
// guard.arguments.secrets, else the configuration's, else off.
func (m *Manifest) SecretsInArguments(t *Tool) GuardAction {
	var def GuardAction
	if m != nil {
		def = m.ArgumentGuard.ArgumentSecrets
	}
	return pick(t.guard().Arguments.secrets(), def)
}

// PersonalDataInArguments is the same for personal data.
func (m *Manifest) PersonalDataInArguments(t *Tool) GuardAction {
	var def GuardAction
	if m != nil {
		def = m.ArgumentGuard.ArgumentPersonalData
	}
	return pick(t.guard().Arguments.personalData(), def)
}

func (v *validator) guard(p string, g *Guard) {
	for _, problem := range GuardProblems(g) {
		v.add(p+problem.Field, "%s", problem.Problem)
	}
}

// GuardProblem is one problem of a guard block: Field is the path below
// guard (".results.secrets"), Problem says what is wrong and the fix.
type GuardProblem struct{ Field, Problem string }

// GuardProblems checks a guard block (a tool's, or airlock.yaml's): the
// same rules and words in both places.
func GuardProblems(g *Guard) []GuardProblem {
	if g == nil {
		return nil
	}
	var out []GuardProblem
	add := func(f, format string, a ...any) {
		out = append(out, GuardProblem{f, fmt.Sprintf(format, a...)})
	}
	if g.Results == nil && g.Arguments == nil && g.Descriptions == nil {
		add(".results", "is required in guard; write results: {secrets: redact} or {personal_data: redact} (or injection: annotate; or block, or off), arguments: {secrets: block} or descriptions: {injection: annotate}, or remove guard")
		return out
	}
	if r := g.Results; r != nil {
		if r.Secrets == "" && r.PersonalData == "" && r.Injection == "" {
			add(".results", "names no category; write secrets: redact, personal_data: redact and/or injection: annotate (or block, or off), or remove results")
		}
		for _, c := range []struct {
			f string
			a GuardAction
		}{{".results.secrets", r.Secrets}, {".results.personal_data", r.PersonalData}, {".results.injection", r.Injection}} {
			switch {
			case c.a != "" && c.f == ".results.injection" && !c.a.OneOf(InjectionActions):
				add(c.f, "must be one of %s, got %q; annotate delivers a result holding prompt-injection markers and records them, block withholds it, redact replaces each marker, require_approval holds it until an approver approves delivering it", list(InjectionActions), c.a)
			case c.a != "" && !c.a.OneOf(GuardResultActions):
				add(c.f, "must be one of %s, got %q; redact replaces each match in a tool's result with a marker, block withholds the result, require_approval holds it until an approver approves delivering it (the call has run), annotate delivers it and records the finding", list(GuardResultActions), c.a)
			}
		}
	}
	if a := g.Arguments; a != nil {
		if a.Injection != "" {
			add(".arguments.injection", "prompt-injection markers are inspected in results and descriptions, not in a call's arguments; move it to results (or descriptions), or remove it")
		}
		if a.Secrets == "" && a.PersonalData == "" {
			add(".arguments", "names no category; write secrets: block and/or personal_data: annotate (or redact, require_approval, off), or remove arguments")
		}
		for _, c := range []struct {
			f string
			a GuardAction
		}{{".arguments.secrets", a.Secrets}, {".arguments.personal_data", a.PersonalData}} {
			if c.a != "" && !c.a.Valid() {
				add(c.f, "must be one of %s, got %q; redact replaces each match in a call's arguments with a marker, block refuses the call, require_approval asks an approver, annotate runs it and records the finding", list(GuardActions), c.a)
			}
		}
	}
	if d := g.Descriptions; d != nil {
		if d.Injection == "" {
			add(".descriptions", "names no category; write injection: annotate (or block, or off), or remove descriptions")
		} else if !d.Injection.OneOf(DescriptionActions) {
			add(".descriptions.injection", "must be one of %s, got %q; annotate lists a tool whose definition holds prompt-injection markers and records them, block hides it and refuses its calls (redact is for results: a definition is listed whole or not at all)", list(DescriptionActions), d.Injection)
		}
	}
	return out
}

// strictness orders the actions from the most permissive to the
// strictest: off, annotate, require_approval (the value is delivered once
// someone approves), redact (the value is never delivered) and block (not
// even the rest is).
func strictness(a GuardAction) int {
	switch a {
	case GuardAnnotate:
		return 1
	case GuardRequireApproval:
		return 2
	case GuardRedact:
		return 3
	case GuardBlock:
		return 4
	}
	return 0
}

// Strictest is the stricter of a and b (strictness); "" counts as off.
func Strictest(a, b GuardAction) GuardAction {
	if strictness(b) > strictness(a) {
		return b
	}
	if a == "" {
		return GuardOff
	}
	return a
}

// withRoles is base (what the tool's manifest, else the configuration,
// says) tightened by the guard of each of roles that sets the same
// setting (get): the strictest of them wins. A role can only make the
// guard stricter for its principals, never looser than the tool's or the
// configuration's setting.
func (m *Manifest) withRoles(base GuardAction, roles []string, get func(*Guard) GuardAction) GuardAction {
	if m == nil {
		return base
	}
	for _, r := range roles {
		if g := m.RoleGuards[r]; g != nil {
			base = Strictest(base, get(g))
		}
	}
	return base
}

// ResultGuardFor is what the worker does with each category in a result
// of the tool (nil: undeclared) called by a principal holding roles: the
// tool's guard.results, else the configuration's, tightened by the roles'
// guard.results (withRoles).
func (m *Manifest) ResultGuardFor(t *Tool, roles []string) (secrets, personal, injection GuardAction) {
	return m.withRoles(m.SecretsInResults(t), roles, func(g *Guard) GuardAction { return g.Results.secrets() }),
		m.withRoles(m.PersonalDataInResults(t), roles, func(g *Guard) GuardAction { return g.Results.personalData() }),
		m.withRoles(m.InjectionInResults(t), roles, func(g *Guard) GuardAction { return g.Results.injection() })
}

// ArgumentGuardFor is the same for a call's arguments (guard.arguments).
func (m *Manifest) ArgumentGuardFor(t *Tool, roles []string) (secrets, personal GuardAction) {
	return m.withRoles(m.SecretsInArguments(t), roles, func(g *Guard) GuardAction { return g.Arguments.secrets() }),
		m.withRoles(m.PersonalDataInArguments(t), roles, func(g *Guard) GuardAction { return g.Arguments.personalData() })
}
