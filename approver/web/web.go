package web

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/redact"
)

// Options configure the approvals page.
type Options struct {
	Temporal  client.Client
	Namespace string
	// Directory authenticates the API keys people log in with.
	Directory *identity.Directory
	// Path is where the page is mounted (default "/approvals"); its forms
	// post to Path/login, Path/decide and Path/logout.
	Path string
	// SessionTTL bounds one login (default 8h).
	SessionTTL time.Duration
	// Secret signs session cookies. Default: random for this process, so a
	// restart logs everyone out. Only tests set it.
	Secret []byte
	// Now is the clock (tests).
	Now func() time.Time
	// Audit receives a line per decision made on the page and per failed
	// login (nil: none).
	Audit *auditstream.Log
	// Groups are the approver groups' members (config GroupMembers), so the
	// page can tell a principal in no group why its list is empty. Nil:
	// not said.
	Groups map[string][]string
	// CurrentGroups, when set, gives Groups at each request instead: the
	// configuration reloads without a restart.
	CurrentGroups func() map[string][]string
	// FailedLogins bounds failed logins per client address: at most this
	// many in a burst (default 5), refilled one per FailedLoginEvery
	// (default 1 minute). Over it, logins from that address get 429 with
	// Retry-After until a token is back.
	FailedLogins     int
	FailedLoginEvery time.Duration
}

// Cookie names; both are scoped to the page's path.
const (
	SessionCookie = "airlock_approvals_session"
	flashCookie   = "airlock_approvals_flash"
	// deviceCookie marks a browser that has logged in before: its login
	// attempts are limited on their own, not with its address's.
	deviceCookie = "airlock_approvals_device"
)

// deviceTTL is how long a browser stays known after its last login.
const deviceTTL = 30 * 24 * time.Hour

// maxForm bounds a posted form.
const maxForm = 64 << 10

// maxShownArgs bounds the arguments shown on the page.
const maxShownArgs = 32 << 10

// Handler serves the approvals page: a login with an API key, then the
// pending requests the principal may decide, each with Approve and Deny.
// It keeps no state but a signing secret: the session is a signed cookie
// naming the principal (never the key), forms carry a CSRF token derived
// from the session, and cross-site posts are refused.
func Handler(o Options) (http.Handler, error) {
	if o.Temporal == nil {
		return nil, errors.New("approvals page: no Temporal client to read and decide requests with")
	}
	if o.Directory == nil || o.Directory.Empty() {
		return nil, errors.New("approvals page: no principals are configured, so nobody could log in; add principals with api_key_sha256 to the configuration")
	}
	if o.Path == "" {
		o.Path = "/approvals"
	}
	o.Path = "/" + strings.Trim(o.Path, "/")
	if o.SessionTTL <= 0 {
		o.SessionTTL = 8 * time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if len(o.Secret) == 0 {
		o.Secret = make([]byte, 32)
		if _, err := rand.Read(o.Secret); err != nil {
			return nil, fmt.Errorf("approvals page: making a session secret: %w", err)
		}
	} else if len(o.Secret) < 16 {
		return nil, errors.New("approvals page: the session secret must be at least 16 bytes")
	}
	if o.FailedLogins <= 0 {
		o.FailedLogins = 5
	}
	if o.FailedLoginEvery <= 0 {
		o.FailedLoginEvery = time.Minute
	}
	return &handler{o: o, local: approver.Local{Temporal: o.Temporal, Namespace: o.Namespace, Audit: o.Audit},
		logins: newLoginLimiter(o.FailedLogins, o.FailedLoginEvery)}, nil
}

type handler struct {
	o      Options
	local  approver.Local
	logins *loginLimiter
}

// session is what the session cookie holds, signed.
type session struct {
	Principal string `json:"p"`
	Expires   int64  `json:"e"` // unix seconds
	Nonce     string `json:"n"` // per login, so each login has its own CSRF token
}

// device is what the device cookie holds, signed: the browser's own name
// in the login limiter.
type device struct {
	Principal string `json:"p"`
	Expires   int64  `json:"e"` // unix seconds
	Nonce     string `json:"n"`
}

type flash struct {
	OK  bool   `json:"ok"`
	Msg string `json:"m"`
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Cache-Control", "no-store")

	switch strings.TrimSuffix(r.URL.Path, "/") {
	case h.o.Path:
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.methodNotAllowed(w, "GET")
			return
		}
		h.page(w, r)
	case h.o.Path + "/login", h.o.Path + "/decide", h.o.Path + "/logout":
		switch {
		case r.Method == http.MethodPost:
		case r.Method == http.MethodGet || r.Method == http.MethodHead:
			// A reload or a bookmark of a form's address (after a failed
			// login the address bar shows /login): show the page.
			http.Redirect(w, r, h.o.Path, http.StatusSeeOther)
			return
		default:
			h.methodNotAllowed(w, "POST")
			return
		}
		switch strings.TrimPrefix(strings.TrimSuffix(r.URL.Path, "/"), h.o.Path) {
		case "/login":
			h.login(w, r)
		case "/decide":
			h.decide(w, r)
		default:
			h.logout(w, r)
		}
	default:
		h.render(w, http.StatusNotFound, view{Path: h.o.Path, Error: "no such page; the approvals are at " + h.o.Path})
	}
}

