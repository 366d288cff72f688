package gateway

import (
	"bytes"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/guard"
	"github.com/airlock-run/airlock/internal/metrics"
	"github.com/airlock-run/airlock/internal/seal"
	"github.com/airlock-run/airlock/manifests"
)

// guardArguments inspects a call's arguments (canonical, as
// callArguments made them) before the call is sent to its task, by the
// tool's guard.arguments (issue 30 §1). A finding under redact or block
// has its value replaced by a marker here, so the task's history (the
// Update's input) never holds it: the call runs with exactly these
// arguments, and the worker refuses a blocked one. The findings (rule,
// path, action; never the value) travel in the call for the policy. A
// finding under require_approval or annotate leaves its value: the
// worker finds it again in what it runs, and decides.
//
// roles are the caller's: a role's guard.arguments tightens the tool's
// (manifests.ArgumentGuardFor).
func (g *Gateway) guardArguments(e *toolEntry, roles []string, args json.RawMessage) (json.RawMessage, []api.Finding, error) {
	secrets, personal := g.manifestOf(e.server).ArgumentGuardFor(e.decl, roles)
	p := guard.Policy{Secrets: guard.Action(secrets), PersonalData: guard.Action(personal)}
	out, found, err := guard.InspectArguments(args, p)
	if err != nil {
		return nil, nil, fmt.Errorf("invalid arguments to %s: %w; send a JSON object. Nothing ran", e.exposed, err)
	}
	var fs []api.Finding
	for _, f := range found {
		if f.Action == string(guard.Redact) || f.Action == string(guard.Block) {
			fs = append(fs, api.Finding{Rule: f.Rule, Path: f.Path, Action: f.Action, Where: api.FindingsInArguments})
			metrics.GuardFindings.WithLabelValues(f.Rule, f.Action).Inc()
		}
	}
	return out, fs, nil
}

// manifestOf is the live manifest of server, nil when none declares it
// (its tools get the defaults: off).
func (g *Gateway) manifestOf(server string) *manifests.Manifest {
	for _, m := range g.cur().Manifests {
		if m.Server.Name == server {
			return m
		}
	}
	return nil
}

// programResult renders a program's result for the model: as the
// worker's content guard left it (ProgramResult.Guarded: inspected, and
// its findings recorded, before the outcome was recorded), else inspected
// here (guardProgram; programs of tasks from before the worker did).
func (g *Gateway) programResult(task, program string, res api.ProgramResult) *mcp.CallToolResult {
	if res.Guarded {
		return renderProgram(task, program, res)
	}
	return g.guardProgram(renderProgram(task, program, res))
}

// guardProgram inspects what a program returns (its value and what it
// printed, as rendered for the model) like a tool's result, by the
// configuration's guard.results (a program is no tool, so no manifest
// speaks for it), before it reaches the model. The calls the program made
// were guarded as they ran, so what it returns is built from guarded
// results and its own source; this catches what it assembled from them.
// The findings are counted and logged (rule, path, action), never the
// value.
func (g *Gateway) guardProgram(res *mcp.CallToolResult) *mcp.CallToolResult {
	p := g.resultDefaults()
	if p.Secrets == guard.Off && p.PersonalData == guard.Off && p.Injection == guard.Off {
		return res
	}
	if res.StructuredContent != nil {
		// Decoded, so that the strings inside the program's value (held
		// as raw JSON) are inspected; numbers stay as written.
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return errorResult("", "", "airlock could not inspect the program's result; nothing of it is shown")
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			return errorResult("", "", "airlock could not inspect the program's result; nothing of it is shown")
		}
		res.StructuredContent = v
	}
	meta := res.Meta
	out, found := guard.InspectPolicy(res, p, "the program")
	if out != res {
		out.Meta = meta // the task and program the client polls by
	}
	for _, f := range found {
		metrics.GuardFindings.WithLabelValues(f.Rule, f.Action).Inc()
		g.log.Info().Str("rule", f.Rule).Str("path", f.Path).Str("action", f.Action).Msg("content guard: finding in a program's result")
	}
	return out
}

// resultDefaults is airlock.yaml's guard.results, which config.Load
// gives every manifest alike (off with no manifest).
func (g *Gateway) resultDefaults() guard.Policy {
	for _, m := range g.cur().Manifests {
		return guard.Policy{Secrets: guard.Action(m.SecretsInResults(nil)), PersonalData: guard.Action(m.PersonalDataInResults(nil)),
			Injection: guard.Action(m.InjectionInResults(nil))}
	}
	return guard.Policy{Secrets: guard.Off, PersonalData: guard.Off, Injection: guard.Off}
}

// heldKeyInfo is the HKDF info that derives the held-result key from the
// session key.
const heldKeyInfo = "airlock-held-result-v1"

// heldKey is the gateway's X25519 key for held results (guard.results:
// require_approval): derived from the session key, so that every replica
// sharing it, and a gateway restarted with it, can open a result approved
// while another held the call.
func (g *Gateway) heldKey() (*ecdh.PrivateKey, error) {
	g.heldResultOnce.Do(func() {
		b, err := hkdf.Key(sha256.New, g.sessionKey, nil, heldKeyInfo, 32)
		if err == nil {
			g.heldResult, err = ecdh.X25519().NewPrivateKey(b)
		}
		g.heldResultErr = err
	})
	return g.heldResult, g.heldResultErr
}

// resultKey is the public key a call of e by pr carries (CallRequest.
// ResultKey) when the caller's guard may hold its result for approval;
// nil otherwise (nothing to seal, and the Update stays as it was).
func (g *Gateway) resultKey(e *toolEntry, roles []string) []byte {
	s, p, i := g.manifestOf(e.server).ResultGuardFor(e.decl, roles)
	if s != manifests.GuardRequireApproval && p != manifests.GuardRequireApproval && i != manifests.GuardRequireApproval {
		return nil
	}
	k, err := g.heldKey()
	if err != nil {
		return nil // the worker then withholds the result (fail closed)
	}
	return k.PublicKey().Bytes()
}

// deliver renders a call result for the client (toMCP), opening the
// result an approver approved delivering (CallResult.Held) in place of the
// redacted copy the history keeps. A held result this gateway cannot open
// (its session key changed since the call) is not delivered.
func (g *Gateway) deliver(taskID string, res api.CallResult) *mcp.CallToolResult {
	if res.Held == nil {
		return toMCP(taskID, res)
	}
	k, err := g.heldKey()
	var clear []byte
	if err == nil {
		clear, err = seal.Open(k, res.Held.Peer, res.Held.Sealed)
	}
	if err != nil {
		g.log.Warn().Str("task", taskID).Str("call", res.CallID).Err(err).Msg("content guard: an approved held result cannot be opened")
		return errorResult(taskID, res.CallID, fmt.Sprintf("the result of %s was approved for delivery, but this gateway cannot open it (its session key is not the one the call was made with); the call ran. Ask an operator to restore the gateway's session key, or call the tool again", res.Tool))
	}
	res.Result, res.Held = clear, nil
	return toMCP(taskID, res)
}
