package config

import (
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/manifests"
)

// RateLimit is one rate limit (a token bucket) of a role or of every task:
// at most Calls calls per Window, up to Burst at once (default Calls).
type RateLimit struct {
	// Name identifies the limit in refusals and metrics (default its
	// place in the file, e.g. "roles.dev.rate_limits[0]").
	Name string `yaml:"name,omitempty"`
	// Per is whose calls share one window: "principal" (each principal
	// of the role; the default in roles), "role" (every principal of the
	// role together) or "task" (each task; the only one in task:).
	Per string `yaml:"per,omitempty"`
	// Tool, a glob over exposed tool names, limits only calls of
	// matching tools, each tool in its own window (default: every call,
	// one window).
	Tool   string             `yaml:"tool,omitempty"`
	Calls  int                `yaml:"calls"`
	Window manifests.Duration `yaml:"window"`
	Burst  int                `yaml:"burst,omitempty"`
}

// MaxLimitWindow bounds a rate limit's window: a shared window's state
// lives in a workflow that lingers while its bucket refills.
const MaxLimitWindow = 31 * 24 * time.Hour

var limitName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._\[\]-]{0,99}$`)

// validateLimits checks the rate limits and budgets of roles and task.
func (c *Config) validateLimits(v *validator, roles []string) {
	names := map[string]string{}
	check := func(at string, i int, l RateLimit, inTask bool) {
		p := fmt.Sprintf("%s.rate_limits[%d]", at, i)
		name := l.Name
		if name == "" {
			name = p
		}
		if !limitName.MatchString(name) {
			v.add(p+".name", "%q is not a limit name: use letters, digits and . _ - (at most 100)", l.Name)
		} else if other, dup := names[name]; dup {
			v.add(p+".name", "%q is also the name of %s; limit names must be unique (they name the limit in refusals and metrics)", name, other)
		}
		names[name] = p
		switch l.Per {
		case "", api.ScopePrincipal, api.ScopeRole, api.ScopeTask:
			if inTask && l.Per != "" && l.Per != api.ScopeTask {
				v.add(p+".per", "%q: task.rate_limits are per task; put a per-%s limit under roles.NAME.rate_limits", l.Per, l.Per)
			}
		default:
			v.add(p+".per", "%q is not a scope; use principal (each principal's calls), role (all the role's principals together) or task (each task)", l.Per)
		}
		if l.Tool != "" {
			if _, err := path.Match(l.Tool, ""); err != nil || strings.TrimSpace(l.Tool) == "" {
				v.add(p+".tool", "%q is not a valid glob; write e.g. \"filesystem__write_*\", or omit it to count every call", l.Tool)
			}
		}
		if l.Calls < 1 {
			v.add(p+".calls", "must be at least 1, got %d; write how many calls the window admits", l.Calls)
		}
		switch w := l.Window.D(); {
		case w <= 0:
			v.add(p+".window", `must be positive, got %s; write the window's length, e.g. "1m"`, l.Window)
		case w > MaxLimitWindow:
			v.add(p+".window", "%s is longer than %s; use a shorter window (or a task budget for long spans)", l.Window, manifests.Duration(MaxLimitWindow))
		case l.Calls > 0 && w/time.Duration(l.Calls) < time.Microsecond:
			v.add(p+".window", "%s for %d calls is less than a microsecond per call; lengthen the window or lower calls", l.Window, l.Calls)
		}
		if l.Burst < 0 || (l.Burst == 0 && v.lines.Has(p+".burst")) {
			v.add(p+".burst", "must be at least 1, got %d; omit it to admit up to calls at once", l.Burst)
		}
	}
	for i, l := range c.Task.RateLimits {
		check("task", i, l, true)
	}
	if c.Task.Budget < 0 {
		v.add("task.budget", "must not be negative, got %d; write the cost units one task may spend, or omit it for no budget", c.Task.Budget)
	}
	for _, name := range roles {
		r := c.Roles[name]
		if r == nil {
			continue
		}
		at := "roles." + name
		for i, l := range r.RateLimits {
			check(at, i, l, false)
		}
		if r.Budget < 0 {
			v.add(at+".budget", "must not be negative, got %d; omit it for task.budget", r.Budget)
		}
	}
}

// TaskRateLimits are task.rate_limits as the workflows take them.
func (c *Config) TaskRateLimits() []api.RateLimit {
	var out []api.RateLimit
	for i, l := range c.Task.RateLimits {
		out = append(out, l.api(fmt.Sprintf("task.rate_limits[%d]", i), api.ScopeTask, ""))
	}
	return out
}

// APIRateLimits are the rate limits of r (named role) for principal as
// the workflows take them: a principal-scoped window is the principal's,
// a role-scoped one the role's.
func (r *Role) APIRateLimits(role, principal string) []api.RateLimit {
	if r == nil {
		return nil
	}
	var out []api.RateLimit
	for i, l := range r.RateLimits {
		scope, subject := l.Per, principal
		switch scope {
		case "":
			scope = api.ScopePrincipal
		case api.ScopeRole:
			subject = role
		case api.ScopeTask:
			subject = ""
		}
		out = append(out, l.api(fmt.Sprintf("roles.%s.rate_limits[%d]", role, i), scope, subject))
	}
	return out
}

func (l RateLimit) api(at, scope, subject string) api.RateLimit {
	name := l.Name
	if name == "" {
		name = at
	}
	return api.RateLimit{Name: name, Scope: scope, Subject: subject, Tool: l.Tool, Calls: l.Calls, Window: l.Window.D(), Burst: l.Burst}
}
