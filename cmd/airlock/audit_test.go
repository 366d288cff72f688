package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/internal/timeline"
	"github.com/airlock-run/airlock/workflows"
)

// recordedHistories are the workflows' recorded histories.
const recordedHistories = "../../workflows/testdata"

// TestAuditArguments: argument errors are reported before any dialing (the
// address refuses connections, and no case may say it cannot connect).
func TestAuditArguments(t *testing.T) {
	t.Setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")
	t.Setenv("TEMPORAL_NAMESPACE", "")
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no subcommand", []string{"audit"}, 2, "airlock audit show"},
		{"help", []string{"audit", "help"}, 0, "airlock audit export"},
		{"unknown subcommand", []string{"audit", "list"}, 2, `unknown subcommand "list"`},
		{"unknown flag", []string{"audit", "show", "--colour", "t"}, 2, "flag provided but not defined"},
		{"show without a task", []string{"audit", "show"}, 2, "name one TASK_ID"},
		{"show with two tasks", []string{"audit", "show", "a", "b"}, 2, "name one TASK_ID"},
		{"export with an argument", []string{"audit", "export", "t1"}, 2, "unexpected argument \"t1\""},
		{"export with --task and --since", []string{"audit", "export", "--task", "t1", "--since", "1h"}, 2, "do not go together"},
		{"export with a bad --since", []string{"audit", "export", "--since", "yesterday"}, 2, `--since "yesterday": use RFC 3339`},
		{"export with a negative --since", []string{"audit", "export", "--since", "-1h"}, 2, "--since"},
		{"verify without an argument", []string{"audit", "verify"}, 2, "name one TASK_ID or export FILE"},
		{"verify with two arguments", []string{"audit", "verify", "a", "b"}, 2, "name one TASK_ID or export FILE"},
		{"verify --history with an argument", []string{"audit", "verify", "--history", "h.json", "x"}, 2, "unexpected argument"},
		{"verify --history of a missing file", []string{"audit", "verify", "--history", missing}, 1, "no such file"},
		{"show with a missing --config", []string{"audit", "show", "--config", missing, "t1"}, 1, missing},
		{"export with a bad --format", []string{"audit", "export", "--format", "xml"}, 2, `--format "xml": use airlock (the default) or sep-3004`},
		{"keygen without --out", []string{"audit", "keygen"}, 2, "--out FILE names the private key's file"},
		{"verify --public-key with --history", []string{"audit", "verify", "--public-key", "k.pub", "--history", "h.json"}, 2, "does not go with --history"},
		{"verify --public-key of a task", []string{"audit", "verify", "--public-key", "k.pub", "t1"}, 2, "t1 is not a file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("airlock %s: exit %d, stderr:\n%s\nwant exit %d and %q", strings.Join(tc.args, " "), code, stderr, tc.code, tc.stderr)
			}
			if strings.Contains(stderr, "cannot connect") {
				t.Errorf("airlock %s dialed Temporal before checking its arguments", strings.Join(tc.args, " "))
			}
		})
	}
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"2026-11-28T10:30:00Z":      time.Date(2026, 11, 28, 10, 30, 0, 0, time.UTC),
		"2026-11-28T10:30:00+01:00": time.Date(2026, 11, 28, 9, 30, 0, 0, time.UTC),
		"2026-11-28":                time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC),
		"90m":                       time.Date(2026, 11, 29, 10, 30, 0, 0, time.UTC),
	} {
		got, err := parseSince(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseSince(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "yesterday", "0s", "-2h", "2026-13-01"} {
		if _, err := parseSince(in, now); err == nil {
			t.Errorf("parseSince(%q) accepted it", in)
		}
	}
}

// exportFile writes the export of recorded tasks and returns its path and
// lines.
func exportFile(t *testing.T) (string, []string) {
	t.Helper()
	var buf bytes.Buffer
	x := timeline.NewExporter(&buf)
	for _, chain := range [][]string{{"saga_v1_run1"}, {"plan_v1_run1"}, {"approvals_v1_run1"}} {
		var hs []*historypb.History
		for _, n := range chain {
			hs = append(hs, readHistory(t, filepath.Join(recordedHistories, n+".json")))
		}
		tl, err := timeline.BuildChain(hs, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := x.Write(tl); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(t.TempDir(), "audit.jsonl")
	if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return p, strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
}

func readHistory(t *testing.T, path string) *historypb.History {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestAuditVerifyFile(t *testing.T) {
	t.Setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")
	path, lines := exportFile(t)
	write := func(ls []string) string {
		p := filepath.Join(t.TempDir(), "tampered.jsonl")
		if err := os.WriteFile(p, []byte(strings.Join(ls, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	changed := append([]string{}, lines...)
	changed[3] = strings.Replace(changed[3], `"task":"record-rollback"`, `"task":"record-rollbacj"`, 1)
	deleted := append(append([]string{}, lines[:6]...), lines[7:]...)

	for _, tc := range []struct {
		name   string
		file   string
		code   int
		stdout string
		stderr string
	}{
		{"intact", path, 0, "records, the chain is intact", ""},
		{"a changed record", write(changed), 1, "", "line 4 (seq 4): hash mismatch"},
		{"a deleted record", write(deleted), 1, "", "line 7 (seq 8): prev mismatch"},
		{"not an export", write([]string{"hello"}), 1, "", "line 1: not a JSON record"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, "audit", "verify", tc.file)
			if code != tc.code || !strings.Contains(stdout, tc.stdout) || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("exit %d\nstdout: %s\nstderr: %s\nwant exit %d, stdout %q, stderr %q", code, stdout, stderr, tc.code, tc.stdout, tc.stderr)
			}
			if strings.Contains(stderr, "cannot connect") {
				t.Error("verify FILE dialed Temporal")
			}
		})
	}
	pub := filepath.Join(t.TempDir(), "k")
	if code, _, stderr := runCLI(t, "audit", "keygen", "--out", pub); code != 0 {
		t.Fatal(stderr)
	}
	if code, _, stderr := runCLI(t, "audit", "verify", "--public-key", pub+".pub", path); code != 1 || !strings.Contains(stderr, "is not a sep-3004 export") {
		t.Errorf("verify --public-key of a default export: %d %s", code, stderr)
	}
	if _, stdout, _ := runCLI(t, "audit", "verify", path); !strings.Contains(stdout, "OK: "+path+": "+strconv.Itoa(len(lines))+" records") {
		t.Errorf("verify does not count the %d records: %s", len(lines), stdout)
	}
}

// TestAuditVerifyHistory replays recorded histories without Temporal: every
// recorded history replays, and the must-fail one does not.
func TestAuditVerifyHistory(t *testing.T) {
	t.Setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")
	// Programs (code mode) replay with a program runner; those recorded
	// were written in the Starlark subset testenv.ScriptRunner plays.
	programRunner = &testenv.ScriptRunner{}
	t.Cleanup(func() { programRunner = nil; workflows.UseProgramRunner(nil) })
	files, err := filepath.Glob(filepath.Join(recordedHistories, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded histories (%v)", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			code, stdout, stderr := runCLI(t, "audit", "verify", "--history", f)
			if code != 0 || !strings.Contains(stdout, "replays against this binary's workflow code") {
				t.Errorf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
			}
		})
	}
	t.Run("a history given as FILE", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, "audit", "verify", files[0])
		if code != 0 || !strings.Contains(stdout, "replays") {
			t.Errorf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
		}
	})
	t.Run("programs with the binary's own interpreter", func(t *testing.T) {
		// No test runner: verify starts wasm.Program, the interpreter the
		// workers run, and the recorded programs replay on it.
		programRunner = nil
		defer func() { programRunner = &testenv.ScriptRunner{} }()
		for _, name := range []string{"program_v1_run1.json", "program_wasm_v1_run1.json", "plan_program_v1_run1.json"} {
			f := filepath.Join(recordedHistories, name)
			code, stdout, stderr := runCLI(t, "audit", "verify", "--history", f)
			if code != 0 || !strings.Contains(stdout, "replays against this binary's workflow code") {
				t.Errorf("%s: exit %d\nstdout: %s\nstderr: %s; want the programs replayed by the real interpreter", name, code, stdout, stderr)
			}
		}
	})
	t.Run("an incompatible history", func(t *testing.T) {
		f := filepath.Join(recordedHistories, "incompatible", "agent_task_renamed_activity.json")
		code, _, stderr := runCLI(t, "audit", "verify", "--history", f)
		if code != 1 || !strings.Contains(stderr, "does NOT replay") {
			t.Errorf("exit %d, stderr: %s; want exit 1 and a replay failure", code, stderr)
		}
	})
}

// TestShowLink: audit show links to the Web UI the dev process actually
// serves (any --ui-port), to none under --no-ui or when nothing says where
// a UI is, and to --ui-url when given.
func TestShowLink(t *testing.T) {
	t.Chdir(t.TempDir()) // the default data dir, .airlock, is relative
	if err := os.MkdirAll(".airlock", 0o700); err != nil {
		t.Fatal(err)
	}
	const addr = "127.0.0.1:7233"
	for _, tc := range []struct {
		name     string
		recorded *servedUI
		asked    string // --ui-url, when given
		address  string
		want     string
	}{
		{name: "nothing recorded", address: addr, want: ""},
		{name: "dev with --ui-port", recorded: &servedUI{addr, "http://127.0.0.1:9999"}, address: addr, want: "http://127.0.0.1:9999"},
		{name: "dev with --no-ui", recorded: &servedUI{addr, ""}, address: addr, want: ""},
		{name: "another Temporal", recorded: &servedUI{"127.0.0.1:7300", "http://127.0.0.1:9999"}, address: addr, want: ""},
		{name: "--ui-url", recorded: &servedUI{addr, "http://127.0.0.1:9999"}, asked: "http://ui.example", address: addr, want: "http://ui.example"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			removeServedUI(".airlock")
			if tc.recorded != nil {
				if err := writeServedUI(".airlock", *tc.recorded); err != nil {
					t.Fatal(err)
				}
			}
			o := &auditOptions{uiURL: tc.asked}
			o.conn.address = tc.address
			if got := o.showLink(tc.asked != "", ""); got != tc.want {
				t.Errorf("link %q, want %q", got, tc.want)
			}
		})
	}
}
