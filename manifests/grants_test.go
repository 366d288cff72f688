package manifests_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestValidateGrants(t *testing.T) {
	approval := head + readTool + "    approval:\n      group: ops\n"
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"valid", approval + "      max_grant: {calls: 10, duration: 1h}\n      grant_args: [path, repo.name]\n", nil},
		{"calls only", approval + "      max_grant: {calls: 3}\n", nil},
		{"principal", approval + "      max_grant: {calls: 3, duration: 1h, principal: true}\n", nil},
		{"principal without duration", approval + "      max_grant: {calls: 3, principal: true}\n",
			[]string{`m.yaml:12: tools.read.approval.max_grant.principal: needs max_grant.duration: a grant across the principal's tasks must end in time; add e.g. duration: "1h"`}},
		{"neither", approval + "      max_grant: {}\n",
			[]string{`m.yaml:12: tools.read.approval.max_grant: sets neither calls nor duration, so no grant could be made; write e.g. {calls: 10, duration: "1h"}, or remove max_grant (approve once only)`}},
		{"negative and too long", approval + "      max_grant:\n        calls: -1\n        duration: 48h\n",
			[]string{
				"m.yaml:13: tools.read.approval.max_grant.calls: must be between 1 and 1000, got -1; it is the most later calls one approval may also cover",
				`m.yaml:14: tools.read.approval.max_grant.duration: must be between 1s and 24h0m0s, got 48h0m0s; it is the longest one approval may also cover, e.g. "1h"`,
			}},
		{"grant_args without max_grant and bad paths", approval + "      grant_args: [\"\", a..b, path, path]\n",
			[]string{
				`m.yaml:12: tools.read.approval.grant_args[0]: is empty; name an argument, e.g. "path" or "repo.name", or remove the entry`,
				`m.yaml:12: tools.read.approval.grant_args[1]: "a..b" is not a dot-separated argument path; write e.g. "repo.name"`,
				`m.yaml:12: tools.read.approval.grant_args[3]: "path" is listed twice; remove one`,
				`m.yaml:12: tools.read.approval.grant_args: has no effect without approval.max_grant (no grant can be made); add max_grant or remove grant_args`,
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, problemsOf(t, tc.src)); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}
