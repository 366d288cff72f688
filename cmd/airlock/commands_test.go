package main

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/internal/identity"
)

// TestFlagsAfterArguments: every command family takes its flags after the
// positional arguments too. Each case puts a flag after the argument and
// checks that the flag took effect (the address it dialed, the file it
// read), not merely that the command ran.
func TestFlagsAfterArguments(t *testing.T) {
	t.Setenv("TEMPORAL_ADDRESS", "")
	t.Setenv("TEMPORAL_NAMESPACE", "")
	t.Setenv(envAPIKey, "")
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	manifest := filepath.Join(t.TempDir(), "echo.yaml")
	if err := os.WriteFile(manifest, []byte("server:\n  name: echo\n  stdio:\n    command: echo-server\ntools:\n  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	refused := "cannot connect to Temporal at 127.0.0.1:1"
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"tasks", []string{"tasks", "show", "t1", "--temporal-address", "127.0.0.1:1"}, 1, "", refused},
		{"tasks rollback", []string{"tasks", "rollback", "t1", "--reason", "x", "--temporal-address", "127.0.0.1:1"}, 1, "", refused},
		{"audit show", []string{"audit", "show", "t1", "--temporal-address", "127.0.0.1:1", "--config", ""}, 1, "", refused},
		{"audit show --config", []string{"audit", "show", "t1", "--config", missing}, 1, "", missing},
		{"audit verify", []string{"audit", "verify", "t1", "--temporal-address", "127.0.0.1:1"}, 1, "", refused},
		{"approvals", []string{"approvals", "show", "t1~c1", "--temporal-address", "127.0.0.1:1", "--config", missing}, 1, "", missing},
		{"approvals dial", []string{"approvals", "list", "--temporal-address", "127.0.0.1:1"}, 1, "", refused},
		{"run", []string{"run", "../../plans/examples/seed-project.yaml", "--config", "../../airlock.yaml", "--temporal-address", "127.0.0.1:1"}, 1, "", refused},
		{"manifests validate", []string{"manifests", "validate", manifest, "--config", missing}, 0, "ok: ", ""},
		{"manifests pin", []string{"manifests", "pin", "echo", "--config", missing}, 1, "", "--config " + missing},
		{"manifests scan", []string{"manifests", "scan", "echo", "--config", missing}, 1, "", "--config " + missing},
		{"keys", []string{"keys", "hash", "--", "-dash-key"}, 0, identity.HashKey("-dash-key"), ""},
		{"dev", []string{"dev", "--log-level", "info", "--config", missing}, 1, "", "--config " + missing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runBounded(t, tc.args)
			if code != tc.code || !strings.Contains(stdout, tc.stdout) || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("airlock %s: exit %d\nstdout: %s\nstderr: %s\nwant exit %d, stdout %q, stderr %q",
					strings.Join(tc.args, " "), code, stdout, stderr, tc.code, tc.stdout, tc.stderr)
			}
		})
	}
}

func TestParseInterspersed(t *testing.T) {
	for _, tc := range []struct {
		args []string
		pos  []string
		json bool
		out  string
	}{
		{[]string{"a", "--json", "b"}, []string{"a", "b"}, true, ""},
		{[]string{"--out", "f", "a"}, []string{"a"}, false, "f"},
		{[]string{"a", "--out=f"}, []string{"a"}, false, "f"},
		{[]string{"a", "--", "--json", "-x"}, []string{"a", "--json", "-x"}, false, ""},
		{[]string{"--", "a"}, []string{"a"}, false, ""},
		{[]string{"--json", "--", "a", "--out", "f"}, []string{"a", "--out", "f"}, true, ""},
		// "--" as a flag's value ends nothing.
		{[]string{"--out", "--", "a", "--json"}, []string{"a"}, true, "--"},
		{[]string{"a", "-"}, []string{"a", "-"}, false, ""},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		asJSON := fs.Bool("json", false, "")
		out := fs.String("out", "", "")
		pos, err := parseInterspersed(fs, tc.args)
		if err != nil || !slices.Equal(pos, tc.pos) || *asJSON != tc.json || *out != tc.out {
			t.Errorf("%q: positional %q, --json %v, --out %q, err %v; want %q, %v, %q", tc.args, pos, *asJSON, *out, err, tc.pos, tc.json, tc.out)
		}
	}
}

// TestHelpFromTable: every command in the table answers -h (and `airlock
// help ...`) with its usage line, its description and its flags, and every
// group lists its subcommands.
func TestHelpFromTable(t *testing.T) {
	var walk func(path []string, cmds []*Command)
	walk = func(path []string, cmds []*Command) {
		for _, cmd := range cmds {
			p := append(slices.Clone(path), cmd.Name)
			name := "airlock " + strings.Join(p, " ")
			if cmd.Sub != nil {
				code, _, stderr := runBounded(t, p)
				for _, sub := range cmd.Sub {
					if code != 2 || !strings.Contains(stderr, name+" "+sub.Name) || !strings.Contains(stderr, sub.Short) {
						t.Errorf("%s: exit %d, want 2 and %q listed with %q:\n%s", name, code, sub.Name, sub.Short, stderr)
					}
				}
				walk(p, cmd.Sub)
				continue
			}
			code, _, stderr := runBounded(t, append(p, "-h"))
			fs := flag.NewFlagSet(name, flag.ContinueOnError)
			cmd.Flags(fs)
			want := []string{"Usage: " + name, firstLine(firstNonEmpty(cmd.Long, cmd.Short))}
			fs.VisitAll(func(f *flag.Flag) { want = append(want, "-"+f.Name) })
			for _, w := range want {
				if code != 0 || !strings.Contains(stderr, w) {
					t.Errorf("%s -h: exit %d, want 0 and %q in:\n%s", name, code, w, stderr)
				}
			}
			code, stdout, _ := runBounded(t, append([]string{"help"}, p...))
			if code != 0 || !strings.Contains(stdout, "Usage: "+name) {
				t.Errorf("airlock help %s: exit %d:\n%s", strings.Join(p, " "), code, stdout)
			}
		}
	}
	walk(nil, commands())
	if code, _, stderr := runBounded(t, []string{"help", "tasks", "purge"}); code != 2 || !strings.Contains(stderr, `no command "purge"`) {
		t.Errorf("help for an unknown command: exit %d, %s", code, stderr)
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
