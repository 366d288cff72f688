package exchange

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlock-run/airlock/manifests"
)

// RFC 8693 names.
const (
	GrantType        = "urn:ietf:params:oauth:grant-type:token-exchange"
	TokenTypeAccess  = "urn:ietf:params:oauth:token-type:access_token"
	TokenTypeRefresh = "urn:ietf:params:oauth:token-type:refresh_token"
	tokenTypeJWT     = "urn:ietf:params:oauth:token-type:jwt"
)

// maxResponseBytes bounds a token endpoint's answer.
const maxResponseBytes = 64 << 10

// MaxRefreshBytes bounds a held grant's refresh token: it is sealed into
// every call's input (and history) that may need it.
const MaxRefreshBytes = 8 << 10

// Token is an exchanged token: the bearer for one call.
type Token struct {
	AccessToken string
	Expiry      time.Time // zero: the provider did not say
	Scopes      []string  // as issued (the requested ones when the provider did not say)
	// What it was asked for: the upstream, and airlock as the actor.
	Audience, Resource, Actor string
	// RefreshToken is the grant the provider issued when asked for one
	// (Request.RequestedTokenType TokenTypeRefresh): the user's delegation
	// to airlock, to be exchanged again later (HoldGrant).
	RefreshToken string
}

// Request is one exchange.
type Request struct {
	Config       *manifests.TokenExchange
	ClientSecret string
	SubjectToken string
	// SubjectTokenType is SubjectToken's RFC 8693 type: TokenTypeAccess
	// (the default) or TokenTypeRefresh (a grant HoldGrant obtained).
	SubjectTokenType string
	// RequestedTokenType is TokenTypeAccess (the default) or
	// TokenTypeRefresh (HoldGrant).
	RequestedTokenType string
	// ActorToken, when set, is airlock's own token (Config.Actor).
	ActorToken string
	// Principal names the user in errors.
	Principal string
}

