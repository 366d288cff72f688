package manifests

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/airlock-run/airlock/internal/egress"
)

// Sandbox says how a stdio server is confined (see internal/bwrap and
// README.md, "Stdio servers run in a sandbox"). A stdio server is
// sandboxed where the host can (bubblewrap installed, user namespaces
// working) and runs unconfined with a warning where it cannot, unless
// the sandbox is required ("sandbox: on", or required: true): then the
// server does not start on such a host. "sandbox: off" runs the server
// as a plain child process with airlock's user, files, network and
// environment.
//
//	sandbox: off
//	sandbox: {network: host, memory: 2GiB, write_paths: ["${AIRLOCK_DATA_DIR}/memory"]}
//	sandbox: {network: {allow: ["api.github.com:443", "*.githubusercontent.com:443"]}}
type Sandbox struct {
	// Off is "sandbox: off" (also false or no).
	Off bool `yaml:"-" json:"off,omitempty"`
	// Required refuses to start the server where there is no sandbox
	// ("sandbox: on" is short for required: true).
	Required bool `yaml:"required,omitempty" json:"required,omitempty"`
	// Network is "none" (the default: the server has a loopback device
	// only), "host" (the host's network, every host reachable), or an
	// egress allowlist, {allow: ["api.github.com:443", …]}: no route out,
	// and a proxy outside the sandbox that connects only there.
	Network SandboxNetwork `yaml:"network,omitempty" json:"network,omitzero"`
	// Memory bounds the server's data memory (RLIMIT_DATA, and a memory
	// cgroup where airlock may create one); default DefaultSandboxMemory.
	Memory ByteSize `yaml:"memory,omitempty" json:"memory,omitempty"`
	// Processes bounds the server's processes and threads (default
	// DefaultSandboxProcesses).
	Processes int `yaml:"processes,omitempty" json:"processes,omitempty"`
	// OpenFiles bounds each process's open files (default
	// DefaultSandboxOpenFiles).
	OpenFiles int `yaml:"open_files,omitempty" json:"open_files,omitempty"`
	// ReadPaths are further files or directories the server may read
	// (a Python virtualenv, a configuration file). ${VAR} expands.
	ReadPaths []string `yaml:"read_paths,omitempty" json:"read_paths,omitempty"`
	// WritePaths are directories the server may write besides path_roots,
	// where it keeps its own state (server-memory's file). ${VAR} expands.
	WritePaths []string `yaml:"write_paths,omitempty" json:"write_paths,omitempty"`
	// User is the host user the server's processes run as when airlock
	// runs as root: "uid" or "uid:gid" (the gid defaults to the uid),
	// numeric, never 0, e.g. "1001:1001"; or "airlock", airlock's own host
	// user (root without capabilities when airlock is root). Empty: host
	// user DefaultSandboxUser where it can reach what the server needs,
	// else airlock's own with a start-up warning saying why. A uid given
	// here is used as it is (with warnings for what it cannot reach).
	// Not applied when airlock is not root: the server then has airlock's
	// unprivileged user. See README.md, "Stdio servers run in a sandbox".
	User string `yaml:"user,omitempty" json:"user,omitempty"`
}

// SandboxUserAirlock is server.sandbox.user's word for airlock's own host user.
const SandboxUserAirlock = "airlock"

// DefaultSandboxUser is the host uid and gid a sandboxed server gets by
// default when airlock is root: nobody and nogroup on Debian.
const DefaultSandboxUser = 65534

// AirlockUser reports whether User is "airlock": the server keeps
// airlock's own host user.
func (s *Sandbox) AirlockUser() bool { return s != nil && s.User == SandboxUserAirlock }

// HostUser parses a numeric User: ok is false when it is empty or
// "airlock". Validation has checked it; a bad value parses as not set.
func (s *Sandbox) HostUser() (uid, gid uint32, ok bool) {
	if s == nil || s.User == "" {
		return 0, 0, false
	}
	uid, gid, err := ParseHostUser(s.User)
	return uid, gid, err == nil
}

