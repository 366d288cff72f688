package gateway

// An MCP session is bound to its task and principal at initialize
// (sessionMiddleware), and over HTTP the binding travels in the session ID
// itself, signed (issueSession, verifySession; replica.go says why). So
// the signed ID is the one authority on who owns a session: ownedSession
// is the one check of it, made wherever a session ID is presented (the
// session router, a stateless request's task), and ownSession the check of
// a session bound on this replica.
//
// MCP sessions over HTTP hold goroutines and memory until they end, and a
// client that crashes never ends its own: 40,000 abandoned sessions held
// 83,000 goroutines and 517 MB. So sessions end on their own: after
// Options.SessionIdle without a request (the go-sdk's SessionTimeout), and,
// when a principal opens more than Options.MaxSessionsPerPrincipal, the
// principal's least recently used idle session is closed to make room.
// Closing frees the session's memory and releases its resource
// subscriptions; its client can go on, served request by request on its
// signed session ID like a session held by another replica (replica.go).

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
)

// Defaults of the session limits.
const (
	DefaultSessionIdle             = 30 * time.Minute
	DefaultMaxSessionsPerPrincipal = 100
)

// CodeTooManySessions is the JSON-RPC error code of an initialize refused
// because every one of the principal's sessions (at the cap) has a request
// in flight, so none can be closed to make room. Like CodeAccessDenied it
// is in the implementation-defined range, clear of the go-sdk's codes.
const CodeTooManySessions = -32029

// sessionIdle is the idle time after which HTTP sessions are closed.
func (g *Gateway) sessionIdle() time.Duration {
	if g.opts.SessionIdle > 0 {
		return g.opts.SessionIdle
	}
	return DefaultSessionIdle
}

func (g *Gateway) maxSessions() int {
	if g.opts.MaxSessionsPerPrincipal > 0 {
		return g.opts.MaxSessionsPerPrincipal
	}
	return DefaultMaxSessionsPerPrincipal
}

// track marks a session's request in flight until the returned func runs,
// so the cap never closes a session in the middle of a call.
func (g *Gateway) track(req mcp.Request) func() {
	ss, ok := req.GetSession().(*mcp.ServerSession)
	if !ok || ss == nil {
		return func() {}
	}
	g.mu.Lock()
	s := g.sessions[ss]
	if s != nil {
		s.inflight++
		s.last = time.Now()
	}
	g.mu.Unlock()
	if s == nil {
		return func() {}
	}
	return func() {
		g.mu.Lock()
		s.inflight--
		s.last = time.Now()
		g.mu.Unlock()
	}
}

// makeRoomLocked closes, when principal already has the most sessions it
// may, its least recently used session without a request in flight (other
// than ss, the session initializing). It refuses when every session is
// busy.
func (g *Gateway) makeRoomLocked(ss *mcp.ServerSession, principal string) error {
	n := 0
	var oldest *mcp.ServerSession
	var oldestAt time.Time
	for k, s := range g.sessions {
		if k == ss || k == nil || s.principal != principal {
			continue
		}
		n++
		if s.inflight == 0 && (oldest == nil || s.last.Before(oldestAt)) {
			oldest, oldestAt = k, s.last
		}
	}
	max := g.maxSessions()
	if n < max {
		return nil
	}
	if oldest == nil {
		return &jsonrpc.Error{Code: CodeTooManySessions, Message: fmt.Sprintf(
			"too many sessions: principal %q has %d open, the most allowed, and all are busy; end one (HTTP DELETE with its Mcp-Session-Id) or try again when a call finishes", principal, n)}
	}
	g.forgetLocked(oldest) // counted out now; its Wait goroutine forgets it again
	g.log.Info().Str("principal", principal).Int("open", n).Str("session", oldest.ID()).
		Msg("session closed: the principal opened more sessions than allowed; its least recently used one made room")
	go func() { _ = oldest.Close() }()
	return nil
}

// sessionCount is how many sessions principal has open ("" for all).
func (g *Gateway) sessionCount(principal string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, s := range g.sessions {
		if principal == "" || s.principal == principal {
			n++
		}
	}
	return n
}

// MinSessionKeyBytes is the shortest Options.SessionKey accepted.
const MinSessionKeyBytes = 32

// NewSessionKey returns a random session key (64 hex characters).
func NewSessionKey() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// sessionToken is what an Mcp-Session-Id carries.
type sessionToken struct {
	raw       string // the go-sdk's session ID on the replica that made it
	task      string
	principal string
}

var b64 = base64.RawURLEncoding