// Exchange asks the provider for a token for the upstream on behalf of the
// subject token's user. A refusal (400/401/403 with an OAuth error) is a
// *GrantError wrapping ErrRefused: the user's grant is gone or does not
// cover the upstream. Any other failure (the provider unreachable, a 5xx,
// an unreadable answer) is returned as it is: the user's grant may be fine.
func Exchange(ctx context.Context, client *http.Client, r Request) (*Token, error) {
	c := r.Config
	subjectType, requested := cmp.Or(r.SubjectTokenType, TokenTypeAccess), cmp.Or(r.RequestedTokenType, TokenTypeAccess)
	form := url.Values{
		"grant_type":           {GrantType},
		"subject_token":        {r.SubjectToken},
		"subject_token_type":   {subjectType},
		"requested_token_type": {requested},
	}
	if c.Audience != "" {
		form.Set("audience", c.Audience)
	}
	if c.Resource != "" {
		form.Set("resource", c.Resource)
	}
	if len(c.Scopes) > 0 {
		form.Set("scope", strings.Join(c.Scopes, " "))
	}
	if r.ActorToken != "" {
		form.Set("actor_token", r.ActorToken)
		form.Set("actor_token_type", TokenTypeAccess)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.TokenURL, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, fmt.Errorf("token exchange at %s: %w", c.TokenURL, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.SetBasicAuth(url.QueryEscape(c.ClientID), url.QueryEscape(r.ClientSecret)) // RFC 6749 §2.3.1
	resp, err := client.Do(req)
	if err != nil {
		// The client's error names the URL and the cause, never the form.
		return nil, fmt.Errorf("token exchange at %s: %w", c.TokenURL, unwrapURLError(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("token exchange at %s: reading the answer: %w", c.TokenURL, err)
	}
	if len(body) > maxResponseBytes {
		return nil, fmt.Errorf("token exchange at %s: the answer is larger than %d bytes", c.TokenURL, maxResponseBytes)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error       string `json:"error"`
			Description string `json:"error_description"`
		}
		_ = json.Unmarshal(body, &e)
		switch {
		case e.Error != "" && (resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden):
			detail := clip(e.Error)
			if e.Description != "" {
				detail += ": " + clip(e.Description)
			}
			if e.Error == "invalid_client" || e.Error == "unauthorized_client" {
				// airlock's own credentials, not the user's grant.
				return nil, fmt.Errorf("token exchange at %s: the provider refused client %q (%s); check client_id and %s", c.TokenURL, c.ClientID, detail, c.ClientSecretEnv)
			}
			if subjectType == TokenTypeRefresh {
				// The user's sign-in had expired; the grant the provider
				// held for the call is what it refused.
				detail = "the grant it held for the call: " + detail
			}
			return nil, &GrantError{Principal: r.Principal, Err: ErrRefused, Detail: fmt.Sprintf("%d %s", resp.StatusCode, detail)}
		default:
			return nil, fmt.Errorf("token exchange at %s: %s", c.TokenURL, resp.Status)
		}
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/json" {
		return nil, fmt.Errorf("token exchange at %s: the answer is %q, not application/json", c.TokenURL, mt)
	}
	var out struct {
		AccessToken     string          `json:"access_token"`
		IssuedTokenType string          `json:"issued_token_type"`
		TokenType       string          `json:"token_type"`
		ExpiresIn       json.Number     `json:"expires_in"`
		Scope           json.RawMessage `json:"scope"`
		RefreshToken    string          `json:"refresh_token"`
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("token exchange at %s: the answer is not a token response: %v", c.TokenURL, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("token exchange at %s: the answer has data after its JSON object", c.TokenURL)
	}
	if k := ambiguousMember(body); k != "" {
		// encoding/json keeps the last of {"access_token":…,"Access_Token":…}
		// where another reader keeps the first: refuse rather than guess.
		return nil, fmt.Errorf("token exchange at %s: the answer names %q more than once (keys compare case-insensitively); it is ambiguous", c.TokenURL, clip(k))
	}
	if out.AccessToken == "" {
		return nil, fmt.Errorf("token exchange at %s: the answer has no access_token", c.TokenURL)
	}
	if requested == TokenTypeAccess && !strings.EqualFold(out.TokenType, "bearer") {
		return nil, fmt.Errorf("token exchange at %s: token_type is %q; only Bearer tokens can be sent", c.TokenURL, clip(out.TokenType))
	}
	if requested == TokenTypeRefresh {
		// RFC 8693 §2.2.1: a refresh token comes in refresh_token (with an
		// access token beside it); some providers put it in access_token
		// with issued_token_type refresh_token.
		if out.RefreshToken == "" && out.IssuedTokenType == TokenTypeRefresh {
			out.RefreshToken = out.AccessToken
		}
		if len(out.RefreshToken) > MaxRefreshBytes {
			return nil, fmt.Errorf("token exchange at %s: the refresh token is %d bytes, more than the %d a task's history holds for a call; have the provider issue shorter (opaque) refresh tokens, or remove offline", c.TokenURL, len(out.RefreshToken), MaxRefreshBytes)
		}
		if out.RefreshToken == "" {
			return nil, fmt.Errorf("token exchange at %s: asked for a refresh token (requested_token_type refresh_token), the provider issued none; it does not hold grants by exchange: remove offline from server.http.auth.token_exchange, or allow refresh tokens in token exchange for client %q", c.TokenURL, c.ClientID)
		}
	} else if out.IssuedTokenType != "" && out.IssuedTokenType != TokenTypeAccess && out.IssuedTokenType != tokenTypeJWT {
		return nil, fmt.Errorf("token exchange at %s: issued_token_type is %q, not an access token", c.TokenURL, clip(out.IssuedTokenType))
	}
	t := &Token{AccessToken: out.AccessToken, Scopes: c.Scopes, Audience: c.Audience, Resource: c.Resource}
	if requested == TokenTypeRefresh {
		t.RefreshToken = out.RefreshToken
	}
	if r.ActorToken != "" {
		t.Actor = c.ClientID
	}
	if out.ExpiresIn != "" {
		secs, err := out.ExpiresIn.Int64()
		if err != nil || secs < 0 || secs > 366*24*3600 {
			return nil, fmt.Errorf("token exchange at %s: expires_in %q is not a number of seconds", c.TokenURL, clip(out.ExpiresIn.String()))
		}
		t.Expiry = time.Now().Add(time.Duration(secs) * time.Second)
	}
	if len(out.Scope) > 0 && string(out.Scope) != "null" {
		var s string
		if err := json.Unmarshal(out.Scope, &s); err != nil {
			return nil, fmt.Errorf("token exchange at %s: scope is not a string", c.TokenURL)
		}
		t.Scopes = strings.Fields(s)
	}
	return t, nil
}

// HoldGrant asks the provider to hold the user's grant for a call that
// may run after r.SubjectToken expires: an exchange of the user's access
// token for a refresh token (requested_token_type refresh_token) issued to
// airlock for the upstream's audience and scopes. It returns the refresh
// token, which the caller seals (SealGrant) and never keeps in the clear.
// Errors are Exchange's.
func HoldGrant(ctx context.Context, client *http.Client, r Request) (string, error) {
	r.RequestedTokenType, r.SubjectTokenType, r.ActorToken = TokenTypeRefresh, TokenTypeAccess, ""
	t, err := Exchange(ctx, client, r)
	if err != nil {
		return "", err
	}
	return t.RefreshToken, nil
}

// ambiguousMember is the first member of the answer's top-level object
// whose name another member repeats, exactly or in another case; "" when
// none does (or the answer is no object: decoding reports that).
func ambiguousMember(body []byte) string {
	dec := json.NewDecoder(strings.NewReader(string(body)))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return ""
		}
		k, _ := t.(string)
		if seen[strings.ToLower(k)] {
			return k
		}
		seen[strings.ToLower(k)] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return ""
		}
	}
	return ""
}

// clip bounds what a provider wrote before it goes into an error.
func clip(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > 200 {
		i := 200
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		s = s[:i] + "…"
	}
	return s
}

// unwrapURLError drops *url.Error's method and URL prefix (the URL is
// named by the caller).
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