func (h *handler) methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	h.render(w, http.StatusMethodNotAllowed, view{Path: h.o.Path, Error: "method not allowed; open " + h.o.Path + " in a browser"})
}

// page shows the login form, or the requests the principal may decide.
func (h *handler) page(w http.ResponseWriter, r *http.Request) {
	v := view{Path: h.o.Path}
	if f, ok := h.takeFlash(w, r); ok {
		if f.OK {
			v.Notice = f.Msg
		} else {
			v.Error = f.Msg
		}
	}
	s, cookie, ok := h.session(r)
	if !ok {
		if c, err := r.Cookie(SessionCookie); err == nil && c.Value != "" && v.Error == "" {
			v.Error = "your session has expired; log in again with your API key"
			http.SetCookie(w, h.cookie(r, SessionCookie, "", time.Time{}))
		}
		h.render(w, http.StatusOK, v)
		return
	}
	v.Principal, v.CSRF = s.Principal, h.csrf(cookie)
	if h.o.Groups != nil || h.o.CurrentGroups != nil {
		v.InGroups = h.groupsOf(s.Principal)
		v.NoGroup = len(v.InGroups) == 0
	}
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	reqs, err := h.local.List(ctx)
	if err != nil {
		v.Error = "cannot read the pending requests: " + err.Error()
		h.render(w, http.StatusServiceUnavailable, v)
		return
	}
	now := h.o.Now()
	for _, req := range reqs {
		if approver.MayDecide(req, s.Principal, now) != nil {
			v.Others++
			continue
		}
		v.Requests = append(v.Requests, h.item(req, now))
	}
	h.render(w, http.StatusOK, v)
}

func (h *handler) item(r api.ApprovalRequest, now time.Time) item {
	args := redact.Visible(redact.PrettyArguments(r.Arguments, r.Redact))
	if len(args) > maxShownArgs {
		args = args[:maxShownArgs] + fmt.Sprintf("\n… (%d more bytes; airlock approvals show %s prints them all)", len(args)-maxShownArgs, r.ID)
	}
	requester := r.Principal
	if r.Client != "" {
		requester += " (client " + r.Client + ")"
	}
	acts := ""
	if r.ActsAs != "" { // token exchange: whom the call acts as, until when, whether the grant is held
		acts = redact.VisibleLine(approver.ActsAsNote(r.ActsAs, r.ActsUntil, r.ActsHeld, now.After(r.ActsUntil), stamp))
	}
	return item{
		Acts: acts,
		ID:   r.ID, Task: r.TaskID, Tool: r.Tool, Server: r.Server, Requester: redact.Visible(requester),
		SideEffects: strings.Join(r.SideEffects, ", "), DataLevel: r.DataLevel, Risk: r.Risk,
		Rule: r.Rule, Reason: redact.Visible(r.Reason), Group: r.Group, Quorum: r.Quorum, Approvals: r.Approvals(),
		ExpiresIn: approver.ExpiresIn(r, now), OnTimeout: r.OnTimeout, Digest: r.Digest, ShortDigest: approver.ShortDigest(r.Digest),
		RequestedAt: stamp(r.RequestedAt), ExpiresAt: stamp(r.ExpiresAt), RequestedAgo: ago(r.RequestedAt, now),
		Arguments: args, Redact: strings.Join(r.Redact, ", "), MaxGrant: r.MaxGrant,
		EditArgs: approver.EditableArguments(r), EditOf: r.EditOf, EditedBy: r.EditedBy,
		Program: redact.VisibleLine(approver.ProgramNote(r.Program, r.Line)),
	}
}

