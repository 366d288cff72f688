package integration

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/manifests"
)

// TestNPMServersAsHostUser is issue 32's "its own user" on the real npm
// servers through the in-process stack: with airlock root and the
// servers' directories granted to host user 65534 (as an operator would),
// the filesystem and memory servers run as that user by default (read
// from the host's /proc), the files they write are that user's on the
// host, and a plan that fails at its last step is rolled back, the
// filesystem server moving the directory it made into the trash root.
func TestNPMServersAsHostUser(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skipf(t, "the servers get a host user of their own only when airlock runs as root (this test runs as uid %d)", os.Geteuid())
	}
	t.Parallel()
	const uid = manifests.DefaultSandboxUser
	// Not under t.TempDir, whose directory is 0700.
	base, err := os.MkdirTemp("", "airlock-hostuser-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	files, mem := filepath.Join(base, "files"), filepath.Join(base, "memory")
	sandbox, trash := filepath.Join(files, "sandbox"), filepath.Join(files, "trash")
	for _, d := range []string{sandbox, trash, mem} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	grant := func() {
		err := filepath.Walk(base, func(p string, _ os.FileInfo, err error) error {
			if err != nil || p == base {
				return err
			}
			return os.Chown(p, uid, uid)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	n := newNPMStackIn(t, stackOptions{}, sandbox, trash, filepath.Join(mem, "memory.jsonl"), grant)
	before, graph := n.snapshot(t)

	// Every process of both servers (bwrap, node) is the host user.
	var uids []string
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		cl, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cl), base) {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(st), "\n") {
			if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				uids = append(uids, strings.Join(strings.Fields(v), " "))
			}
		}
	}
	if len(uids) < 2 {
		t.Errorf("%d processes name %s, want both servers': %q", len(uids), base, uids)
	}
	for _, u := range uids {
		if u != "65534 65534 65534 65534" {
			t.Errorf("a server's process has host Uid %q, want 65534 throughout", u)
		}
	}

	cs := n.connect(t, nil)
	waitTools(t, cs, "filesystem__write_file")
	fresh := filepath.Join(sandbox, "fresh.txt")
	if res := call(t, cs, "filesystem__write_file", map[string]any{"path": fresh, "content": "written by the server\n"}, ""); res.IsError {
		t.Fatalf("write_file: %s", text(res))
	}
	for _, f := range []string{fresh, filepath.Join(mem, "memory.jsonl")} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != uid {
			t.Errorf("%s is owned by host uid %d, want %d", f, st.Uid, uid)
		}
	}
	if err := os.Remove(fresh); err != nil {
		t.Fatal(err)
	}

	run := n.startPlan(t, `name: seed
vars:
  dir: `+sandbox+`
steps:
  - id: notes
    tool: filesystem__write_file
    args: {path: "${{ vars.dir }}/notes.txt", content: "overwritten by the plan\n"}
  - id: project
    tool: filesystem__create_directory
    args: {path: "${{ vars.dir }}/project-x"}
  - id: entities
    tool: memory__create_entities
    args:
      entities:
        - {name: project-x, entityType: project, observations: ["created by plan seed"]}
  - id: observe
    tool: memory__add_observations
    args:
      observations: [{entityName: nobody, contents: ["x"]}]
`, "plan-rollback-hostuser")
	res := planResult(t, run)
	if res.State != api.StateRolledBack || len(res.Undone) != 0 {
		t.Fatalf("plan ended %+v, want rolled_back with nothing left undone", res)
	}
	st := status(t, n.stack, "plan-rollback-hostuser")
	var undone []string
	for _, e := range st.Undone {
		undone = append(undone, e.CallID+">"+e.Compensation.Tool)
	}
	if want := []string{"step-entities>memory__delete_entities", "step-project>filesystem__move_file", "step-notes>filesystem__write_file"}; !slices.Equal(undone, want) {
		t.Errorf("compensations ran %q, want %q", undone, want)
	}
	n.assertUnchanged(t, before, graph)
	if ents, _ := os.ReadDir(trash); len(ents) != 1 || !ents[0].IsDir() {
		t.Errorf("trash holds %v, want the one directory the plan created", ents)
	}
}
