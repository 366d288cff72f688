package manifests

// Guard is a tool's content guard (issue 30 §1), and the global default
// of airlock.yaml's guard: what the worker does with secrets it finds in
// the tool's results before they leave the activity (internal/guard).
//
//	guard:
//	  results:
//	    secrets: redact   # or block, or off
//	    personal_data: redact   # or block, or off (e-mail, cards, IBANs, phones)
type Guard struct {
	Results *GuardResults `yaml:"results,omitempty" json:"results,omitempty"`
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
}

// GuardAction is one of GuardRedact, GuardBlock, GuardOff.
type GuardAction string

const (
	GuardRedact GuardAction = "redact"
	GuardBlock  GuardAction = "block"
	GuardOff    GuardAction = "off"
)

// GuardActions lists the valid actions, for messages.
var GuardActions = []GuardAction{GuardRedact, GuardBlock, GuardOff}

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
	if g.Results == nil {
		v.add(p+".results", "is required in guard; write results: {secrets: redact} or {personal_data: redact} (or block, or off), or remove guard")
		return
	}
	r := g.Results
	if r.Secrets == "" && r.PersonalData == "" {
		v.add(p+".results", "names no category; write secrets: redact and/or personal_data: redact (or block, or off), or remove guard")
		return
	}
	if a := r.Secrets; a != "" && !a.Valid() {
		v.add(p+".results.secrets", "must be one of %s, got %q", list(GuardActions), a)
	}
	if a := r.PersonalData; a != "" && !a.Valid() {
		v.add(p+".results.personal_data", "must be one of %s, got %q", list(GuardActions), a)
	}
}
