package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/manifests"
)

// TestNativeToolsThroughGateway calls the example WASM tools over MCP
// beside an upstream's tools, through the whole pipeline, and rolls a
// note_write back with the task.
func TestNativeToolsThroughGateway(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	nat, err := manifests.Load(filepath.Join(repoRoot(), "manifests", "examples", "native.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	counter, _ := counterManifest(t, "  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}\n")
	s := newStack(t, stackOptions{dataDir: filepath.Join(dataDir, "temporal"), manifests: []*manifests.Manifest{nat, counter},
		vars: map[string]string{"AIRLOCK_DATA_DIR": dataDir}})
	cs := s.connect(t, map[string]string{gateway.HeaderTask: "native-task"})
	tools := waitTools(t, cs, "native__json_query", "native__csv_to_json", "native__note_write", "native__note_read", "native__note_delete", "counter__echo")
	if d := tools["native__json_query"].Description; !strings.Contains(d, "Select values from a JSON document") {
		t.Errorf("json_query description %q: want the manifest's", d)
	}
	if a := tools["native__json_query"].Annotations; a == nil || !a.ReadOnlyHint {
		t.Errorf("json_query annotations %+v: want read-only", a)
	}

	res := call(t, cs, "native__json_query", map[string]any{"json": map[string]any{"items": []any{map[string]any{"id": 7}, map[string]any{"id": 9}}}, "path": "items[*].id"}, "")
	if res.IsError || !strings.Contains(mustJSON(t, res.StructuredContent), `[7,9]`) {
		t.Fatalf("json_query: %s %v", text(res), res.StructuredContent)
	}
	res = call(t, cs, "native__csv_to_json", map[string]any{"csv": "name,qty\napple,3\npear,5\n"}, "")
	if res.IsError || !strings.Contains(mustJSON(t, res.StructuredContent), `{"name":"pear","qty":"5"}`) {
		t.Fatalf("csv_to_json: %s %v", text(res), res.StructuredContent)
	}
	// A bad input is the tool's own error, not a crash.
	res = call(t, cs, "native__csv_to_json", map[string]any{"csv": "a,b\n1\n"}, "")
	if !res.IsError || !strings.Contains(text(res), "line 2") {
		t.Fatalf("ragged csv: isError=%v %s", res.IsError, text(res))
	}
	// Policy sees the manifest's schema: a wrong argument never reaches the module.
	res = call(t, cs, "native__note_write", map[string]any{"name": "../etc/passwd", "content": "x"}, "")
	if !res.IsError || !strings.Contains(text(res), "schema") {
		t.Fatalf("bad note name: %s", text(res))
	}

	notes := filepath.Join(dataDir, "notes")
	if err := os.WriteFile(filepath.Join(notes, "kept.txt"), []byte("before"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, n := range []map[string]any{{"name": "kept", "content": "overwritten"}, {"name": "fresh", "content": "new note"}} {
		if res := call(t, cs, "native__note_write", n, ""); res.IsError {
			t.Fatalf("note_write %v: %s", n, text(res))
		}
	}
	if b, _ := os.ReadFile(filepath.Join(notes, "fresh.txt")); string(b) != "new note" {
		t.Fatalf("fresh.txt = %q", b)
	}
	res = call(t, cs, gateway.ToolRollback, map[string]any{}, "")
	var rb api.RollbackResult
	b, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(b, &rb)
	if res.IsError || rb.State != api.StateRolledBack || len(rb.Compensated) != 2 {
		t.Fatalf("rollback: %s", text(res))
	}
	if b, _ := os.ReadFile(filepath.Join(notes, "kept.txt")); string(b) != "before" {
		t.Errorf("kept.txt = %q after the rollback, want its old content", b)
	}
	if _, err := os.Stat(filepath.Join(notes, "fresh.txt")); !os.IsNotExist(err) {
		t.Errorf("fresh.txt still exists after the rollback (%v)", err)
	}
}

// TestNativeToolLimitsThroughGateway: a tool whose module does not match
// its sha256 is listed as unavailable and says why when called, a guest
// that spins forever is stopped at its timeout with a clear error, one
// that floods stdout is cut at its output limit, and the next call works.
func TestNativeToolLimitsThroughGateway(t *testing.T) {
	t.Parallel()
	guest := filepath.Join(repoRoot(), "internal", "sandbox", "testdata", "guest.wasm")
	b, err := os.ReadFile(guest)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	tool := func(name, mode, extra string) string {
		return `  ` + name + `:
    description: adversarial guest (` + mode + `)
    side_effects: [none]
    data_access_level: public
    risk: low
    idempotent: true
    timeout: 1s
    retry: {max_attempts: 1}
    wasm:
      module: ` + guest + `
      sha256: ` + hex.EncodeToString(sum[:]) + `
      args: [` + mode + `]
      input_schema: {type: object}
` + extra
	}
	// A module that does not match its sha256 makes only its own tool
	// unavailable.
	broken := strings.Replace(tool("broken", "echo", ""), hex.EncodeToString(sum[:]), strings.Repeat("0", 64), 1)
	m, err := manifests.Parse(filepath.Join(t.TempDir(), "bad.yaml"), []byte("server:\n  name: bad\n  wasm: {}\ntools:\n"+
		tool("loop", "loop", "")+tool("flood", "flood", "      output_limit: 64KiB\n")+tool("echo", "echo", "")+broken))
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}})
	cs := s.connect(t, nil)
	waitTools(t, cs, "bad__loop", "bad__flood", "bad__echo")
	const reason = "its module does not match the sha256 pinned in its manifest"
	lt, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	listed := false
	for _, tl := range lt.Tools {
		if tl.Name == "bad__broken" {
			listed = true
			if !strings.HasPrefix(tl.Description, "[unavailable: "+reason+"] ") {
				t.Errorf("broken's description %q: want it to say why it is unavailable", tl.Description)
			}
		}
	}
	if !listed {
		t.Error("bad__broken is not listed")
	}
	res := call(t, cs, "bad__broken", map[string]any{}, "")
	if !res.IsError || !strings.Contains(text(res), reason) {
		t.Fatalf("broken: %s", text(res))
	}
	res = call(t, cs, "bad__loop", map[string]any{}, "")
	if !res.IsError || !strings.Contains(text(res), "time limit of 1s") {
		t.Fatalf("loop: %s", text(res))
	}
	res = call(t, cs, "bad__flood", map[string]any{}, "")
	if !res.IsError || !strings.Contains(text(res), "output limit of 64KiB") {
		t.Fatalf("flood: %s", text(res))
	}
	res = call(t, cs, "bad__echo", map[string]any{"hello": "world"}, "")
	if res.IsError || !strings.Contains(text(res), `"hello"`) {
		t.Fatalf("echo after the bad calls: %s", text(res))
	}
}
