package manifests_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/manifests"
)

func TestLocksParse(t *testing.T) {
	src := head + `  write:
    side_effects: [write]
    data_access_level: internal
    risk: medium
    locks: ['"file:" + args.path', {key: '"repo:" + args.repo', mode: shared}, '"tenant:" + principal.name', '"admin" in principal.roles ? "all" : "one"']
    lock_timeout: 5s
` + readTool
	m, err := manifests.Parse("m.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if ps := m.Validate(); len(ps) > 0 {
		t.Fatalf("problems: %v", ps)
	}
	w := m.Tools["write"]
	want := []manifests.Lock{{Key: `"file:" + args.path`}, {Key: `"repo:" + args.repo`, Mode: manifests.LockShared},
		{Key: `"tenant:" + principal.name`}, {Key: `"admin" in principal.roles ? "all" : "one"`}}
	if diff := cmp.Diff(want, w.Locks); diff != "" {
		t.Errorf("locks (-want +got):\n%s", diff)
	}
	if w.Locks[0].EffectiveMode() != manifests.LockExclusive || w.EffectiveLockTimeout() != 5*time.Second {
		t.Errorf("mode %s timeout %s", w.Locks[0].EffectiveMode(), w.EffectiveLockTimeout())
	}
	if d := m.Tools["read"].EffectiveLockTimeout(); d != manifests.DefaultLockTimeout {
		t.Errorf("default lock timeout %s", d)
	}
}

func TestLocksProblems(t *testing.T) {
	tool := func(lines string) string {
		return head + "  write:\n    side_effects: [write]\n    data_access_level: internal\n    risk: medium\n" + lines
	}
	tests := []struct {
		name, src string
		want      []string
	}{
		{"not a string", tool("    locks: ['args.count > 1']\n"),
			[]string{`m.yaml:10: tools.write.locks[0]: the expression is of type bool, not string; make it one, e.g. "file:" + string(args.path)`}},
		{"unknown variable", tool("    locks: [{key: '\"f:\" + result.path'}]\n"),
			[]string{"m.yaml:10: tools.write.locks[0].key: undeclared reference to 'result'; a lock key is computed before the call runs, so it may use only args, call, roots and principal"}},
		{"unknown principal field", tool("    locks: ['\"tenant:\" + principal.team']\n"),
			[]string{"m.yaml:10: tools.write.locks[0]: undefined field 'team'; call has the fields id, task, tool and slug, principal has name and roles"}},
		{"principal roles not a string", tool("    locks: ['principal.roles']\n"),
			[]string{`m.yaml:10: tools.write.locks[0]: the expression is of type list(string), not string; make it one, e.g. "file:" + string(args.path)`}},
		{"bad mode", tool("    locks: [{key: 'args.path', mode: write}]\n"),
			[]string{`m.yaml:10: tools.write.locks[0].mode: "write" is not a lock mode; use one of exclusive, shared`}},
		{"empty key", tool("    locks: [{mode: shared}]\n"),
			[]string{`m.yaml:10: tools.write.locks[0]: is empty; write a CEL expression over args, call, roots and principal giving the lock's name, e.g. '"file:" + args.path'`}},
		{"timeout without locks", tool("    lock_timeout: 5s\n"),
			[]string{"m.yaml:10: tools.write.lock_timeout: is set but the tool declares no locks; add locks or remove lock_timeout"}},
		{"negative timeout", tool("    locks: ['args.path']\n    lock_timeout: -1s\n"),
			[]string{"m.yaml:11: tools.write.lock_timeout: must be positive, got -1s; omit it for the default 30s"}},
		{"list expected", tool("    locks: {key: x}\n"),
			[]string{"m.yaml:10: tools.write.locks: expected a list, got a mapping"}},
		{"unknown field", tool("    locks: [{key: 'args.path', mod: shared}]\n"),
			[]string{`m.yaml:10: tools.write.locks[0].mod: unknown field; did you mean "mode"?`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := problemsOf(t, tc.src)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}
