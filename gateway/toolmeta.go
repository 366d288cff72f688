package gateway

// What the tool list says a tool is (README.md, "Tools say what they
// are"): each upstream tool's _meta carries the risk and recovery
// metadata of manifests.RiskMeta and manifests.RecoveryMeta, made from
// its declaration and the policy's default decision, and its annotations
// say the same in MCP's hints. What an upstream itself says under
// airlock's _meta prefix is dropped: the listing says what airlock
// enforces, not what the upstream claims.

import (
	"encoding/json"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/internal/upstream"
	"github.com/airlock-run/airlock/manifests"
)

// airlockMetaPrefix is the _meta prefix that speaks for airlock.
const airlockMetaPrefix = "airlock.dev/"

// described is what the listing says of one tool, made from its
// declaration and the policy: shared, read-only, by every listing of the
// same configuration.
type described struct {
	risk, recovery map[string]any
	hints          manifests.ToolHints
}

// describe makes what the listing says of e.
func describe(pol *policy.Policy, m *manifests.Manifest, e *toolEntry) *described {
	risk := pol.Describe(policy.Tool{Name: e.exposed, Server: e.server, Upstream: e.upstream, Decl: e.decl})
	d := &described{risk: metaValue(risk), recovery: metaValue(e.decl.Recovery(m.Exposed)),
		hints: manifests.HintsOf(risk.SideEffects, risk.Idempotent)}
	if !risk.Covered {
		// Nothing declares what it does: MCP's defaults, destructive and
		// open world, rather than a guess from the policy's assumptions.
		d.hints.DestructiveHint, d.hints.OpenWorldHint = nil, nil
	}
	return d
}

// describedCache keeps describe's answers for the configuration in force:
// tools/list republishes every tool, and the declarations and the policy
// they come from change only with a reload (a new Live).
type describedCache struct {
	mu   sync.Mutex
	live *Live
	m    map[describedKey]*described
}

type describedKey struct {
	exposed string
	decl    *manifests.Tool
}

func (c *describedCache) get(live *Live, m *manifests.Manifest, e *toolEntry) *described {
	k := describedKey{e.exposed, e.decl}
	c.mu.Lock()
	if c.live != live {
		c.live, c.m = live, map[describedKey]*described{}
	}
	d := c.m[k]
	c.mu.Unlock()
	if d != nil {
		return d
	}
	d = describe(live.Policy, m, e)
	c.mu.Lock()
	if c.live == live {
		c.m[k] = d
	}
	c.mu.Unlock()
	return d
}

// describeTool replaces, in def (the gateway's copy of an upstream's
// definition of e), the upstream's claims in airlock's _meta namespace and
// its hints with what airlock enforces (d).
func describeTool(d *described, e *toolEntry, def *mcp.Tool) {
	meta := mcp.Meta{}
	for k, v := range def.Meta {
		if !strings.HasPrefix(k, airlockMetaPrefix) {
			meta[k] = v
		}
	}
	meta[manifests.MetaRisk], meta[manifests.MetaRecovery] = d.risk, d.recovery
	if e.avail != "" {
		// airlock's own word, as a wasm server's is (upstream.MetaUnavailable).
		meta[upstream.MetaUnavailable] = e.avail
	}
	def.Meta = meta

	a := &mcp.ToolAnnotations{}
	if def.Annotations != nil {
		a.Title = def.Annotations.Title // the upstream's words, like the description
	}
	h := d.hints
	a.ReadOnlyHint, a.DestructiveHint, a.IdempotentHint, a.OpenWorldHint = h.ReadOnlyHint, h.DestructiveHint, h.IdempotentHint, h.OpenWorldHint
	def.Annotations = a
}

// metaValue is v as a client decodes it (maps, slices, strings, float64
// and bools), so that the listing's _meta holds plain JSON values.
func metaValue(v any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		return nil // the metadata types always marshal
	}
	var out map[string]any
	if json.Unmarshal(b, &out) != nil {
		return nil
	}
	return out
}
