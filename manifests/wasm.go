package manifests

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// WASMServer marks a server whose tools are WebAssembly (WASI) modules run
// in airlock's own sandbox rather than an upstream MCP server. Each tool
// declares its module under wasm:.
type WASMServer struct{}

// WASMTool runs a tool as a WASI command module: the call's JSON arguments
// on stdin, its result on stdout (MCP CallToolResult JSON with a content
// list, or plain text), stderr kept for the error, a non-zero exit an
// isError result. The module sees nothing but what is granted here: no
// network, no host files beyond Mounts, no environment beyond Env. The
// tool's timeout bounds each call.
type WASMTool struct {
	// Module is the .wasm file, relative to the manifest's directory;
	// ${VAR} expands as in stdio.
	Module string `yaml:"module" json:"module"`
	// SHA256 is the module's hex SHA-256; a module that does not match is
	// refused (airlock will not run what was not reviewed).
	SHA256 string `yaml:"sha256" json:"sha256"`
	// Args follow the program name in argv (one module may serve several
	// tools, chosen by argument).
	Args []string `yaml:"args,omitempty" json:"args,omitempty"`
	// InputSchema is the tool's JSON schema (an object schema), shown to
	// agents and checked by policy, since no upstream serves one.
	InputSchema map[string]any `yaml:"input_schema" json:"input_schema"`
	// MemoryLimit caps the guest's memory (default 64MiB, at most 4GiB).
	MemoryLimit ByteSize `yaml:"memory_limit,omitempty" json:"memory_limit,omitempty"`
	// OutputLimit caps stdout (default 1MiB, at most 64MiB); more is an
	// error, never a truncated result.
	OutputLimit ByteSize `yaml:"output_limit,omitempty" json:"output_limit,omitempty"`
	// MaxOpenFiles caps the files and directories a call has open at once
	// in its mounts (default 64, at most 1024); opening one more stops the
	// call with an error naming the limit.
	MaxOpenFiles int     `yaml:"max_open_files,omitempty" json:"max_open_files,omitempty"`
	Mounts       []Mount `yaml:"mounts,omitempty" json:"mounts,omitempty"`
	// Env names the host environment variables the guest sees (their
	// values are read at start-up); nothing else is passed.
	Env []string `yaml:"env,omitempty" json:"env,omitempty"`
}

// Mount grants a guest one host directory.
type Mount struct {
	// Host is the host directory; ${VAR} expands; relative to the
	// manifest's directory. It must exist when the tool runs.
	Host string `yaml:"host" json:"host"`
	// Guest is where the guest sees it: an absolute path such as /data.
	Guest string `yaml:"guest" json:"guest"`
	// Mode is "ro" (the default) or "rw".
	Mode string `yaml:"mode,omitempty" json:"mode,omitempty"`
	// MaxBytes and MaxFiles are the quotas of a read-write mount: what the
	// directory may hold in all, counting what was there before the call,
	// in bytes of regular files (default 64MiB) and in entries — files,
	// directories and links — below it (default 1000). A write or create
	// past either fails and stops the call with an error naming the quota.
	// Every call walks the directory once when it starts (up to MaxFiles
	// entries), so MaxFiles is at most 1000000.
	MaxBytes ByteSize `yaml:"max_bytes,omitempty" json:"max_bytes,omitempty"`
	MaxFiles int      `yaml:"max_files,omitempty" json:"max_files,omitempty"`
}

// ReadOnly reports whether the mount is read-only (the default).
func (m Mount) ReadOnly() bool { return m.Mode != "rw" }

// EffectiveMaxBytes is max_bytes or its default.
func (m Mount) EffectiveMaxBytes() ByteSize {
	if m.MaxBytes > 0 {
		return m.MaxBytes
	}
	return DefaultMountBytes
}

// EffectiveMaxFiles is max_files or its default.
func (m Mount) EffectiveMaxFiles() int {
	if m.MaxFiles > 0 {
		return m.MaxFiles
	}
	return DefaultMountFiles
}

