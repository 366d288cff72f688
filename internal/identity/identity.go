// Package identity answers "who is calling?": it resolves principals and
// their roles from the configuration, authenticates HTTP requests by API key
// (only key hashes are configured), binds MCP sessions to the principal that
// opened them, and names the local principal of stdio sessions.
//
// It imports config and manifests; it never logs.
package identity

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/manifests"
)

// HeaderAPIKey is the alternative to "Authorization: Bearer KEY".
const HeaderAPIKey = "X-API-Key"

// Errors of Authenticate.
var (
	ErrNoCredentials = errors.New("no API key: send Authorization: Bearer <key> (or X-API-Key: <key>)")
	ErrUnknownKey    = errors.New("API key not recognised: check the key, or ask an operator to add its hash to principals[].api_key_sha256")
)

// Principal is a resolved caller: its own facts plus the union of its roles.
type Principal struct {
	Name        string
	Roles       []string
	Permissions []string
	DataLevel   manifests.DataLevel
	SlackUserID string
	// AllowTools are globs over exposed tool names.
	AllowTools []string
	// MaxCalls and Deadline are the task limits its roles give (0: the
	// configuration's task defaults).
	MaxCalls int
	Deadline time.Duration
}

// Directory holds the principals of one configuration.
type Directory struct {
	byHash  map[string]*Principal
	byName  map[string]*Principal
	bySlack map[string]*Principal
	local   string
}

var levelRank = map[manifests.DataLevel]int{
	manifests.DataPublic: 1, manifests.DataInternal: 2, manifests.DataConfidential: 3,
	manifests.DataSensitive: 4, manifests.DataRestricted: 5,
}

// New resolves every principal of a validated configuration.
func New(c *config.Config) *Directory {
	d := &Directory{byHash: map[string]*Principal{}, byName: map[string]*Principal{}, bySlack: map[string]*Principal{}, local: c.LocalPrincipal}
	for _, cp := range c.Principals {
		p := &Principal{Name: cp.Name, Roles: slices.Clone(cp.Roles), SlackUserID: cp.SlackUserID, DataLevel: manifests.DataPublic}
		for _, rn := range cp.Roles {
			r := c.Roles[rn]
			if r == nil {
				continue
			}
			p.Permissions = appendNew(p.Permissions, r.Permissions...)
			p.AllowTools = appendNew(p.AllowTools, r.Tools...)
			if levelRank[r.DataAccessLevel] > levelRank[p.DataLevel] {
				p.DataLevel = r.DataAccessLevel
			}
			p.MaxCalls = max(p.MaxCalls, r.MaxCalls)
			p.Deadline = max(p.Deadline, r.Deadline.D())
		}
		d.byName[p.Name] = p
		if p.SlackUserID != "" {
			d.bySlack[p.SlackUserID] = p
		}
		for _, h := range cp.APIKeySHA256 {
			d.byHash[h] = p
		}
	}
	return d
}

func appendNew(s []string, v ...string) []string {
	for _, x := range v {
		if !slices.Contains(s, x) {
			s = append(s, x)
		}
	}
	return s
}

// Empty reports whether no principal is configured.
func (d *Directory) Empty() bool { return len(d.byName) == 0 }

// Lookup returns the principal with this name.
func (d *Directory) Lookup(name string) (*Principal, bool) {
	p, ok := d.byName[name]
	return p, ok
}

// BySlackUser returns the principal whose slack_user_id is id (a Slack
// user ID such as U0123ABCD), for mapping an approver's click to who they
// are in airlock.
func (d *Directory) BySlackUser(id string) (*Principal, bool) {
	if id == "" {
		return nil, false
	}
	p, ok := d.bySlack[id]
	return p, ok
}

// Local returns the principal of stdio sessions.
func (d *Directory) Local() (*Principal, error) {
	if d.local == "" {
		return nil, errors.New("no local_principal in the configuration: name the principal stdio sessions run as (local_principal: NAME)")
	}
	p, ok := d.byName[d.local]
	if !ok {
		return nil, fmt.Errorf("local_principal %q is not one of principals", d.local)
	}
	return p, nil
}

