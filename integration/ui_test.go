package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/devui"
)

// TestDevWebUI runs `airlock dev` with the Temporal Web UI on a free port,
// makes one tool call so a task exists, and reads the UI: its page, and the
// task's history through the UI's HTTP API (what the page shows). A second
// `airlock dev` asking for the same UI port fails with an error naming the
// flag; a third, on the default port while it is taken, serves the UI on a
// free port instead.
func TestDevWebUI(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("subprocess test; skipped with -short")
	}
	bin := buildBinary(t, "./cmd/airlock")
	upstreamBin := buildBinary(t, "./integration/testupstream")
	dir := t.TempDir()
	effects := newEffectsLog(t)
	writeFile(t, filepath.Join(dir, "counter.yaml"), fmt.Sprintf(`server:
  name: counter
  stdio:
    command: %s
    env:
      SIDE_EFFECT_LOG: %s
%stools:
  put: {side_effects: [write], data_access_level: internal, risk: medium, idempotent: true, timeout: 60s}
`, upstreamBin, effects, effectsSandbox(effects)))
	cfg := filepath.Join(dir, "airlock.yaml")
	writeFile(t, cfg, "manifests: [counter.yaml]\n"+identityYAML)
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	uiPort := freePort(t)
	temporalPort := freePort(t)
	p := startDev(t, bin, "--config", cfg, "--data-dir", filepath.Join(dir, "data"), "--listen", listen,
		"--temporal-port", fmt.Sprint(temporalPort), "--ui-port", fmt.Sprint(uiPort), "--log-format", "json")
	p.waitHealthy(t, "http://"+listen)
	ui := fmt.Sprintf("http://127.0.0.1:%d", uiPort)
	// The banner is written just after the gateway starts serving, so /healthz can
	// answer a moment before it reaches the output.
	waitFor(t, "the banner to print the UI's URL "+ui, 30*time.Second, func() bool {
		return strings.Contains(p.output(), "Temporal UI:   "+ui)
	})

	cs := connectURL(t, "http://"+listen+"/mcp", nil)
	waitTools(t, cs, "counter__put")
	res := call(t, cs, "counter__put", map[string]any{"key": "ui-k1"}, "ui-key-1")
	if res.IsError {
		t.Fatalf("tool call: %s", text(res))
	}
	task, _ := res.Meta[gateway.MetaTask].(string)
	if task == "" {
		t.Fatalf("result has no task ID in _meta: %v", res.Meta)
	}

	t.Run("page", func(t *testing.T) {
		code, ct, page := uiGet(t, ui+"/")
		if code != http.StatusOK || !strings.HasPrefix(ct, "text/html") {
			t.Fatalf("GET /: %d %s", code, ct)
		}
		// The page is a SvelteKit shell; the root layout it preloads
		// carries the Temporal UI's strings.
		layout := regexp.MustCompile(`/_app/immutable/nodes/0\.[^"]+\.js`).FindString(page)
		if layout == "" {
			t.Fatalf("GET /: no root layout preloaded:\n%s", page)
		}
		if code, _, js := uiGet(t, ui+layout); code != http.StatusOK || !strings.Contains(js, "Welcome to Temporal") {
			t.Errorf("GET %s: %d, want 200 and the Temporal UI", layout, code)
		}
	})

	t.Run("history", func(t *testing.T) {
		u := ui + "/api/v1/namespaces/default/workflows/" + url.PathEscape(task) + "/history"
		var hist struct {
			History struct {
				Events []struct {
					EventID   string          `json:"eventId"`
					EventType string          `json:"eventType"`
					Attrs     json.RawMessage `json:"workflowExecutionStartedEventAttributes"`
				} `json:"events"`
			} `json:"history"`
		}
		var types []string
		// The call's update is answered before its completion is written
		// to history; wait for it.
		waitFor(t, "the call's update to complete in history", 30*time.Second, func() bool {
			code, ct, body := uiGet(t, u)
			if code != http.StatusOK || !strings.HasPrefix(ct, "application/json") {
				t.Fatalf("GET %s: %d %s\n%s", u, code, ct, body)
			}
			if err := json.Unmarshal([]byte(body), &hist); err != nil {
				t.Fatalf("GET %s: %v\n%s", u, err, body)
			}
			types = types[:0]
			for _, e := range hist.History.Events {
				types = append(types, e.EventType)
			}
			return strings.Contains(strings.Join(types, " "), "UPDATE_COMPLETED")
		})
		if len(types) == 0 || !strings.HasSuffix(types[0], "WORKFLOW_EXECUTION_STARTED") {
			t.Fatalf("history events %v: want WORKFLOW_EXECUTION_STARTED first", types)
		}
		var started struct {
			WorkflowType struct{ Name string } `json:"workflowType"`
		}
		if err := json.Unmarshal(hist.History.Events[0].Attrs, &started); err != nil || started.WorkflowType.Name != api.AgentTaskName {
			t.Errorf("started event: workflow type %q (%v), want %q", started.WorkflowType.Name, err, api.AgentTaskName)
		}
	})

	// audit show links to the UI this dev serves (its --ui-port), found
	// through the data dir, not to the default port.
	t.Run("audit show link", func(t *testing.T) {
		show := filepath.Join(dir, "show.yaml")
		writeFile(t, show, "manifests: [counter.yaml]\ndata_dir: "+filepath.Join(dir, "data")+"\n"+identityYAML)
		cmd := exec.Command(bin, "audit", "show", "--config", show, "--temporal-address", fmt.Sprintf("127.0.0.1:%d", temporalPort), task)
		cmd.Env = slices.DeleteFunc(os.Environ(), func(v string) bool { return strings.HasPrefix(v, "AIRLOCK_UI_URL=") })
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "ui:        "+ui+"/namespaces/") {
			t.Errorf("audit show: %v, want a link to %s:\n%s", err, ui, out)
		}
	})

	t.Run("port taken", func(t *testing.T) {
		other := startDev(t, bin, "--config", cfg, "--data-dir", filepath.Join(dir, "data2"),
			"--listen", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--temporal-port", fmt.Sprint(freePort(t)),
			"--ui-port", fmt.Sprint(uiPort), "--log-format", "json")
		select {
		case <-other.exited:
		case <-time.After(90 * time.Second):
			t.Fatalf("second airlock dev on a taken UI port still running:\n%s", other.output())
		}
		out := other.output()
		if other.cmd.ProcessState.ExitCode() != 1 || !strings.Contains(out, "address already in use") || !strings.Contains(out, "--ui-port") {
			t.Errorf("second airlock dev on UI port %d: exit %d, want 1 and an error naming --ui-port:\n%s",
				uiPort, other.cmd.ProcessState.ExitCode(), out)
		}
	})

	// Without --ui-port, a taken default port is no reason to fail: the
	// UI goes to a free port, printed in the banner.
	t.Run("default port taken", func(t *testing.T) {
		if ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", devui.DefaultPort)); err == nil {
			defer ln.Close()
		} // else it is taken already, which is the case under test
		listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		other := startDev(t, bin, "--config", cfg, "--data-dir", filepath.Join(dir, "data3"),
			"--listen", listen, "--temporal-port", fmt.Sprint(freePort(t)), "--log-format", "json")
		other.waitHealthy(t, "http://"+listen)
		m := regexp.MustCompile(`Temporal UI:   (http://127\.0\.0\.1:(\d+))`).FindStringSubmatch(other.output())
		if m == nil || m[2] == fmt.Sprint(devui.DefaultPort) {
			t.Fatalf("banner's UI line %q: want a free port other than %d", m, devui.DefaultPort)
		}
		if code, _, _ := uiGet(t, m[1]+"/"); code != http.StatusOK {
			t.Errorf("GET %s/: %d", m[1], code)
		}
	})
}

func uiGet(t *testing.T, u string) (code int, contentType, body string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}
