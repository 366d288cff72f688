package exchange

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/manifests"
)

var alice = Identity{Principal: "alice@corp", Issuer: "https://idp", Subject: "alice", Scopes: []string{"mcp"}, Expiry: time.Now().Add(time.Hour)}

func grantErr(t *testing.T, err, want error) {
	t.Helper()
	var ge *GrantError
	if !errors.As(err, &ge) || !errors.Is(err, want) {
		t.Fatalf("error %v; want a GrantError of %v", err, want)
	}
	if !strings.Contains(err.Error(), "nothing ran") {
		t.Fatalf("error %q does not say that nothing ran", err)
	}
}

// TestSealSubject: the token opens with the worker's key for its own task,
// and never otherwise: another key, altered bytes, a history edited to name
// another user or task, an expired token.
func TestSealSubject(t *testing.T) {
	key, _ := NewKey()
	other, _ := NewKey()
	const tok = "eyJ.secret-token.sig"
	s, err := SealSubject(key.PublicKey(), "task-1", tok, alice)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(s.Sealed), "secret-token") {
		t.Fatal("the sealed form holds the token")
	}
	got, err := OpenSubject(key, "task-1", s, time.Now())
	if err != nil || got.Token != tok || got.Type != TokenTypeAccess {
		t.Fatalf("open: %q, %v", got, err)
	}
	_, err = OpenSubject(other, "task-1", s, time.Now())
	grantErr(t, err, ErrWrongKey)
	_, err = OpenSubject(nil, "task-1", s, time.Now())
	grantErr(t, err, ErrNoKey)
	_, err = OpenSubject(key, "task-1", nil, time.Now())
	grantErr(t, err, ErrNoSubject)
	_, err = OpenSubject(key, "task-2", s, time.Now())
	grantErr(t, err, ErrTampered)
	_, err = OpenSubject(key, "task-1", s, alice.Expiry)
	grantErr(t, err, ErrExpired)

	edits := map[string]func(*Sealed){
		"flipped byte":   func(s *Sealed) { s.Sealed[len(s.Sealed)/2] ^= 1 },
		"trailing bytes": func(s *Sealed) { s.Sealed = append(s.Sealed, 0) },
		"peer":           func(s *Sealed) { s.Peer[0] ^= 1 },
		"principal":      func(s *Sealed) { s.Principal = "bob@corp" },
		"subject":        func(s *Sealed) { s.Subject = "bob" },
		"issuer":         func(s *Sealed) { s.Issuer = "https://evil" },
		"later expiry":   func(s *Sealed) { s.Expiry = s.Expiry.Add(24 * time.Hour) },
		"empty":          func(s *Sealed) { s.Sealed = nil },
		"held":           func(s *Sealed) { s.Held = true },
	}
	for name, edit := range edits {
		c := *s
		c.Sealed, c.Peer = append([]byte(nil), s.Sealed...), append([]byte(nil), s.Peer...)
		edit(&c)
		if _, err := OpenSubject(key, "task-1", &c, time.Now()); !errors.Is(err, ErrTampered) {
			t.Errorf("%s: %v; want ErrTampered", name, err)
		}
	}
	if _, err := SealSubject(nil, "task-1", tok, alice); err == nil || !strings.Contains(err.Error(), EnvKey) {
		t.Fatalf("sealing without a key: %v", err)
	}
}

