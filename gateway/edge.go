package gateway

// The HTTP edge is where a request's caller is settled, once: its
// credentials are authenticated (401 with WWW-Authenticate otherwise), the
// JSON-RPC body is checked the way the MCP SDK will read it (rpcbody.go),
// the tools it calls are checked against the token's scopes, and the
// principal goes with the request. Everything behind the edge reads that
// principal (principalFor, httpPrincipal) and never authenticates again.
// Who owns an MCP session is not the edge's question: the signed session
// ID answers it (ownedSession, sessions.go).
//
// The principal rides in the request's context for the HTTP handlers
// here, and in the go-sdk's auth.TokenInfo for the MCP method handlers:
// the go-sdk hands a handler the TokenInfo of the very HTTP request that
// carried the message (RequestExtra.TokenInfo), whereas the context a
// session's handlers run in is that of the request that opened the
// session.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/oauth"
)

// Edge wraps an MCP HTTP handler serving this gateway's Server (Handler
// does it for its own): it authenticates every request with d, refuses a
// POST body that is not one JSON-RPC message or batch every parser reads
// alike, or that calls a tool the token's scopes do not cover, and hands
// the principal to next.
func Edge(d *identity.Directory, next http.Handler) http.Handler {
	return &edge{d: d, next: auth.RequireBearerToken(carryPrincipal, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(restoreHeader(next))}
}

type edge struct {
	d    *identity.Directory
	next http.Handler // carryPrincipal, then the MCP handler
}

func (e *edge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The listener (Authenticator) or observeRefusals may have made the
	// request's edgeRequest already.
	er, ok := r.Context().Value(edgeKey{}).(*edgeRequest)
	if !ok {
		er = &edgeRequest{}
		r = r.WithContext(context.WithValue(r.Context(), edgeKey{}, er))
	}
	if er.p == nil || er.by != e.d {
		p, err := e.d.AuthenticateContext(r.Context(), r.Header)
		if err != nil {
			refuse(e.d, w, err)
			return
		}
		er.p, er.by = p, e.d
	}
	p := er.p
	if r.Method == http.MethodPost {
		// What is judged here is what the MCP SDK dispatches: a body it
		// could read otherwise than this check is refused (rpcbody.go).
		tools, err := readRPC(r)
		var re *RequestError
		if errors.As(err, &re) {
			writeRPCError(w, re)
			return
		}
		for _, tool := range tools {
			if err := e.d.ScopeError(p, tool); err != nil {
				refuse(e.d, w, err)
				return
			}
		}
	}
	// auth.RequireBearerToken is the one way into auth.TokenInfo; it reads
	// a bearer value, which carryPrincipal ignores, from a header of its
	// own: restoreHeader gives the request its headers back.
	er.header = r.Header
	r2 := r.WithContext(r.Context())
	r2.Header = http.Header{"Authorization": {"Bearer edge"}}
	e.next.ServeHTTP(w, r2)
}

type edgeKey struct{}

// edgeRequest is what the edge settled about a request: its principal
// (nil until authenticated), the directory that authenticated it, and the
// request's own headers.
type edgeRequest struct {
	p      *identity.Principal
	by     *identity.Directory
	header http.Header
}

// Authenticator is the check with which the listener (httplimit.New)
// tells an authenticated request from another before its body is read.
// It authenticates with d, as the edge does, and hands the principal on to
// the edge (of a gateway with the same Directory), so that a request is
// authenticated once; a request it refuses, the edge refuses itself, with
// the answer that says why.
func Authenticator(d *identity.Directory) func(*http.Request) (*http.Request, bool) {
	return func(r *http.Request) (*http.Request, bool) {
		p, err := d.AuthenticateContext(r.Context(), r.Header)
		if err != nil {
			return r, false
		}
		return r.WithContext(context.WithValue(r.Context(), edgeKey{}, &edgeRequest{p: p, by: d})), true
	}
}

// metaPrincipal is the auth.TokenInfo.Extra key of the edge's principal.
const metaPrincipal = "airlock.dev/principal"

// carryPrincipal is the auth.TokenVerifier that puts the edge's principal
// in the request's TokenInfo.
func carryPrincipal(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
	er, ok := ctx.Value(edgeKey{}).(*edgeRequest)
	if !ok || er.p == nil {
		return nil, auth.ErrInvalidToken
	}
	return &auth.TokenInfo{Extra: map[string]any{metaPrincipal: er.p}}, nil
}

func restoreHeader(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		er := r.Context().Value(edgeKey{}).(*edgeRequest)
		r.Header = er.header
		next.ServeHTTP(w, r)
	})
}

// edgePrincipal returns the principal the edge authenticated for an HTTP
// request.
func edgePrincipal(r *http.Request) (*identity.Principal, bool) {
	er, ok := r.Context().Value(edgeKey{}).(*edgeRequest)
	if !ok || er.p == nil {
		return nil, false
	}
	return er.p, true
}

// extraPrincipal returns the principal the edge authenticated for the
// HTTP request that carried an MCP message.
func extraPrincipal(extra *mcp.RequestExtra) (*identity.Principal, bool) {
	if extra == nil || extra.TokenInfo == nil {
		return nil, false
	}
	p, ok := extra.TokenInfo.Extra[metaPrincipal].(*identity.Principal)
	return p, ok
}

// refuse answers 401 (or 403 for insufficient scope) with the challenge
// that tells an OAuth client where to get a token (RFC 9728 section 5.1:
// resource_metadata) and, for step-up, which scopes to ask for.
func refuse(d *identity.Directory, w http.ResponseWriter, err error) {
	tokens := d.Tokens()
	status := http.StatusUnauthorized
	var te *oauth.Error
	if errors.As(err, &te) {
		status = te.Status
	}
	switch {
	case tokens != nil && errors.Is(err, identity.ErrNoCredentials):
		w.Header().Set("WWW-Authenticate", tokens.Challenge(nil))
	case tokens != nil && te != nil:
		w.Header().Set("WWW-Authenticate", tokens.Challenge(te))
	case tokens != nil:
		w.Header().Set("WWW-Authenticate", tokens.Challenge(&oauth.Error{Code: oauth.CodeInvalidToken, Reason: err.Error()}))
	default:
		w.Header().Set("WWW-Authenticate", `Bearer realm="airlock", error="invalid_token", error_description="`+strings.ReplaceAll(err.Error(), `"`, `'`)+`"`)
	}
	writeJSONError(w, status, err.Error())
}

// maxInspectedBody bounds the request body read to judge it: the MCP
// SDK's own default limit (mcp.DefaultMaxRequestBodyBytes), which refuses
// larger bodies anyway.
const maxInspectedBody = 4 << 20

func writeJSONError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": msg})
}

// principalFor returns the caller of a request: for HTTP the principal
// the edge authenticated (edge.go), for stdio (no headers) the local
// principal.
func (g *Gateway) principalFor(extra *mcp.RequestExtra) (*identity.Principal, error) {
	if g.opts.Directory == nil {
		return g.open, nil
	}
	if p, ok := extraPrincipal(extra); ok {
		return p, nil
	}
	if extra == nil || extra.Header == nil {
		local := g.cur().Local
		if local == nil {
			return nil, errors.New("no local principal for this stdio session: set local_principal in the configuration")
		}
		return local, nil
	}
	return nil, errors.New("this HTTP request did not pass the gateway's edge, which authenticates callers: serve Gateway.Handler, or wrap the MCP handler in gateway.Edge")
}
