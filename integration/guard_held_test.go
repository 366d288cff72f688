package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/proto"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/internal/timeline"
	"github.com/airlock-run/airlock/manifests"
)

// TestGuardHeldResultOnNPMFilesystem (issue 30 §1, require_approval for
// results): a file holding a generated cloud key and a token is read
// through the real filesystem server by a tool whose guard.results holds
// secrets for approval. The call runs, its result is held: the approver
// (approvals show, the approvals page's JSON) is told that the call ran
// and which finding is where, never the value. Approved, the model gets
// the file as it is; denied, an isError naming the kind and the path, not
// the result; a request nobody decides expires and is denied alike. The
// task's history and the audit stream hold neither secret: the history
// keeps the redacted copy and the sealed one. With -record it writes
// result_approval_v1_run1.json (changeResultApproval).
func TestGuardHeldResultOnNPMFilesystem(t *testing.T) {
	t.Parallel()
	sandbox, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fsm := loadExample(t, "filesystem.yaml", "server-filesystem", []string{sandbox}, nil)
	held := &manifests.Guard{Results: &manifests.GuardResults{Secrets: manifests.GuardRequireApproval}}
	fsm.Tools["read_text_file"].Guard = held
	fsm.Tools["read_multiple_files"].Guard = held
	fsm.Tools["read_multiple_files"].Approval = &manifests.Approval{Group: "sec", Timeout: manifests.Duration(3 * time.Second)}
	// edit_file: its arguments go to approval too, and its result (a
	// diff) holds what it wrote.
	fsm.Tools["edit_file"].Guard = &manifests.Guard{Arguments: &manifests.GuardResults{Secrets: manifests.GuardRequireApproval},
		Results: &manifests.GuardResults{Secrets: manifests.GuardRequireApproval}}
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{fsm}, policy: &policy.Config{Rules: exampleRules(t), ApprovalGroup: "sec"},
		groups: map[string][]string{"sec": {"bob"}}, audit: openAudit(t, auditPath), inlineWait: 2 * time.Minute})
	const task = "guard-held-result"
	cs := s.connect(t, map[string]string{gateway.HeaderTask: task})
	waitTools(t, cs, "filesystem__read_text_file", "filesystem__read_multiple_files")

	accessKey := "AKIA" + "W4NQ7XLM2TB5PR3K"                 // assembled: never a literal in the repository
	token := "ghp_" + "M3n6Bv9Cx2Zl5Kj8Hg1Fd4Sa7Po0Iu3Yt6Re" // 36 after the prefix
	file := filepath.Join(sandbox, "deploy.env.txt")
	content := "region = eu-west-1\naws_access_key_id = " + accessKey + "\nGITHUB_TOKEN=" + token + "\n"
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	local := approver.Local{Temporal: s.client, Namespace: s.srv.Namespace()}
	seen := map[string]bool{}
	// pendingResult is the next pending request to deliver a held result.
	pendingResult := func(tool string) api.ApprovalRequest {
		t.Helper()
		var req api.ApprovalRequest
		waitFor(t, "the request to deliver "+tool+"'s result", 60*time.Second, func() bool {
			reqs, err := local.List(context.Background())
			for _, r := range reqs {
				if err == nil && r.TaskID == task && r.Tool == tool && strings.HasSuffix(r.CallID, "/result") && !seen[r.ID] && r.State == api.ApprovalPending {
					req = r
					seen[r.ID] = true
					return true
				}
			}
			return false
		})
		return req
	}
	checkShown := func(req api.ApprovalRequest) {
		t.Helper()
		for _, w := range []string{"the call ran; approve delivering its result", "aws-access-key at content[0].text", "github-token at content[0].text"} {
			if !strings.Contains(req.Reason, w) {
				t.Errorf("the approver's reason lacks %q: %q", w, req.Reason)
			}
		}
		var shown strings.Builder
		if err := approver.WriteRequest(&shown, req, time.Now()); err != nil {
			t.Fatal(err)
		}
		page, _ := json.Marshal(approver.Redacted(req))
		for _, sec := range []string{accessKey, token} {
			if strings.Contains(req.Reason, sec) || strings.Contains(shown.String(), sec) || bytes.Contains(page, []byte(sec)) {
				t.Errorf("the approver is shown the secret %q", sec)
			}
		}
		if !strings.Contains(shown.String(), "the call ran; approve delivering its result") {
			t.Errorf("approvals show does not say the call ran:\n%s", shown.String())
		}
	}

	// Approved: the model gets the file as it is.
	pending := callAsync(cs, "filesystem__read_text_file", map[string]any{"path": file})
	req := pendingResult("filesystem__read_text_file")
	checkShown(req)
	if _, err := local.Decide(context.Background(), approver.Decision{RequestID: req.ID, Approver: "bob", Approve: true, Via: "cli", Digest: req.Digest}); err != nil {
		t.Fatalf("bob approving: %v", err)
	}
	r := <-pending
	if r.err != nil || r.res.IsError || text(r.res) != content {
		t.Fatalf("approved: %v isError=%v %q, want the file", r.err, r.res != nil && r.res.IsError, text(r.res))
	}

	// Denied: an error naming the kinds and where, not the result.
	pending = callAsync(cs, "filesystem__read_text_file", map[string]any{"path": file})
	req = pendingResult("filesystem__read_text_file")
	checkShown(req)
	if _, err := local.Decide(context.Background(), approver.Decision{RequestID: req.ID, Approver: "bob", Approve: false, Via: "cli", Digest: req.Digest, Comment: "not for the model"}); err != nil {
		t.Fatalf("bob denying: %v", err)
	}
	r = <-pending
	got := text(r.res)
	if r.err != nil || !r.res.IsError || !strings.Contains(got, "aws-access-key at content[0].text") || !strings.Contains(got, "github-token at content[0].text") ||
		!strings.Contains(got, "not for the model") || !strings.Contains(got, "The call ran") || strings.Contains(got, "eu-west-1") {
		t.Fatalf("denied: %v isError=%v %q; want an error naming the findings", r.err, r.res != nil && r.res.IsError, got)
	}

	// Nobody decides: the request expires, and the result is withheld.
	pending = callAsync(cs, "filesystem__read_multiple_files", map[string]any{"paths": []string{file}})
	req = pendingResult("filesystem__read_multiple_files")
	r = <-pending
	got = text(r.res)
	if r.err != nil || !r.res.IsError || !strings.Contains(got, "expired") || !strings.Contains(got, "aws-access-key at content[0].text") || strings.Contains(got, "eu-west-1") {
		t.Fatalf("expired: %v isError=%v %q; want an error naming the findings", r.err, r.res != nil && r.res.IsError, got)
	}
	if ar, err := approver.Lookup(context.Background(), s.client, req.ID); err != nil || ar.State != api.ApprovalExpired {
		t.Errorf("the expired request: %+v %v", ar.State, err)
	}

	hist := fetchHistory(t, s.client, task, "")
	raw, err := proto.Marshal(hist)
	if err != nil {
		t.Fatal(err)
	}
	audit, err := os.ReadFile(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, sec := range []string{accessKey, token} {
		if bytes.Contains(raw, []byte(sec)) {
			t.Errorf("the history holds %q", sec)
		}
		if bytes.Contains(audit, []byte(sec)) {
			t.Errorf("the audit stream holds %q", sec)
		}
	}
	if !bytes.Contains(raw, []byte("[REDACTED:aws-access-key]")) {
		t.Error("the history lacks the redacted copy")
	}
	findings, shown := guardFindings(t, hist)
	n := 0
	for _, f := range findings {
		if f.Rule == "aws-access-key" && f.Path == "content[0].text" && f.Action == "require_approval" {
			n++
		}
	}
	if n != 3 {
		t.Errorf("the timeline has %d aws-access-key findings under require_approval in content[0].text, want 3 (one per call): %v", n, findings)
	}
	if !strings.Contains(shown, "aws-access-key in the result at content[0].text: held for an approver") ||
		!strings.Contains(shown, "approval to deliver the result requested from sec") || !strings.Contains(shown, "approval to deliver the result request expired") {
		t.Errorf("audit show lacks the finding or the result's approval:\n%s", shown)
	}
	tl, err := timeline.Build(hist, nil)
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	for _, c := range tl.Calls {
		if strings.HasSuffix(c.ID, "/result") {
			t.Errorf("the timeline shows the result's approval as a call %s", c.ID)
		}
		if c.ResultApproval != nil {
			states = append(states, c.ResultApproval.State)
		}
	}
	if strings.Join(states, " ") != "approved denied expired" {
		t.Errorf("the timeline's result approvals: %v, want approved denied expired", states)
	}
	d, err := s.client.DescribeWorkflowExecution(context.Background(), task, "")
	if err != nil {
		t.Fatal(err)
	}
	replayRuns(t, s, task, d.GetWorkflowExecutionInfo().GetExecution().GetRunId(), "result_approval_v1")

	// A call whose arguments needed approval too: the result's approver
	// sees the arguments masked as the call's approver did.
	const task2 = "guard-held-edit"
	cs2 := s.connect(t, map[string]string{gateway.HeaderTask: task2})
	waitTools(t, cs2, "filesystem__edit_file")
	notes := filepath.Join(sandbox, "notes.txt")
	if err := os.WriteFile(notes, []byte("key: TODO\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pending = callAsync(cs2, "filesystem__edit_file", map[string]any{"path": notes, "edits": []any{map[string]any{"oldText": "TODO", "newText": accessKey}}})
	var first api.ApprovalRequest
	waitFor(t, "the edit's approval", 60*time.Second, func() bool {
		reqs, err := local.List(context.Background())
		for _, r := range reqs {
			if err == nil && r.TaskID == task2 && !strings.HasSuffix(r.CallID, "/result") && r.State == api.ApprovalPending {
				first = r
				return true
			}
		}
		return false
	})
	if _, err := local.Decide(context.Background(), approver.Decision{RequestID: first.ID, Approver: "bob", Approve: true, Via: "cli", Digest: first.Digest}); err != nil {
		t.Fatalf("approving the edit: %v", err)
	}
	var second api.ApprovalRequest
	waitFor(t, "the edit's result approval", 60*time.Second, func() bool {
		reqs, err := local.List(context.Background())
		for _, r := range reqs {
			if err == nil && r.TaskID == task2 && strings.HasSuffix(r.CallID, "/result") && r.State == api.ApprovalPending {
				second = r
				return true
			}
		}
		return false
	})
	var shownEdit strings.Builder
	if err := approver.WriteRequest(&shownEdit, second, time.Now()); err != nil {
		t.Fatal(err)
	}
	page, _ := json.Marshal(approver.Redacted(second))
	if strings.Contains(shownEdit.String(), accessKey) || bytes.Contains(page, []byte(accessKey)) || strings.Contains(second.Reason, accessKey) {
		t.Errorf("the result's approver is shown the key in the arguments:\n%s\n%s", shownEdit.String(), page)
	}
	if _, err := local.Decide(context.Background(), approver.Decision{RequestID: second.ID, Approver: "bob", Approve: true, Via: "cli", Digest: second.Digest}); err != nil {
		t.Fatalf("approving the edit's result: %v", err)
	}
	if r := <-pending; r.err != nil || r.res.IsError || !strings.Contains(text(r.res), accessKey) {
		t.Fatalf("the approved edit's result: %v %+v", r.err, r.res)
	}
}

// TestGuardHeldResultStillUndone: a compensable call whose held result an
// approver denied delivering has still run: its compensation is on the
// task's stack, and a rollback undoes it.
func TestGuardHeldResultStillUndone(t *testing.T) {
	t.Parallel()
	m, effects := counterManifest(t, `  put:
    side_effects: [write]
    data_access_level: internal
    risk: medium
    idempotent: true
    compensation: {tool: put, args: {key: '"undo-" + args.key'}}
    guard: {results: {secrets: require_approval}}
    approval: {group: sec, timeout: 10m}
`)
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, groups: map[string][]string{"sec": {"bob"}}, inlineWait: 2 * time.Minute})
	const task = "guard-held-undone"
	cs := s.connect(t, map[string]string{gateway.HeaderTask: task})
	waitTools(t, cs, "counter__put")
	token := "ghp_" + "Z9x8C7v6B5n4M3l2K1j0H9g8F7d6S5a4Q3w2" // assembled: never a literal in the repository
	pending := callAsync(cs, "counter__put", map[string]any{"key": token})
	local := approver.Local{Temporal: s.client, Namespace: s.srv.Namespace()}
	var req api.ApprovalRequest
	waitFor(t, "the request to deliver put's result", 60*time.Second, func() bool {
		reqs, err := local.List(context.Background())
		for _, r := range reqs {
			if err == nil && r.TaskID == task && strings.HasSuffix(r.CallID, "/result") {
				req = r
				return true
			}
		}
		return false
	})
	if n := sideEffects(t, effects, "put", token); n != 1 {
		t.Fatalf("put ran %d times before its result's approval, want 1", n)
	}
	if _, err := local.Decide(context.Background(), approver.Decision{RequestID: req.ID, Approver: "bob", Approve: false, Via: "cli", Digest: req.Digest}); err != nil {
		t.Fatal(err)
	}
	if r := <-pending; r.err != nil || !r.res.IsError || strings.Contains(text(r.res), token) {
		t.Fatalf("denied: %v %+v", r.err, r.res)
	}
	ctx := context.Background()
	h, err := s.client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: task, UpdateID: "rb-held",
		UpdateName: api.UpdateRollback, Args: []any{api.RollbackRequest{By: "tester"}}, WaitForStage: client.WorkflowUpdateStageCompleted})
	var rb api.RollbackResult
	if err == nil {
		err = h.Get(ctx, &rb)
	}
	if err != nil || rb.State != api.StateRolledBack || len(rb.Compensated) != 1 {
		t.Fatalf("rollback: %v %+v", err, rb)
	}
	if n := sideEffects(t, effects, "put", "undo-"+token); n != 1 {
		t.Errorf("the compensation ran %d times, want 1", n)
	}
}
