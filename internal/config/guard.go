package config

import (
	"github.com/airlock-run/airlock/manifests"
)

// validateGuard checks guard, the default content guard of every tool
// that declares none (issue 30 §1; manifests.Guard), by the same rules
// and in the same words as a tool's guard (manifests.GuardProblems).
func (c *Config) validateGuard(v *validator) {
	for _, p := range manifests.GuardProblems(c.Guard) {
		v.add("guard"+p.Field, "%s", p.Problem)
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
		if a := c.Guard.Arguments; a != nil {
			m.ArgumentGuard = manifests.GuardDefaults{ArgumentSecrets: a.Secrets, ArgumentPersonalData: a.PersonalData}
		}
	}
}
