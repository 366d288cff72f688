package upstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Resumable POST streams (SEP-1699), at airlock's HTTP boundary.
//
// An upstream may close the SSE stream of a POST mid-call and expect the
// client to reconnect with GET + Last-Event-ID. go-sdk v1.8.0's client does
// reconnect, but it gives up on the first reconnect answered with a
// non-2xx status (a 503 from a restarting replica or a load balancer fails
// the whole session: handleSSE → checkResponse → fail), and it retries a
// failed dial at most MaxRetries times (airlock sets 1, for the standalone
// stream's sake) instead of for as long as the call may still wait. It
// also delivers a replayed event it has already seen a second time.
// resumeTransport makes the POST stream one stream for the SDK: when the
// upstream ends it before the call's response, it reconnects itself,
// within the call's context, and feeds the new stream's events into the
// same body, each event ID once. The SDK never sees the stream end early,
// so its own reconnect (and the re-send it never does anyway) stays out
// of the way; the call itself is never re-sent here.

const (
	// resumeMaxEventBytes bounds one buffered event, as the SDK's own
	// reader does by default (mcp.DefaultMaxEventSize).
	resumeMaxEventBytes = 16 << 20
	// resumeMaxSeenIDs bounds the event IDs remembered for de-duplication
	// on one stream; past it the oldest are forgotten.
	resumeMaxSeenIDs = 4096
	// resumeMaxFruitless is how many reconnects in a row may bring no new
	// event before the stream is given up (a server that closes every
	// stream at once would otherwise be polled until the call times out).
	resumeMaxFruitless = 8
	// resumeMaxFailures bounds failed reconnect attempts (refused dials,
	// 502/503/504/429) for one stream, for a call without a deadline;
	// with resumeMaxDelay that is about two minutes.
	resumeMaxFailures = 30
	// resumeMinDelay and resumeMaxDelay bound the wait before a reconnect
	// when the server sent no retry field, or for a failed attempt.
	resumeMinDelay = 50 * time.Millisecond
	resumeMaxDelay = 5 * time.Second
	// resumeMaxRetryField caps a server's retry field, so that an upstream
	// cannot park a call for an hour.
	resumeMaxRetryField = 30 * time.Second
)

// resumeTransport wraps the RoundTripper of an HTTP upstream (see the
// comment at the top of this file).
type resumeTransport struct {
	base http.RoundTripper
	// sleep waits d or until ctx is done; a test may shorten it.
	sleep func(ctx context.Context, d time.Duration) error
}

func (t *resumeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost {
		return t.base.RoundTrip(req)
	}
	id, ok := callID(req)
	resp, err := t.base.RoundTrip(req)
	if err != nil || !ok || resp.StatusCode != http.StatusOK || !isEventStream(resp.Header) {
		return resp, err
	}
	sleep := t.sleep
	if sleep == nil {
		sleep = sleepCtx
	}
	resp.Body = &resumableBody{
		base:  t.base,
		req:   req,
		id:    id,
		sleep: sleep,
		cur:   resp.Body,
		sc:    newEventScanner(resp.Body),
		seen:  map[string]struct{}{},
	}
	return resp, nil
}

// callID reads the JSON-RPC id of a POST carrying one request (not a
// notification, a response or a batch), without consuming the body.
func callID(req *http.Request) (any, bool) {
	if req.GetBody == nil {
		return nil, false
	}
	rc, err := req.GetBody()
	if err != nil {
		return nil, false
	}
	defer rc.Close()
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if json.NewDecoder(io.LimitReader(rc, resumeMaxEventBytes)).Decode(&msg) != nil || msg.Method == "" {
		return nil, false
	}
	return jsonrpcID(msg.ID)
}

// jsonrpcID decodes an id as a comparable value: a string, or a number
// as its exact text.
func jsonrpcID(raw json.RawMessage) (any, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, false
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil, false
		}
		return "s:" + s, true
	}
	var n json.Number
	if json.Unmarshal(raw, &n) != nil {
		return nil, false
	}
	if i, err := n.Int64(); err == nil {
		return "n:" + strconv.FormatInt(i, 10), true
	}
	return "n:" + n.String(), true
}

func isEventStream(h http.Header) bool {
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	return err == nil && mt == "text/event-stream"
}

// resumableBody is the body the SDK reads for a POST's SSE response.
type resumableBody struct {
	base  http.RoundTripper
	req   *http.Request
	id    any // the call's JSON-RPC id, from callID
	sleep func(context.Context, time.Duration) error

	mu     sync.Mutex // guards cur and closed against Close from another goroutine
	cur    io.ReadCloser
	closed bool

	sc        *eventScanner
	out       bytes.Buffer // events ready for the SDK
	lastID    string
	retry     time.Duration // the server's latest retry field
	seen      map[string]struct{}
	seenOrder []string
	answered  bool  // the call's response went out: no reconnect after this
	fruitless int   // reconnects in a row that brought no new event
	err       error // sticky: what Read returns once out is drained
}

