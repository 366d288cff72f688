package devui

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// temporalAddr is an address nothing answers on: the UI dials Temporal
// lazily, so pages that need no Temporal call still load.
const temporalAddr = "127.0.0.1:1"

func TestPortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	u, err := Start(context.Background(), Options{Port: port, TemporalAddress: temporalAddr})
	if err == nil {
		u.Stop()
		t.Fatalf("Start on taken port %d: no error", port)
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("error %v does not wrap EADDRINUSE", err)
	}
	if want := "127.0.0.1:" + strconv.Itoa(port); !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name the address %s", err, want)
	}
}

func TestBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"no temporal", Options{}, "no Temporal address"},
		{"public host", Options{Host: "0.0.0.0", TemporalAddress: temporalAddr}, "not a loopback address"},
		{"negative port", Options{Port: -1, TemporalAddress: temporalAddr}, "out of range"},
		{"huge port", Options{Port: 70000, TemporalAddress: temporalAddr}, "out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := Start(context.Background(), tc.o)
			if err == nil {
				u.Stop()
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestServeAndStop starts on a free port, loads the app and its settings,
// and checks that Stop releases the port.
func TestServeAndStop(t *testing.T) {
	u, err := Start(context.Background(), Options{Host: "localhost", TemporalAddress: temporalAddr, Namespace: "airlock"})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			u.Stop()
		}
	}()
	if !strings.HasPrefix(u.URL(), "http://127.0.0.1:") && !strings.HasPrefix(u.URL(), "http://[::1]:") {
		t.Fatalf("URL %q: want a loopback http URL with the bound port", u.URL())
	}
	if strings.HasSuffix(u.URL(), ":0") {
		t.Fatalf("URL %q names port 0, not the bound port", u.URL())
	}

	for _, tc := range []struct {
		path, contentType, body string
	}{
		{"/", "text/html", "/_app/immutable/entry/start."},
		{"/namespaces/airlock/workflows", "text/html", "/_app/immutable/entry/start."}, // client-side route
		{"/api/v1/settings", "application/json", `"DefaultNamespace":"airlock"`},
		{"/healthz", "application/json", `"OK"`},
	} {
		code, ct, body := get(t, u.URL()+tc.path)
		if code != http.StatusOK || !strings.HasPrefix(ct, tc.contentType) || !strings.Contains(body, tc.body) {
			t.Errorf("GET %s: %d %s, body containing %q: %v\n%.300s", tc.path, code, ct, tc.body, strings.Contains(body, tc.body), body)
		}
	}
	// The page is a bare SvelteKit shell; its root layout, which it
	// preloads, is recognisably the Temporal UI.
	_, _, index := get(t, u.URL()+"/")
	layout := layoutRE.FindString(index)
	if layout == "" {
		t.Fatalf("index.html preloads no root layout:\n%s", index)
	}
	if code, _, body := get(t, u.URL()+layout); code != http.StatusOK || !strings.Contains(body, "Welcome to Temporal") {
		t.Errorf("GET %s: %d, want 200 with the Temporal UI's strings", layout, code)
	}

	u.Stop()
	u.Stop() // a second Stop is harmless
	stopped = true
	if _, err := http.Get(u.URL() + "/healthz"); err == nil {
		t.Errorf("UI still answers after Stop")
	}
	ln, err := net.Listen("tcp", strings.TrimPrefix(u.URL(), "http://"))
	if err != nil {
		t.Errorf("port not released after Stop: %v", err)
	} else {
		ln.Close()
	}
}

// TestWriteNeedsCSRFToken: a write through the API without the token the
// UI's own page carries is refused before it reaches Temporal.
func TestWriteNeedsCSRFToken(t *testing.T) {
	u, err := Start(context.Background(), Options{TemporalAddress: temporalAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Stop()
	resp, err := http.Post(u.URL()+"/api/v1/namespaces/default/workflows/x/terminate", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST without CSRF token: %d, want 400 or 403", resp.StatusCode)
	}
}

var layoutRE = regexp.MustCompile(`/_app/immutable/nodes/0\.[^"]+\.js`)

func get(t *testing.T, url string) (int, string, string) {
	t.Helper()
	resp, err := http.Get(url)
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
