package manifests_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"

	"github.com/airlock-run/airlock/manifests"
)

const (
	sandboxHead  = "server:\n  name: fs\n  stdio: {command: node}\n"
	sandboxTools = "tools:\n  read: {side_effects: [read], data_access_level: public, risk: low, idempotent: true}\n"
)

func TestSandboxDecode(t *testing.T) {
	tests := []struct {
		name         string
		src          string
		want         *manifests.Sandbox
		on, demanded bool
	}{
		{"absent: on where the host can", "", nil, true, false},
		{"off", "  sandbox: off\n", &manifests.Sandbox{Off: true}, false, false},
		{"false", "  sandbox: false\n", &manifests.Sandbox{Off: true}, false, false},
		{"on: required", "  sandbox: on\n", &manifests.Sandbox{Required: true}, true, true},
		{"required in the mapping", "  sandbox: {required: true, network: host}\n", &manifests.Sandbox{Required: true, Network: "host"}, true, true},
		{"mapping", "  sandbox:\n    network: host\n    memory: 2GiB\n    processes: 32\n    open_files: 4096\n    read_paths: [/opt/venv]\n    write_paths: [\"${AIRLOCK_DATA_DIR}/memory\"]\n",
			&manifests.Sandbox{Network: "host", Memory: 2 << 30, Processes: 32, OpenFiles: 4096, ReadPaths: []string{"/opt/venv"}, WritePaths: []string{"${AIRLOCK_DATA_DIR}/memory"}}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := manifests.Parse("m.yaml", []byte(sandboxHead+tt.src))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, m.Server.Sandbox); diff != "" {
				t.Errorf("sandbox (-want +got):\n%s", diff)
			}
			if got := m.Server.Sandboxed(); got != tt.on {
				t.Errorf("Sandboxed() = %v, want %v", got, tt.on)
			}
			if got := m.Server.SandboxDemanded(); got != tt.demanded {
				t.Errorf("SandboxDemanded() = %v, want %v", got, tt.demanded)
			}
			// It survives a round trip through YAML (skeletons, pins).
			out, err := yaml.Marshal(m.Server)
			if err != nil {
				t.Fatal(err)
			}
			var back manifests.Server
			if err := yaml.Unmarshal(out, &back); err != nil {
				t.Fatalf("%v in\n%s", err, out)
			}
			if diff := cmp.Diff(tt.want, back.Sandbox); diff != "" {
				t.Errorf("after a round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSandboxExpand(t *testing.T) {
	m, err := manifests.Parse("m.yaml", []byte(sandboxHead+"  sandbox: {read_paths: [\"${AIRLOCK_CONFIG_DIR}/x\"], write_paths: [\"${AIRLOCK_DATA_DIR}/memory\"]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := m.Server.Expand(map[string]string{"AIRLOCK_DATA_DIR": "/d", "AIRLOCK_CONFIG_DIR": "/c"})
	if got := s.Sandbox.WritePaths[0] + " " + s.Sandbox.ReadPaths[0]; got != "/d/memory /c/x" {
		t.Errorf("expanded = %q", got)
	}
	if m.Server.Sandbox.WritePaths[0] != "${AIRLOCK_DATA_DIR}/memory" {
		t.Errorf("Expand changed the original: %q", m.Server.Sandbox.WritePaths[0])
	}
}

func TestSandboxProblems(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"unknown word", sandboxHead + "  sandbox: maybe\n",
			[]string{`m.yaml:4: server.sandbox: "maybe" is not a sandbox setting; write off (no sandbox), on (required), or a mapping with required, network, memory, processes, open_files, read_paths, write_paths`}},
		{"unknown field", sandboxHead + "  sandbox:\n    netwrk: host\n",
			[]string{`m.yaml:5: server.sandbox.netwrk: unknown field; did you mean "network"?`}},
		{"duplicate key", sandboxHead + "  sandbox:\n    network: host\n    network: none\n",
			[]string{`m.yaml:6: server.sandbox.network: defined twice (first at line 5); keep one`}},
		{"network mode", sandboxHead + "  sandbox: {network: [api.github.com]}\n",
			[]string{`m.yaml:4: server.sandbox.network: expected a single value, got a list`}},
		{"network word", sandboxHead + "  sandbox: {network: api.github.com}\n",
			[]string{`m.yaml:4: server.sandbox.network: "api.github.com" is not a network mode; write none (the default: no network) or host (every host reachable; a host allowlist is not enforced yet)`}},
		{"memory without unit", sandboxHead + "  sandbox: {memory: 512}\n",
			[]string{`m.yaml:4: server.sandbox.memory: "512" is not a size; write a number and a unit, e.g. "64MiB" (B, KiB, MiB, GiB, KB, MB, GB)`}},
		{"memory too small", sandboxHead + "  sandbox: {memory: 1MiB}\n",
			[]string{`m.yaml:4: server.sandbox.memory: 1MiB is below 32MiB, too little for a runtime to start; raise it or omit it for the default 1GiB`}},
		{"memory huge", sandboxHead + "  sandbox: {memory: 9999999GiB}\n",
			[]string{`m.yaml:4: server.sandbox.memory: 9999999GiB is above 256GiB; lower it`}},
		{"processes zero", sandboxHead + "  sandbox: {processes: 0}\n",
			[]string{`m.yaml:4: server.sandbox.processes: must be between 1 and 65536 (processes and threads together), got 0; omit it for the default 256`}},
		{"open files huge", sandboxHead + "  sandbox: {open_files: 99999999999}\n",
			[]string{`m.yaml:4: server.sandbox.open_files: must be between 64 and 1048576, got 99999999999; omit it for the default 1024`}},
		{"relative path", sandboxHead + "  sandbox: {write_paths: [state], read_paths: [\"\"]}\n",
			[]string{
				`m.yaml:4: server.sandbox.read_paths[0]: is empty; name a directory, e.g. "${AIRLOCK_DATA_DIR}/state"`,
				`m.yaml:4: server.sandbox.write_paths[0]: "state" is a relative path; the sandbox binds absolute paths only, so write one, e.g. "${AIRLOCK_DATA_DIR}/state"`,
			}},
		{"http server", "server:\n  name: web\n  http: {url: \"https://x.example/mcp\"}\n  sandbox: {network: host}\n",
			[]string{`m.yaml:4: server.sandbox: applies to stdio servers only; remove it (an http server runs elsewhere, and wasm tools run in airlock's own sandbox)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := manifests.Parse("m.yaml", []byte(tt.src+sandboxTools))
			if err == nil {
				if ps := m.Validate(); len(ps) > 0 {
					err = manifests.Problems(ps)
				}
			}
			if err == nil {
				t.Fatal("Parse and Validate succeeded, want problems")
			}
			got := errorLines(t, err)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}
