package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/authzen"
	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/metrics"
	"github.com/airlock-run/airlock/internal/policy"
)

// External is the worker's external policy decision point (issue 30 §3):
// an AuthZEN client and the configuration's choices around it. It is
// part of a Judge, so a reload replaces it (and its cache) whole.
type External struct {
	Client *authzen.Client
	// AppliesTo is "not_denied", "allowed" or "all" (config.ExternalPolicy).
	AppliesTo string
	// OnError is the fail mode of a tool: "deny" or "allow".
	OnError func(tool string) string
	// ApprovalGroup, when set, sends a call airlock would allow and the
	// PDP refuses to this approver group instead of denying it (on_deny:
	// require_approval).
	ApprovalGroup string
}

// NewExternal is the worker's external policy decision point for the
// configuration's external_policy (nil when there is none). The
// Authorization header's value is read from the environment here, so it
// stays in the process and never enters a workflow's history.
func NewExternal(x *config.ExternalPolicy, getenv func(string) string) (*External, error) {
	if x == nil {
		return nil, nil
	}
	auth := ""
	if name := x.AuthorizationEnv; name != "" {
		auth = strings.TrimSpace(getenv(name))
		if auth == "" {
			return nil, fmt.Errorf("external_policy.authorization_env names %s, which is not set; export it (the PDP's Authorization header, e.g. \"Bearer …\") or remove authorization_env", name)
		}
		if strings.ContainsAny(auth, "\r\n\x00") {
			return nil, fmt.Errorf("external_policy.authorization_env: %s holds a line break or NUL, which cannot be sent in a header; set it to one line", name)
		}
	}
	return &External{
		Client: authzen.New(authzen.Options{Endpoint: x.Endpoint, Timeout: x.EffectiveTimeout(),
			Authorization: auth, CacheEntries: x.EffectiveCacheEntries()}),
		AppliesTo:     x.EffectiveAppliesTo(),
		OnError:       x.OnErrorFor,
		ApprovalGroup: approvalGroup(x),
	}, nil
}

func approvalGroup(x *config.ExternalPolicy) string {
	if x.OnDeny == config.ExternalOnDenyApproval {
		return x.ApprovalGroup
	}
	return ""
}

// The AuthZEN vocabulary of a call, documented in README ("An external
// policy decision point").
const (
	externalSubjectType  = "principal"
	externalResourceType = "mcp_tool"
	externalAction       = "tools/call"
)

// applies reports whether a decision with effect e is put to the PDP.
func (x *External) applies(e api.Effect) bool {
	switch x.AppliesTo {
	case "all":
		return true
	case "allowed":
		return e == api.Allow
	default:
		return e != api.Deny
	}
}

// consultExternal asks the external decision point about a call airlock
// has judged d, and makes d stricter when the answer is no or, under
// on_error: deny, when there is no answer. It never loosens d. The
// record it returns is part of the activity's result, so Temporal keeps
// it: a replay reads the answer from the history and never asks again.
func (a *Activities) consultExternal(ctx context.Context, x *External, in api.DecideInput, tool policy.Tool, d *api.Verdict) *api.ExternalDecision {
	if x == nil || x.Client == nil || !x.applies(d.Effect) {
		return nil
	}
	rec := &api.ExternalDecision{URL: x.Client.URL(), Effect: d.Effect}
	body, err := authzen.Body(externalRequest(in, tool, *d))
	var ans authzen.Answer
	if err == nil {
		sum := sha256.Sum256(body)
		rec.RequestSHA256, rec.RequestBytes = hex.EncodeToString(sum[:]), len(body)
		if len(body) <= api.MaxRecordedExternalRequest {
			rec.Request = body
		}
		ans, err = x.Client.Evaluate(ctx, body, in.TaskID+"/"+in.CallID)
	}
	if err != nil {
		kind := authzen.KindTransport
		var ae *authzen.Error
		if errors.As(err, &ae) {
			kind = ae.Kind
		}
		rec.ErrorKind, rec.Error = kind, err.Error()
		metrics.ExternalDecisions.WithLabelValues(kind, "false").Inc()
		rec.OnError = "deny"
		if x.OnError != nil {
			rec.OnError = x.OnError(in.Tool)
		}
		if rec.OnError != "allow" && d.Effect != api.Deny {
			*d = api.Verdict{Effect: api.Deny, Check: api.CheckExternal, Version: d.Version,
				Reason: fmt.Sprintf("denied: the external policy decision point %s, and a call it cannot decide on is denied (external_policy.on_error: deny); try again later, or ask an operator to look at the PDP",
					failure(kind, x.Client))}
			rec.Changed = true
		}
		return rec
	}
	rec.Decision, rec.Context, rec.Cached = &ans.Decision, ans.Context, ans.Cached
	metrics.ExternalDecisions.WithLabelValues(map[bool]string{true: "allow", false: "deny"}[ans.Decision], strconv.FormatBool(ans.Cached)).Inc()
	if ans.Decision || d.Effect == api.Deny {
		return rec
	}
	why := ""
	if r := reasonUser(ans.Context); r != "" {
		why = ": " + r
	}
	switch {
	case x.ApprovalGroup != "" && d.Effect == api.RequireApproval:
		// Already asked of people: their approval stands as the stricter
		// decision (on_deny: require_approval).
		return rec
	case x.ApprovalGroup != "":
		*d = api.Verdict{Effect: api.RequireApproval, Check: api.CheckExternal, Version: d.Version, Group: x.ApprovalGroup, Quorum: 1,
			Reason: fmt.Sprintf("the external policy decision point did not allow the call to %s%s; waiting for 1 approval(s) from group %q (external_policy.on_deny: require_approval)", in.Tool, why, x.ApprovalGroup)}
	default:
		*d = api.Verdict{Effect: api.Deny, Check: api.CheckExternal, Version: d.Version,
			Reason: fmt.Sprintf("denied: the external policy decision point denied the call to %s%s; airlock's own policy would have %s, and the external point may only be stricter", in.Tool, why, verb(rec.Effect))}
	}
	rec.Changed = true
	return rec
}