// maxHostID is the largest uid or gid accepted (2^32-1 is the kernel's
// "no id").
const maxHostID = 1<<32 - 2

// ParseHostUser reads "uid" or "uid:gid": decimal digits only, no sign or
// spaces, neither 0 (root) nor past maxHostID.
func ParseHostUser(v string) (uid, gid uint32, err error) {
	us, gs, hasGid := strings.Cut(v, ":")
	id := func(what, s string) (uint32, error) {
		if s == "" || len(s) > 10 || strings.TrimLeft(s, "0123456789") != "" {
			return 0, fmt.Errorf("the %s %q is not a decimal number", what, s)
		}
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || n > maxHostID {
			return 0, fmt.Errorf("the %s %s is past %d", what, s, uint64(maxHostID))
		}
		if n == 0 {
			return 0, fmt.Errorf("the %s is 0 (root), which is what the setting takes away", what)
		}
		return uint32(n), nil
	}
	if uid, err = id("uid", us); err != nil {
		return 0, 0, err
	}
	gid = uid
	if hasGid {
		if gid, err = id("gid", gs); err != nil {
			return 0, 0, err
		}
	}
	return uid, gid, nil
}

// Sandbox network modes.
const (
	SandboxNetworkNone = "none"
	SandboxNetworkHost = "host"
)

// Sandbox defaults and bounds.
const (
	DefaultSandboxMemory    ByteSize = 1 << 30
	DefaultSandboxProcesses          = 256
	DefaultSandboxOpenFiles          = 1024

	minSandboxMemory    ByteSize = 32 << 20
	maxSandboxMemory    ByteSize = 256 << 30
	maxSandboxProcesses          = 65536
	minSandboxOpenFiles          = 64
	maxSandboxOpenFiles          = 1 << 20
)

// Sandboxed reports whether the manifest leaves the sandbox on (anything
// but "sandbox: off").
func (s *Server) Sandboxed() bool { return s.Sandbox == nil || !s.Sandbox.Off }

// SandboxDemanded reports whether the manifest requires the sandbox, so
// that a host without one must refuse to start the server. An egress
// allowlist requires it: unconfined, the server would reach every host.
func (s *Server) SandboxDemanded() bool {
	return s.Sandbox != nil && (s.Sandbox.Required || s.Sandbox.Egress() != nil)
}

// EffectiveMemory, EffectiveProcesses and EffectiveOpenFiles are the
// bounds with defaults applied; s may be nil.
func (s *Sandbox) EffectiveMemory() ByteSize {
	if s == nil || s.Memory == 0 {
		return DefaultSandboxMemory
	}
	return s.Memory
}

func (s *Sandbox) EffectiveProcesses() int {
	if s == nil || s.Processes == 0 {
		return DefaultSandboxProcesses
	}
	return s.Processes
}

func (s *Sandbox) EffectiveOpenFiles() int {
	if s == nil || s.OpenFiles == 0 {
		return DefaultSandboxOpenFiles
	}
	return s.OpenFiles
}

// HostNetwork reports whether the server shares the host's network.
func (s *Sandbox) HostNetwork() bool { return s != nil && s.Network.Mode == SandboxNetworkHost }

// Egress is the server's egress allowlist (nil unless network is an
// allowlist).
func (s *Sandbox) Egress() []string {
	if s == nil || s.Network.Mode != "" {
		return nil
	}
	return s.Network.Allow
}

// SandboxNetwork is server.sandbox.network: a mode ("none", "host") or
// an allowlist ({allow: [...]}, Mode empty).
type SandboxNetwork struct {
	Mode string `yaml:"-" json:"-"`
	// Allow are "host:port" entries (see internal/egress.ParseRule): a
	// host name, "*.domain" for its subdomains, or an IP literal.
	Allow []string `yaml:"allow,omitempty" json:"allow,omitempty"`
}

// networkFields is SandboxNetwork's mapping form.
type networkFields struct {
	Allow []string `yaml:"allow" json:"allow"`
}

