package workflows

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/jsoncanon"
	"github.com/airlock-run/airlock/internal/redact"
)

// digest is the approval digest of a call of this task, in this run's form.
func (t *task) digest(callID, tool string, args json.RawMessage, policyVersion string) string {
	if t.exactOn {
		return api.RequestDigest(t.in.TaskID, callID, tool, args, policyVersion)
	}
	return api.LegacyRequestDigest(t.in.TaskID, callID, tool, args, policyVersion)
}

// editChanges is the diff of an edit since changeEditDiff.
func editChanges(from, to json.RawMessage, paths []string) []api.ArgChange {
	var out []api.ArgChange
	for _, c := range redact.Changes(from, to, paths) {
		out = append(out, api.ArgChange{Path: c.Path, From: c.From, To: c.To, Masked: c.Masked})
	}
	return out
}

// editJudged reports whether policy has judged an edit (or refused it).
func editJudged(e *api.ArgsEdit) bool { return e == nil || e.Effect != "" || e.Refused != "" }

// awaitEditJudged waits (bounded) until policy has judged ar's edit, in
// runs since changeEditOutcome.
func (t *task) awaitEditJudged(ctx workflow.Context, ar *api.ApprovalRequest) {
	if ar.Edit == nil || workflow.GetVersion(ctx, changeEditOutcome, workflow.DefaultVersion, 1) < 1 {
		return
	}
	_, _ = workflow.AwaitWithTimeout(ctx, time.Minute, func() bool { return editJudged(ar.Edit) })
}

// pendingEdit is the edit the next approval request asks about.
type pendingEdit struct {
	of, by string
	// vote is the editor's own approval, counted when the edited call
	// needs the same group again.
	vote *api.Vote
}

// editFields fills a new approval request's edit fields: whether it may
// be edited and, when it asks about an edit, which one.
func (t *task) editFields(ar *api.ApprovalRequest, spec *api.ApprovalSpec) {
	ar.NoEdits = spec.NoEdits || !t.editsOn
	pe := t.nextEdit
	if pe == nil {
		return
	}
	t.nextEdit = nil
	ar.ID = api.EditRequestID(ar.ID)
	ar.EditOf, ar.EditedBy, ar.NoEdits = pe.of, pe.by, true
	if pe.vote != nil {
		ar.Votes = append(ar.Votes, *pe.vote)
	}
}

// validateEdit refuses edits this request may not take, and a second
// approval of an edit by the approver who made it. It is part of the
// decide validator: it must not change state.
func (t *task) validateEdit(ar *api.ApprovalRequest, d api.DecideRequest) error {
	if ar.EditOf != "" && d.Approver == ar.EditedBy {
		return fmt.Errorf("%s edited these arguments (on request %s) and may not approve the edit again; another approver in %q must decide", d.Approver, ar.EditOf, ar.Group)
	}
	if len(d.Arguments) == 0 {
		return nil
	}
	switch {
	case !d.Approve:
		return errors.New("edited arguments come with an approval only; to refuse the call, deny it without arguments")
	case !t.editsOn && t.plan != nil:
		return fmt.Errorf("request %s is a plan step's, and plan steps take no edited arguments (the plan declares them); approve or deny it as it is", ar.ID)
	case !t.editsOn:
		return fmt.Errorf("task %s was started before airlock took edited arguments; approve or deny request %s as it is", t.in.TaskID, ar.ID)
	case ar.EditOf != "":
		return fmt.Errorf("request %s already asks about arguments %s edited; approve or deny it as it is", ar.ID, ar.EditedBy)
	case ar.NoEdits:
		return fmt.Errorf("%s does not allow approvers to change its arguments (its manifest says approval.edits: false); approve or deny it as it is", ar.Tool)
	case len(d.Arguments) > api.MaxArgumentBytes:
		return fmt.Errorf("the edited arguments are %d bytes; keep them under %d", len(d.Arguments), api.MaxArgumentBytes)
	}
	v, err := jsoncanon.Decode([]byte(d.Arguments))
	var dup *jsoncanon.DuplicateKeyError
	var num *jsoncanon.NumberError
	switch {
	case errors.As(err, &dup):
		return fmt.Errorf("the edited arguments are ambiguous: %v (JSON parsers disagree on which value counts); send each key once", err)
	case errors.As(err, &num):
		return fmt.Errorf("the edited arguments: %v", err)
	}
	if obj, ok := v.(map[string]any); err != nil || !ok || obj == nil {
		return errors.New(`the edited arguments must be a JSON object, like the call's own ({"name": value, ...})`)
	}
	return nil
}

