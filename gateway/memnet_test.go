package gateway

import (
	"context"
	"net"
	"net/http"
	"sync"
	"testing"
)

// memListener is an in-memory network for tests inside a testing/synctest
// bubble, where a real socket would block time: an http.Server serves on
// the listener, and a Transport dials it (Dial), over net.Pipe.
type memListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newMemListener() *memListener {
	return &memListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *memListener) Addr() net.Addr { return memAddr{} }

// Dial connects to the listener: the http.Transport's DialContext.
func (l *memListener) Dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type memAddr struct{}

func (memAddr) Network() string { return "mem" }
func (memAddr) String() string  { return "airlock.test:80" }

// serveMem serves h on an in-memory listener until the test ends, and
// returns the URL to reach it with the returned client: httptest.NewServer
// for a synctest bubble.
func serveMem(t *testing.T, h http.Handler) (url string, hc *http.Client) {
	t.Helper()
	ln := newMemListener()
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	tr := &http.Transport{DialContext: ln.Dial}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		_ = srv.Close()
	})
	return "http://airlock.test", &http.Client{Transport: tr}
}
