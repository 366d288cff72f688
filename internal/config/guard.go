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

// validateRoleGuard checks a role's guard (at is "roles.NAME"): the same
// rules and words as a tool's, and no descriptions (a tool's definition is
// inspected once, for every principal alike, when it is listed).
func (c *Config) validateRoleGuard(v *validator, at string, g *manifests.Guard) {
	if g == nil {
		if v.lines.Has(at + ".guard") {
			v.add(at+".guard", "is empty; write e.g. guard: {results: {secrets: block}}, or remove it")
		}
		return
	}
	if g.Descriptions != nil {
		v.add(at+".guard.descriptions", "a tool's definition is inspected once for every principal, so a role cannot set it; set guard.descriptions in airlock.yaml or the tool's manifest, or remove it")
	}
	for _, p := range manifests.GuardProblems(g) {
		v.add(at+".guard"+p.Field, "%s", p.Problem)
	}
}

// applyGuard gives every manifest the configuration's guard as its
// tools' default, and the roles' guards (manifests.Manifest.RoleGuards).
func (c *Config) applyGuard(ms []*manifests.Manifest) {
	roles := map[string]*manifests.Guard{}
	for name, r := range c.Roles {
		if r != nil && r.Guard != nil {
			roles[name] = r.Guard
		}
	}
	for _, m := range ms {
		if len(roles) > 0 {
			m.RoleGuards = roles
		}
	}
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
