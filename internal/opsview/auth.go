package opsview

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/byollm/relay-go/internal/opsstore"
)

// cookieName carries a login session: never a token, but a value derived
// from it (session.go) that expires. HttpOnly and SameSite=Strict, so no
// script reads it and no other site's page sends it, Secure when the view
// is reached over TLS; the view answers GET only with it, so a forged
// cross-site request has nothing to change.
const cookieName = "relay_ui"

// principal is who a request is: the admin, or a site's read-only token.
type principal struct {
	Admin   bool
	Site    string // the one site a scoped token sees
	TokenID string
	digest  string // a site token's digest, for its login session
}

// sees reports whether the principal may see siteID.
func (p principal) sees(siteID string) bool { return p.Admin || p.Site == siteID }

type tokenRecord struct {
	ID        string `json:"id"`
	Site      string `json:"site"`
	CreatedAt int64  `json:"createdAt"`
}

func digest(token string) string {
	d := sha256.Sum256([]byte(token))
	return hex.EncodeToString(d[:])
}

// bearer is the token of the one Authorization header ("Bearer" in any
// case, then spaces), "" when absent or malformed.
func bearer(r *http.Request) (string, bool) {
	vals := r.Header.Values("Authorization")
	if len(vals) != 1 {
		return "", false
	}
	scheme, tok, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimLeft(tok, " ")
	return tok, tok != ""
}

// identify resolves the request: the Authorization header's token first,
// then the login session cookie. ok is false when neither is valid.
func (h *Handler) identify(ctx context.Context, r *http.Request, allowCookie bool) (principal, bool, error) {
	if tok, ok := bearer(r); ok {
		return h.check(ctx, r, tok)
	}
	if !allowCookie {
		return principal{}, false, nil
	}
	c, err := r.Cookie(cookieName)
	if err != nil || c.Value == "" {
		return principal{}, false, nil
	}
	subject, ok := h.sessions.open(c.Value, time.Now())
	switch {
	case !ok:
		return principal{}, false, nil
	case subject == sessionAdmin:
		return principal{Admin: true}, true, nil
	}
	return h.siteByDigest(ctx, r, subject)
}

// check resolves a token: the admin token (compared by digest in constant
// time), else a site token looked up by its digest.
func (h *Handler) check(ctx context.Context, r *http.Request, tok string) (principal, bool, error) {
	if len(tok) > 512 {
		return principal{}, false, nil
	}
	if h.adminSet {
		got := sha256.Sum256([]byte(tok))
		if subtle.ConstantTimeCompare(got[:], h.adminSum[:]) == 1 {
			return principal{Admin: true}, true, nil
		}
	}
	return h.siteByDigest(ctx, r, digest(tok))
}

// siteByDigest looks a site token up by its digest. A lookup costs a store
// call, so each address gets only so many (limits.go) before it is asked
// to slow down: a flood of made-up tokens is refused without a store call.
func (h *Handler) siteByDigest(ctx context.Context, r *http.Request, d string) (principal, bool, error) {
	if wait := h.limits.address(clientAddress(r)); wait > 0 {
		return principal{}, false, &slowDown{wait: wait}
	}
	raw, err := h.src.Token(ctx, d)
	if err != nil {
		return principal{}, false, err
	}
	if raw == nil {
		return principal{}, false, nil
	}
	var rec tokenRecord
	if err := json.Unmarshal(raw, &rec); err != nil || rec.Site == "" {
		return principal{}, false, fmt.Errorf("view token record: %v", err)
	}
	// A token whose site has left the projection in force reads nothing;
	// the store refuses one whose site left and came back (its generation).
	if p := h.src.Projection(); p == nil || p.SiteFor(rec.Site) == nil {
		return principal{}, false, nil
	}
	if wait := h.limits.token(rec.ID); wait > 0 {
		return principal{}, false, &slowDown{wait: wait}
	}
	return principal{Site: rec.Site, TokenID: rec.ID, digest: d}, true, nil
}

func randomString(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // the OS has no randomness: nothing is safe
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// adminOnly answers the token API: the admin token in the Authorization
// header, never the cookie, so a page on another origin cannot mint or
// revoke with a logged-in browser's cookie.
func (h *Handler) adminOnly(w http.ResponseWriter, r *http.Request) bool {
	p, ok, err := h.identify(r.Context(), r, false)
	var slow *slowDown
	switch {
	case errors.As(err, &slow):
		h.tooMany(w, slow)
		return false
	case err != nil:
		h.fail(w, r, err)
		return false
	}
	if !ok || !p.Admin {
		w.Header().Set("WWW-Authenticate", `Bearer realm="relay-admin"`)
		writeError(w, http.StatusUnauthorized, "unauthorized", "the admin token is required (Authorization: Bearer)")
		return false
	}
	return true
}

// mintToken is POST /ui/tokens {"site":"..."}: a new read-only token for
// one site. The token is shown once; Valkey keeps only its SHA-256.
func (h *Handler) mintToken(w http.ResponseWriter, r *http.Request) {
	if !h.adminOnly(w, r) {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 4096))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "payload-too-large", "the body is over 4096 bytes")
		return
	}
	var in struct {
		Site *string `json:"site"`
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil || dec.More() || in.Site == nil {
		writeError(w, http.StatusBadRequest, "invalid-request", `expected {"site":"<site id>"}`)
		return
	}
	site := *in.Site
	if site == "" || len(site) > 256 || !utf8.ValidString(site) || strings.ContainsRune(site, 0) {
		writeError(w, http.StatusBadRequest, "invalid-request", "site: a non-empty site id of at most 256 bytes")
		return
	}
	p := h.src.Projection()
	if p == nil || p.SiteFor(site) == nil {
		writeError(w, http.StatusBadRequest, "invalid-request", "site: no such site in the projection in force")
		return
	}
	now, err := h.src.Now(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	rec := tokenRecord{ID: "vt_" + randomString(9), Site: site, CreatedAt: now}
	tok := "rvt_" + randomString(32)
	b, _ := json.Marshal(rec)
	if err := h.src.PutToken(r.Context(), digest(tok), rec.ID, b, site); err != nil {
		switch {
		case errors.Is(err, opsstore.ErrTokenRefused):
			writeError(w, http.StatusConflict, "conflict", fmt.Sprintf("at most %d view tokens exist at once: revoke some first", opsstore.MaxViewTokens))
		case errors.Is(err, opsstore.ErrTokenSiteGone):
			writeError(w, http.StatusBadRequest, "invalid-request", "site: no such site in the stored projection (it has just left)")
		case errors.Is(err, opsstore.ErrTokenProjectionMoved):
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, "unavailable", "the projection changed while the token was minted; try again")
		default:
			h.fail(w, r, err)
		}
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"id": rec.ID, "site": rec.Site, "createdAt": rec.CreatedAt, "token": tok})
}