// Defaults and bounds of WASM tools.
const (
	DefaultWASMMemory    = ByteSize(64 << 20)
	MaxWASMMemory        = ByteSize(4 << 30)
	DefaultWASMOutput    = ByteSize(1 << 20)
	MaxWASMOutput        = ByteSize(64 << 20)
	DefaultWASMOpenFiles = 64
	MaxWASMOpenFiles     = 1024
	DefaultMountBytes    = ByteSize(64 << 20)
	MaxMountBytes        = ByteSize(1 << 40)
	DefaultMountFiles    = 1000
	MaxMountFiles        = 1_000_000
)

// EffectiveMaxOpenFiles is max_open_files or its default.
func (w *WASMTool) EffectiveMaxOpenFiles() int {
	if w.MaxOpenFiles > 0 {
		return w.MaxOpenFiles
	}
	return DefaultWASMOpenFiles
}

// EffectiveMemoryLimit is memory_limit or its default.
func (w *WASMTool) EffectiveMemoryLimit() ByteSize {
	if w.MemoryLimit > 0 {
		return w.MemoryLimit
	}
	return DefaultWASMMemory
}

// EffectiveOutputLimit is output_limit or its default.
func (w *WASMTool) EffectiveOutputLimit() ByteSize {
	if w.OutputLimit > 0 {
		return w.OutputLimit
	}
	return DefaultWASMOutput
}

// ByteSize is a number of bytes written with a unit: "512KiB", "64MiB",
// "1GiB" (also KB, MB, GB as powers of 1000, and B). A bare number is an
// error, as for durations: "64" is too easy to misread.
type ByteSize int64

var byteSizeRE = regexp.MustCompile(`^\s*([0-9]+)\s*(B|KiB|MiB|GiB|KB|MB|GB)\s*$`)

// ParseByteSize reads a size with a unit.
func ParseByteSize(s string) (ByteSize, error) {
	m := byteSizeRE.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("%q is not a size; write a number and a unit, e.g. \"64MiB\" (B, KiB, MiB, GiB, KB, MB, GB)", s)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is too large", s)
	}
	mult := map[string]int64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "KB": 1e3, "MB": 1e6, "GB": 1e9}[m[2]]
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return ByteSize(n * mult), nil
}

func (b ByteSize) String() string {
	switch {
	case b >= 1<<30 && b%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", b>>30)
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", b>>20)
	case b >= 1<<10 && b%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", b>>10)
	}
	return fmt.Sprintf("%dB", int64(b))
}

// UnmarshalYAML reads a size string.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: expected a size such as \"64MiB\", got %s", n.Line, describeNode(n))}}
	}
	v, err := ParseByteSize(n.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	*b = v
	return nil
}

// MarshalYAML writes the size as a string.
func (b ByteSize) MarshalYAML() (any, error) { return b.String(), nil }

// MarshalJSON writes the size as a string.
func (b ByteSize) MarshalJSON() ([]byte, error) { return []byte(strconv.Quote(b.String())), nil }

