package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// servePprof serves Go's profiling endpoints (/debug/pprof/) on addr, for
// finding where a loaded `airlock dev` spends its time. Profiles show code
// paths and, through goroutine dumps, arguments in flight, so only a
// loopback address is accepted. The returned function stops it.
func servePprof(e *env, addr string) (func(), error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof %q: %w (want host:port on loopback, e.g. 127.0.0.1:6060)", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("--pprof %q: profiles expose the process's internals; serve them on a loopback address only (e.g. 127.0.0.1:6060)", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof cannot listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.log.Error().Err(err).Msg("pprof listener failed")
		}
	}()
	e.log.Info().Str("url", "http://"+ln.Addr().String()+"/debug/pprof/").Msg("serving pprof")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
