// Package consenttest is a fake OAuth 2.0 authorization server for tests
// of the consent flow: authorization code with PKCE (S256 only, checked),
// single-use codes bound to the redirect URI, refresh tokens rotated on
// use, RFC 7009 revocation, and a lookup of who an access token is for,
// which a test upstream uses to check the bearer it receives. The user
// "signed in" at the provider is the X-Test-User header of the browser's
// request to /authorize; user "nobody" declines.
package consenttest

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"time"
)

// Provider is the fake authorization server.
type Provider struct {
	URL                  string
	ClientID, Secret     string
	RedirectURL          string
	AccessTTL            time.Duration // default one hour
	srv                  *httptest.Server
	mu                   sync.Mutex
	codes                map[string]*grant
	access               map[string]*token
	refresh              map[string]*grant
	disabled             map[string]bool
	issued               []string // every token and code issued
	Redeemed, Refreshed  int
	Revocations, Refused int
}

type grant struct {
	user, challenge, redirect, scope string
	used                             bool
}

type token struct {
	user   string
	expiry time.Time
}

// Start starts a provider for client id/secret with its registered
// redirect URL; Close stops it.
func Start(clientID, secret, redirectURL string) *Provider {
	p := &Provider{ClientID: clientID, Secret: secret, RedirectURL: redirectURL, AccessTTL: time.Hour,
		codes: map[string]*grant{}, access: map[string]*token{}, refresh: map[string]*grant{}, disabled: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/authorize", p.authorize)
	mux.HandleFunc("/token", p.token)
	mux.HandleFunc("/revoke", p.revoke)
	p.srv = httptest.NewServer(mux)
	p.URL = p.srv.URL
	return p
}

// Close stops the provider.
func (p *Provider) Close() { p.srv.Close() }

func (p *Provider) random() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	s := base64.RawURLEncoding.EncodeToString(b[:])
	p.issued = append(p.issued, s)
	return s
}

// Issued is every code and token the provider issued.
func (p *Provider) Issued() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.issued...)
}

// Disable makes every refresh of user's grants fail (invalid_grant), as
// a provider does for a user who revoked the app.
func (p *Provider) Disable(user string) {
	p.mu.Lock()
	p.disabled[user] = true
	p.mu.Unlock()
}

// Who is the user an access token is for, if it is valid now.
func (p *Provider) Who(access string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.access[access]
	if !ok || !time.Now().Before(t.expiry) {
		return "", false
	}
	return t.user, true
}

// Counts returns codes redeemed, refreshes, revocations, refused requests.
func (p *Provider) Counts() (redeemed, refreshed, revocations, refused int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.Redeemed, p.Refreshed, p.Revocations, p.Refused
}

func (p *Provider) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("response_type") != "code" || q.Get("client_id") != p.ClientID || q.Get("redirect_uri") != p.RedirectURL ||
		q.Get("code_challenge_method") != "S256" || len(q.Get("code_challenge")) != 43 || q.Get("state") == "" {
		p.mu.Lock()
		p.Refused++
		p.mu.Unlock()
		http.Error(w, "bad authorization request", http.StatusBadRequest)
		return
	}
	back, _ := url.Parse(p.RedirectURL)
	v := url.Values{"state": {q.Get("state")}}
	user := r.Header.Get("X-Test-User")
	if user == "" || user == "nobody" {
		v.Set("error", "access_denied")
	} else {
		p.mu.Lock()
		code := p.random()
		p.codes[code] = &grant{user: user, challenge: q.Get("code_challenge"), redirect: q.Get("redirect_uri"), scope: q.Get("scope")}
		p.mu.Unlock()
		v.Set("code", code)
	}
	back.RawQuery = v.Encode()
	http.Redirect(w, r, back.String(), http.StatusFound)
}

func oauthError(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": code})
}

func (p *Provider) client(r *http.Request) bool {
	id, sec, ok := r.BasicAuth()
	if !ok {
		id, sec = r.PostFormValue("client_id"), r.PostFormValue("client_secret")
	}
	return id == p.ClientID && sec == p.Secret
}

func (p *Provider) token(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.ParseForm() != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request")
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.client(r) {
		p.Refused++
		oauthError(w, http.StatusUnauthorized, "invalid_client")
		return
	}
	var g *grant
	switch r.PostForm.Get("grant_type") {
	case "authorization_code":
		c := p.codes[r.PostForm.Get("code")]
		sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
		if c == nil || c.used || c.redirect != r.PostForm.Get("redirect_uri") || base64.RawURLEncoding.EncodeToString(sum[:]) != c.challenge {
			p.Refused++
			oauthError(w, http.StatusBadRequest, "invalid_grant")
			return
		}
		c.used = true
		g = c
		p.Redeemed++
	case "refresh_token":
		old := r.PostForm.Get("refresh_token")
		g = p.refresh[old]
		if g == nil || p.disabled[g.user] {
			p.Refused++
			oauthError(w, http.StatusBadRequest, "invalid_grant")
			return
		}
		delete(p.refresh, old) // rotated
		p.Refreshed++
	default:
		oauthError(w, http.StatusBadRequest, "unsupported_grant_type")
		return
	}
	at, rt := p.random(), p.random()
	p.access[at] = &token{user: g.user, expiry: time.Now().Add(p.AccessTTL)}
	p.refresh[rt] = g
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": at, "token_type": "Bearer", "refresh_token": rt,
		"expires_in": int(p.AccessTTL.Seconds()), "scope": g.scope})
}

func (p *Provider) revoke(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.ParseForm() != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request")
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.client(r) {
		oauthError(w, http.StatusUnauthorized, "invalid_client")
		return
	}
	t := r.PostForm.Get("token")
	if g := p.refresh[t]; g != nil {
		delete(p.refresh, t)
		for k, a := range p.access {
			if a.user == g.user {
				delete(p.access, k)
			}
		}
	}
	delete(p.access, t)
	p.Revocations++
	w.WriteHeader(http.StatusOK)
}