// takeEdit records the edit a decision carries: the request is approved
// (its call's wait ends; the edited call is judged again and, if policy
// says so, approved again). It returns the edited arguments' digest, or
// "" when the decision edited nothing (arguments equal to the request's
// count as a plain approval).
func (t *task) takeEdit(ctx workflow.Context, ar *api.ApprovalRequest, d api.DecideRequest) string {
	if len(d.Arguments) == 0 || !d.Approve {
		return ""
	}
	canon := canonical
	if t.exactOn {
		canon = exactCanonical
	}
	edited := canon(json.RawMessage(d.Arguments))
	if bytes.Equal(edited, canon(ar.Arguments)) {
		return ""
	}
	ar.Edit = &api.ArgsEdit{
		RequestID: ar.ID, By: d.Approver, Via: d.Via, At: workflow.Now(ctx), Comment: d.Comment,
		Original: ar.Arguments, OriginalDigest: ar.Digest, Arguments: edited,
		Digest: t.digest(ar.CallID, ar.Tool, edited, ar.PolicyVersion),
	}
	if workflow.GetVersion(ctx, changeEditDiff, workflow.DefaultVersion, 1) >= 1 {
		ar.Edit.Changes = editChanges(ar.Arguments, edited, ar.Redact)
	} else {
		ar.Edit.Changes = argChanges(ar.Arguments, edited, ar.Redact)
	}
	ar.State = api.ApprovalApproved
	return ar.Edit.Digest
}

// applyEdit runs after a call's approval: when the approver edited the
// arguments, the edited call replaces req and is judged again by the
// decide local activity (schema, path confinement, rules). Policy's deny
// refuses the call (neither version runs); a require_approval goes to its
// group as a new request (the editor's vote counts when it is the same
// group). d and out become the edited call's. A non-nil result ends the
// call with it (recorded).
func (t *task) applyEdit(ctx workflow.Context, req *api.CallRequest, d *api.Decision, out *api.DecideOutput, started time.Time) *api.CallResult {
	if !t.editsOn {
		return nil
	}
	ar := t.approval(api.RequestID(t.in.TaskID, req.CallID))
	if ar == nil || ar.Edit == nil {
		return nil
	}
	res := t.editedCall(ctx, ar.Edit, ar, req, d, out)
	if res == nil {
		return nil
	}
	if res.Outcome == api.OutcomeDenied {
		r := t.denied(ctx, *req, started, *res)
		return &r
	}
	t.lastActivity = workflow.Now(ctx)
	r := t.record(*req, started, t.lastActivity, *res)
	return &r
}

// editedCall is applyEdit's work; see there.
func (t *task) editedCall(ctx workflow.Context, e *api.ArgsEdit, ar *api.ApprovalRequest, req *api.CallRequest, d *api.Decision, out *api.DecideOutput) *api.CallResult {
	if t.edited == nil {
		t.edited = map[string]*api.ArgsEdit{}
	}
	t.edited[req.CallID] = e
	req.Arguments, req.ArgumentsRef = e.Arguments, ""
	d2, out2 := t.judge(ctx, *req, workflow.Now(ctx))
	e.Effect, e.Reason = string(d2.Effect), d2.Reason
	refused := func(why string) *api.CallResult {
		e.Refused = why
		return &api.CallResult{Outcome: api.OutcomeDenied, Decision: &d2,
			Reason: fmt.Sprintf("%s approved %s with edited arguments, but the edit was refused: %s. Neither the original nor the edited call ran", e.By, req.Tool, why)}
	}
	switch {
	case d2.Effect == api.Allow:
	case d2.Effect == api.RequireApproval && out2.Approval != nil:
		quorum := max(d2.Quorum, 1)
		same := d2.Group == ar.Group && slices.Contains(out2.Approval.Approvers, e.By)
		if same && quorum <= 1 {
			break // the editor's approval is the one the edited call needs
		}
		pe := &pendingEdit{of: ar.ID, by: e.By}
		if same {
			pe.vote = &api.Vote{Approver: e.By, Approve: true, At: e.At, Via: e.Via, Comment: e.Comment}
		}
		t.nextEdit = pe
		ok, why := t.awaitApproval(ctx, *req, d2, out2.Approval)
		if res, c := t.cancelledResult(*req, api.CallResult{Decision: &d2}, true); !ok && c {
			return &res
		}
		if !ok {
			return refused(fmt.Sprintf("the edited call needs approval by %q, which did not approve it (%s)", d2.Group, why))
		}
	case d2.Effect == api.RequireApproval:
		return refused("the edited call needs approval, and this call path has none")
	default:
		reason := d2.Reason
		if reason == "" {
			reason = "denied"
		}
		return refused(fmt.Sprintf("policy denies the edited call (check %s): %s", d2.Check, reason))
	}
	*d, *out = d2, out2
	return nil
}

// attachEdit adds the edit of a call to its result as it is recorded: the
// result says that an approver changed the arguments, and how (masked),
// in _meta[api.EditMetaKey] and in a text line the model reads.
func (t *task) attachEdit(callID string, res api.CallResult) api.CallResult {
	e := t.edited[callID]
	if e == nil {
		return res
	}
	delete(t.edited, callID)
	res.Edit = e
	if len(res.Result) > 0 {
		res.Result = annotateResult(res.Result, e)
	}
	return res
}

