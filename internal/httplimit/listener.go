package httplimit

import (
	"container/list"
	"net"
	"sync"
	"sync/atomic"
)

// pending is the set of connections that have not sent an authenticated
// request, oldest first.
type pending struct {
	max     int
	mu      sync.Mutex
	conns   list.List // of *conn
	evicted atomic.Int64
}

func (p *pending) init(max int) { p.max = max }

func (p *pending) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conns.Len()
}

// add counts c, and returns the oldest connection to close when that makes
// one too many.
func (p *pending) add(c *conn) (evict *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns.Len() >= p.max {
		front := p.conns.Front()
		evict = p.conns.Remove(front).(*conn)
		evict.elem = nil
	}
	c.elem = p.conns.PushBack(c)
	return evict
}

// remove stops counting c (it authenticated, or closed).
func (p *pending) remove(c *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.elem != nil {
		p.conns.Remove(c.elem)
		c.elem = nil
	}
}

// listener counts every accepted connection as unauthenticated until one
// of its requests authenticates.
type listener struct {
	net.Listener
	p *pending
}

func (l *listener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &conn{Conn: nc, p: l.p}
	if old := l.p.add(c); old != nil {
		l.p.evicted.Add(1)
		// Closing the socket makes the server's reads and writes on it
		// fail, which ends its goroutine.
		_ = old.Conn.Close()
	}
	return c, nil
}

// conn is a connection counted in pending while elem is set.
type conn struct {
	net.Conn
	p    *pending
	elem *list.Element // guarded by p.mu
}

func (c *conn) Close() error {
	c.p.remove(c)
	return c.Conn.Close()
}
