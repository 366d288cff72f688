package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/internal/upstream"
)

// defaultDrain is how long a stopping role gives what it has in flight:
// the gateway its requests, the worker its tool calls (--drain-timeout).
const defaultDrain = 30 * time.Second

// readyTimeout bounds the Temporal check of one /readyz: an orchestrator
// probing every few seconds must get an answer before its own timeout.
const readyTimeout = 2 * time.Second

// registerDrain adds --drain-timeout to a serving role's flags.
func (f *commonFlags) registerDrain(fs *flag.FlagSet, what string) {
	fs.DurationVar(&f.drain, "drain-timeout", defaultDrain, "on SIGTERM, how long "+what+" may take to finish before the process exits (`duration`, e.g. 30s; give the orchestrator's grace period a few seconds more)")
}

// badDrain reports a --drain-timeout that is not positive (usage error,
// exit status 2), or returns 0.
func badDrain(c *Call, d time.Duration) int {
	if d <= 0 {
		return c.usage("--drain-timeout %s: want a positive duration, e.g. 30s (how long requests and tool calls in flight may take to finish on SIGTERM)", d)
	}
	return 0
}

// health answers /healthz (the process serves HTTP) and /readyz (it can do
// its work: Temporal answers, the upstreams had their first connection
// attempt, and it is not draining). Roles fill it in as they start.
type health struct {
	draining atomic.Bool
	// requests counts the requests in flight on the tracked listeners,
	// streams (GET text/event-stream) left out: a drain waits for them.
	requests atomic.Int64
	mu       sync.Mutex
	temporal client.Client
	pool     *upstream.Pool
}

func (h *health) setTemporal(c client.Client) {
	h.mu.Lock()
	h.temporal = c
	h.mu.Unlock()
}

func (h *health) setPool(p *upstream.Pool) {
	h.mu.Lock()
	h.pool = p
	h.mu.Unlock()
}

// track counts h's requests in flight, except the event streams a client
// holds open for as long as it likes (MCP's GET stream): a drain waits for
// the requests, and cuts the streams.
func (h *health) track(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
			next.ServeHTTP(w, r)
			return
		}
		h.requests.Add(1)
		defer h.requests.Add(-1)
		next.ServeHTTP(w, r)
	})
}

// mount serves /healthz and /readyz on mux.
func (h *health) mount(mux *http.ServeMux) {
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", h.serveReady)
}

func (h *health) serveReady(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	notes, err := h.ready(ctx)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: %v\n", err)
	} else {
		fmt.Fprintln(w, "ready")
	}
	for _, n := range notes {
		fmt.Fprintln(w, n)
	}
}

// ready reports why the role cannot take work (nil: it can), and notes
// about upstreams that are down without making it unready: an upstream
// that is down is down for every replica alike, and taking them all out
// of rotation would turn one tool's outage into the whole gateway's.
func (h *health) ready(ctx context.Context) (notes []string, err error) {
	if h.draining.Load() {
		return nil, fmt.Errorf("draining (shutting down)")
	}
	h.mu.Lock()
	c, pool := h.temporal, h.pool
	h.mu.Unlock()
	if c == nil {
		return nil, fmt.Errorf("not connected to Temporal yet")
	}
	if _, err := c.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		return nil, fmt.Errorf("Temporal does not answer: %v", err)
	}
	if pool == nil {
		return nil, nil
	}
	var starting []string
	for _, st := range pool.Statuses() {
		switch {
		case st.State == upstream.StateConnected:
		case st.State == upstream.StateConnecting && st.Tools == nil && st.Attempts == 0:
			starting = append(starting, st.Server)
		default:
			notes = append(notes, fmt.Sprintf("upstream %s: %s (%s)", st.Server, st.State, st.Reason))
		}
	}
	if len(starting) > 0 {
		return notes, fmt.Errorf("upstreams still connecting for the first time: %s", strings.Join(starting, ", "))
	}
	return notes, nil
}
