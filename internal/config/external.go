package config

import (
	"net/url"
	"path"
	"sort"
	"time"

	"github.com/airlock-run/airlock/manifests"
)

// ExternalPolicy asks an external policy decision point about each call
// over the OpenID AuthZEN Authorization API 1.0 (issue 30 §3; package
// internal/authzen). The external point can only make a decision
// stricter: it may deny a call airlock would allow or send to approval,
// never allow one airlock denies.
type ExternalPolicy struct {
	// Endpoint is the PDP's base URL (http or https); airlock POSTs to
	// {endpoint}/access/v1/evaluation.
	Endpoint string `yaml:"endpoint"`
	// Timeout bounds one evaluation (default 2s, at most 5s: the decision
	// runs inside a local activity of 10s).
	Timeout manifests.Duration `yaml:"timeout,omitempty"`
	// AuthorizationEnv names the environment variable whose value is sent
	// as the Authorization header ("Bearer …"); unset: none is sent.
	AuthorizationEnv string `yaml:"authorization_env,omitempty"`
	// AppliesTo says which of airlock's decisions are also put to the PDP:
	// "not_denied" (default: allow and require_approval), "allowed" (allow
	// only) or "all" (denies too: the answer is recorded, the deny stays).
	AppliesTo string `yaml:"applies_to,omitempty"`
	// OnError is what an error, a non-2xx status, a malformed answer or a
	// timeout means: "deny" (default) or "allow" (airlock's own decision
	// stands, the failure is recorded).
	OnError string `yaml:"on_error,omitempty"`
	// OnDeny is what the PDP's no does to a call airlock would allow:
	// "deny" (default) or "require_approval" (ApprovalGroup decides; a
	// call airlock already sends to approval keeps its own group).
	OnDeny string `yaml:"on_deny,omitempty"`
	// ApprovalGroup approves what the PDP refused under on_deny:
	// require_approval (one of approver_groups).
	ApprovalGroup string `yaml:"approval_group,omitempty"`
	// Tools override OnError per exposed tool name or glob ("docs__*" for
	// a server's tools). Where several match, deny wins.
	Tools map[string]*ExternalTool `yaml:"tools,omitempty"`
	// CacheEntries bounds the answers kept for their Cache-Control
	// max-age (default 1024; 0 keeps none).
	CacheEntries *int `yaml:"cache_entries,omitempty"`
}

// ExternalTool is a tool's (or a glob's) setting of the external policy.
type ExternalTool struct {
	OnError string `yaml:"on_error"`
}

// External policy values and bounds.
const (
	ExternalAppliesNotDenied    = "not_denied"
	ExternalAppliesAllowed      = "allowed"
	ExternalAppliesAll          = "all"
	ExternalOnErrorDeny         = "deny"
	ExternalOnErrorAllow        = "allow"
	ExternalOnDenyDeny          = "deny"
	ExternalOnDenyApproval      = "require_approval"
	DefaultExternalTimeout      = 2 * time.Second
	MaxExternalTimeout          = 5 * time.Second
	DefaultExternalCacheEntries = 1024
	MaxExternalCacheEntries     = 100000
	maxExternalEndpointBytes    = 2048
	maxExternalToolsEntries     = 10000
)

// EffectiveTimeout is the configured timeout or the default.
func (e *ExternalPolicy) EffectiveTimeout() time.Duration {
	if e.Timeout > 0 {
		return e.Timeout.D()
	}
	return DefaultExternalTimeout
}

// EffectiveAppliesTo is the configured applies_to or the default.
func (e *ExternalPolicy) EffectiveAppliesTo() string {
	if e.AppliesTo == "" {
		return ExternalAppliesNotDenied
	}
	return e.AppliesTo
}

// EffectiveCacheEntries is the configured bound or the default.
func (e *ExternalPolicy) EffectiveCacheEntries() int {
	if e.CacheEntries == nil {
		return DefaultExternalCacheEntries
	}
	return *e.CacheEntries
}

// OnErrorFor is the fail mode for the exposed tool: deny when any
// matching entry of tools says deny, else allow when one says allow, else
// on_error (default deny).
func (e *ExternalPolicy) OnErrorFor(tool string) string {
	mode := ""
	for _, g := range e.toolGlobs() {
		if ok, err := path.Match(g, tool); err != nil || !ok {
			continue // validated at load: a malformed glob never gets here
		}
		if e.Tools[g].OnError == ExternalOnErrorDeny {
			return ExternalOnErrorDeny
		}
		mode = ExternalOnErrorAllow
	}
	if mode != "" {
		return mode
	}
	if e.OnError == ExternalOnErrorAllow {
		return ExternalOnErrorAllow
	}
	return ExternalOnErrorDeny
}