// UnmarshalYAML reads a mode word or the mapping.
func (n *SandboxNetwork) UnmarshalYAML(node *yaml.Node) error {
	if node.Kind == yaml.ScalarNode {
		*n = SandboxNetwork{Mode: node.Value}
		return nil
	}
	var f networkFields
	if err := node.Decode(&f); err != nil {
		return err
	}
	*n = SandboxNetwork{Allow: f.Allow}
	if n.Allow == nil {
		n.Allow = []string{}
	}
	return nil
}

// MarshalYAML writes the mode word, or the mapping.
func (n SandboxNetwork) MarshalYAML() (any, error) {
	if n.Mode != "" {
		return n.Mode, nil
	}
	return networkFields{Allow: n.Allow}, nil
}

// MarshalJSON writes the mode as a string (as before the allowlist
// existed) and the allowlist as {"allow": [...]}.
func (n SandboxNetwork) MarshalJSON() ([]byte, error) {
	if n.Mode != "" {
		return json.Marshal(n.Mode)
	}
	return json.Marshal(networkFields{Allow: n.Allow})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (n *SandboxNetwork) UnmarshalJSON(b []byte) error {
	var mode string
	if err := json.Unmarshal(b, &mode); err == nil {
		*n = SandboxNetwork{Mode: mode}
		return nil
	}
	var f networkFields
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("sandbox.network: %w", err)
	}
	*n = SandboxNetwork{Allow: f.Allow}
	if n.Allow == nil {
		n.Allow = []string{}
	}
	return nil
}

// IsZero is true for an absent network (the default, none).
func (n SandboxNetwork) IsZero() bool { return n.Mode == "" && n.Allow == nil }

var (
	_ yaml.Unmarshaler = (*SandboxNetwork)(nil)
	_ yaml.Marshaler   = SandboxNetwork{}
)

// sandboxFields is Sandbox without its UnmarshalYAML, for the mapping form.
type sandboxFields Sandbox

// sandboxWords are the scalar forms, to the value of Off.
var sandboxWords = map[string]bool{"off": true, "false": true, "no": true, "on": false, "true": false, "yes": false}

// UnmarshalYAML reads "off"/"on" (and YAML's booleans) or the mapping.
func (s *Sandbox) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		off, ok := sandboxWords[strings.ToLower(n.Value)]
		if !ok {
			return fmt.Errorf("%q is not a sandbox setting; write off, on, or a mapping (required, network, memory, processes, open_files, read_paths, write_paths, user)", n.Value)
		}
		*s = Sandbox{Off: off, Required: !off}
		return nil
	}
	var f sandboxFields
	if err := n.Decode(&f); err != nil {
		return err
	}
	*s = Sandbox(f)
	return nil
}

// MarshalYAML writes "off" for Off, else the mapping.
func (s Sandbox) MarshalYAML() (any, error) {
	if s.Off {
		return "off", nil
	}
	if reflect.DeepEqual(s, Sandbox{Required: true}) {
		return "on", nil
	}
	return sandboxFields(s), nil
}

var (
	_ yaml.Unmarshaler = (*Sandbox)(nil)
	_ yaml.Marshaler   = Sandbox{}
)

// sandboxScalar checks the scalar form while decoding (the walker).
func sandboxScalar(n *yaml.Node) string {
	if _, ok := sandboxWords[strings.ToLower(n.Value)]; ok {
		return ""
	}
	return fmt.Sprintf("%q is not a sandbox setting; write off (no sandbox), on (required), or a mapping with required, network, memory, processes, open_files, read_paths, write_paths, user", n.Value)
}