// Authenticate finds the principal of an HTTP request's API key.
func (d *Directory) Authenticate(h http.Header) (*Principal, error) {
	key := ""
	if auth := h.Get("Authorization"); auth != "" {
		scheme, rest, ok := strings.Cut(auth, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return nil, errors.New("Authorization header is not \"Bearer <key>\"")
		}
		key = strings.TrimSpace(rest)
	} else {
		key = strings.TrimSpace(h.Get(HeaderAPIKey))
	}
	if key == "" {
		return nil, ErrNoCredentials
	}
	p, ok := d.byHash[HashKey(key)]
	if !ok {
		return nil, ErrUnknownKey
	}
	return p, nil
}

// HashKey is the hash stored in principals[].api_key_sha256.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// NewKey makes a random API key and returns it with its hash.
func NewKey() (key, hash string, err error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	key = "ak_" + hex.EncodeToString(b[:])
	return key, HashKey(key), nil
}

type ctxKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext returns the principal carried by ctx, if any.
func FromContext(ctx context.Context) (*Principal, bool) {
	p, ok := ctx.Value(ctxKey{}).(*Principal)
	return p, ok
}

// Guard wraps an MCP HTTP handler: it authenticates every request (401 with
// WWW-Authenticate otherwise), binds each MCP session ID to the principal
// whose request created it, and rejects a session ID presented by another
// principal (403).
func (d *Directory) Guard(next http.Handler) http.Handler {
	g := &guard{d: d, next: next, sessions: map[string]sessionOwner{}}
	return g
}

type sessionOwner struct {
	principal string
	seen      time.Time
}

type guard struct {
	d    *Directory
	next http.Handler

	mu       sync.Mutex
	sessions map[string]sessionOwner
}

// sessionTTL bounds how long an idle session's owner is remembered.
const sessionTTL = 24 * time.Hour

const sessionHeader = "Mcp-Session-Id"

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, err := g.d.Authenticate(r.Header)
	if err != nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="airlock", error="invalid_token", error_description="`+strings.ReplaceAll(err.Error(), `"`, `'`)+`"`)
		writeJSONError(w, http.StatusUnauthorized, err.Error())
		return
	}
	if sid := r.Header.Get(sessionHeader); sid != "" {
		g.mu.Lock()
		owner, ok := g.sessions[sid]
		if ok && owner.principal == p.Name {
			owner.seen = time.Now()
			g.sessions[sid] = owner
		}
		g.mu.Unlock()
		if ok && owner.principal != p.Name {
			writeJSONError(w, http.StatusForbidden, "this MCP session belongs to another principal; open your own session (initialize without Mcp-Session-Id)")
			return
		}
		if r.Method == http.MethodDelete {
			defer func() {
				g.mu.Lock()
				delete(g.sessions, sid)
				g.mu.Unlock()
			}()
		}
	}
	rw := &recorder{ResponseWriter: w, onHeader: func(h http.Header) {
		if sid := h.Get(sessionHeader); sid != "" && r.Header.Get(sessionHeader) == "" {
			g.bind(sid, p.Name)
		}
	}}
	g.next.ServeHTTP(rw, r.WithContext(WithPrincipal(r.Context(), p)))
}

func (g *guard) bind(sid, principal string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	for k, o := range g.sessions {
		if now.Sub(o.seen) > sessionTTL {
			delete(g.sessions, k)
		}
	}
	g.sessions[sid] = sessionOwner{principal: principal, seen: now}
}

// recorder calls onHeader once, just before the status line is written.
type recorder struct {
	http.ResponseWriter
	onHeader func(http.Header)
	done     bool
}

func (r *recorder) WriteHeader(code int) {
	if !r.done {
		r.done = true
		r.onHeader(r.Header())
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if !r.done {
		r.WriteHeader(http.StatusOK)
	}
	return r.ResponseWriter.Write(b)
}

// Flush keeps server-sent events streaming through the wrapper.
func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		if !r.done {
			r.WriteHeader(http.StatusOK)
		}
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func writeJSONError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": msg})
}
