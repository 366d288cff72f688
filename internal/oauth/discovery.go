package oauth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
)

var osGetenv = os.Getenv

func base64URLDecode(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}

// retryDiscoveryAfter spaces the attempts to discover an issuer that
// failed, so a down provider is not asked once per request.
const retryDiscoveryAfter = 5 * time.Second

// serverMetadata is what airlock reads of an authorization server's
// metadata (OpenID Connect Discovery or RFC 8414).
type serverMetadata struct {
	Issuer  string `json:"issuer"`
	JWKSURI string `json:"jwks_uri"`
}

// getVerifier discovers the issuer's key set once (retrying later after a
// failure) and returns its verifier. The key set (jwks.go) is fetched again
// on a schedule, so a withdrawn key stops verifying, and when a token names
// a key ID it does not hold, which is how a rotation is followed: that at
// most once per is.cooldown.
func (is *issuer) getVerifier(ctx context.Context, algs []string, now func() time.Time) (*oidc.IDTokenVerifier, *keySet, error) {
	is.mu.Lock()
	defer is.mu.Unlock()
	if is.verifier != nil {
		return is.verifier, is.keys, nil
	}
	if is.lastErr != nil && time.Since(is.lastTry) < retryDiscoveryAfter {
		return nil, nil, is.lastErr
	}
	jwks := is.cfg.JWKSURL
	if jwks == "" {
		md, err := discover(ctx, is.client, is.cfg.URL)
		if err != nil {
			is.lastErr, is.lastTry = err, time.Now()
			return nil, nil, err
		}
		jwks = md.JWKSURI
	}
	is.keys = newKeySet(is.client, jwks, is.cooldown, now, algs)
	is.verifier = oidc.NewVerifier(is.cfg.URL, is.keys, &oidc.Config{
		ClientID:             is.cfg.Audience,
		SupportedSigningAlgs: slices.Clone(algs),
		Now:                  now,
	})
	return is.verifier, is.keys, nil
}

// discover reads the issuer's OpenID Connect discovery document, or its
// RFC 8414 authorization server metadata, and checks that it names the
// issuer (a metadata document for another issuer is refused, as both
// specifications require).
func discover(ctx context.Context, c *http.Client, iss string) (*serverMetadata, error) {
	u, err := url.Parse(iss)
	if err != nil {
		return nil, fmt.Errorf("issuer %q: %v", iss, err)
	}
	p := strings.TrimSuffix(u.EscapedPath(), "/")
	urls := []string{
		strings.TrimSuffix(iss, "/") + "/.well-known/openid-configuration",
		u.Scheme + "://" + u.Host + "/.well-known/oauth-authorization-server" + p,
	}
	var errs []string
	for _, mu := range urls {
		md, err := fetchMetadata(ctx, c, mu)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if md.Issuer != iss {
			return nil, fmt.Errorf("the metadata at %s names issuer %q, not %q; fix principals_from_tokens.issuers[].issuer to the exact issuer identifier", mu, md.Issuer, iss)
		}
		if md.JWKSURI == "" {
			return nil, fmt.Errorf("the metadata at %s has no jwks_uri; set principals_from_tokens.issuers[].jwks_url", mu)
		}
		return md, nil
	}
	return nil, fmt.Errorf("discovery failed: %s", strings.Join(errs, "; "))
}

func fetchMetadata(ctx context.Context, c *http.Client, u string) (*serverMetadata, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := readLimited(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", u, resp.Status)
	}
	var md serverMetadata
	if err := json.Unmarshal(b, &md); err != nil {
		return nil, fmt.Errorf("%s: not JSON metadata: %v", u, err)
	}
	return &md, nil
}

// introspect asks the issuer's RFC 7662 endpoint about an opaque token and
// returns its claims when it is active, issued by this issuer, for this
// audience and within its validity.
func (v *Verifier) introspect(ctx context.Context, is *issuer, raw string) (map[string]any, error) {
	in := is.cfg.Introspection
	form := url.Values{"token": {raw}, "token_type_hint": {"access_token"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, in.URL, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, invalid("introspection: %v", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.SetBasicAuth(url.QueryEscape(in.ClientID), url.QueryEscape(v.getenv(in.ClientSecretEnv)))
	resp, err := is.client.Do(req)
	if err != nil {
		return nil, invalid("introspection at %s failed: %v", in.URL, err)
	}
	defer resp.Body.Close()
	b, err := readLimited(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, invalid("introspection at %s answered %s", in.URL, resp.Status)
	}
	var claims map[string]any
	if err := json.Unmarshal(b, &claims); err != nil {
		return nil, invalid("introspection at %s: not JSON: %v", in.URL, err)
	}
	if active, _ := claims["active"].(bool); !active {
		return nil, invalid("the token is not active (introspection says it is expired, revoked or unknown)")
	}
	if iss, ok := claims["iss"].(string); ok && iss != is.cfg.URL {
		return nil, invalid("wrong issuer: introspection says %q, expected %q", iss, is.cfg.URL)
	}
	if !audienceHas(claims["aud"], is.cfg.Audience) {
		return nil, invalid("wrong audience: the token is not for this resource (%s); request it with resource=%s (RFC 8707)", is.cfg.Audience, is.cfg.Audience)
	}
	now := v.now()
	if exp, ok := claims["exp"].(float64); ok && now.After(time.Unix(int64(exp), 0)) {
		return nil, invalid("token expired at %s", time.Unix(int64(exp), 0).UTC().Format(time.RFC3339))
	}
	if nbf, ok := claims["nbf"].(float64); ok && now.Before(time.Unix(int64(nbf), 0)) {
		return nil, invalid("token not yet valid (nbf %s)", time.Unix(int64(nbf), 0).UTC().Format(time.RFC3339))
	}
	if _, ok := claims["exp"].(float64); !ok {
		// Cache it no longer than cacheTTL; introspection is asked again then.
		claims["exp"] = float64(now.Add(cacheTTL).Unix())
	}
	return claims, nil
}

func audienceHas(aud any, want string) bool {
	switch a := aud.(type) {
	case string:
		return a == want
	case []any:
		for _, x := range a {
			if s, ok := x.(string); ok && s == want {
				return true
			}
		}
	}
	return false
}
