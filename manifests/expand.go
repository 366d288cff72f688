package manifests

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Expand returns a copy of s with ${VAR} references replaced in the stdio
// command, args, env values and dir, and in the http url and header values;
// s itself is not changed. A variable is looked up in vars first (airlock's
// own: AIRLOCK_DATA_DIR, AIRLOCK_CONFIG_DIR), then in the process
// environment.
//
// An undefined variable expands to "", as in a shell; the upstream then sees
// an empty argument or header, so define what a manifest uses. Only the
// ${VAR} form is expanded: "$HOME" stays as written, so arguments meant for a
// shell pass through, and "$${" writes a literal "${".
func (s Server) Expand(vars map[string]string) Server {
	lookup := func(name string) string {
		if v, ok := vars[name]; ok {
			return v
		}
		return os.Getenv(name)
	}
	out := s
	if s.Stdio != nil {
		st := *s.Stdio
		st.Command = expand(st.Command, lookup)
		st.Dir = expand(st.Dir, lookup)
		st.Args = slices.Clone(st.Args)
		for i, a := range st.Args {
			st.Args[i] = expand(a, lookup)
		}
		st.Env = expandValues(st.Env, lookup)
		out.Stdio = &st
	}
	if s.PathRoots != nil {
		out.PathRoots = slices.Clone(s.PathRoots)
		for i, r := range out.PathRoots {
			out.PathRoots[i] = expand(r, lookup)
		}
	}
	if s.Sandbox != nil {
		sb := *s.Sandbox
		sb.ReadPaths = expandAll(sb.ReadPaths, lookup)
		sb.WritePaths = expandAll(sb.WritePaths, lookup)
		// Not expanded: an allowlist entry is checked as written.
		sb.Network.Allow = slices.Clone(sb.Network.Allow)
		out.Sandbox = &sb
	}
	if s.HTTP != nil {
		h := *s.HTTP
		h.URL = expand(h.URL, lookup)
		h.Headers = expandValues(h.Headers, lookup)
		h.OAuth = h.OAuth.expand(lookup)
		h.Auth = h.Auth.expand(lookup)
		out.HTTP = &h
	}
	return out
}

func expandAll(in []string, lookup func(string) string) []string {
	if in == nil {
		return nil
	}
	out := slices.Clone(in)
	for i, r := range out {
		out[i] = expand(r, lookup)
	}
	return out
}

func expandValues(m map[string]string, lookup func(string) string) map[string]string {
	if m == nil {
		return nil
	}
	out := maps.Clone(m)
	for k, v := range out {
		out[k] = expand(v, lookup)
	}
	return out
}

func expand(s string, lookup func(string) string) string {
	if !strings.Contains(s, "${") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			b.WriteString("${")
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 { // unterminated: leave as written
				b.WriteString(s[i:])
				return b.String()
			}
			b.WriteString(lookup(s[i+2 : i+2+end]))
			i += 2 + end + 1
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String()
}

// Resolve returns a copy of w with ${VAR} expanded (as in Server.Expand)
// in the module path and mount host directories, and relative ones made
// relative to dir (the manifest's directory).
func (w WASMTool) Resolve(dir string, vars map[string]string) WASMTool {
	lookup := func(name string) string {
		if v, ok := vars[name]; ok {
			return v
		}
		return os.Getenv(name)
	}
	abs := func(p string) string {
		p = expand(p, lookup)
		if p != "" && !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		return p
	}
	out := w
	out.Module = abs(w.Module)
	out.Mounts = slices.Clone(w.Mounts)
	for i := range out.Mounts {
		out.Mounts[i].Host = abs(out.Mounts[i].Host)
	}
	return out
}