func (b *resumableBody) Read(p []byte) (int, error) {
	for b.out.Len() == 0 {
		if b.err != nil {
			return 0, b.err
		}
		b.fill()
	}
	return b.out.Read(p)
}

// fill moves the next event to out, reconnecting when the stream ended
// before the call's response; on the end it sets b.err.
func (b *resumableBody) fill() {
	ev, err := b.sc.next()
	if err == nil {
		b.accept(ev)
		return
	}
	if errors.Is(err, errEventTooLarge) {
		b.giveUp(err)
		return
	}
	if b.answered || b.lastID == "" || b.req.Context().Err() != nil || b.isClosed() {
		// Nothing to resume (no event ID was ever sent: the SDK reports
		// "request terminated without response"), or nothing to wait for.
		b.err = err
		b.sc.release()
		return
	}
	if err := b.reconnect(); err != nil {
		b.giveUp(err)
	}
}

// giveUp ends the body; the SDK then answers the call "request terminated
// without response", and the call's error says why (classify).
func (b *resumableBody) giveUp(why error) {
	if m, ok := b.req.Context().Value(sendMarkerKey{}).(*sendMarker); ok {
		m.setResumeErr(why)
	}
	b.err = io.EOF
	b.sc.release()
}

func (b *resumableBody) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

func (b *resumableBody) accept(ev event) {
	if ev.id != "" {
		if _, dup := b.seen[ev.id]; dup {
			return // a replayed event the SDK has had: exactly once
		}
		b.remember(ev.id)
		b.lastID = ev.id
		b.fruitless = 0
	}
	if ev.retry != "" {
		if n, err := strconv.ParseInt(ev.retry, 10, 64); err == nil && n >= 0 {
			b.retry = min(time.Duration(n)*time.Millisecond, resumeMaxRetryField)
		}
	}
	if b.isResponse(ev) {
		b.answered = true
	}
	// The SDK gets the event without its ID (and retry): seeing none, it
	// never starts a reconnect of its own on this stream, so this body is
	// the only resumer, and when it gives up the SDK answers the call with
	// "request terminated without response".
	if len(ev.data) == 0 {
		return
	}
	if ev.name != "" {
		b.out.WriteString("event: " + ev.name + "\n")
	}
	for _, line := range bytes.Split(ev.data, []byte("\n")) {
		b.out.WriteString("data: ")
		b.out.Write(line)
		b.out.WriteByte('\n')
	}
	b.out.WriteByte('\n')
}

func (b *resumableBody) remember(id string) {
	b.seen[id] = struct{}{}
	b.seenOrder = append(b.seenOrder, id)
	if len(b.seenOrder) > resumeMaxSeenIDs {
		delete(b.seen, b.seenOrder[0])
		b.seenOrder = b.seenOrder[1:]
	}
}

// isResponse reports whether ev carries the response to the call.
func (b *resumableBody) isResponse(ev event) bool {
	if ev.name != "" && ev.name != "message" || len(ev.data) == 0 {
		return false
	}
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if json.Unmarshal(ev.data, &msg) != nil || msg.Method != "" || (msg.Result == nil && msg.Error == nil) {
		return false
	}
	id, ok := jsonrpcID(msg.ID)
	return ok && id == b.id
}

// reconnect replaces the ended stream with a GET resuming after lastID,
// retrying dial failures and transient statuses until the call's context
// ends. It returns an error to end the body with.
func (b *resumableBody) reconnect() error {
	ctx := b.req.Context()
	if b.fruitless >= resumeMaxFruitless {
		return fmt.Errorf("upstream ended the stream %d times in a row without a new event after %q; giving up on the call", b.fruitless, b.lastID)
	}
	delay := b.retry
	var last error
	for failures := 0; failures < resumeMaxFailures; failures++ {
		if delay <= 0 {
			delay = resumeMinDelay
		}
		if err := b.sleep(ctx, delay); err != nil {
			return err
		}
		if b.isClosed() {
			return errors.New("the call's stream was closed while resuming")
		}
		resp, err := b.base.RoundTrip(b.resumeRequest(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			last = err
			delay = backoff(delay)
			continue
		}
		switch {
		case resp.StatusCode == http.StatusOK && isEventStream(resp.Header):
			b.fruitless++ // reset by the first new event
			b.swap(resp.Body)
			return nil
		case transientStatus(resp.StatusCode):
			drainClose(resp.Body)
			last = fmt.Errorf("HTTP %d", resp.StatusCode)
			delay = max(backoff(delay), retryAfter(resp.Header))
		default:
			drainClose(resp.Body)
			return fmt.Errorf("upstream refused to resume the stream after event %q: HTTP %d", b.lastID, resp.StatusCode)
		}
	}
	return fmt.Errorf("upstream stream not resumed after event %q in %d attempts: %v", b.lastID, resumeMaxFailures, last)
}

func (b *resumableBody) resumeRequest(ctx context.Context) *http.Request {
	r, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.req.URL.String(), nil)
	for k, vs := range b.req.Header {
		switch http.CanonicalHeaderKey(k) {
		case "Content-Type", "Content-Length", "Accept", "Mcp-Method", "Mcp-Name":
			continue
		}
		if strings.HasPrefix(http.CanonicalHeaderKey(k), "Mcp-Param-") {
			continue
		}
		r.Header[k] = append([]string(nil), vs...)
	}
	r.Header.Set("Accept", "text/event-stream")
	r.Header.Set("Last-Event-ID", b.lastID)
	return r
}