// annotateResult adds the edit note to a CallToolResult's JSON; a result
// that is not a JSON object is left as it is.
func annotateResult(raw json.RawMessage, e *api.ArgsEdit) json.RawMessage {
	var r map[string]json.RawMessage
	if err := json.Unmarshal(raw, &r); err != nil || r == nil {
		return raw
	}
	var content []json.RawMessage
	if c, ok := r["content"]; ok {
		if err := json.Unmarshal(c, &content); err != nil {
			return raw
		}
	}
	note, _ := json.Marshal(map[string]string{"type": "text", "text": EditNote(e)})
	content = append(content, note)
	r["content"], _ = json.Marshal(content)
	meta := map[string]json.RawMessage{}
	if m, ok := r["_meta"]; ok {
		if err := json.Unmarshal(m, &meta); err != nil || meta == nil {
			meta = map[string]json.RawMessage{}
		}
	}
	meta[api.EditMetaKey], _ = json.Marshal(map[string]any{
		"by": e.By, "via": e.Via, "request": e.RequestID,
		"originalDigest": e.OriginalDigest, "digest": e.Digest, "changes": e.Changes,
	})
	r["_meta"], _ = json.Marshal(meta)
	b, err := json.Marshal(r)
	if err != nil {
		return raw
	}
	return b
}

// EditNote is the line a result carries about an approver's edit.
func EditNote(e *api.ArgsEdit) string {
	var parts []string
	for _, c := range e.Changes {
		parts = append(parts, redact.ChangeText(c.Path, c.From, c.To, c.Masked))
	}
	return fmt.Sprintf("Note from airlock: approver %s changed the arguments of this call before approving it; what ran is the edited call. Changes: %s.",
		e.By, strings.Join(parts, "; "))
}

// exactCanonical is jsoncanon's canonical form, what the gateway forwards
// and RequestDigest hashes; input it refuses is returned as it is (and
// policy then refuses it).
func exactCanonical(raw json.RawMessage) json.RawMessage {
	b, err := jsoncanon.Canonical(raw)
	if err != nil {
		return raw
	}
	return b
}

// canonical is JSON with object keys sorted, as runs before
// changeExactNumbers wrote edited arguments; input that does not parse is
// returned as it is.
func canonical(raw json.RawMessage) json.RawMessage {
	v, err := decodeExact(raw)
	if err != nil {
		return raw
	}
	b, err := json.Marshal(v)
	if err != nil {
		return raw
	}
	return b
}

// argChanges lists the values that differ between two JSON documents,
// objects compared key by key (sorted), anything else as a whole. A value
// at or under a redact path shows as redact.Mask.
func argChanges(from, to json.RawMessage, paths []string) []api.ArgChange {
	a, _ := decodeExact(from)
	b, _ := decodeExact(to)
	var out []api.ArgChange
	var walk func(path []string, a, b any, hasA, hasB bool)
	walk = func(path []string, a, b any, hasA, hasB bool) {
		ma, okA := a.(map[string]any)
		mb, okB := b.(map[string]any)
		if okA && okB && hasA && hasB {
			keys := make([]string, 0, len(ma)+len(mb))
			for k := range ma {
				keys = append(keys, k)
			}
			for k := range mb {
				if _, ok := ma[k]; !ok {
					keys = append(keys, k)
				}
			}
			sort.Strings(keys)
			for _, k := range keys {
				va, ia := ma[k]
				vb, ib := mb[k]
				walk(append(slices.Clone(path), k), va, vb, ia, ib)
			}
			return
		}
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if hasA == hasB && bytes.Equal(ja, jb) {
			return
		}
		masked := secretPath(path, paths)
		c := api.ArgChange{Path: strings.Join(path, ".")}
		if hasA {
			c.From = maskedJSON(ja, masked)
		}
		if hasB {
			c.To = maskedJSON(jb, masked)
		}
		out = append(out, c)
	}
	walk(nil, a, b, true, true)
	return out
}

func maskedJSON(b []byte, masked bool) json.RawMessage {
	if masked {
		m, _ := json.Marshal(redact.Mask)
		return m
	}
	return b
}

// secretPath reports whether a redact path covers the value at path or
// lies inside it (the value then holds a secret).
func secretPath(path []string, paths []string) bool {
	for _, p := range paths {
		rp := strings.Split(p, ".")
		n := min(len(rp), len(path))
		if slices.Equal(rp[:n], path[:n]) {
			return true
		}
	}
	return false
}

// decodeExact decodes JSON keeping numbers exact (json.Number), so an
// edited call runs with the numbers the approver wrote.
func decodeExact(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}
