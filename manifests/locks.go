package manifests

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/airlock-run/airlock/internal/expr"
)

// Lock is one resource lock a call of a tool takes (issue 16 §4). Key is
// a CEL expression over args, call and roots (the variables of a capture)
// and principal ({name, roles}: who calls) whose value, a string, names the
// lock: '"file:" + args.path'. Calls of
// any tool, in any task, whose keys are equal exclude each other: one
// exclusive holder, or any number of shared ones (readers/writer).
//
// In YAML a lock is either its key alone (exclusive) or a mapping:
//
//	locks: ['"repo:" + args.repo', {key: '"file:" + args.path', mode: shared}]
type Lock struct {
	Key  string   `yaml:"key" json:"key"`
	Mode LockMode `yaml:"mode,omitempty" json:"mode,omitempty"`
}

// LockMode is exclusive (the default) or shared.
type LockMode string

// Lock modes.
const (
	LockExclusive LockMode = "exclusive"
	LockShared    LockMode = "shared"
)

var lockModes = []LockMode{LockExclusive, LockShared}

// EffectiveMode is the lock's mode, exclusive when unset.
func (l Lock) EffectiveMode() LockMode {
	if l.Mode == "" {
		return LockExclusive
	}
	return l.Mode
}

// DefaultLockTimeout is how long a call waits for its locks when the
// manifest sets no lock_timeout.
const DefaultLockTimeout = 30 * time.Second

// EffectiveLockTimeout is the tool's lock_timeout, else DefaultLockTimeout.
func (t *Tool) EffectiveLockTimeout() time.Duration {
	if t == nil || t.LockTimeout <= 0 {
		return DefaultLockTimeout
	}
	return t.LockTimeout.D()
}

// lockFields is Lock without its UnmarshalYAML, to decode the mapping form.
type lockFields Lock

// UnmarshalYAML reads a lock's key alone (a string) or its mapping.
func (l *Lock) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*l = Lock{}
		return n.Decode(&l.Key)
	}
	var f lockFields
	if err := n.Decode(&f); err != nil {
		return err
	}
	*l = Lock(f)
	return nil
}

// MaxLocks bounds the locks of one tool.
const MaxLocks = 16

// locks checks a tool's locks and lock_timeout.
func (v *validator) locks(p string, t *Tool) {
	lp := p + ".locks"
	if len(t.Locks) > MaxLocks {
		v.add(lp, "declares %d locks, more than %d; lock a coarser resource instead", len(t.Locks), MaxLocks)
	}
	for i, l := range t.Locks {
		ep := fmt.Sprintf("%s[%d]", lp, i)
		kp := ep + ".key"
		if !v.lines.Has(kp) {
			kp = ep // the short form: the key is the element itself
		}
		if strings.TrimSpace(l.Key) == "" {
			v.add(kp, `is empty; write a CEL expression over %s giving the lock's name, e.g. '"file:" + args.path'`, celVariables(expr.Lock))
		} else if _, err := expr.CompileString(expr.Lock, l.Key); err != nil {
			v.lockProblem(kp, err)
		}
		if l.Mode != "" {
			oneOf(v, ep+".mode", l.Mode, "lock mode", lockModes)
		}
	}
	if tp := p + ".lock_timeout"; v.set(tp, t.LockTimeout) {
		switch {
		case t.LockTimeout <= 0:
			v.add(tp, "must be positive, got %s; omit it for the default %s", t.LockTimeout, DefaultLockTimeout)
		case t.LockTimeout.D() > MaxToolTimeout:
			v.add(tp, "%s is longer than 24h; lower it", t.LockTimeout)
		case len(t.Locks) == 0:
			v.add(tp, "is set but the tool declares no locks; add locks or remove lock_timeout")
		}
	}
}

// lockProblem reports a lock key that does not compile or is not a string.
func (v *validator) lockProblem(p string, err error) {
	msg := err.Error()
	switch {
	case errors.Is(err, expr.ErrNotString):
		// CompileString's message says how already.
	case errors.Is(err, expr.ErrUndeclaredReference):
		msg += "; a lock key is computed before the call runs, so it may use only " + celVariables(expr.Lock)
	case errors.Is(err, expr.ErrUndefinedField):
		msg += "; call has the fields id, task, tool and slug, principal has name and roles"
	default:
		msg += "; write a CEL expression over " + celVariables(expr.Lock) + ` giving a string, e.g. '"file:" + args.path' (see https://cel.dev)`
	}
	v.add(p, "%s", msg)
}