// failure says, for the model, what went wrong with the PDP, without its
// address.
func failure(kind string, c *authzen.Client) string {
	switch kind {
	case authzen.KindTimeout:
		return fmt.Sprintf("did not answer within %s", c.Timeout())
	case authzen.KindStatus:
		return "answered with an HTTP error status"
	case authzen.KindMalformed:
		return "gave an answer that is not a valid AuthZEN evaluation response"
	default:
		return "could not be reached"
	}
}

func verb(e api.Effect) string {
	if e == api.RequireApproval {
		return "sent it to approval"
	}
	return "allowed it"
}

// externalRequest is the AuthZEN request for a call: who (the principal
// and its roles), what (tools/call) on which tool (its manifest's facts),
// and the context (the task, the arguments, airlock's own decision). It
// holds no counter or clock, so that equal calls in a task are equal
// requests and a cached answer can serve them.
func externalRequest(in api.DecideInput, tool policy.Tool, d api.Verdict) authzen.Request {
	subject := map[string]any{
		"roles":       nonNil(in.Principal.Roles),
		"permissions": nonNil(in.Principal.Permissions),
		"data_level":  string(in.Principal.DataLevel),
	}
	resource := map[string]any{"server": tool.Server, "tool": tool.Upstream, "covered": tool.Decl != nil}
	if decl := tool.Decl; decl != nil {
		se := make([]string, 0, len(decl.SideEffects))
		for _, s := range decl.SideEffects {
			se = append(se, string(s))
		}
		resource["risk"], resource["data_access_level"] = string(decl.Risk), string(decl.DataAccessLevel)
		resource["side_effects"], resource["idempotent"] = se, decl.Idempotent
	}
	args := json.RawMessage(`{}`)
	if len(in.Arguments) > 0 && json.Valid(in.Arguments) {
		args = in.Arguments
	}
	airlock := map[string]any{"effect": string(d.Effect), "check": d.Check, "policy_version": d.Version}
	if d.Rule != "" {
		airlock["rule"] = d.Rule
	}
	return authzen.Request{
		Subject:  authzen.Entity{Type: externalSubjectType, ID: in.Principal.Name, Properties: subject},
		Action:   authzen.Action{Name: externalAction},
		Resource: authzen.Entity{Type: externalResourceType, ID: in.Tool, Properties: resource},
		Context:  map[string]any{"task_id": in.TaskID, "arguments": args, "airlock": airlock},
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// reasonUser is the answer's context.reason_user, for the model: a
// string, or from an object of language-tagged strings the "en…" one
// (else the first by key); printable, at most 300 bytes.
func reasonUser(ctx json.RawMessage) string {
	var c struct {
		ReasonUser json.RawMessage `json:"reason_user"`
	}
	if len(ctx) == 0 || json.Unmarshal(ctx, &c) != nil || len(c.ReasonUser) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(c.ReasonUser, &s) != nil {
		var m map[string]json.RawMessage
		if json.Unmarshal(c.ReasonUser, &m) != nil {
			return ""
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			ei, ej := strings.HasPrefix(keys[i], "en"), strings.HasPrefix(keys[j], "en")
			if ei != ej {
				return ei
			}
			return keys[i] < keys[j]
		})
		for _, k := range keys {
			if json.Unmarshal(m[k], &s) == nil && s != "" {
				break
			}
		}
	}
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	if len(s) > 300 {
		cut := 300
		for cut > 0 && !utf8Start(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return strings.TrimSpace(s)
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// auditExternal is the audit stream's view of an external decision.
func auditExternal(x *api.ExternalDecision) *auditstream.External {
	if x == nil {
		return nil
	}
	out := &auditstream.External{URL: x.URL, RequestSHA256: x.RequestSHA256, Context: x.Context, Cached: x.Cached,
		ErrorKind: x.ErrorKind, OnError: x.OnError, Changed: x.Changed}
	if x.Decision != nil {
		out.Decision = "deny"
		if *x.Decision {
			out.Decision = "allow"
		}
	}
	return out
}