func (g *Gateway) sessionMAC(raw, task, principal string) []byte {
	m := hmac.New(sha256.New, g.sessionKey)
	m.Write([]byte("airlock-session-v1\x00" + raw + "\x00" + task + "\x00" + principal))
	return m.Sum(nil)
}

// issueSession makes the Mcp-Session-Id of a new session.
func (g *Gateway) issueSession(t sessionToken) string {
	return t.raw + "." + b64.EncodeToString([]byte(t.task)) + "." + b64.EncodeToString([]byte(t.principal)) + "." +
		b64.EncodeToString(g.sessionMAC(t.raw, t.task, t.principal))
}

var errBadSession = errors.New("session not found: the Mcp-Session-Id was not issued by a gateway with this session key; initialize again without it")

// errForeignSession refuses a session ID presented by another principal
// than the one that opened the session (HTTP 403).
var errForeignSession = errors.New("this MCP session belongs to another principal; open your own session (initialize without Mcp-Session-Id)")

// ownedSession is the one check of a presented Mcp-Session-Id: its
// signature (errBadSession), then that principal opened the session
// (errForeignSession). A session ID the gateway issues always carries,
// signed, the principal of the request that opened it.
func (g *Gateway) ownedSession(sid, principal string) (sessionToken, error) {
	t, err := g.verifySession(sid)
	if err != nil {
		return sessionToken{}, err
	}
	if err := ownSession(t.principal, principal); err != nil {
		return sessionToken{}, err
	}
	return t, nil
}

// ownSession refuses principal a session that owner opened.
func ownSession(owner, principal string) error {
	if owner != principal {
		return errForeignSession
	}
	return nil
}

// verifySession checks an Mcp-Session-Id's signature and returns its token.
func (g *Gateway) verifySession(sid string) (sessionToken, error) {
	parts := strings.Split(sid, ".")
	if len(parts) != 4 || parts[0] == "" {
		return sessionToken{}, errBadSession
	}
	task, err1 := canonicalB64(parts[1])
	principal, err2 := canonicalB64(parts[2])
	mac, err3 := canonicalB64(parts[3])
	if err1 != nil || err2 != nil || err3 != nil {
		return sessionToken{}, errBadSession
	}
	t := sessionToken{raw: parts[0], task: string(task), principal: string(principal)}
	if !hmac.Equal(mac, g.sessionMAC(t.raw, t.task, t.principal)) {
		return sessionToken{}, errBadSession
	}
	return t, nil
}

// canonicalB64 decodes s, which must be exactly what issueSession
// writes: the decoder alone would also take other spellings of the same
// bytes (non-zero trailing bits, line breaks), so that one session would
// have many IDs.
func canonicalB64(s string) ([]byte, error) {
	// Strict refuses set trailing bits; the length, skipped line breaks.
	b, err := b64Strict.DecodeString(s)
	if err != nil {
		return nil, err
	}
	if len(s) != b64.EncodedLen(len(b)) {
		return nil, errBadSession
	}
	return b, nil
}

var b64Strict = b64.Strict()

// newRawSessionID is the go-sdk session ID of a new HTTP session; the task
// of a session opened without the Airlock-Task header is "task-" + it, so
// every replica can tell the task from the token alone.
func newRawSessionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// sessionTaskID is the task of a new HTTP session whose client named none.
func sessionTaskID(raw string) string { return "task-" + raw }

type session struct {
	taskID    string
	client    string
	principal string
	named     bool      // its client chose the task's ID (taskRef.named)
	last      time.Time // the last request began or ended
	inflight  int       // requests being handled
}

// ServeStdio serves one MCP session over t (stdin/stdout for Claude
// Desktop), attached to taskID, or to a new task if taskID is empty.
func (g *Gateway) ServeStdio(ctx context.Context, t mcp.Transport, taskID string) error {
	if taskID != "" {
		pr, err := g.principalFor(nil)
		if err != nil {
			return err
		}
		if !taskIDAllowed(taskID, pr.Name) {
			return badTaskID("--task", taskID)
		}
		if err := api.ClaimTaskID(taskID, pr.Name); err != nil {
			return fmt.Errorf("--task: %w", err)
		}
		if err := g.checkReattach(ctx, taskID, pr.Name); err != nil {
			return err
		}
	}
	g.mu.Lock()
	g.stdioTask = taskID
	g.mu.Unlock()
	ss, err := g.server.Connect(ctx, t, nil)
	if err != nil {
		return err
	}
	err = ss.Wait()
	g.forget(ss)
	return err
}

