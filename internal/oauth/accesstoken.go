package oauth

import (
	"encoding/json"
	"errors"
	"strings"
	"time"
)

// DefaultMaxTokenLifetime bounds exp - iat of a JWT access token when
// Options name no bound: a day, the longest default lifetime of the common
// providers' access tokens (Auth0's); most issue them for an hour or less.
const DefaultMaxTokenLifetime = 24 * time.Hour

// issuedAtLeeway is how far in the future a token's iat may be: the
// leeway go-oidc gives nbf, since providers set both to the same instant.
const issuedAtLeeway = 5 * time.Minute

// idTokenClaims are claims only an OpenID Connect ID token carries
// (OpenID Connect Core 1.0 section 2 and 3.1.3.6, 3.3.2.11): an access
// token of RFC 9068 has none of them.
var idTokenClaims = []string{"nonce", "at_hash", "c_hash"}

// checkAccessToken refuses a verified JWT that is not an access token, or
// whose times are not believable:
//
//   - typ (RFC 9068 section 2.1): "at+jwt" (or "application/at+jwt")
//     says it is an access token. Many providers still sign access tokens
//     with typ "JWT" or none; those are accepted unless they carry an ID
//     token's marks: Keycloak's typ claim "ID", or, without Keycloak's
//     typ claim "Bearer", a claim only ID tokens carry (nonce, at_hash,
//     c_hash). Any other typ (an ID token's
//     "id_token+jwt", a logout token, a DPoP proof...) is refused.
//   - iat no later than now plus issuedAtLeeway.
//   - exp - iat (or exp - now, without iat) at most maxLifetime.
func checkAccessToken(raw string, claims map[string]any, now time.Time, maxLifetime time.Duration) *Error {
	typ, err := headerType(raw)
	if err != nil {
		return invalid("malformed JWT header: %v", err)
	}
	switch t := strings.TrimPrefix(strings.ToLower(typ), "application/"); t {
	case "at+jwt":
	case "", "jwt":
		ct, _ := claims["typ"].(string)
		if strings.EqualFold(ct, "ID") {
			return invalid(`the token is an ID token (its typ claim is %q), not an access token; send the access token the provider issued for this resource`, ct)
		}
		if strings.EqualFold(ct, "Bearer") {
			break // Keycloak's access tokens (before Keycloak 24 they carried the nonce too)
		}
		for _, c := range idTokenClaims {
			if _, ok := claims[c]; ok {
				return invalid("the token is an ID token (it carries %s, which only ID tokens do), not an access token; send the access token the provider issued for this resource", c)
			}
		}
	default:
		return invalid(`the token's typ %q is not an access token's ("at+jwt", RFC 9068); send the access token the provider issued for this resource`, typ)
	}
	exp, _ := claims["exp"].(float64)
	expiry := time.Unix(int64(exp), 0)
	if iat, ok := claims["iat"].(float64); ok { // go-oidc refused one that is not a number
		issued := time.Unix(int64(iat), 0)
		if issued.After(now.Add(issuedAtLeeway)) {
			return invalid("the token was issued in the future (iat %s, now %s, leeway %s); check the clocks of the provider and of airlock",
				issued.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), issuedAtLeeway)
		}
		if life := expiry.Sub(issued); life > maxLifetime {
			return invalid("the token is valid for %s (iat to exp), longer than principals_from_tokens.max_token_lifetime (%s); issue shorter-lived access tokens or raise the bound",
				life, maxLifetime)
		}
	} else if left := expiry.Sub(now); left > maxLifetime {
		return invalid("the token (without iat) is valid for %s more, longer than principals_from_tokens.max_token_lifetime (%s); issue shorter-lived access tokens or raise the bound",
			left.Round(time.Second), maxLifetime)
	}
	return nil
}

// headerType reads the typ of a JWT's protected header (whose signature
// was verified).
func headerType(raw string) (string, error) {
	h, _, _ := strings.Cut(raw, ".")
	b, err := base64URLDecode(h)
	if err != nil {
		return "", err
	}
	var hdr struct {
		Typ any `json:"typ"`
	}
	if err := json.Unmarshal(b, &hdr); err != nil {
		return "", err
	}
	switch t := hdr.Typ.(type) {
	case nil:
		return "", nil
	case string:
		return t, nil
	}
	return "", errors.New("typ is not a string")
}
