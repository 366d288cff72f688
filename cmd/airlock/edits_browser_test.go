package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/testenv"
)

// TestApprovalsPageApproveWithEdits drives the /approvals page of an
// in-process `airlock dev` in headless Chromium at a phone's width: bob
// logs in, opens "Edit arguments" on alice's waiting call (prefilled with
// the arguments masked), changes them and presses "Approve with edits".
// The page says the edit was recorded; the edited call is what runs, and
// alice's result says an approver changed it. Then, still at 375 px, the
// grant fieldset of alice's next call fits the screen (element geometry),
// bob approves it with a grant of 2 calls, the page says so, alice's
// third call runs without asking, and airlock tasks show lists the grant
// with one call used.
func TestApprovalsPageApproveWithEdits(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test; skipped with -short")
	}
	exe := testenv.Chromium(t)
	upstream := buildTestupstream(t)
	cfg, effects := approvalsConfig(t, upstream)
	allowGrants(t, cfg, "{calls: 3, duration: 1h}")
	ctx, s := approvalsDev(t, cfg, filepath.Join(t.TempDir(), "data"))
	cs := approvalsSession(t, ctx, s, "alice-key")
	done := appendInBackground(t, ctx, cs, "web-draft")

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Flag("headless", "new"))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	bctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	bctx, cancelT := context.WithTimeout(bctx, 90*time.Second)
	defer cancelT()
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	page := "http://" + s.addr + "/approvals"
	step("log in",
		chromedp.EmulateViewport(375, 812),
		chromedp.Navigate(page),
		chromedp.SendKeys(chromedp.CSS("#key"), "bob-key"),
		chromedp.Submit(chromedp.CSS("#key")),
		chromedp.WaitVisible(chromedp.CSS("header form")))
	testenv.WaitFor(t, "the request on the page", 60*time.Second, func() bool {
		n, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("section.req").length`))
		if err == nil && n > 0 {
			return true
		}
		step("reload", chromedp.Navigate(page))
		return false
	})
	step("open Edit arguments", chromedp.Click(chromedp.CSS("details.edit summary")), chromedp.WaitVisible(chromedp.CSS("textarea[name=arguments]")))
	prefill, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector("textarea[name=arguments]").value`))
	if err != nil || !strings.Contains(prefill, `"key": "[redacted]"`) || strings.Contains(prefill, "web-draft") {
		t.Fatalf("Edit arguments is prefilled with %q (%v), want the arguments masked", prefill, err)
	}
	wide, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth + 1`))
	if err != nil || wide {
		t.Errorf("at 375 px with Edit arguments open the page scrolls sideways (%v)", err)
	}
	step("edit and approve",
		chromedp.SetValue(chromedp.CSS("textarea[name=arguments]"), `{"key": "web-edited"}`),
		chromedp.Click(chromedp.CSS("button.approve-edits")),
		chromedp.WaitNotPresent(chromedp.CSS("section.req")),
		chromedp.WaitVisible(chromedp.CSS("p.notice")))
	notice, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("p.notice")))
	if err != nil || !strings.Contains(notice, "approved with edited arguments") || !strings.Contains(notice, "You changed its arguments (edited digest") {
		t.Errorf("notice %q (%v)", notice, err)
	}

	var res *mcp.CallToolResult
	select {
	case res = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the approved call did not finish")
	}
	if res == nil || res.IsError || !strings.Contains(textOf(res), "approver bob changed the arguments") {
		t.Fatalf("result %+v", res)
	}
	if b, _ := os.ReadFile(effects); string(b) != "append web-edited\n" {
		t.Errorf("side effects %q, want the edited call only", b)
	}

	// Approve with a grant, on the phone.
	call := func(key string) chan *mcp.CallToolResult {
		out := make(chan *mcp.CallToolResult, 1)
		go func() {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "counter__append", Arguments: map[string]any{"key": key}})
			if err != nil {
				t.Errorf("call %s: %v", key, err)
				res = &mcp.CallToolResult{IsError: true}
			}
			out <- res
		}()
		return out
	}
	second := call("web-grant")
	testenv.WaitFor(t, "the second request, with its grant fieldset, on the page", 60*time.Second, func() bool {
		step("reload", chromedp.Navigate(page))
		n, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("section.req fieldset").length`))
		return err == nil && n > 0
	})
	// Every box of the fieldset lies inside it, and it inside the screen.
	misfit, err := chromedp.Run(bctx, chromedp.Evaluate[string](`(() => {
		const f = document.querySelector("section.req fieldset"), r = f.getBoundingClientRect(), out = [];
		if (r.left < 0 || r.right > window.innerWidth + 0.5) out.push("fieldset " + r.left + ".." + r.right + " of " + window.innerWidth);
		for (const e of f.querySelectorAll("legend, label, input")) {
			const b = e.getBoundingClientRect();
			if (b.width === 0 || b.left < r.left - 0.5 || b.right > r.right + 0.5) out.push(e.tagName + "[" + (e.name || "") + "] " + b.left + ".." + b.right);
		}
		if (document.documentElement.scrollWidth > window.innerWidth + 1) out.push("page scrolls sideways: " + document.documentElement.scrollWidth);
		return out.join("; ");
	})()`))
	if err != nil || misfit != "" {
		t.Errorf("at 375 px the grant fieldset does not fit: %s (%v)", misfit, err)
	}
	reqID, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector("section.req input[name=id]").value`))
	if _, _, ok := api.SplitRequestID(reqID); err != nil || !ok {
		t.Fatalf("request ID on the page %q (%v)", reqID, err)
	}
	step("approve with a grant of 2 calls",
		chromedp.SetValue(chromedp.CSS("section.req input[name=grant_calls]"), "2"),
		chromedp.Click(chromedp.CSS("section.req button.approve")),
		chromedp.WaitNotPresent(chromedp.CSS("section.req")),
		chromedp.WaitVisible(chromedp.CSS("p.notice")))
	notice, err = chromedp.Run(bctx, chromedp.Text(chromedp.CSS("p.notice")))
	if err != nil || !strings.Contains(notice, "with a grant of 2 calls of counter__append") {
		t.Errorf("notice after approving with a grant %q (%v)", notice, err)
	}
	for _, key := range []string{"second", "third"} {
		ch := second
		if key == "third" {
			ch = call("web-grant") // covered by the grant: runs without asking
		}
		select {
		case res = <-ch:
		case <-time.After(60 * time.Second):
			t.Fatalf("the %s call did not finish", key)
		}
		if res.IsError {
			t.Fatalf("the %s call: %s", key, textOf(res))
		}
	}
	if b, _ := os.ReadFile(effects); string(b) != "append web-edited\nappend web-grant\nappend web-grant\n" {
		t.Errorf("side effects %q", b)
	}
	task, call2, _ := api.SplitRequestID(reqID)
	code, stdout, stderr := runCLI(t, "tasks", "show", task, "--temporal-address", s.srv.HostPort())
	if grant := regexp.MustCompile(`active\s+` + regexp.QuoteMeta(api.GrantIDOf(task, call2)) + `  counter__append by bob .*; used 1; 1 of 2 calls left`); code != 0 || !grant.MatchString(stdout) {
		t.Errorf("tasks show does not list the grant made on the page: %d %s\n%s", code, stderr, stdout)
	}
}