// TestSealGrant: a held grant's refresh token opens only once the access
// token has expired (the access token is used while it is valid), with the
// same checks; a seal that claims a held grant it has not, or hides one it
// has, does not open.
func TestSealGrant(t *testing.T) {
	key, _ := NewKey()
	const tok, refresh = "eyJ.secret-token.sig", "refresh-secret-value"
	s, err := SealGrant(key.PublicKey(), "task-1", tok, refresh, alice)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Held || strings.Contains(string(s.Sealed), "refresh-secret") {
		t.Fatalf("held %v, or the sealed form holds the refresh token", s.Held)
	}
	if g, err := OpenSubject(key, "task-1", s, time.Now()); err != nil || g != (Grant{tok, TokenTypeAccess}) {
		t.Fatalf("while valid: %+v %v", g, err)
	}
	if g, err := OpenSubject(key, "task-1", s, alice.Expiry.Add(48*time.Hour)); err != nil || g != (Grant{refresh, TokenTypeRefresh}) {
		t.Fatalf("after expiry: %+v %v", g, err)
	}
	_, err = OpenSubject(key, "task-2", s, alice.Expiry.Add(time.Hour))
	grantErr(t, err, ErrTampered)
	c := *s
	c.Held = false
	_, err = OpenSubject(key, "task-1", &c, alice.Expiry.Add(time.Hour))
	grantErr(t, err, ErrTampered)
	c = *s
	c.Principal = "bob@corp"
	_, err = OpenSubject(key, "task-1", &c, alice.Expiry.Add(time.Hour))
	grantErr(t, err, ErrTampered)
	// No refresh token: SealSubject's behaviour.
	if s, _ := SealGrant(key.PublicKey(), "task-1", tok, "", alice); s.Held {
		t.Fatal("a seal without a refresh token claims a held grant")
	}
}

// TestHoldGrant: HoldGrant asks for a refresh token by RFC 8693 exchange of
// the user's access token, for the upstream, without actor_token; a
// provider that issues none, or refuses, is an error that names the fix
// and never echoes a token. An exchange of the held refresh token names
// its type.
func TestHoldGrant(t *testing.T) {
	var answer string
	c := provider(t, func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		f := r.PostForm
		w.Header().Set("Content-Type", "application/json")
		if f.Get("subject_token_type") == TokenTypeRefresh {
			if f.Get("subject_token") != "rt-1" || f.Get("requested_token_type") != TokenTypeAccess || f.Get("audience") != "tickets" {
				w.WriteHeader(400)
				fmt.Fprint(w, `{"error":"invalid_grant","error_description":"refresh token revoked"}`)
				return
			}
			fmt.Fprint(w, `{"access_token":"fresh","token_type":"Bearer","issued_token_type":"urn:ietf:params:oauth:token-type:access_token","expires_in":60}`)
			return
		}
		want := map[string]string{"grant_type": GrantType, "subject_token": "user-token", "subject_token_type": TokenTypeAccess,
			"requested_token_type": TokenTypeRefresh, "audience": "tickets", "scope": "a b", "actor_token": ""}
		for k, v := range want {
			if f.Get(k) != v {
				w.WriteHeader(400)
				fmt.Fprintf(w, `{"error":"invalid_request","error_description":"%s is %q"}`, k, f.Get(k))
				return
			}
		}
		fmt.Fprint(w, answer)
	})
	r := Request{Config: c, ClientSecret: "s", SubjectToken: "user-token", ActorToken: "airlock-token", Principal: "alice@corp"}
	for _, tc := range []struct{ answer, want, err string }{
		{`{"access_token":"at","token_type":"Bearer","issued_token_type":"urn:ietf:params:oauth:token-type:refresh_token","refresh_token":"rt-1","expires_in":300}`, "rt-1", ""},
		{`{"access_token":"rt-2","token_type":"N_A","issued_token_type":"urn:ietf:params:oauth:token-type:refresh_token"}`, "rt-2", ""},
		{`{"access_token":"at","token_type":"Bearer","issued_token_type":"urn:ietf:params:oauth:token-type:access_token","expires_in":300}`, "", "remove offline"},
		{`{"access_token":"at","token_type":"Bearer","refresh_token":"x"}{}`, "", "after its JSON object"},
		{`{"access_token":"at","token_type":"Bearer","refresh_token":"` + strings.Repeat("r", MaxRefreshBytes+1) + `"}`, "", "more than the 8192"},
		{`{"access_token":"at","token_type":"Bearer","refresh_token":"x","Refresh_Token":"y"}`, "", `names "Refresh_Token" more than once`},
		{`{"access_token":"at","token_type":"Bearer","refresh_token":"x","refresh_token":"y"}`, "", `names "refresh_token" more than once`},
	} {
		answer = tc.answer
		got, err := HoldGrant(context.Background(), http.DefaultClient, r)
		if tc.err == "" && (err != nil || got != tc.want) {
			t.Fatalf("%s: %q %v", tc.answer, got, err)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "user-token")) {
			t.Fatalf("%s: %v; want %q", tc.answer, err, tc.err)
		}
	}
	r = Request{Config: c, ClientSecret: "s", SubjectToken: "rt-1", SubjectTokenType: TokenTypeRefresh, Principal: "alice@corp"}
	if tok, err := Exchange(context.Background(), http.DefaultClient, r); err != nil || tok.AccessToken != "fresh" {
		t.Fatalf("exchange of the held grant: %v", err)
	}
	r.SubjectToken = "rt-revoked"
	_, err := Exchange(context.Background(), http.DefaultClient, r)
	grantErr(t, err, ErrRefused)
	if strings.Contains(err.Error(), "rt-revoked") || !strings.Contains(err.Error(), "the grant it held for the call: invalid_grant: refresh token revoked") {
		t.Fatalf("revoked grant: %v", err)
	}
}

