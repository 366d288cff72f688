package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/metrics"
)

// Outcomes of airlock_tool_calls_total besides the workflow's call
// outcomes: the answer was "still pending" (past the inline wait), or no
// result could be had from the task.
const (
	OutcomePending = "pending"
	OutcomeError   = "error"
)

// observeRefusals counts and audits the requests the HTTP edge (edge.go)
// or the session check (ownedSession) refuses: 401 (no or unknown
// credentials) and 403 (insufficient scope, a session of another
// principal), naming the principal when the edge authenticated one.
func (g *Gateway) observeRefusals(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		er, ok := r.Context().Value(edgeKey{}).(*edgeRequest) // the listener's (Authenticator)
		if !ok {
			er = &edgeRequest{}
			r = r.WithContext(context.WithValue(r.Context(), edgeKey{}, er))
		}
		next.ServeHTTP(sw, r)
		if sw.status != http.StatusUnauthorized && sw.status != http.StatusForbidden {
			return
		}
		metrics.AuthFailures.WithLabelValues(strconv.Itoa(sw.status)).Inc()
		f := auditstream.AuthFailure{Status: sw.status, Channel: "mcp", Method: r.Method, Path: r.URL.Path, Remote: r.RemoteAddr, Reason: sw.reason()}
		if er.p != nil {
			f.Principal = er.p.Name
		}
		g.opts.Audit.AuthFailed(f)
	})
}

// statusWriter remembers the status of a response, and the start of its
// body when it is a refusal (the reason).
type statusWriter struct {
	http.ResponseWriter
	status int
	body   []byte
}

// maxReasonBody bounds how much of a refusal's body is kept.
const maxReasonBody = 512

// reason is the refusal's message: the edge's {"error": "..."}, or the
// text another layer wrote (the MCP handler's Host and Origin checks).
func (w *statusWriter) reason() string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(w.body, &e) == nil && e.Error != "" {
		return e.Error
	}
	return strings.TrimSpace(string(w.body))
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if (w.status == http.StatusUnauthorized || w.status == http.StatusForbidden) && len(w.body) < maxReasonBody {
		w.body = append(w.body, b[:min(len(b), maxReasonBody-len(w.body))]...)
	}
	return w.ResponseWriter.Write(b)
}

// Flush keeps server-sent events streaming through the wrapper.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		if w.status == 0 {
			w.status = http.StatusOK
		}
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
