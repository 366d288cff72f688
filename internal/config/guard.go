package config

import (
	"github.com/airlock-run/airlock/manifests"
)

// validateGuard checks guard, the default content guard of every tool
// that declares none (issue 30 §1; manifests.Guard).
func (c *Config) validateGuard(v *validator) {
	g := c.Guard
	if g == nil {
		return
	}
	if g.Results == nil && g.Descriptions == nil {
		v.add("guard.results", "is required in guard; write results: {secrets: redact} (or personal_data, injection) or descriptions: {injection: annotate}, or remove guard")
		return
	}
	if r := g.Results; r != nil {
		if r.Secrets == "" && r.PersonalData == "" && r.Injection == "" {
			v.add("guard.results", "names no category; write secrets: redact, personal_data: redact and/or injection: annotate (or block, or off), or remove results")
			return
		}
		if a := r.Secrets; a != "" && !a.Valid() {
			v.add("guard.results.secrets", "must be one of redact, block or off, got %q; redact replaces each secret in a tool's result with a marker, block withholds the result", a)
		}
		if a := r.PersonalData; a != "" && !a.Valid() {
			v.add("guard.results.personal_data", "must be one of redact, block or off, got %q; redact replaces each e-mail address, card number, IBAN or phone number in a tool's result with a marker, block withholds the result", a)
		}
		if a := r.Injection; a != "" && !a.OneOf(manifests.InjectionActions) {
			v.add("guard.results.injection", "must be one of annotate, block, redact or off, got %q; annotate delivers a result holding prompt-injection markers and records them, block withholds it, redact replaces each marker", a)
		}
	}
	if d := g.Descriptions; d != nil {
		if d.Injection == "" {
			v.add("guard.descriptions", "names no category; write injection: annotate (or block, or off), or remove descriptions")
		} else if !d.Injection.OneOf(manifests.DescriptionActions) {
			v.add("guard.descriptions.injection", "must be one of annotate, block or off, got %q; annotate lists a tool whose definition holds prompt-injection markers and records them, block hides it and refuses its calls", d.Injection)
		}
	}
}

// applyGuard gives every manifest the configuration's guard as its
// tools' default.
func (c *Config) applyGuard(ms []*manifests.Manifest) {
	if c.Guard == nil {
		return
	}
	for _, m := range ms {
		if r := c.Guard.Results; r != nil {
			m.GuardDefault = r.Secrets
			m.PersonalDataDefault = r.PersonalData
			m.InjectionDefault = r.Injection
		}
		if d := c.Guard.Descriptions; d != nil {
			m.DescriptionInjectionDefault = d.Injection
		}
	}
}
