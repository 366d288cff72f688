package consent

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/oauth2"

	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/credstore"
	"github.com/airlock-run/airlock/manifests"
)

// maxCodeLen bounds the authorization code the callback accepts.
const maxCodeLen = 4096

// Handler serves the start endpoint (manifests.ConsentStartPath) and the
// callback (manifests.ConsentCallbackPath).
func (f *Flow) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(manifests.ConsentStartPath, f.start)
	mux.HandleFunc(manifests.ConsentCallbackPath, f.callback)
	return mux
}

// cookieName is the browser binding of flow id: a cookie of its own per
// flow, so that two flows in one browser do not overwrite each other.
func cookieName(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "airlock_consent_" + hex.EncodeToString(sum[:8])
}

func (f *Flow) cookieValue(id string) (string, error) {
	keys := f.o.Store.Keys()
	if keys == nil {
		return "", errors.New(credstore.EnvKeys + " is not set")
	}
	_, mac, err := keys.MAC("", []byte("airlock consent browser v1\x00"+id))
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(mac), nil
}

// one returns the single value of query parameter name: a parameter
// given twice is refused (which of two states would be meant?).
func one(q url.Values, name string) (string, error) {
	v := q[name]
	switch {
	case len(v) == 0:
		return "", nil
	case len(v) > 1:
		return "", fmt.Errorf("the parameter %s is given %d times; open the link exactly as airlock gave it", name, len(v))
	}
	return v[0], nil
}

func (f *Flow) page(w http.ResponseWriter, status int, title, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	fmt.Fprintf(w, "<!doctype html><meta charset=utf-8><title>airlock: %s</title><h1>%s</h1><p>%s</p>\n", html.EscapeString(title), html.EscapeString(title), html.EscapeString(msg))
}

// gone is the answer to a link that can no longer be used.
func (f *Flow) gone(w http.ResponseWriter, err error) {
	msg := "This consent link is not known. Ask your agent to make the call again: it will give you a new link."
	switch {
	case errors.Is(err, credstore.ErrUsed):
		msg = "This consent link was used already; a link works once. Ask your agent to make the call again for a new one."
	case errors.Is(err, credstore.ErrExpired):
		msg = "This consent link has expired. Ask your agent to make the call again for a new one."
	}
	f.page(w, http.StatusGone, "consent link not usable", msg)
}

// start sends the browser to the provider: the flow's ID is the state,
// the flow's PKCE verifier's S256 challenge goes with it, and the cookie
// binds the flow to this browser.
func (f *Flow) start(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET")
		f.page(w, http.StatusMethodNotAllowed, "method not allowed", "Open the consent link in a browser (GET).")
		return
	}
	id, err := one(r.URL.Query(), "id")
	if err != nil {
		f.page(w, http.StatusBadRequest, "bad consent link", err.Error())
		return
	}
	p, err := f.o.Store.Peek(r.Context(), id)
	if credstore.IsGone(err) {
		f.gone(w, err)
		return
	}
	if err != nil {
		f.o.Log.Error().Err(err).Msg("consent start: reading the flow")
		f.page(w, http.StatusInternalServerError, "consent unavailable", "airlock cannot read the consent flow; try again later.")
		return
	}
	c, err := f.config(p.Upstream)
	var oc *oauth2.Config
	if err == nil {
		oc, err = f.oauth(c)
	}
	if err != nil {
		f.o.Log.Error().Err(err).Str("upstream", p.Upstream).Msg("consent start")
		f.page(w, http.StatusServiceUnavailable, "consent unavailable", "airlock is not configured to authorize "+p.Upstream+": "+err.Error())
		return
	}
	val, err := f.cookieValue(id)
	if err != nil {
		f.page(w, http.StatusServiceUnavailable, "consent unavailable", err.Error())
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName(id), Value: val, Path: "/oauth/consent/", MaxAge: int(f.o.TTL.Seconds()),
		HttpOnly: true, Secure: strings.HasPrefix(c.RedirectURL, "https:"), SameSite: http.SameSiteLaxMode})
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	http.Redirect(w, r, oc.AuthCodeURL(id, oauth2.S256ChallengeOption(p.Verifier)), http.StatusFound)
}

