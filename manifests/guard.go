package manifests

// Guard is a tool's content guard (issue 30 §1), and the global default
// of airlock.yaml's guard: what the worker does with secrets it finds in
// the tool's results before they leave the activity (internal/guard).
//
//	guard:
//	  results:
//	    secrets: redact   # or block, or off
//	    personal_data: redact   # or block, or off (e-mail, cards, IBANs, phones)
//	    injection: annotate   # or block, redact, off (prompt-injection markers)
//	  descriptions:
//	    injection: annotate   # or block, off: the tool's listed definition
type Guard struct {
	Results *GuardResults `yaml:"results,omitempty" json:"results,omitempty"`
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

// GuardResults is what the guard does with a result.
type GuardResults struct {
	// Secrets: redact (each secret replaced by [REDACTED:<rule>], the rest
	// delivered), block (an error result naming the kinds and where,
	// never the values) or off. Omitted: the configuration's guard, else
	// off.
	Secrets GuardAction `yaml:"secrets,omitempty" json:"secrets,omitempty"`
	// PersonalData: the same for personal data (e-mail addresses, payment
	// card numbers, IBANs, E.164 phone numbers; guard.PersonalRules).
	// Omitted: the configuration's guard, else off.
	PersonalData GuardAction `yaml:"personal_data,omitempty" json:"personal_data,omitempty"`
	// Injection: the same for prompt-injection markers
	// (guard.InjectionRules), with annotate besides: delivered unchanged,
	// each finding recorded. Omitted: the configuration's guard, else off.
	Injection GuardAction `yaml:"injection,omitempty" json:"injection,omitempty"`
}

// GuardAction is one of GuardRedact, GuardBlock, GuardOff.
type GuardAction string

const (
	GuardRedact GuardAction = "redact"
	GuardBlock  GuardAction = "block"
	GuardOff    GuardAction = "off"
)

// GuardAnnotate delivers what was inspected unchanged and records the
// findings (prompt-injection markers only).
const GuardAnnotate GuardAction = "annotate"

// GuardActions lists the valid actions, for messages.
var GuardActions = []GuardAction{GuardRedact, GuardBlock, GuardOff}

// InjectionActions are the valid actions of guard.results.injection.
var InjectionActions = []GuardAction{GuardAnnotate, GuardBlock, GuardRedact, GuardOff}

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
func (a GuardAction) Valid() bool { return a == GuardRedact || a == GuardBlock || a == GuardOff }

// secrets is the tool's own action, "" when it declares none.
func (g *Guard) secrets() GuardAction {
	if g == nil || g.Results == nil {
		return ""
	}
	return g.Results.Secrets
}

// personalData is the tool's own action for personal data, "" when it
// declares none.
func (g *Guard) personalData() GuardAction {
	if g == nil || g.Results == nil {
		return ""
	}
	return g.Results.PersonalData
}

// injection is the tool's own action for prompt-injection markers in
// results, "" when it declares none.
func (g *Guard) injection() GuardAction {
	if g == nil || g.Results == nil {
		return ""
	}
	return g.Results.Injection
}

// descriptionInjection is the tool's own action for prompt-injection
// markers in its definition, "" when it declares none.
func (g *Guard) descriptionInjection() GuardAction {
	if g == nil || g.Descriptions == nil {
		return ""
	}
	return g.Descriptions.Injection
}

// InjectionInResults is what the worker does with prompt-injection
// markers in a result of the tool (nil: undeclared): the tool's
// guard.results.injection, else the configuration's (InjectionDefault),
// else off.
func (m *Manifest) InjectionInResults(t *Tool) GuardAction {
	if t != nil {
		if a := t.Guard.injection(); a != "" {
			return a
		}
	}
	if m != nil && m.InjectionDefault != "" {
		return m.InjectionDefault
	}
	return GuardOff
}

// InjectionInDescriptions is what the gateway does with prompt-injection
// markers in the tool's served definition (nil: a tool the manifest does
// not declare): the tool's guard.descriptions.injection, else the
// configuration's (DescriptionInjectionDefault), else off.
func (m *Manifest) InjectionInDescriptions(t *Tool) GuardAction {
	if t != nil {
		if a := t.Guard.descriptionInjection(); a != "" {
			return a
		}
	}
	if m != nil && m.DescriptionInjectionDefault != "" {
		return m.DescriptionInjectionDefault
	}
	return GuardOff
}

// PersonalDataInResults is what the worker does with personal data in a
// result of the tool (nil: undeclared): the tool's
// guard.results.personal_data, else the configuration's
// (PersonalDataDefault), else off.
func (m *Manifest) PersonalDataInResults(t *Tool) GuardAction {
	if t != nil {
		if a := t.Guard.personalData(); a != "" {
			return a
		}
	}
	if m != nil && m.PersonalDataDefault != "" {
		return m.PersonalDataDefault
	}
	return GuardOff
}

// SecretsInResults is what the worker does with secrets in a result of
// the tool (nil: a tool the manifest does not declare): the tool's
// guard.results.secrets, else the configuration's (GuardDefault), else off.
func (m *Manifest) SecretsInResults(t *Tool) GuardAction {
	if t != nil {
		if a := t.Guard.secrets(); a != "" {
			return a
		}
	}
	if m != nil && m.GuardDefault != "" {
		return m.GuardDefault
	}
	return GuardOff
}

func (v *validator) guard(p string, g *Guard) {
	if g == nil {
		return
	}
	if g.Results == nil && g.Descriptions == nil {
		v.add(p, "names neither results nor descriptions; write results: {secrets: redact} (or personal_data, injection) or descriptions: {injection: annotate}, or remove guard")
		return
	}
	if r := g.Results; r != nil {
		if r.Secrets == "" && r.PersonalData == "" && r.Injection == "" {
			v.add(p+".results", "names no category; write secrets: redact, personal_data: redact and/or injection: annotate (or block, or off), or remove results")
		}
		if a := r.Secrets; a != "" && !a.Valid() {
			v.add(p+".results.secrets", "must be one of %s, got %q", list(GuardActions), a)
		}
		if a := r.PersonalData; a != "" && !a.Valid() {
			v.add(p+".results.personal_data", "must be one of %s, got %q", list(GuardActions), a)
		}
		if a := r.Injection; a != "" && !a.OneOf(InjectionActions) {
			v.add(p+".results.injection", "must be one of %s, got %q", list(InjectionActions), a)
		}
	}
	if d := g.Descriptions; d != nil {
		if d.Injection == "" {
			v.add(p+".descriptions", "names no category; write injection: annotate (or block, or off), or remove descriptions")
		} else if !d.Injection.OneOf(DescriptionActions) {
			v.add(p+".descriptions.injection", "must be one of %s, got %q (redact is for results: a definition is listed whole or not at all)", list(DescriptionActions), d.Injection)
		}
	}
}
