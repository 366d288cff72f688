package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/internal/testenv"
)

// TestApprovalsPageApproveWithEdits drives the /approvals page of an
// in-process `airlock dev` in headless Chromium at a phone's width: bob
// logs in, opens "Edit arguments" on alice's waiting call (prefilled with
// the arguments masked), changes them and presses "Approve with edits".
// The page says the edit was recorded; the edited call is what runs, and
// alice's result says an approver changed it.
func TestApprovalsPageApproveWithEdits(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test; skipped with -short")
	}
	exe := testenv.Chromium(t)
	upstream := buildTestupstream(t)
	cfg, effects := approvalsConfig(t, upstream)
	ctx, s := approvalsDev(t, cfg, filepath.Join(t.TempDir(), "data"))
	cs := approvalsSession(t, ctx, s, "alice-key")
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		deadline := time.Now().Add(60 * time.Second)
		for {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "counter__append", Arguments: map[string]any{"key": "web-draft"}})
			if err == nil && res.IsError && strings.Contains(textOf(res), "unavailable") && time.Now().Before(deadline) {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			if err != nil {
				t.Errorf("call: %v", err)
			}
			done <- res
			return
		}
	}()

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
	for deadline := time.Now().Add(60 * time.Second); ; {
		n, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("section.req").length`))
		if err == nil && n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the request never showed on the page: %v", err)
		}
		time.Sleep(300 * time.Millisecond)
		step("reload", chromedp.Navigate(page))
	}
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
}
