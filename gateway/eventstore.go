package gateway

import (
	"bytes"
	"context"
	"fmt"
	"iter"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Resumable streams as a server (SEP-1699). With an event store the go-sdk's
// stateful handler opens every POST stream of protocol 2025-11-25 with a
// priming event that carries an event ID, sends a retry field when it
// closes a stream, numbers every event, and answers a GET with
// Last-Event-ID by replaying what followed. The events live in this
// replica's memory, bounded in bytes and in age (see RATIONALE.md, "What
// happens when a client resumes a stream on another replica?").

const (
	// streamEventBytes bounds the events this replica keeps for resumption,
	// across all sessions; past it the oldest go first.
	streamEventBytes = 16 << 20
	// streamEventAge is how long an event stays resumable.
	streamEventAge = 10 * time.Minute
	// streamRetry is the retry field of the priming event: how long a
	// client whose stream broke waits before it resumes.
	streamRetry = time.Second
)

// primeWriter adds the retry field to the priming event of a POST stream
// the go-sdk's stateful handler writes: the go-sdk sends retry only in the
// close event of a stream the server ends (CloseSSEStream), which airlock
// never does, so without it a client whose connection breaks would not
// know when to come back. The go-sdk writes each event in one Write, the
// priming event first ("event: prime\nid: …\n"); TestGatewayStreamResumes
// fails if that changes.
//
// With hold set (an initialize), the priming event waits for the next
// write: the session ID on the response is decided when the first byte is
// written (tokenWriter), and a refused initialize is known only once its
// handler ran, after the go-sdk wrote the priming event.
type primeWriter struct {
	http.ResponseWriter
	hold  bool
	wrote bool
	held  []byte
}

var primePrefix = []byte("event: prime\nid: ")

func (p *primeWriter) Write(b []byte) (int, error) {
	if p.wrote {
		if p.held != nil {
			out := append(p.held, b...)
			p.held = nil
			if _, err := p.ResponseWriter.Write(out); err != nil {
				return 0, err
			}
			return len(b), nil
		}
		return p.ResponseWriter.Write(b)
	}
	p.wrote = true
	end := -1
	if bytes.HasPrefix(b, primePrefix) {
		end = bytes.IndexByte(b[len(primePrefix):], '\n')
	}
	if end < 0 {
		return p.ResponseWriter.Write(b)
	}
	cut := len(primePrefix) + end + 1 // after the id line
	out := make([]byte, 0, len(b)+16)
	out = append(out, b[:cut]...)
	out = append(out, "retry: "+strconv.FormatInt(streamRetry.Milliseconds(), 10)+"\n"...)
	out = append(out, b[cut:]...)
	if p.hold {
		p.held = out
		return len(b), nil
	}
	if _, err := p.ResponseWriter.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}

// release writes a held priming event that no other write followed.
func (p *primeWriter) release() {
	if p.held != nil {
		_, _ = p.ResponseWriter.Write(p.held)
		p.held = nil
		p.Flush()
	}
}

// Flush keeps server-sent events streaming through the wrapper; not while
// the priming event is held, since flushing writes the headers.
func (p *primeWriter) Flush() {
	if p.held != nil {
		return
	}
	if f, ok := p.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (p *primeWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }

// eventStore is a bounded in-memory mcp.EventStore: events older than
// maxAge, and the oldest while the total passes maxBytes, are dropped; a
// resume from before a dropped event fails (mcp.ErrEventsPurged) rather than
// skipping it.
type eventStore struct {
	maxBytes int
	maxAge   time.Duration
	now      func() time.Time

	mu      sync.Mutex
	bytes   int
	streams map[string]map[string]*eventList // session → stream
	order   []eventRef                       // every kept event, oldest first
	head    int                              // order[:head] are dropped
}

type streamKey struct{ session, stream string }

type eventList struct {
	first int // the stream index of data[0]
	data  [][]byte
}

type eventRef struct {
	key  streamKey
	size int
	at   time.Time
}

var _ mcp.EventStore = (*eventStore)(nil)

func newEventStore(maxBytes int, maxAge time.Duration) *eventStore {
	return &eventStore{maxBytes: maxBytes, maxAge: maxAge, now: time.Now, streams: map[string]map[string]*eventList{}}
}

func (s *eventStore) Open(_ context.Context, session, stream string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list(streamKey{session, stream})
	return nil
}

func (s *eventStore) list(k streamKey) *eventList {
	ss := s.streams[k.session]
	if ss == nil {
		ss = map[string]*eventList{}
		s.streams[k.session] = ss
	}
	l := ss[k.stream]
	if l == nil {
		l = &eventList{}
		ss[k.stream] = l
	}
	return l
}

func (s *eventStore) Append(_ context.Context, session, stream string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	k := streamKey{session, stream}
	l := s.list(k)
	l.data = append(l.data, data)
	s.order = append(s.order, eventRef{key: k, size: len(data), at: now})
	s.bytes += len(data)
	// Purge after adding, keeping at least the newest event: the one the
	// stream is about to send must be replayable.
	s.purge(now, 1)
	return nil
}

// purge drops events past the age bound, and past the byte bound while
// more than keep are left, oldest first.
func (s *eventStore) purge(now time.Time, keep int) {
	for s.head < len(s.order) {
		ref := s.order[s.head]
		over := s.bytes > s.maxBytes && len(s.order)-s.head > keep
		if !over && now.Sub(ref.at) <= s.maxAge {
			break
		}
		s.order[s.head] = eventRef{}
		s.head++
		l := s.streams[ref.key.session][ref.key.stream]
		if l == nil || len(l.data) == 0 {
			continue // its session closed: already uncounted
		}
		l.data[0] = nil
		l.data = l.data[1:]
		l.first++
		s.bytes -= ref.size
	}
	if s.head > 1024 && s.head > len(s.order)/2 {
		s.order = slices.Clone(s.order[s.head:])
		s.head = 0
	}
}

func (s *eventStore) After(_ context.Context, session, stream string, index int) iter.Seq2[[]byte, error] {
	s.mu.Lock()
	s.purge(s.now(), math.MaxInt) // by age only: bytes are bounded on Append
	var data [][]byte
	var err error
	if l := s.streams[session][stream]; l == nil {
		err = fmt.Errorf("no events of stream %q of this session on this gateway replica", stream)
	} else if start := index + 1 - l.first; start < 0 {
		err = fmt.Errorf("stream %q: the events after index %d are older than the replica keeps (%v, %d MiB): %w",
			stream, index, s.maxAge, s.maxBytes>>20, mcp.ErrEventsPurged)
	} else if start < len(l.data) {
		data = slices.Clone(l.data[start:])
	}
	s.mu.Unlock()
	return func(yield func([]byte, error) bool) {
		if err != nil {
			yield(nil, err)
			return
		}
		for _, d := range data {
			if !yield(d, nil) {
				return
			}
		}
	}
}

func (s *eventStore) SessionClosed(_ context.Context, session string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.streams[session] {
		for _, d := range l.data {
			s.bytes -= len(d)
		}
	}
	delete(s.streams, session)
	return nil
}