// UnmarshalJSON reads a size string.
func (b *ByteSize) UnmarshalJSON(data []byte) error {
	s, err := strconv.Unquote(string(data))
	if err != nil {
		return fmt.Errorf("a size must be a string such as \"64MiB\"")
	}
	v, err := ParseByteSize(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

var (
	sha256RE  = regexp.MustCompile(`^[0-9a-f]{64}$`)
	envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// wasmTool checks a tool of a wasm server (or a wasm block where it does
// not belong).
func (v *validator) wasmTool(m *Manifest, p string, t *Tool) {
	isWASM := m.Server.WASM != nil || v.lines.Has("server.wasm")
	hasBlock := t.WASM != nil || v.lines.Has(p+".wasm")
	switch {
	case !isWASM && hasBlock:
		v.add(p+".wasm", "is only for tools of a wasm server (server.wasm); remove it, or make the server a wasm server")
		return
	case isWASM && !hasBlock:
		v.add(p+".wasm", "is required for a tool of a wasm server; give its module, sha256 and input_schema")
		return
	case !isWASM:
		return
	}
	if t.Description == "" {
		v.add(p+".description", "is required for a wasm tool (no upstream describes it); say what it does and what it returns")
	}
	w := t.WASM
	if w == nil {
		w = &WASMTool{}
	}
	wp := p + ".wasm"
	if strings.TrimSpace(w.Module) == "" {
		v.add(wp+".module", `is required; the .wasm file, relative to this manifest, e.g. "../wasm/json.wasm"`)
	}
	switch {
	case w.SHA256 == "":
		v.add(wp+".sha256", "is required; write the module's SHA-256 (sha256sum FILE), so a changed module is refused")
	case !sha256RE.MatchString(w.SHA256):
		v.add(wp+".sha256", "%q is not a SHA-256; write 64 lowercase hex digits (sha256sum FILE)", w.SHA256)
	}
	if w.InputSchema == nil {
		v.add(wp+".input_schema", `is required; the tool's JSON schema, e.g. {type: object, properties: {...}, required: [...]}`)
	} else if typ, _ := w.InputSchema["type"].(string); typ != "object" {
		v.add(wp+".input_schema.type", `must be "object" (MCP tool arguments are an object), got %v`, w.InputSchema["type"])
	}
	if v.lines.Has(wp+".memory_limit") && (w.MemoryLimit < 1<<20 || w.MemoryLimit > MaxWASMMemory) {
		v.add(wp+".memory_limit", "%s is out of range; use 1MiB to 4GiB (default %s)", w.MemoryLimit, DefaultWASMMemory)
	}
	if v.lines.Has(wp+".output_limit") && (w.OutputLimit < 1 || w.OutputLimit > MaxWASMOutput) {
		v.add(wp+".output_limit", "%s is out of range; use 1B to 64MiB (default %s)", w.OutputLimit, DefaultWASMOutput)
	}
	if v.lines.Has(wp+".max_open_files") && (w.MaxOpenFiles < 1 || w.MaxOpenFiles > MaxWASMOpenFiles) {
		v.add(wp+".max_open_files", "%d is out of range; use 1 to %d (default %d)", w.MaxOpenFiles, MaxWASMOpenFiles, DefaultWASMOpenFiles)
	}
	guests := map[string]bool{}
	for i, mt := range w.Mounts {
		mp := fmt.Sprintf("%s.mounts[%d]", wp, i)
		if strings.TrimSpace(mt.Host) == "" {
			v.add(mp+".host", `is required; the host directory to grant, e.g. "${AIRLOCK_DATA_DIR}/notes"`)
		}
		switch {
		case mt.Guest == "" || !strings.HasPrefix(mt.Guest, "/"):
			v.add(mp+".guest", `%q must be an absolute guest path such as "/data"`, mt.Guest)
		case path.Clean(mt.Guest) != mt.Guest || mt.Guest == "/":
			v.add(mp+".guest", `%q must be a clean path below "/", such as "/data"`, mt.Guest)
		case guests[mt.Guest]:
			v.add(mp+".guest", "%q is mounted twice; give each mount its own guest path", mt.Guest)
		}
		guests[mt.Guest] = true
		if mt.Mode != "" && mt.Mode != "ro" && mt.Mode != "rw" {
			v.add(mp+".mode", `%q is not a mode; use "ro" (read-only, the default) or "rw"`, mt.Mode)
		}
		for _, q := range []string{"max_bytes", "max_files"} {
			if v.lines.Has(mp+"."+q) && (mt.Mode == "" || mt.Mode == "ro") {
				v.add(mp+"."+q, `is a quota of read-write mounts; remove it, or make the mount "rw"`)
			}
		}
		if v.lines.Has(mp+".max_bytes") && (mt.MaxBytes < 1 || mt.MaxBytes > MaxMountBytes) {
			v.add(mp+".max_bytes", "%s is out of range; use 1B to %s (default %s)", mt.MaxBytes, MaxMountBytes, DefaultMountBytes)
		}
		if v.lines.Has(mp+".max_files") && (mt.MaxFiles < 1 || mt.MaxFiles > MaxMountFiles) {
			v.add(mp+".max_files", "%d is out of range; use 1 to %d (default %d)", mt.MaxFiles, MaxMountFiles, DefaultMountFiles)
		}
	}
	for i, e := range w.Env {
		if !envNameRE.MatchString(e) {
			v.add(fmt.Sprintf("%s.env[%d]", wp, i), "%q is not an environment variable name; list names only (values come from the host)", e)
		}
	}
}