// sandbox checks server.sandbox.
func (v *validator) sandbox(s Server) {
	sb := s.Sandbox
	if sb == nil {
		return
	}
	const p = "server.sandbox"
	if s.Stdio == nil && !v.lines.Has("server.stdio") && !sb.Off {
		v.add(p, "applies to stdio servers only; remove it (an http server runs elsewhere, and wasm tools run in airlock's own sandbox)")
		return
	}
	v.sandboxNetwork(sb.Network)
	if sb.Memory != 0 || v.lines.Has(p+".memory") {
		switch {
		case sb.Memory < minSandboxMemory:
			v.add(p+".memory", "%s is below %s, too little for a runtime to start; raise it or omit it for the default %s", sb.Memory, minSandboxMemory, DefaultSandboxMemory)
		case sb.Memory > maxSandboxMemory:
			v.add(p+".memory", "%s is above %s; lower it", sb.Memory, maxSandboxMemory)
		}
	}
	if (sb.Processes != 0 || v.lines.Has(p+".processes")) && (sb.Processes < 1 || sb.Processes > maxSandboxProcesses) {
		v.add(p+".processes", "must be between 1 and %d (processes and threads together), got %d; omit it for the default %d", maxSandboxProcesses, sb.Processes, DefaultSandboxProcesses)
	}
	if (sb.OpenFiles != 0 || v.lines.Has(p+".open_files")) && (sb.OpenFiles < minSandboxOpenFiles || sb.OpenFiles > maxSandboxOpenFiles) {
		v.add(p+".open_files", "must be between %d and %d, got %d; omit it for the default %d", minSandboxOpenFiles, maxSandboxOpenFiles, sb.OpenFiles, DefaultSandboxOpenFiles)
	}
	if sb.User != SandboxUserAirlock && (sb.User != "" || v.lines.Has(p+".user")) {
		if _, _, err := ParseHostUser(sb.User); err != nil {
			v.add(p+".user", "%v; write a host uid, or uid:gid, that is not root, e.g. \"1001\" or \"1001:1001\", or airlock for airlock's own user, or omit it for %d where it can reach what the server needs", err, DefaultSandboxUser)
		}
	}
	for _, l := range []struct {
		name  string
		paths []string
	}{{"read_paths", sb.ReadPaths}, {"write_paths", sb.WritePaths}} {
		for i, r := range l.paths {
			at := fmt.Sprintf("%s.%s[%d]", p, l.name, i)
			switch {
			case strings.TrimSpace(r) == "":
				v.add(at, "is empty; name a directory, e.g. \"${AIRLOCK_DATA_DIR}/state\"")
			case !RootIsAbsolute(r):
				v.add(at, "%q is a relative path; the sandbox binds absolute paths only, so write one, e.g. %q", r, "${AIRLOCK_DATA_DIR}/"+relExample(r))
			}
		}
	}
}

// maxEgressEntries bounds an allowlist: a server that needs more hosts
// than this needs network: host, or a wildcard.
const maxEgressEntries = 256

// sandboxNetwork checks server.sandbox.network.
func (v *validator) sandboxNetwork(n SandboxNetwork) {
	const p = "server.sandbox.network"
	if n.Mode != "" {
		if !slices.Contains([]string{SandboxNetworkNone, SandboxNetworkHost}, n.Mode) {
			hint := ""
			for _, e := range []string{n.Mode, n.Mode + ":443"} {
				if _, err := egress.ParseRule(e); err == nil {
					hint = fmt.Sprintf("; to allow that host, write network: {allow: [%q]}", e)
					break
				}
			}
			v.add(p, "%q is not a network mode; write none (the default: no network), host (every host reachable), or an allowlist, {allow: [\"api.github.com:443\"]}%s", n.Mode, hint)
		}
		return
	}
	if n.Allow == nil {
		return
	}
	switch {
	case len(n.Allow) == 0:
		v.add(p+".allow", "is empty; list host:port entries, e.g. [\"api.github.com:443\"], or write network: none for no network")
		return
	case len(n.Allow) > maxEgressEntries:
		v.add(p+".allow", "has %d entries, more than %d; use wildcards (\"*.example.com:443\") or network: host", len(n.Allow), maxEgressEntries)
		return
	}
	seen := map[string]int{}
	for i, e := range n.Allow {
		at := fmt.Sprintf("%s.allow[%d]", p, i)
		r, err := egress.ParseRule(e)
		if err != nil {
			v.add(at, "%v", err)
			continue
		}
		key := r.String()
		if first, dup := seen[key]; dup {
			v.add(at, "%q is allow[%d] again (as %s); keep one", e, first, key)
			continue
		}
		seen[key] = i
	}
}