// revokeToken is DELETE /ui/tokens/{id}.
func (h *Handler) revokeToken(w http.ResponseWriter, r *http.Request) {
	if !h.adminOnly(w, r) {
		return
	}
	id := r.PathValue("id")
	if id == "" || len(id) > 64 {
		writeError(w, http.StatusNotFound, "not-found", "no such token")
		return
	}
	ok, err := h.src.DropToken(r.Context(), id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if !ok {
		writeError(w, http.StatusNotFound, "not-found", "no such token")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "revoked": true})
}

// listTokens is GET /ui/tokens: every token's id, site and creation time.
func (h *Handler) listTokens(w http.ResponseWriter, r *http.Request) {
	if !h.adminOnly(w, r) {
		return
	}
	raws, err := h.src.Tokens(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := []tokenRecord{}
	for _, raw := range raws {
		var rec tokenRecord
		if json.Unmarshal(raw, &rec) == nil {
			out = append(out, rec)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"tokens": out})
}

// sameOrigin refuses a form post whose Origin (or Referer) is not this
// view's own origin: the same scheme, host and port (default ports
// written or not). With SameSite=Strict this is belt and braces against
// login CSRF. The scheme is https when the view is reached over TLS (here,
// or at a proxy that says so, or Options.Secure), else http.
func (h *Handler) sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		o = r.Header.Get("Referer")
	}
	if o == "" || o == "null" {
		return o == ""
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" || u.User != nil {
		return false
	}
	scheme := "http"
	if h.secureFor(r) {
		scheme = "https"
	}
	return strings.EqualFold(u.Scheme, scheme) && strings.EqualFold(hostPort(u.Host, scheme), hostPort(r.Host, scheme))
}

// hostPort is host:port with the scheme's default port filled in.
func hostPort(hostport, scheme string) string {
	if _, _, err := net.SplitHostPort(hostport); err == nil {
		host, port, _ := net.SplitHostPort(hostport)
		if (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
			port = ""
		}
		if port == "" {
			return strings.Trim(host, "[]")
		}
		return net.JoinHostPort(host, port)
	}
	return strings.Trim(hostport, "[]")
}

// login is POST /ui/login (form field "token"): sets the cookie.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if !h.sameOrigin(r) {
		writeError(w, http.StatusForbidden, "forbidden", "cross-origin login refused")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if err := r.ParseForm(); err != nil {
		writeError(w, http.StatusBadRequest, "invalid-request", "a form with a token field of at most 4096 bytes")
		return
	}
	tok := strings.TrimSpace(r.PostForm.Get("token"))
	if !h.sessions.enabled() {
		w.WriteHeader(http.StatusForbidden)
		h.render(w, r, "login", page{Title: "Log in", Message: "Logging in needs RELAY_ADMIN_TOKEN set on the relay (sessions are signed with a key derived from it); send the token as Authorization: Bearer instead."})
		return
	}
	p, ok, err := h.check(r.Context(), r, tok)
	var slow *slowDown
	switch {
	case errors.As(err, &slow):
		h.tooMany(w, slow)
		return
	case err != nil:
		h.fail(w, r, err)
		return
	}
	if !ok || tok == "" {
		w.WriteHeader(http.StatusUnauthorized)
		h.render(w, r, "login", page{Title: "Log in", Message: "That token is not valid (or was revoked)."})
		return
	}
	subject := sessionAdmin
	to := "/ui/"
	if !p.Admin {
		subject = p.digest
		to = "/ui/site/" + pathSegment(p.Site)
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: h.sessions.issue(subject, time.Now()), Path: "/ui/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: h.secureFor(r), MaxAge: int(sessionTTL / time.Second)})
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// logout is POST /ui/logout: drops the cookie.
func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	if !h.sameOrigin(r) {
		writeError(w, http.StatusForbidden, "forbidden", "cross-origin logout refused")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/ui/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: h.secureFor(r), MaxAge: -1})
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// secureFor marks the cookie Secure when the browser reached the view over
// TLS: here, or at a proxy that says so. Not on plain HTTP, where a browser
// would drop a Secure cookie and the login would never stick.
func (h *Handler) secureFor(r *http.Request) bool {
	return h.secure || r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}