func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	v := view{Path: h.o.Path}
	if err := h.sameOrigin(r); err != nil {
		v.Error = err.Error()
		h.render(w, http.StatusForbidden, v)
		return
	}
	// Failed logins are counted per client address, except from a browser
	// that has logged in before (a valid device cookie): its attempts have
	// their own bucket, so guesses from elsewhere behind the same address
	// (a NAT, a proxy) cannot lock its owner out.
	bucket, from := "addr:"+clientAddr(r), "address"
	if d, ok := h.device(r); ok {
		bucket, from = "device:"+d.Nonce, "browser"
	}
	if wait := h.logins.locked(bucket, h.o.Now()); wait > 0 {
		secs := int(wait.Seconds() + 0.999)
		h.authFailed(r, http.StatusTooManyRequests, "too many failed logins from this "+from)
		w.Header().Set("Retry-After", fmt.Sprint(secs))
		v.Error = fmt.Sprintf("too many failed logins from this %s: wait %d s before trying again", from, secs)
		h.render(w, http.StatusTooManyRequests, v)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		v.Error = "cannot read the form: " + err.Error()
		h.render(w, http.StatusBadRequest, v)
		return
	}
	p, err := approver.AuthenticateKey(h.o.Directory, r.PostForm.Get("key"))
	if err != nil {
		reason := "login failed"
		switch {
		case errors.Is(err, identity.ErrNoCredentials):
			reason = "no API key entered"
			v.Error = "enter your API key (the key your agent sends as Authorization: Bearer <key>)"
		case errors.Is(err, identity.ErrUnknownKey):
			reason = "unknown API key"
			v.Error = "that API key is not recognised: check it, or ask an operator to add its SHA-256 to principals[].api_key_sha256 (airlock keys hash KEY prints it)"
		default:
			v.Error = "login failed: " + err.Error()
		}
		h.logins.failed(bucket, h.o.Now())
		h.authFailed(r, http.StatusUnauthorized, reason)
		h.render(w, http.StatusUnauthorized, v)
		return
	}
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		v.Error = "login failed: " + err.Error()
		h.render(w, http.StatusInternalServerError, v)
		return
	}
	exp := h.o.Now().Add(h.o.SessionTTL)
	value := h.sign("session", mustJSON(session{Principal: p.Name, Expires: exp.Unix(), Nonce: base64.RawURLEncoding.EncodeToString(nonce)}))
	http.SetCookie(w, h.cookie(r, SessionCookie, value, exp))
	devNonce := make([]byte, 16)
	if _, err := rand.Read(devNonce); err == nil {
		dexp := h.o.Now().Add(deviceTTL)
		dv := h.sign("device", mustJSON(device{Principal: p.Name, Expires: dexp.Unix(), Nonce: base64.RawURLEncoding.EncodeToString(devNonce)}))
		http.SetCookie(w, h.cookie(r, deviceCookie, dv, dexp))
	}
	h.redirect(w, r, flash{OK: true, Msg: "logged in as " + p.Name})
}

