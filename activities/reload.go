package activities

import "github.com/airlock-run/airlock/internal/policy"

// Judge is what the worker judges calls with: the compiled policy, the
// catalog of manifest declarations and the approver groups of one version
// of the configuration. A reload (package reload) replaces it whole, so a
// decision never mixes two versions.
type Judge struct {
	Policy  *policy.Policy
	Catalog ToolCatalog
	Groups  map[string][]string
	// External, when set, is asked about each call too (external.go).
	External *External
}

// judge is the version in force: Current's when set (hot reload), else the
// fields Policy, Catalog and Groups.
func (a *Activities) judge() Judge {
	if a.Current != nil {
		if j := a.Current(); j != nil {
			return *j
		}
	}
	return Judge{Policy: a.Policy, Catalog: a.Catalog, Groups: a.Groups}
}
