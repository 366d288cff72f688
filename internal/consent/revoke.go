package consent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/credstore"
)

// Revocation is what Revoke did.
type Revocation struct {
	Deleted bool // a credential was stored, and is no longer
	// Provider says what the provider's revocation endpoint answered
	// ("" when none is configured or nothing was stored).
	Provider string
}

// Revoke deletes the credential of principal for server, after asking
// the provider's revocation endpoint (RFC 7009) to revoke its refresh
// token (or access token) when one is configured; by is who revoked it,
// for the audit stream. A provider that cannot be asked does not keep it
// stored: Provider says so.
func (f *Flow) Revoke(ctx context.Context, principal, server, by string) (Revocation, error) {
	var out Revocation
	line := auditstream.Credential{Event: auditstream.EventCredentialRevoked, Principal: principal, Upstream: server, By: by, Via: "cli"}
	unlock := f.o.Store.Lock(principal, server)
	defer unlock()
	notFound := fmt.Errorf("%s has no stored credential for %s; `airlock credentials list` shows what is stored", principal, server)
	if has, err := f.o.Store.Has(ctx, principal, server); err != nil {
		return out, err
	} else if !has {
		return out, notFound
	}
	_, sec, err := f.o.Store.Get(ctx, principal, server)
	switch {
	case errors.Is(err, credstore.ErrNotFound):
		return out, notFound
	case err != nil:
		out.Provider = "not told: the credential cannot be opened here (" + err.Error() + ")"
	default:
		out.Provider = f.revokeAtProvider(ctx, server, sec)
	}
	if out.Deleted, err = f.o.Store.Delete(ctx, principal, server); err != nil {
		return out, err
	}
	if !out.Deleted { // revoked meanwhile by someone else
		return out, notFound
	}
	line.Detail = out.Provider
	f.o.Audit.Credential(line)
	return out, nil
}

func (f *Flow) revokeAtProvider(ctx context.Context, server string, sec credstore.Secret) string {
	c := f.o.Upstreams(server)
	if c == nil {
		return "not told: " + server + " is no longer in the configuration"
	}
	if c.RevocationURL == "" {
		return "" // none configured
	}
	secret := f.o.Getenv(c.ClientSecretEnv)
	if secret == "" {
		return "not told: " + c.ClientSecretEnv + " is not set here"
	}
	tok, hint := sec.RefreshToken, "refresh_token"
	if tok == "" {
		tok, hint = sec.AccessToken, "access_token"
	}
	form := url.Values{"token": {tok}, "token_type_hint": {hint}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.RevocationURL, strings.NewReader(form.Encode()))
	if err != nil {
		return "not told: " + err.Error()
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(c.ClientID), url.QueryEscape(secret))
	resp, err := f.o.HTTPClient.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "not told: " + c.RevocationURL + ": " + clip(err.Error())
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return "the provider refused: " + resp.Status
	}
	return "revoked at the provider"
}