func (h *handler) logout(w http.ResponseWriter, r *http.Request) {
	if _, _, ok := h.checkPost(w, r); !ok {
		return
	}
	http.SetCookie(w, h.cookie(r, SessionCookie, "", time.Time{}))
	h.redirect(w, r, flash{OK: true, Msg: "logged out"})
}

func (h *handler) decide(w http.ResponseWriter, r *http.Request) {
	s, _, ok := h.checkPost(w, r)
	if !ok {
		return
	}
	f := r.PostForm
	id, digest := strings.TrimSpace(f.Get("id")), strings.TrimSpace(f.Get("digest"))
	var approve bool
	var edited json.RawMessage
	switch f.Get("action") {
	case "approve":
		approve = true
	case "approve-edits": // approve with edits (edits.go)
		approve, edited = true, json.RawMessage(f.Get("arguments"))
		if len(edited) == 0 {
			edited = json.RawMessage(" ") // refused by name: no arguments
		}
	case "deny":
	default:
		h.render(w, http.StatusBadRequest, view{Path: h.o.Path, Principal: s.Principal, Error: "the form names no action: press Approve or Deny"})
		return
	}
	if id == "" || digest == "" {
		h.render(w, http.StatusBadRequest, view{Path: h.o.Path, Principal: s.Principal, Error: "the form lacks the request ID or digest; reload " + h.o.Path + " and decide again"})
		return
	}
	comment := strings.TrimSpace(f.Get("comment"))
	if len(comment) > 1000 {
		comment = comment[:1000]
	}
	grant, err := api.ParseGrant(f.Get("grant_calls"), f.Get("grant_for"), f.Get("grant_principal") != "")
	if err != nil {
		h.redirect(w, r, flash{Msg: "Not recorded: " + err.Error()})
		return
	}
	if !approve {
		grant = nil // the grant fields belong to Approve
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	res, req, err := h.local.DecideOn(ctx, approver.Decision{RequestID: id, Approver: s.Principal, Approve: approve, Via: "web", Comment: comment, Digest: digest, Arguments: edited, Grant: grant})
	var ref *approver.Refusal
	switch {
	case errors.As(err, &ref) && ref.Repeat:
		h.redirect(w, r, flash{Msg: "Already decided: " + ref.Reason})
	case errors.As(err, &ref):
		h.redirect(w, r, flash{Msg: "Refused: " + ref.Reason})
	case err != nil:
		h.redirect(w, r, flash{Msg: "Not recorded: " + err.Error()})
	default:
		h.redirect(w, r, flash{OK: true, Msg: decidedNotice(approve, res, req)})
	}
}

// decidedNotice says what a recorded decision did: which call (tool, task,
// arguments as shown, masked) and what happens to it now.
func decidedNotice(approve bool, res api.DecideResult, r api.ApprovalRequest) string {
	what := res.RequestID
	if r.Tool != "" {
		args := redact.Visible(string(redact.Arguments(r.Arguments, r.Redact)))
		if len(args) > 300 {
			args = args[:300] + "…"
		}
		what = fmt.Sprintf("%s %s (request %s, task %s)", r.Tool, args, res.RequestID, r.TaskID)
	}
	var next string
	switch res.State {
	case api.ApprovalApproved:
		next = "The call runs now; its result goes to the agent."
	case api.ApprovalDenied:
		next = "The call will not run; the agent is told it was denied."
	case api.ApprovalPending:
		next = "The call still waits for the other approvals it needs."
	}
	if res.EditDigest != "" {
		next = approver.EditOutcome(res)
	}
	return strings.TrimSpace(fmt.Sprintf("Your %s of %s is recorded: %s. %s", verb(approve), what, res.Message, next))
}

// groupsOf lists the approver groups name belongs to, sorted.
func (h *handler) groupsOf(name string) []string {
	var out []string
	groups := h.o.Groups
	if h.o.CurrentGroups != nil {
		groups = h.o.CurrentGroups()
	}
	for g, members := range groups {
		if slices.Contains(members, name) {
			out = append(out, g)
		}
	}
	slices.Sort(out)
	return out
}

// authFailed records a refused login (never the key) in the audit stream.
func (h *handler) authFailed(r *http.Request, status int, reason string) {
	h.o.Audit.AuthFailed(auditstream.AuthFailure{Channel: "web", Status: status, Reason: reason, Method: r.Method, Path: r.URL.Path, Remote: r.RemoteAddr})
}

// stamp prints an absolute time the way the CLI does, in UTC.
func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// ago says how long before now t was, to the minute (seconds under one).
func ago(t, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		return d.Truncate(time.Second).String() + " ago"
	default:
		return strings.TrimSuffix(d.Truncate(time.Minute).String(), "0s") + " ago"
	}
}

