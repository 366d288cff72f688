package gateway

// Tool definitions inspected for prompt-injection markers as they are
// served (issue 30 §1; guard.descriptions.injection): what tools/list
// would show the model, after the manifest's description replaced the
// upstream's and after pinning accepted it (a pin says the definition did
// not change, not that it is clean). Annotate lists the tool, logs and
// counts each finding once per definition and names the findings in the
// listing's _meta (metaGuard); block lists it not at all (visibleTools)
// and refuses its calls with an error naming the findings (admitCall, as
// for a tool its pin blocks).

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/internal/guard"
	"github.com/airlock-run/airlock/internal/metrics"
	"github.com/airlock-run/airlock/manifests"
)

// metaGuard is the _meta key under which an annotated tool's listing
// names its definition's findings: {"findings": [{rule, path, action}]}.
// Under airlock's prefix, so an upstream cannot write it (describeTool
// drops what it says there).
const metaGuard = airlockMetaPrefix + "guard"

// maxNamed bounds the findings a definition's log line, listing and
// refusal name.
const maxNamed = 20

// descriptionNotes remembers each definition's findings, so that a
// tools/list (which republishes every tool) neither inspects a definition
// it has seen again nor logs and counts its findings again.
type descriptionNotes struct {
	mu   sync.Mutex
	seen map[string][]guard.Finding
	// inspected counts the definitions inspected (for tests).
	inspected int
}

// findings returns def's findings (key identifies it), inspecting it only
// the first time; first says it was.
func (n *descriptionNotes) findings(key string, def *mcp.Tool) (fs []guard.Finding, first bool) {
	n.mu.Lock()
	fs, ok := n.seen[key]
	n.mu.Unlock()
	if ok {
		return fs, false
	}
	fs = guard.InspectDescription(def)
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.seen[key]; ok {
		return fs, false // another listing got there first
	}
	if n.seen == nil || len(n.seen) > 10000 { // bounded: definitions change rarely
		n.seen = map[string][]guard.Finding{}
	}
	n.seen[key] = fs
	n.inspected++
	return fs, true
}

// guardDescription inspects e's definition as it will be served, by m's
// setting for it.
func (g *Gateway) guardDescription(m *manifests.Manifest, e *toolEntry) {
	action := m.InjectionInDescriptions(e.decl)
	if e.def == nil || (action != manifests.GuardAnnotate && action != manifests.GuardBlock) {
		return
	}
	raw, err := json.Marshal(e.def)
	if err != nil {
		raw = nil // InspectDescription reports what does not encode
	}
	sum := sha256.Sum256(raw)
	found, first := g.notes.findings(e.exposed+"\x00"+string(action)+"\x00"+hex.EncodeToString(sum[:]), e.def)
	if len(found) == 0 {
		return
	}
	// At most maxNamed are named (a schema of a thousand poisoned
	// properties must not make a log line or listing of them all).
	var where []string
	var listed []any
	for i, f := range found {
		if i == maxNamed {
			where = append(where, fmt.Sprintf("and %d more", len(found)-maxNamed))
			break
		}
		where = append(where, f.Rule+" at "+f.Path)
		listed = append(listed, map[string]any{"rule": f.Rule, "path": f.Path, "action": string(action)})
	}
	if first {
		for _, f := range found {
			metrics.GuardFindings.WithLabelValues(f.Rule, string(action)).Inc()
		}
		g.log.Warn().Str("server", e.server).Str("tool", e.upstream).Str("action", string(action)).
			Strs("findings", where).Msg("the tool's definition holds prompt-injection markers")
	}
	if action == manifests.GuardAnnotate {
		def := *e.def
		meta := mcp.Meta{}
		for k, v := range def.Meta {
			meta[k] = v
		}
		meta[metaGuard] = map[string]any{"findings": listed}
		def.Meta = meta
		e.def = &def
		return
	}
	reason := fmt.Sprintf("airlock withholds tool %s: its definition from upstream %s holds prompt-injection markers (%s); ask an operator to review the upstream's tool, or to change guard.descriptions.injection for it",
		e.exposed, e.server, strings.Join(where, ", "))
	e.avail, e.blocked, e.hidden = reason, true, true
	e.def = &mcp.Tool{Name: e.exposed, Description: "[unavailable: " + reason + "]", InputSchema: map[string]any{"type": "object"}}
}
