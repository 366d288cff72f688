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
			[]string{`m.yaml:10: tools.read.guard.results.secrets: must be one of redact, block, require_approval, annotate, off, got "mask"; redact replaces each match in a tool's result with a marker, block withholds the result, require_approval holds it until an approver approves delivering it (the call has run), annotate delivers it and records the finding`}},
		{"empty results", "    guard: {results: {}}\n",
			[]string{`m.yaml:10: tools.read.guard.results: names no category; write secrets: redact, personal_data: redact and/or injection: annotate (or block, or off), or remove results`}},
		{"no results", "    guard: {}\n",
			[]string{`m.yaml:10: tools.read.guard.results: is required in guard; write results: {secrets: redact} or {personal_data: redact} (or injection: annotate; or block, or off), arguments: {secrets: block} or descriptions: {injection: annotate}, or remove guard`}},
		{"injection annotate", "    guard: {results: {injection: annotate}}\n", nil},
		{"injection each", "    guard: {results: {injection: redact, secrets: redact}, descriptions: {injection: block}}\n", nil},
		{"injection unknown", "    guard:\n      results:\n        injection: warn\n",
			[]string{`m.yaml:12: tools.read.guard.results.injection: must be one of annotate, block, redact, require_approval, off, got "warn"; annotate delivers a result holding prompt-injection markers and records them, block withholds it, redact replaces each marker, require_approval holds it until an approver approves delivering it`}},
		{"annotate for secrets too", "    guard: {results: {secrets: annotate}}\n", nil},
		{"injection require_approval", "    guard: {results: {injection: require_approval}}\n", nil},
		{"injection in arguments", "    guard: {arguments: {injection: annotate}}\n",
			[]string{`m.yaml:10: tools.read.guard.arguments.injection: prompt-injection markers are inspected in results and descriptions, not in a call's arguments; move it to results (or descriptions), or remove it`,
				`m.yaml:10: tools.read.guard.arguments: names no category; write secrets: block and/or personal_data: annotate (or redact, require_approval, off), or remove arguments`}},
		{"all three", "    guard: {arguments: {secrets: require_approval}, results: {injection: annotate}, descriptions: {injection: block}}\n", nil},
		{"descriptions only", "    guard:\n      descriptions:\n        injection: annotate\n", nil},
		{"descriptions redact", "    guard:\n      descriptions:\n        injection: redact\n",
			[]string{`m.yaml:12: tools.read.guard.descriptions.injection: must be one of annotate, block, off, got "redact"; annotate lists a tool whose definition holds prompt-injection markers and records them, block hides it and refuses its calls (redact is for results: a definition is listed whole or not at all)`}},
		{"descriptions empty", "    guard: {descriptions: {}}\n",
			[]string{`m.yaml:10: tools.read.guard.descriptions: names no category; write injection: annotate (or block, or off), or remove descriptions`}},
		{"descriptions misspelt", "    guard: {description: {injection: block}}\n",
			[]string{`m.yaml:10: tools.read.guard.description: unknown field; did you mean "descriptions"?`}},
		{"personal data", "    guard: {results: {personal_data: redact}}\n", nil},
		{"both", "    guard: {results: {secrets: block, personal_data: redact}}\n", nil},
		{"personal data unknown", "    guard:\n      results:\n        personal_data: hide\n",
			[]string{`m.yaml:12: tools.read.guard.results.personal_data: must be one of redact, block, require_approval, annotate, off, got "hide"; redact replaces each match in a tool's result with a marker, block withholds the result, require_approval holds it until an approver approves delivering it (the call has run), annotate delivers it and records the finding`}},
		{"personal data misspelt", "    guard: {results: {personal-data: redact}}\n",
			[]string{`m.yaml:10: tools.read.guard.results.personal-data: unknown field; did you mean "personal_data"?`}},
		{"arguments, all actions", "    guard: {arguments: {secrets: require_approval, personal_data: annotate}}\n", nil},
		{"arguments block redact", "    guard: {arguments: {secrets: block, personal_data: redact}, results: {secrets: annotate}}\n", nil},
		{"arguments unknown action", "    guard:\n      arguments:\n        secrets: approve\n",
			[]string{`m.yaml:12: tools.read.guard.arguments.secrets: must be one of redact, block, require_approval, annotate, off, got "approve"; redact replaces each match in a call's arguments with a marker, block refuses the call, require_approval asks an approver, annotate runs it and records the finding`}},
		{"arguments case-folded action", "    guard: {arguments: {secrets: Block}}\n",
			[]string{`m.yaml:10: tools.read.guard.arguments.secrets: must be one of redact, block, require_approval, annotate, off, got "Block"; redact replaces each match in a call's arguments with a marker, block refuses the call, require_approval asks an approver, annotate runs it and records the finding`}},
		{"arguments case-folded key", "    guard: {arguments: {Secrets: block}}\n",
			[]string{`m.yaml:10: tools.read.guard.arguments.Secrets: unknown field; did you mean "secrets"?`}},
		{"arguments duplicate key", "    guard:\n      arguments:\n        secrets: annotate\n        secrets: off\n",
			[]string{"m.yaml:13: tools.read.guard.arguments.secrets: defined twice (first at line 12); keep one"}},
		{"arguments empty", "    guard: {arguments: {}}\n",
			[]string{`m.yaml:10: tools.read.guard.arguments: names no category; write secrets: block and/or personal_data: annotate (or redact, require_approval, off), or remove arguments`}},
		{"require_approval on results", "    guard: {results: {secrets: require_approval}}\n", nil},
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

