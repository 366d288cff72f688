package manifests_test

import (
	"encoding/json"
	"strings"
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
		{"required in the mapping", "  sandbox: {required: true, network: host}\n", &manifests.Sandbox{Required: true, Network: manifests.SandboxNetwork{Mode: "host"}}, true, true},
		{"allowlist: the sandbox is required", "  sandbox: {network: {allow: [\"api.github.com:443\", \"10.0.0.5:8080\"]}}\n",
			&manifests.Sandbox{Network: manifests.SandboxNetwork{Allow: []string{"api.github.com:443", "10.0.0.5:8080"}}}, true, true},
		{"network none", "  sandbox: {network: none}\n", &manifests.Sandbox{Network: manifests.SandboxNetwork{Mode: "none"}}, true, false},
		{"mapping", "  sandbox:\n    network: host\n    memory: 2GiB\n    processes: 32\n    open_files: 4096\n    read_paths: [/opt/venv]\n    write_paths: [\"${AIRLOCK_DATA_DIR}/memory\"]\n",
			&manifests.Sandbox{Network: manifests.SandboxNetwork{Mode: "host"}, Memory: 2 << 30, Processes: 32, OpenFiles: 4096, ReadPaths: []string{"/opt/venv"}, WritePaths: []string{"${AIRLOCK_DATA_DIR}/memory"}}, true, false},
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
			// And through JSON (the manifest as other parts carry it).
			j, err := json.Marshal(m.Server)
			if err != nil {
				t.Fatal(err)
			}
			var backJ manifests.Server
			if err := json.Unmarshal(j, &backJ); err != nil {
				t.Fatalf("%v in %s", err, j)
			}
			if diff := cmp.Diff(tt.want, backJ.Sandbox); diff != "" {
				t.Errorf("after a JSON round trip (-want +got):\n%s\n%s", diff, j)
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

const userFix = "; write a host uid, or uid:gid, that is not root, e.g. \"1001\" or \"1001:1001\", or airlock for airlock's own user, or omit it for 65534 where it can reach what the server needs"

func TestSandboxHostUser(t *testing.T) {
	for _, c := range []struct {
		v        string
		uid, gid uint32
		ok       bool
	}{
		{"65534", 65534, 65534, true},
		{"1000:100", 1000, 100, true},
		{"4294967294", 4294967294, 4294967294, true},
		{"0", 0, 0, false},
		{"00", 0, 0, false},
		{"+5", 0, 0, false},
		{"-1", 0, 0, false},
		{" 5", 0, 0, false},
		{"5 ", 0, 0, false},
		{"0x10", 0, 0, false},
		{"٥", 0, 0, false}, // an Arabic-Indic digit
		{"5:", 0, 0, false},
		{":5", 0, 0, false},
		{"5:5:5", 0, 0, false},
		{"99999999999", 0, 0, false},
		{strings.Repeat("9", 100000), 0, 0, false},
	} {
		uid, gid, err := manifests.ParseHostUser(c.v)
		if (err == nil) != c.ok || uid != c.uid || gid != c.gid {
			t.Errorf("ParseHostUser(%.20q) = %d, %d, %v; want %d, %d, ok %v", c.v, uid, gid, err, c.uid, c.gid, c.ok)
		}
	}
	m, err := manifests.Parse("m.yaml", []byte(sandboxHead+"  sandbox: {user: 65534}\n"+sandboxTools))
	if err != nil {
		t.Fatal(err)
	}
	if ps := m.Validate(); len(ps) > 0 {
		t.Fatal(manifests.Problems(ps))
	}
	if uid, gid, ok := m.Server.Sandbox.HostUser(); !ok || uid != 65534 || gid != 65534 {
		t.Errorf("HostUser() = %d, %d, %v", uid, gid, ok)
	}
	if _, _, ok := (&manifests.Sandbox{}).HostUser(); ok {
		t.Error("an empty user is set")
	}
	m, err = manifests.Parse("m.yaml", []byte(sandboxHead+"  sandbox: {user: airlock}\n"+sandboxTools))
	if err != nil {
		t.Fatal(err)
	}
	if ps := m.Validate(); len(ps) > 0 {
		t.Fatal(manifests.Problems(ps))
	}
	if _, _, ok := m.Server.Sandbox.HostUser(); ok || !m.Server.Sandbox.AirlockUser() {
		t.Errorf("user: airlock is not airlock's own user")
	}
}

func TestSandboxProblems(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"unknown word", sandboxHead + "  sandbox: maybe\n",
			[]string{`m.yaml:4: server.sandbox: "maybe" is not a sandbox setting; write off (no sandbox), on (required), or a mapping with required, network, memory, processes, open_files, read_paths, write_paths, user`}},
		{"unknown field", sandboxHead + "  sandbox:\n    netwrk: host\n",
			[]string{`m.yaml:5: server.sandbox.netwrk: unknown field; did you mean "network"?`}},
		{"duplicate key", sandboxHead + "  sandbox:\n    network: host\n    network: none\n",
			[]string{`m.yaml:6: server.sandbox.network: defined twice (first at line 5); keep one`}},
		{"network mode", sandboxHead + "  sandbox: {network: [api.github.com]}\n",
			[]string{`m.yaml:4: server.sandbox.network: expected none, host or a mapping, got a list; write the hosts under allow: network: {allow: ["api.github.com:443"]}`}},
		{"network word", sandboxHead + "  sandbox: {network: api.github.com}\n",
			[]string{`m.yaml:4: server.sandbox.network: "api.github.com" is not a network mode; write none (the default: no network), host (every host reachable), or an allowlist, {allow: ["api.github.com:443"]}; to allow that host, write network: {allow: ["api.github.com:443"]}`}},
		{"network allowlist, hostile entries", sandboxHead + "  sandbox:\n    network:\n      allow:\n" +
			"        - \"\"\n" +
			"        - \"*\"\n" +
			"        - \"*:443\"\n" +
			"        - api.github.com:443\n" +
			"        - API.GitHub.com.:443\n" +
			"        - api.github.com:0443\n" +
			"        - api.github.com:65536\n" +
			"        - api.github.com:9007199254740993\n" +
			"        - https://api.github.com\n" +
			"        - api.github.com:443/repos\n" +
			"        - api.github.com\n" +
			"        - 10.0.0.5:8080\n" +
			"        - \"[::ffff:10.0.0.5]:8080\"\n" +
			"        - localhost:8080\n" +
			"        - \"*.com:443\"\n" +
			"        - 169.254.169.254:80\n",
			[]string{
				`m.yaml:7: server.sandbox.network.allow[0]: is empty; write host:port, e.g. "api.github.com:443"`,
				`m.yaml:8: server.sandbox.network.allow[1]: "*" has no port; write one, e.g. "*:443"`,
				`m.yaml:9: server.sandbox.network.allow[2]: "*:443" matches every host; list the hosts the server needs, or write network: host if every host is meant`,
				`m.yaml:11: server.sandbox.network.allow[4]: "API.GitHub.com.:443" is allow[3] again (as api.github.com:443); keep one`,
				`m.yaml:12: server.sandbox.network.allow[5]: "api.github.com:0443" is allow[3] again (as api.github.com:443); keep one`,
				`m.yaml:13: server.sandbox.network.allow[6]: "api.github.com:65536": port 65536 is out of range (1 to 65535)`,
				`m.yaml:14: server.sandbox.network.allow[7]: "api.github.com:9007199254740993": port 9007199254740993 is out of range (1 to 65535)`,
				`m.yaml:15: server.sandbox.network.allow[8]: "https://api.github.com" has a scheme (https://); write host:port only, e.g. "api.github.com:443"`,
				`m.yaml:16: server.sandbox.network.allow[9]: "api.github.com:443/repos" has a path or query ("/repos"); the allowlist names hosts and ports, not URLs: write "api.github.com:443"`,
				`m.yaml:17: server.sandbox.network.allow[10]: "api.github.com" has no port; write one, e.g. "api.github.com:443"`,
				`m.yaml:19: server.sandbox.network.allow[12]: "[::ffff:10.0.0.5]:8080" is allow[11] again (as 10.0.0.5:8080); keep one`,
				`m.yaml:20: server.sandbox.network.allow[13]: "localhost:8080" resolves to loopback, which the proxy refuses for names; write the address literally, e.g. "127.0.0.1:8080"`,
				`m.yaml:21: server.sandbox.network.allow[14]: "*.com:443" covers a whole top-level domain; name the domain, e.g. "*.example.com:443"`,
			}},
		{"network allowlist too long", sandboxHead + "  sandbox: {network: {allow: [" + strings.Repeat("a.com:443, ", 300) + "b.com:443]}}\n",
			[]string{`m.yaml:4: server.sandbox.network.allow: has 301 entries, more than 256; use wildcards ("*.example.com:443") or network: host`}},
		{"network allowlist huge entry", sandboxHead + "  sandbox: {network: {allow: [" + strings.Repeat("a", 100000) + ":443]}}\n",
			[]string{`m.yaml:4: server.sandbox.network.allow[0]: is 100004 characters long; an entry is a host name (at most 253) and a port`}},
		{"network allowlist empty", sandboxHead + "  sandbox: {network: {allow: []}}\n",
			[]string{`m.yaml:4: server.sandbox.network.allow: is empty; list host:port entries, e.g. ["api.github.com:443"], or write network: none for no network`}},
		{"network allowlist unknown field", sandboxHead + "  sandbox: {network: {alow: [a.com:443]}}\n",
			[]string{`m.yaml:4: server.sandbox.network.alow: unknown field; did you mean "allow"?`}},
		{"network allowlist duplicate key", sandboxHead + "  sandbox:\n    network:\n      allow: [a.com:443]\n      allow: [b.com:443]\n",
			[]string{`m.yaml:7: server.sandbox.network.allow: defined twice (first at line 6); keep one`}},
		{"network allowlist not a list", sandboxHead + "  sandbox: {network: {allow: a.com:443}}\n",
			[]string{`m.yaml:4: server.sandbox.network.allow: expected a list, got "a.com:443"; write [a.com:443]`}},
		{"network allowlist nested values", sandboxHead + "  sandbox: {network: {allow: [{host: a.com}]}}\n",
			[]string{`m.yaml:4: server.sandbox.network.allow[0]: expected a single value, got a mapping`}},
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
		{"user root", sandboxHead + "  sandbox: {user: 0}\n",
			[]string{"m.yaml:4: server.sandbox.user: the uid is 0 (root), which is what the setting takes away" + userFix}},
		{"user root group", sandboxHead + "  sandbox: {user: \"65534:0\"}\n",
			[]string{"m.yaml:4: server.sandbox.user: the gid is 0 (root), which is what the setting takes away" + userFix}},
		{"user empty", sandboxHead + "  sandbox:\n    user: \"\"\n",
			[]string{"m.yaml:5: server.sandbox.user: the uid \"\" is not a decimal number" + userFix}},
		{"user past 2^53", sandboxHead + "  sandbox: {user: 9007199254740993}\n",
			[]string{"m.yaml:4: server.sandbox.user: the uid \"9007199254740993\" is not a decimal number" + userFix}},
		{"user is the kernel's no-id", sandboxHead + "  sandbox: {user: 4294967295}\n",
			[]string{"m.yaml:4: server.sandbox.user: the uid 4294967295 is past 4294967294" + userFix}},
		{"user a name (case-folded airlock too)", sandboxHead + "  sandbox: {user: Airlock}\n",
			[]string{"m.yaml:4: server.sandbox.user: the uid \"Airlock\" is not a decimal number" + userFix}},
		{"user a name", sandboxHead + "  sandbox: {user: nobody}\n",
			[]string{"m.yaml:4: server.sandbox.user: the uid \"nobody\" is not a decimal number" + userFix}},
		{"user trailing part", sandboxHead + "  sandbox: {user: \"65534:65534:1\"}\n",
			[]string{"m.yaml:4: server.sandbox.user: the gid \"65534:1\" is not a decimal number" + userFix}},
		{"user nested", sandboxHead + "  sandbox: {user: {uid: 1}}\n",
			[]string{"m.yaml:4: server.sandbox.user: expected a single value, got a mapping"}},
		{"user twice", sandboxHead + "  sandbox:\n    user: 65534\n    user: 1000\n",
			[]string{"m.yaml:6: server.sandbox.user: defined twice (first at line 5); keep one"}},
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