func (b *resumableBody) swap(body io.ReadCloser) {
	b.mu.Lock()
	old, closed := b.cur, b.closed
	b.cur = body
	b.mu.Unlock()
	drainClose(old)
	if closed {
		body.Close()
	}
	b.sc.release()
	b.sc = newEventScanner(body)
}

func (b *resumableBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return b.cur.Close()
}

func transientStatus(code int) bool {
	switch code {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// retryAfter reads a Retry-After in seconds, capped like a retry field.
func retryAfter(h http.Header) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(h.Get("Retry-After")))
	if err != nil || n < 0 {
		return 0
	}
	return min(time.Duration(n)*time.Second, resumeMaxRetryField)
}

func backoff(d time.Duration) time.Duration {
	return min(max(2*d, resumeMinDelay), resumeMaxDelay)
}

func drainClose(rc io.ReadCloser) {
	if rc == nil {
		return
	}
	_, _ = io.CopyN(io.Discard, rc, 64<<10)
	rc.Close()
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// event is one server-sent event: its fields and its bytes as they came,
// ending with the blank line.
type event struct {
	id, name, retry string
	data            []byte
	raw             []byte // as read; only its length is used
}

var errEventTooLarge = errors.New("upstream sent a server-sent event larger than 16 MiB")

// eventScanner reads events per the SSE grammar (lines end in LF or
// CRLF; a blank line dispatches).
type eventScanner struct {
	r *bufio.Reader
}

// scanBuffers are the scanners' 64 KiB readers, reused: one per call's
// POST stream was about 4% of the bytes a loaded airlock dev allocated
// (issue 28 §3).
var scanBuffers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64<<10) }}

func newEventScanner(r io.Reader) *eventScanner {
	br := scanBuffers.Get().(*bufio.Reader)
	br.Reset(r)
	return &eventScanner{r: br}
}

// release gives the scanner's reader back for another stream; the
// scanner is not read again (the events it returned do not share its
// buffer: readLine copies each line). Released twice, or never, is safe.
func (s *eventScanner) release() {
	if s == nil || s.r == nil {
		return
	}
	s.r.Reset(nil)
	scanBuffers.Put(s.r)
	s.r = nil
}

// readLine reads one line with its end, at most limit bytes.
func (s *eventScanner) readLine(limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := s.r.ReadSlice('\n')
		if len(line)+len(chunk) > limit {
			return nil, errEventTooLarge
		}
		line = append(line, chunk...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

// next returns the next event; at the end of the stream (or a cut) it
// returns the reader's error (io.EOF when the server closed cleanly) and
// drops an unfinished event, which a resumed stream sends again.
func (s *eventScanner) next() (event, error) {
	var ev event
	var data [][]byte
	for {
		line, err := s.readLine(resumeMaxEventBytes - len(ev.raw))
		if err != nil {
			return event{}, err
		}
		start := len(ev.raw)
		ev.raw = append(ev.raw, line...)
		text := bytes.TrimRight(ev.raw[start:], "\r\n")
		if len(text) == 0 {
			if len(ev.raw) == len(line) {
				ev.raw = ev.raw[:0] // blank lines between events
				continue
			}
			if data != nil {
				ev.data = bytes.Join(data, []byte("\n"))
			}
			return ev, nil
		}
		if text[0] == ':' {
			continue // a comment
		}
		field, value, _ := bytes.Cut(text, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "id":
			if !bytes.ContainsRune(value, 0) {
				ev.id = string(value)
			}
		case "event":
			ev.name = string(value)
		case "retry":
			ev.retry = string(value)
		case "data":
			data = append(data, value)
		}
	}
}