func verb(approve bool) string {
	if approve {
		return "approval"
	}
	return "denial"
}

// checkPost admits a form post from a logged-in principal of this site
// with the session's CSRF token. Otherwise it answers and reports false.
func (h *handler) checkPost(w http.ResponseWriter, r *http.Request) (session, string, bool) {
	if err := h.sameOrigin(r); err != nil {
		h.render(w, http.StatusForbidden, view{Path: h.o.Path, Error: err.Error()})
		return session{}, "", false
	}
	s, cookie, ok := h.session(r)
	if !ok {
		h.render(w, http.StatusUnauthorized, view{Path: h.o.Path, Error: "your session has expired or you are not logged in; log in again with your API key"})
		return session{}, "", false
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		h.render(w, http.StatusBadRequest, view{Path: h.o.Path, Principal: s.Principal, Error: "cannot read the form: " + err.Error()})
		return session{}, "", false
	}
	got := r.PostForm.Get("csrf")
	if got == "" || !hmac.Equal([]byte(got), []byte(h.csrf(cookie))) {
		h.render(w, http.StatusForbidden, view{Path: h.o.Path, Principal: s.Principal,
			Error: "this form has no valid CSRF token (it is stale, or it came from another page); reload " + h.o.Path + " and try again"})
		return session{}, "", false
	}
	return s, cookie, true
}

// sameOrigin refuses requests a browser marks as coming from another site:
// Sec-Fetch-Site, else Origin, else Referer, when present.
func (h *handler) sameOrigin(r *http.Request) error {
	const refuse = "cross-site form posts are refused: open %s on this host and use its forms"
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return fmt.Errorf(refuse, h.o.Path)
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if o == "null" || err != nil || !strings.EqualFold(u.Host, r.Host) {
			return fmt.Errorf(refuse, h.o.Path)
		}
		return nil
	}
	if ref := r.Header.Get("Referer"); ref != "" {
		u, err := url.Parse(ref)
		if err != nil || !strings.EqualFold(u.Host, r.Host) {
			return fmt.Errorf(refuse, h.o.Path)
		}
	}
	return nil
}

// session returns the valid session of the request and its cookie value.
func (h *handler) session(r *http.Request) (session, string, bool) {
	c, err := r.Cookie(SessionCookie)
	if err != nil || c.Value == "" {
		return session{}, "", false
	}
	payload, ok := h.verify("session", c.Value)
	if !ok {
		return session{}, "", false
	}
	var s session
	if json.Unmarshal(payload, &s) != nil || s.Principal == "" || !h.o.Now().Before(time.Unix(s.Expires, 0)) {
		return session{}, "", false
	}
	if _, ok := h.o.Directory.Lookup(s.Principal); !ok {
		return session{}, "", false
	}
	return s, c.Value, true
}

// device returns the request's valid device cookie: a browser that logged
// in within deviceTTL.
func (h *handler) device(r *http.Request) (device, bool) {
	c, err := r.Cookie(deviceCookie)
	if err != nil || c.Value == "" {
		return device{}, false
	}
	payload, ok := h.verify("device", c.Value)
	if !ok {
		return device{}, false
	}
	var d device
	if json.Unmarshal(payload, &d) != nil || d.Nonce == "" || !h.o.Now().Before(time.Unix(d.Expires, 0)) {
		return device{}, false
	}
	return d, true
}