// sessionMiddleware binds MCP sessions to tasks at initialize and forgets
// them when they end.
func (g *Gateway) sessionMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
		defer g.track(req)() // a session's use, for the cap
		if method == "tools/list" {
			// The pool reports tool list changes only, not an upstream
			// failing (or recovering) with the same tools: republish so the
			// list shows each tool's current availability and reason.
			g.Refresh()
			res, err := next(ctx, method, req)
			if lr, ok := res.(*mcp.ListToolsResult); ok && err == nil {
				lr.Tools = g.withProgramDescription(req.GetExtra(), g.catalogList(g.visibleTools(req.GetExtra(), lr.Tools)))
			}
			return res, err
		}
		ir, ok := req.(*mcp.ServerRequest[*mcp.InitializeParams])
		if !ok {
			return next(ctx, method, req)
		}
		defer func() {
			if err != nil && ir.Session != nil && ir.Session.ID() != "" {
				// The go-sdk has given the refused session an ID: the
				// answer must not carry it, signed (replica.go).
				g.refused.Store(ir.Session.ID(), struct{}{})
			}
		}()
		id, clientName, err := g.attachSession(ctx, ir)
		if err != nil {
			return nil, err
		}
		res, err = next(ctx, method, req)
		if r, ok := res.(*mcp.InitializeResult); ok && err == nil {
			if r.Meta == nil {
				r.Meta = mcp.Meta{}
			}
			r.Meta[MetaTask] = id
		}
		g.log.Info().Str("task", id).Str("client", clientName).Msg("session attached")
		return res, err
	}
}

// attachSession binds the session an initialize opens to its task: the
// one its Airlock-Task header names (the caller's, or a new one), else
// the one its signed session ID will name, else a new one. It returns the
// task and the client's name.
func (g *Gateway) attachSession(ctx context.Context, ir *mcp.ServerRequest[*mcp.InitializeParams]) (taskID, clientName string, err error) {
	pr, err := g.principalFor(ir.Extra)
	if err != nil {
		return "", "", err
	}
	if ir.Extra != nil && ir.Extra.Header != nil {
		taskID = strings.TrimSpace(ir.Extra.Header.Get(HeaderTask))
	}
	if taskID != "" {
		if !taskIDAllowed(taskID, pr.Name) {
			return "", "", badTaskID("header "+HeaderTask, taskID)
		}
		if err := api.ClaimTaskID(taskID, pr.Name); err != nil {
			return "", "", fmt.Errorf("header %s: %w", HeaderTask, err)
		}
		if err := g.checkReattach(ctx, taskID, pr.Name); err != nil {
			return "", "", err
		}
	}
	if ir.Params != nil && ir.Params.ClientInfo != nil {
		clientName = ir.Params.ClientInfo.Name + " " + ir.Params.ClientInfo.Version
	}
	named := taskID != "" && taskID != api.DefaultTaskID(pr.Name)
	g.mu.Lock()
	defer g.mu.Unlock()
	s, exists := g.sessions[ir.Session]
	if !exists {
		if err := g.makeRoomLocked(ir.Session, pr.Name); err != nil {
			return "", "", err
		}
		if taskID == "" && ir.Extra != nil && ir.Extra.Header != nil && ir.Session != nil && ir.Session.ID() != "" {
			// The signed session ID names this task (replica.go).
			taskID = sessionTaskID(ir.Session.ID())
		}
		if taskID == "" {
			taskID = g.newSessionTaskLocked(ir.Extra)
			named = taskID == g.stdioTask
		}
		s = g.bindLocked(ir.Session, taskID, pr.Name)
		s.named = named
	} else if taskID != "" {
		s.taskID, s.named = taskID, named
	}
	s.principal = pr.Name
	s.client = strings.TrimSpace(clientName)
	return s.taskID, clientName, nil
}

func (g *Gateway) forget(ss *mcp.ServerSession) {
	g.mu.Lock()
	g.forgetLocked(ss)
	g.mu.Unlock()
}

func (g *Gateway) forgetLocked(ss *mcp.ServerSession) {
	delete(g.sessions, ss)
	if ss != nil && g.live[ss.ID()] == ss {
		delete(g.live, ss.ID())
	}
}

// bindLocked binds a session to a task until the session ends.
func (g *Gateway) bindLocked(ss *mcp.ServerSession, taskID, principal string) *session {
	s := &session{taskID: taskID, principal: principal, last: time.Now()}
	g.sessions[ss] = s
	if ss != nil && ss.ID() != "" {
		g.live[ss.ID()] = ss
	}
	if ss != nil {
		go func() { _ = ss.Wait(); g.forget(ss) }()
	}
	return s
}
