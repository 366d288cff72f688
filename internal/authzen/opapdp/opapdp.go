// Package opapdp runs a real policy decision point for tests: OPA's Rego
// engine (github.com/open-policy-agent/opa/v1/rego) behind an httptest
// server that serves the AuthZEN 1.0 Access Evaluation API. The decision
// is the policy's, not the test's: a Rego module defines
// data.airlock.authzen.response as {"decision": bool, "context": {...}}
// and, optionally, data.airlock.authzen.max_age (seconds, sent as
// Cache-Control: max-age).
//
// Only tests import it, so OPA is linked into test binaries and never into
// cmd/airlock (TestAirlockDoesNotLinkOPA in package authzen checks).
package opapdp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/rego"
)

// PDP is a running decision point.
type PDP struct {
	URL string // the base URL; evaluations go to URL + /access/v1/evaluation

	response, maxAge rego.PreparedEvalQuery

	mu       sync.Mutex
	requests []Seen
	delay    time.Duration
}

// Seen is one request the PDP received.
type Seen struct {
	Body          json.RawMessage
	Authorization string
	RequestID     string
}

// Start compiles module (Rego v1) and serves it until the test ends.
func Start(t testing.TB, module string) *PDP {
	t.Helper()
	ctx := context.Background()
	resp, err := rego.New(rego.Query("data.airlock.authzen.response"), rego.Module("authzen.rego", module)).PrepareForEval(ctx)
	if err != nil {
		t.Fatalf("compiling the Rego policy: %v", err)
	}
	age, err := rego.New(rego.Query("data.airlock.authzen.max_age"), rego.Module("authzen.rego", module)).PrepareForEval(ctx)
	if err != nil {
		t.Fatalf("compiling the Rego policy: %v", err)
	}
	p := &PDP{response: resp, maxAge: age}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /access/v1/evaluation", p.evaluate)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// SetDelay makes every later answer wait d first (a slow PDP).
func (p *PDP) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Requests are the requests received so far.
func (p *PDP) Requests() []Seen {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Seen(nil), p.requests...)
}

func (p *PDP) evaluate(w http.ResponseWriter, r *http.Request) {
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, 4<<20)); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	p.requests = append(p.requests, Seen{Body: append(json.RawMessage(nil), buf.Bytes()...), Authorization: r.Header.Get("Authorization"), RequestID: r.Header.Get("X-Request-ID")})
	delay := p.delay
	p.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	dec := json.NewDecoder(&buf)
	dec.UseNumber()
	var input any
	if err := dec.Decode(&input); err != nil {
		http.Error(w, "the request is not JSON: "+err.Error(), http.StatusBadRequest)
		return
	}
	rs, err := p.response.Eval(r.Context(), rego.EvalInput(input))
	if err != nil || len(rs) != 1 || len(rs[0].Expressions) != 1 {
		http.Error(w, fmt.Sprintf("the policy gave no response (%v)", err), http.StatusInternalServerError)
		return
	}
	out, err := json.Marshal(rs[0].Expressions[0].Value)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if rs, err := p.maxAge.Eval(r.Context(), rego.EvalInput(input)); err == nil && len(rs) == 1 && len(rs[0].Expressions) == 1 {
		if n, ok := rs[0].Expressions[0].Value.(json.Number); ok {
			w.Header().Set("Cache-Control", "max-age="+n.String())
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if id := r.Header.Get("X-Request-ID"); id != "" {
		w.Header().Set("X-Request-ID", id)
	}
	_, _ = w.Write(out)
}
