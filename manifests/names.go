package manifests

import (
	"cmp"
	"slices"
	"strings"
)

// Names maps between the names the gateway exposes and the upstreams'
// own: an exposed tool or prompt name is its server's prefix (see
// Server.ExposedPrefix) followed by the upstream's name. Every place that
// builds or takes apart an exposed name goes through it (or through
// Manifest.Exposed), never by splitting on "__", because a prefix may be
// anything, including empty.
//
// A nil *Names knows no servers: it builds names with DefaultPrefix.
type Names struct {
	prefix  map[string]string // by server
	servers []string          // longest prefix first, then by name
}

// NewNames indexes the servers of ms (nil entries are skipped).
func NewNames(ms []*Manifest) *Names {
	n := &Names{prefix: map[string]string{}}
	for _, m := range ms {
		if m == nil || m.Server.Name == "" {
			continue
		}
		if _, dup := n.prefix[m.Server.Name]; dup {
			continue // a validation problem; the first one counts, as elsewhere
		}
		n.prefix[m.Server.Name] = m.Server.ExposedPrefix()
		n.servers = append(n.servers, m.Server.Name)
	}
	slices.SortFunc(n.servers, func(a, b string) int {
		if c := cmp.Compare(len(n.prefix[b]), len(n.prefix[a])); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return n
}

// Prefix is server's prefix (DefaultPrefix for a server it does not know).
func (n *Names) Prefix(server string) string {
	if n != nil {
		if p, ok := n.prefix[server]; ok {
			return p
		}
	}
	return DefaultPrefix(server)
}

// Expose is the exposed name of server's tool or prompt name.
func (n *Names) Expose(server, name string) string { return n.Prefix(server) + name }

// Resolve finds the server and upstream name an exposed name stands for,
// for names no manifest declares (expose_uncovered): the server with the
// longest prefix that exposed starts with, leaving a non-empty name. An
// unprefixed server matches every name, so it comes last. Declared names
// are looked up exactly instead, so this order only decides between
// undeclared names.
func (n *Names) Resolve(exposed string) (server, name string, ok bool) {
	if n == nil {
		return "", "", false
	}
	for _, s := range n.servers {
		if rest, found := strings.CutPrefix(exposed, n.prefix[s]); found && rest != "" {
			return s, rest, true
		}
	}
	return "", "", false
}
