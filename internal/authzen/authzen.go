// Package authzen asks an external policy decision point (PDP) about one
// access over the OpenID AuthZEN Authorization API 1.0: it POSTs an
// evaluation request (subject, action, resource, context) to
// {endpoint}/access/v1/evaluation and reads the answer ({decision, context})
// strictly, so that anything but a well-formed yes or no is an error the
// caller can fail closed on. Answers are cached for as long as the
// response's Cache-Control max-age says (AuthZEN names no cache field), in
// a cache of bounded size; without max-age nothing is cached.
//
// It is a leaf: it imports internal/jsoncanon and the standard library,
// never logs, and knows nothing of airlock's policy (the worker's
// activities build the request and combine the answer with their own
// decision).
package authzen

import (
	"bytes"
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-run/airlock/internal/jsoncanon"
)

// EvaluationPath is where the Access Evaluation API lives under a PDP's
// base URL (AuthZEN 1.0 §6).
const EvaluationPath = "/access/v1/evaluation"

// MaxAnswerBytes bounds the body of a PDP's answer; a longer one is
// malformed.
const MaxAnswerBytes = 64 << 10

// MaxCacheAge caps how long an answer is reused, whatever max-age says.
const MaxCacheAge = time.Hour

// Entity is a subject or a resource: a type, an identifier and attributes.
type Entity struct {
	Type       string         `json:"type"`
	ID         string         `json:"id"`
	Properties map[string]any `json:"properties,omitempty"`
}

// Action is what the subject asks to do.
type Action struct {
	Name string `json:"name"`
}

// Request is one access evaluation request.
type Request struct {
	Subject  Entity         `json:"subject"`
	Action   Action         `json:"action"`
	Resource Entity         `json:"resource"`
	Context  map[string]any `json:"context,omitempty"`
}

// Answer is a PDP's decision on one request.
type Answer struct {
	Decision bool
	// Context is the answer's context object as received (compacted), or
	// nil when it had none. AuthZEN 1.0 suggests reason_admin and
	// reason_user members.
	Context json.RawMessage
	// Cached: the answer was reused from an earlier response within its
	// max-age; no request was sent.
	Cached bool
}

// The kinds of Error, for callers (and records) that tell them apart.
const (
	KindTimeout   = "timeout"   // no answer within the timeout
	KindTransport = "transport" // the request could not be sent or the answer read
	KindStatus    = "status"    // an HTTP status other than 2xx
	KindMalformed = "malformed" // the answer is not a valid evaluation response
)

// Error is why no answer could be had.
type Error struct {
	Kind string
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Options configure a Client.
type Options struct {
	// Endpoint is the PDP's base URL (http or https, no query); requests go
	// to Endpoint + EvaluationPath.
	Endpoint string
	// Timeout bounds one evaluation, connecting and reading included
	// (default 2s).
	Timeout time.Duration
	// Authorization, when set, is sent as the Authorization header.
	Authorization string
	// CacheEntries bounds the cache (0: nothing is cached).
	CacheEntries int
	// Transport is the HTTP transport (nil: a clone of the default).
	Transport http.RoundTripper
	// Now is the clock of the cache (nil: time.Now).
	Now func() time.Time
}

// Client evaluates requests against one PDP. It is safe for concurrent use.
type Client struct {
	url     string
	timeout time.Duration
	auth    string
	http    *http.Client
	now     func() time.Time

	mu    sync.Mutex
	max   int
	cache map[string]*list.Element
	order *list.List // front: most recently stored
}

type cached struct {
	key     string
	answer  Answer
	expires time.Time
}

// DefaultTimeout is the timeout of a Client whose Options set none.
const DefaultTimeout = 2 * time.Second

// New returns a client for o.Endpoint.
func New(o Options) *Client {
	c := &Client{url: strings.TrimRight(o.Endpoint, "/") + EvaluationPath, timeout: o.Timeout, auth: o.Authorization,
		now: o.Now, max: o.CacheEntries, cache: map[string]*list.Element{}, order: list.New()}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	if c.now == nil {
		c.now = time.Now
	}
	tr := o.Transport
	if tr == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxResponseHeaderBytes = MaxAnswerBytes // a PDP's headers are small too
		tr = t
	}
	// Redirects are not followed: the request carries the call's
	// arguments and the Authorization header, and goes where it was
	// configured to go or nowhere.
	c.http = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return c
}

// URL is where the client sends evaluations.
func (c *Client) URL() string { return c.url }

// Timeout is the client's bound on one evaluation.
func (c *Client) Timeout() time.Duration { return c.timeout }