// TestPersonalDataInResults: the tool's own action, else the
// configuration's, else off; independent of secrets.
func TestPersonalDataInResults(t *testing.T) {
	block := &manifests.Tool{Guard: &manifests.Guard{Results: &manifests.GuardResults{PersonalData: manifests.GuardBlock}}}
	secretsOnly := &manifests.Tool{Guard: &manifests.Guard{Results: &manifests.GuardResults{Secrets: manifests.GuardBlock}}}
	for _, tc := range []struct {
		def  manifests.GuardAction
		tool *manifests.Tool
		want manifests.GuardAction
	}{
		{"", nil, manifests.GuardOff},
		{"", &manifests.Tool{}, manifests.GuardOff},
		{manifests.GuardRedact, nil, manifests.GuardRedact},
		{manifests.GuardRedact, secretsOnly, manifests.GuardRedact},
		{manifests.GuardRedact, block, manifests.GuardBlock},
		{"", secretsOnly, manifests.GuardOff},
	} {
		m := &manifests.Manifest{PersonalDataDefault: tc.def, GuardDefault: manifests.GuardRedact}
		if got := m.PersonalDataInResults(tc.tool); got != tc.want {
			t.Errorf("default %q, tool %+v: %q, want %q", tc.def, tc.tool, got, tc.want)
		}
	}
	if got := (&manifests.Manifest{}).SecretsInResults(block); got != manifests.GuardOff {
		t.Errorf("a tool guarding personal data only: secrets %q, want off", got)
	}
}

// TestInjectionSettings: each of the two injection settings is the
// tool's own, else the configuration's, else off, independently of the
// other categories.
func TestInjectionSettings(t *testing.T) {
	own := &manifests.Tool{Guard: &manifests.Guard{
		Results:      &manifests.GuardResults{Injection: manifests.GuardBlock},
		Descriptions: &manifests.GuardDescriptions{Injection: manifests.GuardBlock},
	}}
	secretsOnly := &manifests.Tool{Guard: &manifests.Guard{Results: &manifests.GuardResults{Secrets: manifests.GuardBlock}}}
	for _, tc := range []struct {
		def        manifests.GuardAction
		tool       *manifests.Tool
		results    manifests.GuardAction
		listedWant manifests.GuardAction
	}{
		{"", nil, manifests.GuardOff, manifests.GuardOff},
		{"", secretsOnly, manifests.GuardOff, manifests.GuardOff},
		{manifests.GuardAnnotate, nil, manifests.GuardAnnotate, manifests.GuardAnnotate},
		{manifests.GuardAnnotate, secretsOnly, manifests.GuardAnnotate, manifests.GuardAnnotate},
		{manifests.GuardAnnotate, own, manifests.GuardBlock, manifests.GuardBlock},
		{"", own, manifests.GuardBlock, manifests.GuardBlock},
	} {
		m := &manifests.Manifest{InjectionDefault: tc.def, DescriptionInjectionDefault: tc.def, GuardDefault: manifests.GuardRedact}
		if got := m.InjectionInResults(tc.tool); got != tc.results {
			t.Errorf("default %q, tool %+v: results %q, want %q", tc.def, tc.tool, got, tc.results)
		}
		if got := m.InjectionInDescriptions(tc.tool); got != tc.listedWant {
			t.Errorf("default %q, tool %+v: descriptions %q, want %q", tc.def, tc.tool, got, tc.listedWant)
		}
	}
	var nilM *manifests.Manifest
	if nilM.InjectionInResults(nil) != manifests.GuardOff || nilM.InjectionInDescriptions(own) != manifests.GuardBlock {
		t.Error("a nil manifest")
	}
}

// TestGuardInArguments: the tool's own action, else the configuration's,
// else off; independent of the result settings.
func TestGuardInArguments(t *testing.T) {
	own := &manifests.Tool{Guard: &manifests.Guard{Arguments: &manifests.GuardResults{Secrets: manifests.GuardRequireApproval}}}
	results := &manifests.Tool{Guard: &manifests.Guard{Results: &manifests.GuardResults{Secrets: manifests.GuardBlock}}}
	m := &manifests.Manifest{ArgumentGuard: manifests.GuardDefaults{ArgumentSecrets: manifests.GuardBlock, ArgumentPersonalData: manifests.GuardAnnotate}}
	for _, tc := range []struct {
		m          *manifests.Manifest
		tool       *manifests.Tool
		sec, pdata manifests.GuardAction
	}{
		{m, own, manifests.GuardRequireApproval, manifests.GuardAnnotate},
		{m, results, manifests.GuardBlock, manifests.GuardAnnotate},
		{m, nil, manifests.GuardBlock, manifests.GuardAnnotate},
		{&manifests.Manifest{}, results, manifests.GuardOff, manifests.GuardOff},
		{nil, own, manifests.GuardRequireApproval, manifests.GuardOff},
	} {
		if s, p := tc.m.SecretsInArguments(tc.tool), tc.m.PersonalDataInArguments(tc.tool); s != tc.sec || p != tc.pdata {
			t.Errorf("%+v: %q %q, want %q %q", tc.tool, s, p, tc.sec, tc.pdata)
		}
	}
}
