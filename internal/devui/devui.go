// Package devui serves the Temporal Web UI (github.com/temporalio/ui-server,
// with its embedded assets) from `airlock dev`, so a person can browse tasks
// and their histories in the embedded Temporal without installing anything.
//
// Start listens on a loopback address itself and mounts ui-server's routes
// on its own HTTP server, rather than calling ui-server's Server.Start: that
// one picks the listener internally and exits the whole process when the
// port is taken, whereas here a taken port is an error for the caller and a
// port of 0 picks a free one. Stop shuts the server down gracefully.
//
// The UI has no login and can terminate or reset workflows, so it only ever
// binds to loopback. Only the commands under cmd/ import this package; it
// imports ui-server and echo (which ui-server's routes are built on) and
// nothing of airlock's.
package devui

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	"github.com/temporalio/ui-server/v2/server/csrf"
	"github.com/temporalio/ui-server/v2/server/route"
	uiassets "github.com/temporalio/ui-server/v2/ui"
)

// Defaults applied by Start to zero-valued Options fields. DefaultPort is
// what `airlock dev` uses (as `temporal server start-dev` does); Start
// itself treats Port 0 as "pick a free port".
const (
	DefaultHost      = "127.0.0.1"
	DefaultPort      = 8233
	DefaultNamespace = "default"
)

// stopTimeout bounds how long Stop waits for requests in flight (the UI
// long-polls nothing, so this is only for a page half-loaded at shutdown).
const stopTimeout = 5 * time.Second

// Options configure Start.
type Options struct {
	// Host is the loopback address to listen on ("" means DefaultHost).
	Host string
	// Port to listen on; 0 picks a free port (see UI.URL).
	Port int
	// TemporalAddress is the host:port of the Temporal frontend (gRPC) the
	// UI reads from. Required.
	TemporalAddress string
	// Namespace the UI opens first ("" means DefaultNamespace).
	Namespace string
}

// UI is a running Web UI server.
type UI struct {
	srv  *http.Server
	url  string
	done chan struct{} // closed when Serve has returned
}

// Start listens on o.Host:o.Port and serves the UI until Stop. A port that
// is taken is returned as an error wrapping the listen error (errors.Is
// syscall.EADDRINUSE holds). ctx bounds only the start-up.
func Start(ctx context.Context, o Options) (*UI, error) {
	if o.TemporalAddress == "" {
		return nil, errors.New("temporal UI: no Temporal address")
	}
	if o.Host == "" {
		o.Host = DefaultHost
	}
	if !loopback(o.Host) {
		return nil, fmt.Errorf("temporal UI: host %q is not a loopback address (the UI has no login)", o.Host)
	}
	if o.Port < 0 || o.Port > 65535 {
		return nil, fmt.Errorf("temporal UI: port %d out of range", o.Port)
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}

	h, err := handler(o)
	if err != nil {
		return nil, fmt.Errorf("temporal UI: %w", err)
	}
	addr := net.JoinHostPort(o.Host, strconv.Itoa(o.Port))
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("temporal UI cannot listen on %s: %w", addr, err)
	}
	u := &UI{
		srv:  &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second},
		url:  "http://" + ln.Addr().String(),
		done: make(chan struct{}),
	}
	go func() {
		defer close(u.done)
		_ = u.srv.Serve(ln) // returns ErrServerClosed after Stop; nothing else to report to
	}()
	return u, nil
}

// URL is the UI's base URL, with the port actually bound.
func (u *UI) URL() string { return u.url }

// Stop closes the listener, lets requests in flight finish (up to a few
// seconds) and returns once the server has stopped. It is safe to call more
// than once.
func (u *UI) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := u.srv.Shutdown(ctx); err != nil {
		_ = u.srv.Close()
	}
	<-u.done
}

// handler builds the UI's routes: the HTTP API that proxies to Temporal's
// gRPC frontend under /api/v1, and the embedded single-page app for every
// other path; auth routes are left out, as auth is off. The gRPC connection it opens is lazy and lives as long as the
// process: ui-server's route setup does not hand it back to be closed.
func handler(o Options) (http.Handler, error) {
	cfg, err := uiconfig.NewConfigProviderWithRefresh(&uiconfig.Config{
		Host:                o.Host,
		TemporalGRPCAddress: o.TemporalAddress,
		EnableUI:            true,
		DefaultNamespace:    o.Namespace,
		// Served over plain HTTP on loopback: a Secure cookie would never
		// come back, and the UI's write actions would fail the CSRF check.
		CORS: uiconfig.CORS{CookieInsecure: true},
		// No calls to api.github.com or temporal.io from a local tool.
		DisableNewsFetch:   true,
		NotifyOnNewVersion: false,
		HideLogs:           true,
	})
	if err != nil {
		return nil, err
	}
	assets, err := uiassets.Assets()
	if err != nil {
		return nil, err
	}
	// The module embeds the local and the Cloud build; this is the local one.
	if assets, err = fs.Sub(assets, "local"); err != nil {
		return nil, err
	}

	e := echo.New()
	e.Use(middleware.Recover())
	e.Use(middleware.Gzip())
	e.Use(middleware.Secure())
	// The UI reads the _csrf cookie and echoes it in a header on writes
	// (terminate, cancel, reset), so another page open in the same browser
	// cannot drive the API.
	e.Use(csrf.EnsureTokenCookie(false))
	e.Use(middleware.CSRFWithConfig(csrf.MiddlewareConfig(cfg, false)))
	route.SetHealthRoute(e)
	if err := route.SetAPIRoutes(e, cfg, nil); err != nil {
		return nil, err
	}
	if err := route.SetUIRoutes(e, "", assets, cfg); err != nil {
		return nil, err
	}
	route.SetRenderRoute(e, "/") // markdown in workflow summaries and details
	return e, nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