// Body is the JSON a request is sent as. Encoding sorts object keys, so
// equal requests are equal bytes (the cache's key).
func Body(r Request) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return nil, fmt.Errorf("encoding the evaluation request: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Evaluate asks the PDP about body (a request as Body encodes it). A
// request ID, when set, is sent as X-Request-ID (AuthZEN 1.0 §10.1.3) and
// is not part of the cache key. The error is an *Error.
func (c *Client) Evaluate(ctx context.Context, body []byte, requestID string) (Answer, error) {
	sum := sha256.Sum256(body)
	key := hex.EncodeToString(sum[:])
	if a, ok := c.lookup(key); ok {
		return a, nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return Answer{}, &Error{KindTransport, fmt.Sprintf("the request to %s cannot be made: %v", c.url, err)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	if requestID != "" {
		req.Header.Set("X-Request-ID", requestID)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return Answer{}, c.transportError(ctx, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes+1))
	if err != nil {
		return Answer{}, c.transportError(ctx, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return Answer{}, &Error{KindStatus, fmt.Sprintf("%s answered HTTP %d instead of 2xx", c.url, resp.StatusCode)}
	}
	if len(data) > MaxAnswerBytes {
		return Answer{}, &Error{KindMalformed, fmt.Sprintf("the answer of %s is over %d bytes", c.url, MaxAnswerBytes)}
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return Answer{}, &Error{KindMalformed, fmt.Sprintf("the answer of %s has Content-Type %q, not application/json", c.url, clip(ct))}
		}
	}
	a, err := Parse(data)
	if err != nil {
		return Answer{}, &Error{KindMalformed, fmt.Sprintf("the answer of %s is not an evaluation response: %v", c.url, err)}
	}
	if age, ok := maxAge(resp.Header.Values("Cache-Control")); ok {
		c.store(key, a, age)
	}
	return a, nil
}

func (c *Client) transportError(ctx context.Context, err error) *Error {
	var ne net.Error
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return &Error{KindTimeout, fmt.Sprintf("%s did not answer within %s", c.url, c.timeout)}
	}
	return &Error{KindTransport, fmt.Sprintf("%s could not be asked: %v", c.url, err)}
}

// Parse reads an evaluation response: one JSON object, nothing after it,
// no key twice at any depth, a "decision" that is true or false, and a
// "context" that is an object when present. A member whose name differs
// from "decision" or "context" only in case is refused: a decoder that
// folds case would read it as the decision. Other members are ignored.
func Parse(data []byte) (Answer, error) {
	if err := jsoncanon.CheckDuplicates(data); err != nil { // syntax, trailing bytes, repeated keys
		return Answer{}, err
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(data, &members); err != nil || members == nil {
		return Answer{}, errors.New("it is not a JSON object")
	}
	for k := range members {
		if k != "decision" && k != "context" && (strings.EqualFold(k, "decision") || strings.EqualFold(k, "context")) {
			return Answer{}, fmt.Errorf("it has a member %q; the names are lowercase", clip(k))
		}
	}
	var a Answer
	switch raw := string(bytes.TrimSpace(members["decision"])); raw {
	case "true":
		a.Decision = true
	case "false":
	case "":
		return Answer{}, errors.New(`it has no "decision"`)
	default:
		return Answer{}, fmt.Errorf(`its "decision" is %s, not true or false`, clip(raw))
	}
	if raw, ok := members["context"]; ok {
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 || raw[0] != '{' {
			return Answer{}, fmt.Errorf(`its "context" is %s, not an object`, clip(string(raw)))
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil {
			return Answer{}, err
		}
		a.Context = buf.Bytes()
	}
	return a, nil
}

// maxAge is how long a response may be reused by a private cache: its
// max-age, capped at MaxCacheAge; false when it has none, says no-store or
// no-cache, or says max-age more than once or unreadably.
func maxAge(values []string) (time.Duration, bool) {
	var age time.Duration
	seen := false
	for _, v := range values {
		for _, d := range strings.Split(v, ",") {
			name, val, _ := strings.Cut(strings.TrimSpace(d), "=")
			switch strings.ToLower(strings.TrimSpace(name)) {
			case "no-store", "no-cache":
				return 0, false
			case "max-age":
				n, err := strconv.ParseUint(strings.Trim(strings.TrimSpace(val), `"`), 10, 31)
				if err != nil || seen {
					return 0, false
				}
				seen = true
				age = time.Duration(n) * time.Second
			}
		}
	}
	if !seen || age <= 0 {
		return 0, false
	}
	return min(age, MaxCacheAge), true
}

func (c *Client) lookup(key string) (Answer, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.cache[key]
	if !ok {
		return Answer{}, false
	}
	e := el.Value.(*cached)
	if !c.now().Before(e.expires) {
		c.order.Remove(el)
		delete(c.cache, key)
		return Answer{}, false
	}
	a := e.answer
	a.Cached = true
	return a, true
}

func (c *Client) store(key string, a Answer, age time.Duration) {
	if c.max <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.cache[key]; ok {
		c.order.Remove(el)
		delete(c.cache, key)
	}
	for c.order.Len() >= c.max { // the oldest stored goes first
		el := c.order.Back()
		c.order.Remove(el)
		delete(c.cache, el.Value.(*cached).key)
	}
	c.cache[key] = c.order.PushFront(&cached{key: key, answer: a, expires: c.now().Add(age)})
}

// CacheLen is how many answers the cache holds.
func (c *Client) CacheLen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