// TestKeysFromEnv: the private key gives both halves, the public one the
// gateway's alone; malformed values are refused with what to do.
func TestKeysFromEnv(t *testing.T) {
	k, _ := NewKey()
	env := map[string]string{EnvKey: EncodeKey(k.Bytes())}
	priv, pub, err := KeysFromEnv(func(n string) string { return env[n] })
	if err != nil || !priv.Equal(k) || !pub.Equal(k.PublicKey()) {
		t.Fatalf("private: %v", err)
	}
	env = map[string]string{EnvPublicKey: EncodeKey(k.PublicKey().Bytes())}
	priv, pub, err = KeysFromEnv(func(n string) string { return env[n] })
	if err != nil || priv != nil || !pub.Equal(k.PublicKey()) {
		t.Fatalf("public: %v", err)
	}
	for _, bad := range []string{"short", EncodeKey(k.Bytes()) + "AAAA", "!!!!"} {
		env = map[string]string{EnvKey: bad}
		if _, _, err := KeysFromEnv(func(n string) string { return env[n] }); err == nil || !strings.Contains(err.Error(), EnvKey) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if priv, pub, err := KeysFromEnv(func(string) string { return "" }); priv != nil || pub != nil || err != nil {
		t.Fatal("no key set")
	}
}

func provider(t *testing.T, h http.HandlerFunc) *manifests.TokenExchange {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &manifests.TokenExchange{TokenURL: srv.URL, ClientID: "airlock", ClientSecretEnv: "X", Audience: "tickets", Resource: "https://tickets/mcp", Scopes: []string{"a", "b"}}
}

// TestExchange: the request is RFC 8693's, and each kind of answer is
// classified: a refusal is the user's grant, a bad client is airlock's,
// anything unreadable is an error that never echoes a token.
func TestExchange(t *testing.T) {
	c := provider(t, func(w http.ResponseWriter, r *http.Request) {
		id, secret, _ := r.BasicAuth()
		if r.ParseForm() != nil || id != "airlock" || secret != "s3cret" {
			http.Error(w, `{"error":"invalid_client"}`, 401)
			return
		}
		f := r.PostForm
		want := map[string]string{"grant_type": GrantType, "subject_token": "user-token", "subject_token_type": TokenTypeAccess,
			"requested_token_type": TokenTypeAccess, "audience": "tickets", "resource": "https://tickets/mcp", "scope": "a b",
			"actor_token": "airlock-token", "actor_token_type": TokenTypeAccess}
		for k, v := range want {
			if f.Get(k) != v {
				http.Error(w, fmt.Sprintf(`{"error":"invalid_request","error_description":"%s is %q"}`, k, f.Get(k)), 400)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		fmt.Fprint(w, `{"access_token":"upstream-token","issued_token_type":"urn:ietf:params:oauth:token-type:access_token","token_type":"Bearer","expires_in":300,"scope":"a"}`)
	})
	r := Request{Config: c, ClientSecret: "s3cret", SubjectToken: "user-token", ActorToken: "airlock-token", Principal: "alice@corp"}
	tok, err := Exchange(context.Background(), http.DefaultClient, r)
	if err != nil {
		t.Fatal(err)
	}
	if tok.AccessToken != "upstream-token" || len(tok.Scopes) != 1 || tok.Scopes[0] != "a" || tok.Actor != "airlock" || tok.Audience != "tickets" ||
		time.Until(tok.Expiry) < 4*time.Minute || time.Until(tok.Expiry) > 5*time.Minute {
		t.Fatalf("token %+v", tok)
	}
	r.ClientSecret = "wrong"
	if _, err := Exchange(context.Background(), http.DefaultClient, r); err == nil || errors.As(err, new(*GrantError)) || !strings.Contains(err.Error(), "X") {
		t.Fatalf("bad client: %v; want airlock's own error naming the variable", err)
	}
}

func TestExchangeAnswers(t *testing.T) {
	cases := []struct {
		name, status, ctype, body string
		grant                     bool // a GrantError
		want                      string
	}{
		{"revoked", "400", "application/json", `{"error":"invalid_grant","error_description":"user is disabled"}`, true, "user is disabled"},
		{"invalid request", "400", "application/json", `{"error":"invalid_request","error_description":"subject_token is invalid"}`, true, "subject_token is invalid"},
		{"server error", "503", "application/json", `{"error":"temporarily_unavailable"}`, false, "503"},
		{"html", "200", "text/html", `<html>`, false, "not application/json"},
		{"trailing", "200", "application/json", `{"access_token":"x","token_type":"Bearer"}{"access_token":"y"}`, false, "after its JSON object"},
		{"no token", "200", "application/json", `{"token_type":"Bearer"}`, false, "no access_token"},
		{"not bearer", "200", "application/json", `{"access_token":"x","token_type":"DPoP"}`, false, "only Bearer"},
		{"id token", "200", "application/json", `{"access_token":"x","token_type":"Bearer","issued_token_type":"urn:ietf:params:oauth:token-type:id_token"}`, false, "not an access token"},
		{"huge expiry", "200", "application/json", `{"access_token":"x","token_type":"Bearer","expires_in":1e30}`, false, "expires_in"},
		{"negative expiry", "200", "application/json", `{"access_token":"x","token_type":"Bearer","expires_in":-1}`, false, "expires_in"},
		{"scope not string", "200", "application/json", `{"access_token":"x","token_type":"Bearer","scope":["a"]}`, false, "scope"},
		{"case-folded twin", "200", "application/json", `{"access_token":"x","token_type":"Bearer","ACCESS_TOKEN":"y"}`, false, "more than once"},
		{"huge", "200", "application/json", `{"access_token":"` + strings.Repeat("x", maxResponseBytes) + `","token_type":"Bearer"}`, false, "larger than"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := provider(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.ctype)
				var code int
				fmt.Sscan(tc.status, &code)
				w.WriteHeader(code)
				fmt.Fprint(w, tc.body)
			})
			_, err := Exchange(context.Background(), http.DefaultClient, Request{Config: c, ClientSecret: "s", SubjectToken: "user-token-xyz", Principal: "alice@corp"})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want it to say %q", err, tc.want)
			}
			if got := errors.As(err, new(*GrantError)); got != tc.grant {
				t.Fatalf("GrantError: %v, want %v (%v)", got, tc.grant, err)
			}
			if tc.grant && !errors.Is(err, ErrRefused) {
				t.Fatalf("%v is not ErrRefused", err)
			}
			if strings.Contains(err.Error(), "user-token-xyz") {
				t.Fatal("the error holds the subject token")
			}
		})
	}
	// Unreachable: an error, not the user's grant.
	c := &manifests.TokenExchange{TokenURL: "http://127.0.0.1:1/token", ClientID: "a", Audience: "u"}
	if _, err := Exchange(context.Background(), http.DefaultClient, Request{Config: c, SubjectToken: "user-token-xyz"}); err == nil || errors.As(err, new(*GrantError)) || strings.Contains(err.Error(), "user-token-xyz") {
		t.Fatalf("unreachable: %v", err)
	}
}
