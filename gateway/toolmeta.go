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

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/internal/upstream"
	"github.com/airlock-run/airlock/manifests"
)

// airlockMetaPrefix is the _meta prefix that speaks for airlock.
const airlockMetaPrefix = "airlock.dev/"

// describeTool replaces, in def (the gateway's copy of an upstream's
// definition of e), the upstream's claims in airlock's _meta namespace and
// its hints with what airlock enforces.
func describeTool(pol *policy.Policy, m *manifests.Manifest, e *toolEntry, def *mcp.Tool) {
	meta := mcp.Meta{}
	for k, v := range def.Meta {
		if !strings.HasPrefix(k, airlockMetaPrefix) {
			meta[k] = v
		}
	}
	risk := pol.Describe(policy.Tool{Name: e.exposed, Server: e.server, Upstream: e.upstream, Decl: e.decl})
	meta[manifests.MetaRisk] = metaValue(risk)
	meta[manifests.MetaRecovery] = metaValue(e.decl.Recovery(m.Exposed))
	if e.avail != "" {
		// airlock's own word, as a wasm server's is (upstream.MetaUnavailable).
		meta[upstream.MetaUnavailable] = e.avail
	}
	def.Meta = meta

	a := &mcp.ToolAnnotations{}
	if def.Annotations != nil {
		a.Title = def.Annotations.Title // the upstream's words, like the description
	}
	h := manifests.HintsOf(risk.SideEffects, risk.Idempotent)
	if !risk.Covered {
		// Nothing declares what it does: MCP's defaults, destructive and
		// open world, rather than a guess from the policy's assumptions.
		h.DestructiveHint, h.OpenWorldHint = nil, nil
	}
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