// callback redeems the code of a flow that this browser started, once,
// and stores what the provider issued.
func (f *Flow) callback(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		f.page(w, http.StatusMethodNotAllowed, "method not allowed", "The provider sends the browser here with GET.")
		return
	}
	q := r.URL.Query()
	state, err1 := one(q, "state")
	code, err2 := one(q, "code")
	perr, err3 := one(q, "error")
	if err := errors.Join(err1, err2, err3); err != nil {
		f.page(w, http.StatusBadRequest, "bad callback", err.Error())
		return
	}
	if !credstore.ValidID(state) {
		f.page(w, http.StatusBadRequest, "bad callback", "the state parameter is not one airlock issued.")
		return
	}
	if len(code) > maxCodeLen {
		f.page(w, http.StatusBadRequest, "bad callback", fmt.Sprintf("the code is longer than %d bytes.", maxCodeLen))
		return
	}
	want, err := f.cookieValue(state)
	if err != nil {
		f.page(w, http.StatusServiceUnavailable, "consent unavailable", err.Error())
		return
	}
	// The browser that comes back must be the one that started: else a
	// link (or a code) of one user could finish another's flow.
	ck, err := r.Cookie(cookieName(state))
	if err != nil || !hmac.Equal([]byte(ck.Value), []byte(want)) {
		f.o.Log.Warn().Msg("consent callback refused: this browser did not start the flow")
		f.page(w, http.StatusForbidden, "not your consent", "This browser did not open this consent link. Open the link your agent gave you, in this browser, and authorize from there.")
		return
	}
	p, err := f.o.Store.Take(r.Context(), state)
	if credstore.IsGone(err) {
		f.gone(w, err)
		return
	}
	if err != nil {
		f.o.Log.Error().Err(err).Msg("consent callback: using up the flow")
		f.page(w, http.StatusInternalServerError, "consent unavailable", "airlock cannot read the consent flow; ask your agent to make the call again.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName(state), Value: "", Path: "/oauth/consent/", MaxAge: -1, HttpOnly: true})
	line := auditstream.Credential{Principal: p.Principal, Upstream: p.Upstream, Via: "consent"}
	if perr != "" || code == "" {
		why := "the provider returned no code"
		if perr != "" {
			why = "the provider answered " + clip(perr)
		}
		line.Event, line.Detail = auditstream.EventCredentialRefused, why
		f.o.Audit.Credential(line)
		f.page(w, http.StatusOK, "not authorized", "Nothing was stored: "+why+". Your agent's call did not run; make it again to retry.")
		return
	}
	c, err := f.config(p.Upstream)
	var oc *oauth2.Config
	if err == nil {
		oc, err = f.oauth(c)
	}
	if err != nil {
		f.page(w, http.StatusServiceUnavailable, "consent unavailable", err.Error())
		return
	}
	tok, err := oc.Exchange(f.ctx(r.Context()), code, oauth2.VerifierOption(p.Verifier))
	if err == nil {
		err = checkToken(tok)
	}
	if err != nil {
		line.Event, line.Detail = auditstream.EventCredentialRefused, "redeeming the code: "+providerError(err)
		f.o.Audit.Credential(line)
		f.o.Log.Warn().Str("principal", p.Principal).Str("upstream", p.Upstream).Str("error", providerError(err)).Msg("consent callback: the provider did not redeem the code")
		f.page(w, http.StatusBadGateway, "not authorized", "The provider did not accept the authorization ("+providerError(err)+"). Nothing was stored; make the call again to retry.")
		return
	}
	now := f.now().UTC()
	rec := credstore.Record{Principal: p.Principal, Upstream: p.Upstream, Scopes: c.Scopes, Obtained: now, Expiry: tok.Expiry.UTC()}
	if sc := grantedScopes(tok); sc != nil {
		rec.Scopes = sc
	}
	if err := f.o.Store.Put(r.Context(), rec, credstore.Secret{AccessToken: tok.AccessToken, RefreshToken: tok.RefreshToken}); err != nil {
		f.o.Log.Error().Err(err).Msg("consent callback: storing the credential")
		f.page(w, http.StatusInternalServerError, "not stored", "airlock could not store the authorization; make the call again to retry.")
		return
	}
	f.complete(state)
	line.Event, line.Scopes = auditstream.EventCredentialStored, rec.Scopes
	f.o.Audit.Credential(line)
	f.o.Log.Info().Str("principal", p.Principal).Str("upstream", p.Upstream).Strs("scopes", rec.Scopes).Msg("consent: credential stored")
	f.page(w, http.StatusOK, "authorized", fmt.Sprintf("airlock may now call %s as %s. Go back to your agent: its call can be made again.", p.Upstream, p.Principal))
}
