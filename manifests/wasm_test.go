package manifests_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	. "github.com/airlock-run/airlock/manifests"
)

func TestWASMManifests(t *testing.T) {
	const sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	good := `server:
  name: native
  wasm: {}
tools:
  q:
    description: Query JSON.
    side_effects: [none]
    data_access_level: public
    risk: low
    idempotent: true
    timeout: 5s
    wasm:
      module: ../wasm/json.wasm
      sha256: ` + sha + `
      args: [query]
      input_schema:
        type: object
        properties: {json: {}, path: {type: string}}
        required: [json, path]
      memory_limit: 32MiB
      output_limit: 512KiB
      mounts: [{host: "${AIRLOCK_DATA_DIR}/data", guest: /data}, {host: out, guest: /out, mode: rw, max_bytes: 1MiB, max_files: 10}]
      env: [LANG]
      max_open_files: 16
`
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{name: "valid", src: good},
		{name: "wasm and stdio", src: strings.Replace(good, "  wasm: {}\n", "  wasm: {}\n  stdio: {command: x}\n", 1),
			want: []string{"m.yaml:1: server: more than one of stdio, http and wasm is set; keep the one that says where the tools run"}},
		{name: "no description", src: strings.Replace(good, "    description: Query JSON.\n", "", 1),
			want: []string{"m.yaml:5: tools.q.description: is required for a wasm tool (no upstream describes it); say what it does and what it returns"}},
		{name: "no wasm block", src: good[:strings.Index(good, "    wasm:")],
			want: []string{"m.yaml:5: tools.q.wasm: is required for a tool of a wasm server; give its module, sha256 and input_schema"}},
		{name: "wasm block on a stdio server", src: strings.Replace(good, "  wasm: {}\n", "  stdio: {command: x}\n", 1),
			want: []string{"m.yaml:12: tools.q.wasm: is only for tools of a wasm server (server.wasm); remove it, or make the server a wasm server"}},
		{name: "bad hash, size, mounts, env", src: strings.NewReplacer(
			"sha256: "+sha, "sha256: abc",
			"memory_limit: 32MiB", "memory_limit: 8GiB",
			"guest: /out, mode: rw", "guest: out, mode: rwx",
			"env: [LANG]", "env: [LANG=C]").Replace(good),
			want: []string{
				`m.yaml:14: tools.q.wasm.sha256: "abc" is not a SHA-256; write 64 lowercase hex digits (sha256sum FILE)`,
				`m.yaml:20: tools.q.wasm.memory_limit: 8GiB is out of range; use 1MiB to 4GiB (default 64MiB)`,
				`m.yaml:22: tools.q.wasm.mounts[1].guest: "out" must be an absolute guest path such as "/data"`,
				`m.yaml:22: tools.q.wasm.mounts[1].mode: "rwx" is not a mode; use "ro" (read-only, the default) or "rw"`,
				`m.yaml:23: tools.q.wasm.env[0]: "LANG=C" is not an environment variable name; list names only (values come from the host)`,
			}},
		{name: "quotas out of range or on a read-only mount", src: strings.NewReplacer(
			"guest: /data}", "guest: /data, max_files: 5}",
			"max_bytes: 1MiB, max_files: 10", "max_bytes: 0B, max_files: 2000000",
			"max_open_files: 16", "max_open_files: 0").Replace(good),
			want: []string{
				`m.yaml:22: tools.q.wasm.mounts[0].max_files: is a quota of read-write mounts; remove it, or make the mount "rw"`,
				`m.yaml:22: tools.q.wasm.mounts[1].max_bytes: 0B is out of range; use 1B to 1024GiB (default 64MiB)`,
				`m.yaml:22: tools.q.wasm.mounts[1].max_files: 2000000 is out of range; use 1 to 1000000 (default 1000)`,
				`m.yaml:24: tools.q.wasm.max_open_files: 0 is out of range; use 1 to 1024 (default 64)`,
			}},
		{name: "a quota that is not a number", src: strings.Replace(good, "max_files: 10", "max_files: many", 1),
			want: []string{`m.yaml:22: tools.q.wasm.mounts[1].max_files: expected a whole number, got "many"`}},
		{name: "size without unit", src: strings.Replace(good, "output_limit: 512KiB", "output_limit: 512", 1),
			want: []string{`m.yaml:21: tools.q.wasm.output_limit: "512" is not a size; write a number and a unit, e.g. "64MiB" (B, KiB, MiB, GiB, KB, MB, GB)`}},
		{name: "schema not an object", src: strings.Replace(good, "        type: object\n", "        type: array\n", 1),
			want: []string{`m.yaml:17: tools.q.wasm.input_schema.type: must be "object" (MCP tool arguments are an object), got array`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := problemsOf(t, tc.src)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWASMResolve(t *testing.T) {
	w := WASMTool{Module: "../wasm/x.wasm", Mounts: []Mount{{Host: "${AIRLOCK_DATA_DIR}/notes", Guest: "/notes"}, {Host: "rel", Guest: "/r"}}}
	got := w.Resolve("/etc/airlock/manifests", map[string]string{"AIRLOCK_DATA_DIR": "/var/lib/airlock"})
	if got.Module != "/etc/airlock/wasm/x.wasm" || got.Mounts[0].Host != "/var/lib/airlock/notes" || got.Mounts[1].Host != "/etc/airlock/manifests/rel" {
		t.Fatalf("resolved %+v", got)
	}
	if w.Mounts[0].Host != "${AIRLOCK_DATA_DIR}/notes" {
		t.Fatal("Resolve changed its receiver's mounts")
	}
}

func TestWASMDefaults(t *testing.T) {
	var w WASMTool
	if got := w.EffectiveMaxOpenFiles(); got != 64 {
		t.Errorf("max_open_files defaults to %d, want 64", got)
	}
	var m Mount
	if m.EffectiveMaxBytes() != 64<<20 || m.EffectiveMaxFiles() != 1000 {
		t.Errorf("mount quotas default to %s and %d, want 64MiB and 1000", m.EffectiveMaxBytes(), m.EffectiveMaxFiles())
	}
	w = WASMTool{MaxOpenFiles: 8, Mounts: []Mount{{MaxBytes: 1 << 10, MaxFiles: 3}}}
	if w.EffectiveMaxOpenFiles() != 8 || w.Mounts[0].EffectiveMaxBytes() != 1<<10 || w.Mounts[0].EffectiveMaxFiles() != 3 {
		t.Errorf("set values not kept: %+v", w)
	}
}

func TestByteSize(t *testing.T) {
	for in, want := range map[string]ByteSize{"64MiB": 64 << 20, "1GiB": 1 << 30, "512KiB": 512 << 10, "10B": 10, "1MB": 1e6} {
		got, err := ParseByteSize(in)
		if err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"64", "64mb", "-1MiB", "1TiB", "99999999999999999999GiB"} {
		if _, err := ParseByteSize(bad); err == nil {
			t.Errorf("ParseByteSize(%q) accepted", bad)
		}
	}
}
