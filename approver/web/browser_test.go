package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver/internal/approvertest"
	"github.com/airlock-run/airlock/internal/testenv"
)

// longDestination is a move_file destination longer than any screen: its
// end must be readable on the page (it was hidden behind a box without a
// visible scrollbar).
const longDestination = "/srv/projects/airlock/archive/2026/quarterly-reports/finance/consolidated/drafts/final/reviewed/approved-by-legal/destination-END-OF-PATH.txt"

// geometry is what the page looks like, measured in the browser.
type geometry struct {
	ViewportWidth float64 `json:"vw"`
	ScrollWidth   float64 `json:"sw"` // the document's; > vw means sideways scrolling
	Boxes         []box   `json:"boxes"`
	// Pre is the arguments box: its content must fit its width.
	PreScrollWidth, PreClientWidth float64
	// EndVisible: the end of the destination lies inside the arguments
	// box and the viewport.
	EndVisible bool
	// DT and DD are the first label and value of the request's details.
	DTWidth, DDWidth, DLWidth float64
	Notice                    string
}

type box struct {
	Sel                        string
	Left, Right, Width, Height float64
}

const measureJS = `(() => {
  const vw = window.innerWidth;
  const boxes = [];
  for (const sel of ["#key", "button[type=submit]", "section.req", ".approve", ".deny", "p.notice", "textarea", "header", "p.program"]) {
    for (const el of document.querySelectorAll(sel)) {
      const r = el.getBoundingClientRect();
      boxes.push({Sel: sel, Left: r.left, Right: r.right, Width: r.width, Height: r.height});
    }
  }
  const out = {vw, sw: document.documentElement.scrollWidth, boxes};
  const pre = document.querySelector("section.req pre");
  if (pre) {
    out.PreScrollWidth = pre.scrollWidth;
    out.PreClientWidth = pre.clientWidth;
    const i = pre.textContent.indexOf("END-OF-PATH");
    if (i >= 0) {
      const range = document.createRange();
      const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
      let node, seen = 0;
      while ((node = walker.nextNode())) {
        if (seen + node.length > i) { range.setStart(node, i - seen); range.setEnd(node, Math.min(node.length, i - seen + 11)); break; }
        seen += node.length;
      }
      const rr = range.getBoundingClientRect(), pr = pre.getBoundingClientRect();
      out.EndVisible = rr.width > 0 && rr.left >= pr.left - 1 && rr.right <= pr.right + 1 && rr.right <= vw + 1;
    }
  }
  const dl = document.querySelector("section.req dl");
  if (dl) {
    out.DLWidth = dl.getBoundingClientRect().width;
    out.DTWidth = dl.querySelector("dt").getBoundingClientRect().width;
    out.DDWidth = dl.querySelector("dd").getBoundingClientRect().width;
  }
  const n = document.querySelector("p.notice");
  if (n) out.Notice = n.textContent;
  return out;
})()`

func TestWebPageInABrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test; skipped with -short")
	}
	exe := testenv.Chromium(t)
	for _, vp := range []struct{ w, h int64 }{{375, 812}, {1280, 900}} {
		t.Run(fmt.Sprintf("%dpx", vp.w), func(t *testing.T) {
			e := newWebEnv(t)
			e.now = time.Now()
			r := approvertest.Request("task-1", e.now)
			r.Tool, r.Server = "fs__move_file", "fs"
			r.Arguments = json.RawMessage(fmt.Sprintf(`{"source":"/srv/a.txt","destination":%q}`, longDestination))
			r.Redact = nil
			// A program's call (code mode), its ID as long as the workflow
			// allows and unbreakable: its line must wrap, not widen the page.
			r.Program, r.Line = strings.Repeat("p", 190)+"-PROG-END", 12
			e.ft.Reqs = []api.ApprovalRequest{r}

			ctx := browser(t, exe)
			do(t, ctx, "open the login page",
				chromedp.EmulateViewport(vp.w, vp.h),
				chromedp.Navigate(e.srv.URL+"/approvals"),
				chromedp.WaitVisible(chromedp.CSS("#key")))
			g := measure(t, ctx)
			noSideways(t, "login", g)
			within(t, g, "#key")

			do(t, ctx, "log in and show the request",
				chromedp.SendKeys(chromedp.CSS("#key"), "bob-key"),
				chromedp.Submit(chromedp.CSS("#key")),
				chromedp.WaitVisible(chromedp.CSS("section.req")))
			g = measure(t, ctx)
			noSideways(t, "requests", g)
			for _, sel := range []string{"section.req", ".approve", ".deny", "textarea", "header", "p.program"} {
				within(t, g, sel)
			}
			if g.PreScrollWidth > g.PreClientWidth+1 {
				t.Errorf("arguments box hides %v px of its content sideways", g.PreScrollWidth-g.PreClientWidth)
			}
			if !g.EndVisible {
				t.Errorf("the end of the move_file destination is not visible in the arguments box")
			}
			if vp.w <= 480 {
				// Labels above values: a value has the card's whole width.
				if g.DDWidth < 0.9*g.DLWidth {
					t.Errorf("at %d px the value column is %.0f of %.0f px: the label column takes the card", vp.w, g.DDWidth, g.DLWidth)
				}
				for _, b := range g.Boxes {
					if (b.Sel == ".approve" || b.Sel == ".deny") && b.Height < 44 {
						t.Errorf("%s is %.0f px high: too small to tap", b.Sel, b.Height)
					}
				}
			} else if g.DTWidth > 0.3*g.DLWidth {
				t.Errorf("at %d px the label column is %.0f of %.0f px", vp.w, g.DTWidth, g.DLWidth)
			}
			shot, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
			if err != nil {
				t.Fatalf("screenshot: %v", err)
			}
			checkPNG(t, shot, vp.w, fmt.Sprintf("requests-%dpx.png", vp.w))

			do(t, ctx, "approve",
				chromedp.Click(chromedp.CSS(".approve")),
				// The page before the click has a notice too ("logged in"):
				// wait for the request to leave the list first.
				chromedp.WaitNotPresent(chromedp.CSS("section.req")),
				chromedp.WaitVisible(chromedp.CSS("p.notice")))
			g = measure(t, ctx)
			noSideways(t, "after deciding", g)
			within(t, g, "p.notice")
			for _, want := range []string{"approval of fs__move_file", "END-OF-PATH", "task task-1", "The call runs now"} {
				if !strings.Contains(g.Notice, want) {
					t.Errorf("notice %q lacks %q", g.Notice, want)
				}
			}
		})
	}
}

// browser starts a headless Chromium for t.
func browser(t *testing.T, exe string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("headless", "new"))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelA() })
	// The first Run starts the browser and must not carry a timeout (it
	// would stop the browser); the steps after it share one deadline.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(cancelT)
	return ctx
}

func do(t *testing.T, ctx context.Context, step string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", step, err)
	}
}

func measure(t *testing.T, ctx context.Context) geometry {
	t.Helper()
	g, err := chromedp.Run(ctx, chromedp.Evaluate[geometry](measureJS))
	if err != nil {
		t.Fatalf("measuring the page: %v", err)
	}
	return g
}

func noSideways(t *testing.T, page string, g geometry) {
	t.Helper()
	if g.ScrollWidth > g.ViewportWidth+1 {
		t.Errorf("%s page is %.0f px wide in a %.0f px viewport: it scrolls sideways", page, g.ScrollWidth, g.ViewportWidth)
	}
}

// within checks every element matching sel lies inside the viewport.
func within(t *testing.T, g geometry, sel string) {
	t.Helper()
	found := false
	for _, b := range g.Boxes {
		if b.Sel != sel {
			continue
		}
		found = true
		if b.Left < -1 || b.Right > g.ViewportWidth+1 {
			t.Errorf("%s spans %.0f–%.0f px, outside the %.0f px viewport", sel, b.Left, b.Right, g.ViewportWidth)
		}
	}
	if !found {
		t.Errorf("no %s on the page", sel)
	}
}

// checkPNG checks the screenshot is a PNG as wide as the viewport (device
// scale 1) and keeps it under the test's temp dir, or AIRLOCK_SCREENSHOTS.
func checkPNG(t *testing.T, shot []byte, width int64, name string) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if got := img.Bounds().Dx(); int64(got) != width {
		t.Errorf("screenshot is %d px wide, want %d", got, width)
	}
	dir := os.Getenv("AIRLOCK_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	_ = os.WriteFile(filepath.Join(dir, name), shot, 0o644)
}
