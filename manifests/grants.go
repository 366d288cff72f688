package manifests

import (
	"fmt"
	"strings"
	"time"
)

// MaxGrantCalls and MaxGrantDuration bound approval.max_grant itself: a
// grant is a convenience for a burst of similar calls, not a standing
// permission (write a policy rule for that).
const (
	MaxGrantCalls    = 1000
	MaxGrantDuration = Duration(24 * time.Hour)
)

// grants checks approval.max_grant and approval.grant_args.
func (v *validator) grants(p string, a *Approval) {
	mp := p + ".max_grant"
	if g := a.MaxGrant; g != nil {
		if g.Calls < 0 || g.Calls > MaxGrantCalls {
			v.add(mp+".calls", "must be between 1 and %d, got %d; it is the most later calls one approval may also cover", MaxGrantCalls, g.Calls)
		}
		if g.Duration < 0 || g.Duration > MaxGrantDuration {
			v.add(mp+".duration", `must be between 1s and %s, got %s; it is the longest one approval may also cover, e.g. "1h"`, MaxGrantDuration, g.Duration)
		}
		if g.Principal && g.Duration == 0 {
			v.add(mp+".principal", `needs max_grant.duration: a grant across the principal's tasks must end in time; add e.g. duration: "1h"`)
		}
		if g.Calls == 0 && g.Duration == 0 {
			v.add(mp, `sets neither calls nor duration, so no grant could be made; write e.g. {calls: 10, duration: "1h"}, or remove max_grant (approve once only)`)
		}
	} else if v.lines.Has(mp) {
		v.add(mp, `is empty; write e.g. {calls: 10, duration: "1h"}, or remove it (approve once only)`)
	}
	seen := map[string]bool{}
	for i, path := range a.GrantArgs {
		ip := fmt.Sprintf("%s.grant_args[%d]", p, i)
		switch {
		case strings.TrimSpace(path) == "":
			v.add(ip, `is empty; name an argument, e.g. "path" or "repo.name", or remove the entry`)
		case strings.HasPrefix(path, ".") || strings.HasSuffix(path, ".") || strings.Contains(path, ".."):
			v.add(ip, "%q is not a dot-separated argument path; write e.g. \"repo.name\"", path)
		case seen[path]:
			v.add(ip, "%q is listed twice; remove one", path)
		}
		seen[path] = true
	}
	if len(a.GrantArgs) > 0 && a.MaxGrant == nil {
		v.add(p+".grant_args", "has no effect without approval.max_grant (no grant can be made); add max_grant or remove grant_args")
	}
}
