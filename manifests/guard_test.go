package manifests_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/manifests"
)

// TestGuardValidation: a tool's guard is checked like every field, each
// problem at its line with the fix.
func TestGuardValidation(t *testing.T) {
	for _, tc := range []struct {
		name, guard string
		want        []string
	}{
		{"redact", "    guard: {results: {secrets: redact}}\n", nil},
		{"block", "    guard:\n      results:\n        secrets: block\n", nil},
		{"off", "    guard: {results: {secrets: off}}\n", nil},
		{"unknown action", "    guard: {results: {secrets: mask}}\n",
			[]string{`m.yaml:10: tools.read.guard.results.secrets: must be one of redact, block, off, got "mask"`}},
		{"empty results", "    guard: {results: {}}\n",
			[]string{`m.yaml:10: tools.read.guard.results.secrets: must be one of redact, block, off, got ""`}},
		{"no results", "    guard: {}\n",
			[]string{`m.yaml:10: tools.read.guard.results: is required in guard; write results: {secrets: redact} (or block, or off), or remove guard`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, problemsOf(t, head+readTool+tc.guard)); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSecretsInResults: the tool's own action, else the configuration's,
// else off.
func TestSecretsInResults(t *testing.T) {
	block := &manifests.Tool{Guard: &manifests.Guard{Results: &manifests.GuardResults{Secrets: manifests.GuardBlock}}}
	plain := &manifests.Tool{}
	for _, tc := range []struct {
		def  manifests.GuardAction
		tool *manifests.Tool
		want manifests.GuardAction
	}{
		{"", plain, manifests.GuardOff},
		{"", nil, manifests.GuardOff},
		{manifests.GuardRedact, plain, manifests.GuardRedact},
		{manifests.GuardRedact, nil, manifests.GuardRedact},
		{manifests.GuardRedact, block, manifests.GuardBlock},
		{"", block, manifests.GuardBlock},
	} {
		m := &manifests.Manifest{GuardDefault: tc.def}
		if got := m.SecretsInResults(tc.tool); got != tc.want {
			t.Errorf("default %q, tool %+v: %q, want %q", tc.def, tc.tool, got, tc.want)
		}
	}
	var nilM *manifests.Manifest
	if got := nilM.SecretsInResults(block); got != manifests.GuardBlock {
		t.Errorf("nil manifest: %q", got)
	}
}