// csrf is the CSRF token of a session: a MAC of its cookie.
func (h *handler) csrf(cookie string) string {
	m := hmac.New(sha256.New, h.o.Secret)
	m.Write([]byte("csrf\x00" + cookie))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// sign returns payload.MAC, both base64url; purpose separates the uses of
// the secret.
func (h *handler) sign(purpose string, payload []byte) string {
	p := base64.RawURLEncoding.EncodeToString(payload)
	m := hmac.New(sha256.New, h.o.Secret)
	m.Write([]byte(purpose + "\x00" + p))
	return p + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (h *handler) verify(purpose, value string) ([]byte, bool) {
	p, mac, ok := strings.Cut(value, ".")
	if !ok {
		return nil, false
	}
	got, err := base64.RawURLEncoding.DecodeString(mac)
	if err != nil {
		return nil, false
	}
	m := hmac.New(sha256.New, h.o.Secret)
	m.Write([]byte(purpose + "\x00" + p))
	if !hmac.Equal(got, m.Sum(nil)) {
		return nil, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(p)
	return payload, err == nil
}

// cookie builds a cookie of the page; a zero expiry deletes it.
func (h *handler) cookie(r *http.Request, name, value string, exp time.Time) *http.Cookie {
	c := &http.Cookie{Name: name, Value: value, Path: h.o.Path, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil}
	if exp.IsZero() {
		c.MaxAge = -1
	} else {
		c.Expires = exp
		c.MaxAge = max(int(exp.Sub(h.o.Now()).Seconds()), 1)
	}
	return c
}

// redirect answers a post with 303 to the page, carrying f in a short-lived
// signed cookie.
func (h *handler) redirect(w http.ResponseWriter, r *http.Request, f flash) {
	if len(f.Msg) > 1500 { // cookies hold about 4 KB
		f.Msg = f.Msg[:1500] + "…"
	}
	http.SetCookie(w, h.cookie(r, flashCookie, h.sign("flash", mustJSON(f)), h.o.Now().Add(time.Minute)))
	http.Redirect(w, r, h.o.Path, http.StatusSeeOther)
}

func (h *handler) takeFlash(w http.ResponseWriter, r *http.Request) (flash, bool) {
	c, err := r.Cookie(flashCookie)
	if err != nil {
		return flash{}, false
	}
	http.SetCookie(w, h.cookie(r, flashCookie, "", time.Time{}))
	payload, ok := h.verify("flash", c.Value)
	var f flash
	if !ok || json.Unmarshal(payload, &f) != nil {
		return flash{}, false
	}
	return f, true
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v) // plain structs of strings and numbers
	return b
}

type view struct {
	Path      string
	Principal string
	CSRF      string
	Notice    string
	Error     string
	Requests  []item
	Others    int // pending requests this principal may not decide
	// InGroups are the approver groups of the principal; NoGroup is set
	// when the page knows the groups and the principal is in none.
	InGroups []string
	NoGroup  bool
}

type item struct {
	ID, Task, Tool, Server, Requester         string
	SideEffects, DataLevel, Risk              string
	Rule, Reason, Group                       string
	Quorum, Approvals                         int
	ExpiresIn, OnTimeout, Digest, ShortDigest string
	Arguments, Redact                         string
	RequestedAt, RequestedAgo, ExpiresAt      string
	// Approve with edits (edits.go): EditArgs prefills "Edit arguments"
	// ("" when the request may not be edited); EditOf and EditedBy name
	// the edit a request asks about.
	EditArgs, EditOf, EditedBy string
	// Approval grants: the grant options the tool allows (nil: none).
	MaxGrant *api.GrantBound
	// Program (code mode) is "from program <ID>, line <N>" for a
	// program's call, "" for the agent's own.
	Program string
	// Acts (token exchange) says whom the call acts as upstream, until
	// when, and whether the provider holds the user's grant.
	Acts string
}

func (h *handler) render(w http.ResponseWriter, code int, v view) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_ = pageTmpl.Execute(w, v)
}

var pageTmpl = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>airlock approvals</title>
<style>
*, *::before, *::after { box-sizing: border-box; }
body { font: 16px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 60rem; padding: .75rem 1.5rem; color: #1b1b1b; }
header { display: flex; flex-wrap: wrap; gap: .5rem; justify-content: space-between; align-items: center; border-bottom: 1px solid #ddd; margin-bottom: 1rem; }
header form { display: flex; flex-wrap: wrap; gap: .5rem; align-items: center; }
h1 { font-size: 1.3rem; margin: .5rem 0; }
.notice { background: #e8f5e9; border: 1px solid #a5d6a7; padding: .6rem .8rem; overflow-wrap: anywhere; }
.error { background: #fdecea; border: 1px solid #f5a9a1; padding: .6rem .8rem; overflow-wrap: anywhere; }
.warn { background: #fff8e1; border: 1px solid #ffe082; padding: .6rem .8rem; }
.req { border: 1px solid #ccc; border-radius: 6px; padding: .8rem 1rem; margin: 1rem 0; }
.req h2 { font-size: 1.1rem; margin: 0 0 .5rem; overflow-wrap: anywhere; }
dl { display: grid; grid-template-columns: max-content minmax(0, 1fr); gap: .2rem .8rem; margin: 0 0 .6rem; }
dt { color: #555; }
dd { margin: 0; min-width: 0; overflow-wrap: anywhere; }
pre { background: #f6f6f6; padding: .6rem; margin: .3rem 0 .6rem; white-space: pre-wrap; overflow-wrap: anywhere; overflow-y: auto; max-height: 24rem; border: 1px solid #ddd; scrollbar-gutter: stable; }
code { font-size: .9em; overflow-wrap: anywhere; }
input[type=password] { width: 100%; max-width: 32rem; font-size: 1rem; padding: .5rem; }
textarea { width: 100%; font-size: 1rem; }
button { font-size: 1rem; min-height: 2.75rem; padding: .35rem 1.2rem; margin: .25rem .5rem .25rem 0; }
.approve { background: #2e7d32; color: #fff; border: 0; border-radius: 4px; }
.approve-edits { background: #1565c0; color: #fff; border: 0; border-radius: 4px; }
details.edit { margin: .4rem 0; }
details.edit summary { cursor: pointer; min-height: 2.75rem; line-height: 2.75rem; }
.deny { background: #c62828; color: #fff; border: 0; border-radius: 4px; }
.muted { color: #666; }
.program { margin: 0 0 .4rem; overflow-wrap: anywhere; }
@media (max-width: 30rem) {
  body { padding: .5rem .75rem; }
  dl { grid-template-columns: minmax(0, 1fr); gap: 0; }
  dt { font-size: .85rem; margin-top: .35rem; }
  .req { padding: .6rem .7rem; }
  .actions button { width: 100%; margin: .3rem 0; }
}
</style>
</head>
<body>
<header>
<h1>airlock approvals</h1>
{{if .Principal}}<form method="post" action="{{.Path}}/logout"><span class="muted">{{.Principal}}</span>
<input type="hidden" name="csrf" value="{{.CSRF}}"> <button type="submit">Log out</button></form>{{end}}
</header>
{{if .Notice}}<p class="notice" role="status">{{.Notice}}</p>{{end}}
{{if .Error}}<p class="error" role="alert">{{.Error}}</p>{{end}}
{{if not .Principal}}
<form method="post" action="{{.Path}}/login">
<p><label for="key">Your API key</label><br>
<input id="key" name="key" type="password" autocomplete="current-password" required autofocus></p>
<p class="muted">The key of a principal in an approver group (the configuration holds only its hash). It is checked once; the page then keeps a signed session cookie, never the key.</p>
<p><button type="submit">Log in</button></p>
</form>
{{else}}
{{if .NoGroup}}<p class="warn" role="status">You are logged in as {{.Principal}}, which is in no approver group, so no request can be yours to decide. Ask an operator to add {{.Principal}} to the members of an approver group (approver_groups.&lt;group&gt;.members in the configuration).</p>
{{else if not .Requests}}<p>Nothing waits for your decision.{{if .Others}} <span class="muted">({{.Others}} pending request(s) are for other approvers, or your own.)</span>{{end}}</p>
{{else}}{{if .Others}}<p class="muted">{{.Others}} other pending request(s) are for other approvers, or your own.</p>{{end}}{{end}}
{{range .Requests}}
<section class="req">
<h2>{{.Tool}} <span class="muted">requested by {{.Requester}}</span></h2>
{{if .Program}}<p class="muted program">{{.Program}}</p>{{end}}
<dl>
<dt>request</dt><dd><code>{{.ID}}</code></dd>
<dt>task</dt><dd><code>{{.Task}}</code></dd>
{{if .Server}}<dt>server</dt><dd>{{.Server}}</dd>{{end}}
{{if .Acts}}<dt>acts as</dt><dd>{{.Acts}}</dd>{{end}}
<dt>side effects</dt><dd>{{.SideEffects}}</dd>
<dt>data level</dt><dd>{{.DataLevel}}</dd>
<dt>risk</dt><dd>{{.Risk}}</dd>
{{if .Rule}}<dt>rule</dt><dd>{{.Rule}}</dd>{{end}}
{{if .Reason}}<dt>why</dt><dd>{{.Reason}}</dd>{{end}}
{{if .EditOf}}<dt>edited by</dt><dd>{{.EditedBy}}, approving request <code>{{.EditOf}}</code>: these are the arguments {{.EditedBy}} wants run</dd>{{end}}
<dt>group</dt><dd>{{.Group}}: {{.Approvals}} of {{.Quorum}} approval(s)</dd>
{{if .RequestedAt}}<dt>requested</dt><dd>{{.RequestedAt}} ({{.RequestedAgo}})</dd>{{end}}
<dt>expires</dt><dd>{{.ExpiresAt}}, in {{.ExpiresIn}} (then {{.OnTimeout}})</dd>
<dt>digest</dt><dd><code>{{.ShortDigest}}</code></dd>
</dl>
<div>arguments{{if .Redact}} <span class="muted">(masked: {{.Redact}})</span>{{end}}</div>
<pre>{{.Arguments}}</pre>
<form method="post" action="{{$.Path}}/decide">
<input type="hidden" name="csrf" value="{{$.CSRF}}">
<input type="hidden" name="id" value="{{.ID}}">
<input type="hidden" name="digest" value="{{.Digest}}">
<p><label>Comment (optional; the agent sees it on a deny)<br><textarea name="comment" rows="2" maxlength="1000"></textarea></label></p>
{{with .MaxGrant}}<fieldset><legend>On approve, also approve later calls of this tool in this task (optional; at most {{.}})</legend>
{{if .Calls}}<label>next <input name="grant_calls" type="number" min="0" max="{{.Calls}}" size="4"> calls</label>{{end}}
{{if .Duration}}<label>for <input name="grant_for" size="6" placeholder="{{.Duration}}"> (e.g. 30m)</label>{{end}}
{{if .Principal}}<label><input type="checkbox" name="grant_principal" value="1"> in the requester's other tasks too</label>{{end}}
</fieldset>{{end}}
<div class="actions"><button class="approve" type="submit" name="action" value="approve">Approve</button>
<button class="deny" type="submit" name="action" value="deny">Deny</button></div>
{{if .EditArgs}}<details class="edit"><summary>Edit arguments</summary>
<p><label>Arguments to run instead (JSON; a "[redacted]" value keeps the call's own; policy checks the edited call again)<br>
<textarea name="arguments" rows="8" spellcheck="false" autocomplete="off">{{.EditArgs}}</textarea></label></p>
<div class="actions"><button class="approve-edits" type="submit" name="action" value="approve-edits">Approve with edits</button></div>
</details>{{end}}
</form>
</section>
{{end}}
<p class="muted">Reload to see new requests. The same requests: <code>airlock approvals list</code>.</p>
{{end}}
</body>
</html>
`))
