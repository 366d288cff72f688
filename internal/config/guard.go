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
	if g.Results == nil {
		v.add("guard.results", "is required in guard; write results: {secrets: redact} or {personal_data: redact} (or block, or off), or remove guard")
		return
	}
	r := g.Results
	if r.Secrets == "" && r.PersonalData == "" {
		v.add("guard.results", "names no category; write secrets: redact and/or personal_data: redact (or block, or off), or remove guard")
		return
	}
	if a := r.Secrets; a != "" && !a.Valid() {
		v.add("guard.results.secrets", "must be one of redact, block or off, got %q; redact replaces each secret in a tool's result with a marker, block withholds the result", a)
	}
	if a := r.PersonalData; a != "" && !a.Valid() {
		v.add("guard.results.personal_data", "must be one of redact, block or off, got %q; redact replaces each e-mail address, card number, IBAN or phone number in a tool's result with a marker, block withholds the result", a)
	}
}

// applyGuard gives every manifest the configuration's guard as its
// tools' default.
func (c *Config) applyGuard(ms []*manifests.Manifest) {
	if c.Guard == nil || c.Guard.Results == nil {
		return
	}
	for _, m := range ms {
		m.GuardDefault = c.Guard.Results.Secrets
		m.PersonalDataDefault = c.Guard.Results.PersonalData
	}
}