func (e *ExternalPolicy) toolGlobs() []string {
	gs := make([]string, 0, len(e.Tools))
	for g, t := range e.Tools {
		if t != nil {
			gs = append(gs, g)
		}
	}
	sort.Strings(gs)
	return gs
}

// validateExternal checks external_policy.
func (c *Config) validateExternal(v *validator) {
	e := c.ExternalPolicy
	if e == nil {
		return
	}
	const at = "external_policy"
	switch u, err := url.Parse(e.Endpoint); {
	case e.Endpoint == "":
		v.add(at+".endpoint", "is required; name the PDP's base URL, e.g. https://pdp.example.com (airlock POSTs to {endpoint}/access/v1/evaluation), or remove external_policy")
	case len(e.Endpoint) > maxExternalEndpointBytes:
		v.add(at+".endpoint", "is %d bytes, over %d; name the PDP's base URL", len(e.Endpoint), maxExternalEndpointBytes)
	case err != nil:
		v.add(at+".endpoint", "is not a URL (%v); write e.g. https://pdp.example.com", err)
	case u.Scheme != "http" && u.Scheme != "https":
		v.add(at+".endpoint", "must be an http or https URL, got scheme %q; write e.g. https://pdp.example.com", u.Scheme)
	case u.Host == "" || u.Hostname() == "":
		v.add(at+".endpoint", "names no host; write e.g. https://pdp.example.com")
	case u.User != nil:
		v.add(at+".endpoint", "holds credentials; remove them from the URL and name the variable holding the Authorization header in authorization_env")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		v.add(at+".endpoint", "has a query or fragment; name the base URL only (airlock appends /access/v1/evaluation)")
	}
	if e.Timeout < 0 || e.Timeout.D() > MaxExternalTimeout {
		v.add(at+".timeout", "must be between 0 (the default, %s) and %s, got %s; a decision runs in a local activity of 10s", DefaultExternalTimeout, MaxExternalTimeout, e.Timeout.D())
	}
	if e.AuthorizationEnv != "" && !envName.MatchString(e.AuthorizationEnv) {
		v.add(at+".authorization_env", "must name an environment variable (letters, digits, _), got %q; the variable holds the Authorization header's value, never this file", clipName(e.AuthorizationEnv))
	}
	switch e.AppliesTo {
	case "", ExternalAppliesNotDenied, ExternalAppliesAllowed, ExternalAppliesAll:
	default:
		v.add(at+".applies_to", "must be not_denied (the default: calls airlock would allow or send to approval), allowed or all, got %q", clipName(e.AppliesTo))
	}
	validOnError := func(field, mode string, required bool) {
		switch mode {
		case ExternalOnErrorDeny, ExternalOnErrorAllow:
		case "":
			if required {
				v.add(field, "is required; write deny or allow")
			}
		default:
			v.add(field, "must be deny (the default: a PDP that cannot answer denies) or allow, got %q", clipName(mode))
		}
	}
	validOnError(at+".on_error", e.OnError, false)
	switch e.OnDeny {
	case "", ExternalOnDenyDeny:
		if e.ApprovalGroup != "" {
			v.add(at+".approval_group", "is set but on_deny is not require_approval; write on_deny: require_approval, or remove approval_group")
		}
	case ExternalOnDenyApproval:
		switch g := e.ApprovalGroup; {
		case g == "":
			v.add(at+".approval_group", "is required with on_deny: require_approval; name one of approver_groups")
		case c.ApproverGroups[g] == nil:
			v.add(at+".approval_group", "names %q, which is not one of approver_groups; add the group or name another", clipName(g))
		}
	default:
		v.add(at+".on_deny", "must be deny (the default) or require_approval, got %q", clipName(e.OnDeny))
	}
	if len(e.Tools) > maxExternalToolsEntries {
		v.add(at+".tools", "has %d entries, over %d; use globs such as server__*", len(e.Tools), maxExternalToolsEntries)
	}
	for _, g := range sortedKeys(e.Tools) {
		field := at + ".tools." + g
		if _, err := path.Match(g, ""); err != nil || g == "" {
			v.add(field, "is not a tool name or glob (%v); write an exposed name such as docs__search or a glob such as docs__*", err)
			continue
		}
		if e.Tools[g] == nil {
			v.add(field, "is empty; write on_error: deny or on_error: allow")
			continue
		}
		validOnError(field+".on_error", e.Tools[g].OnError, true)
	}
	if n := e.CacheEntries; n != nil && (*n < 0 || *n > MaxExternalCacheEntries) {
		v.add(at+".cache_entries", "must be between 0 (no cache) and %d, got %d (default %d)", MaxExternalCacheEntries, *n, DefaultExternalCacheEntries)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func clipName(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
