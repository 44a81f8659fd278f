package opsview

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/projectionsync"
	"github.com/byollm/relay-go/test/relaytest"
)

// fixture without site-b (and bob's consent to it).
const fixtureWithoutB = `{"sites":[
 {"siteId":"site-a","site":{"identity":"aWQtYQ","encryption":"ZW5jLWE","encryptionSig":"c2lnLWE"}}],
 "consents":[{"owner":"alice","siteId":"site-a"}],
 "devices":[
 {"owner":"alice","runnerId":"alice-laptop","device":{"identity":"ZGV2LWE","encryption":"ZS1h","encryptionSig":"cy1h"}}]}`

// replicaOn is a second view over e's namespace with a projection follower
// of its own, refreshed only when the test says so (a replica lagging).
func replicaOn(t *testing.T, e env, o Options) (*httptest.Server, *projectionsync.Sync) {
	t.Helper()
	proj := projectionsync.New(e.client, projectionsync.Options{Namespace: e.ns, Logger: relaytest.Logger(t)})
	if err := proj.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	o.Source = StoreSource{Store: e.st, Client: e.client, Proj: proj.Current, Version: proj.Version}
	if o.AdminToken == "" {
		o.AdminToken = adminToken
	}
	o.Logger = relaytest.Logger(t)
	srv := httptest.NewServer(New(o))
	t.Cleanup(srv.Close)
	return srv, proj
}

func replace(t *testing.T, e env, doc string) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.proj.Replace(ctx, []byte(doc)); err != nil {
		t.Fatal(err)
	}
	if err := e.proj.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
}

// Issue 27, defect 7: a site token ends with its site. Once the site leaves
// the projection its token reads nothing, not even on a replica that has
// not yet seen the site go; and a site re-added under the same id does not
// revive it (the token is bound to the site's generation), while a token
// minted for the new site works. Before, the token read /ui/job/<site>/<job>
// (200, owner and state) after its site had left.
func TestSiteTokenEndsWithItsSite(t *testing.T) {
	t.Parallel()
	e := setup(t)
	enqueue(t, e.st, "site-b", "job-b1", "bob")
	_, tokB := mint(t, e.srv.URL, "site-b")
	lagging, _ := replicaOn(t, e, Options{})
	for _, base := range []string{e.srv.URL, lagging.URL} {
		if a := get(t, nil, base, "/ui/job/site-b/job-b1", tokB, true); a.status != 200 || !strings.Contains(a.body, `"owner":"bob"`) {
			t.Fatalf("before: %d %s", a.status, a.body)
		}
	}

	replace(t, e, fixtureWithoutB)
	for _, base := range []string{e.srv.URL, lagging.URL} { // lagging still has site-b in force
		for _, p := range []string{"/ui/job/site-b/job-b1", "/ui/site/site-b"} {
			if a := get(t, nil, base, p, tokB, true); a.status != 401 || strings.Contains(a.body, "bob") {
				t.Errorf("%s on %s after site-b left: %d %s", p, base, a.status, a.body)
			}
		}
	}

	replace(t, e, fixture) // site-b is back, same id, same keys
	for _, base := range []string{e.srv.URL, lagging.URL} {
		if a := get(t, nil, base, "/ui/job/site-b/job-b1", tokB, true); a.status != 401 {
			t.Errorf("old token on %s after site-b came back: %d %s", base, a.status, a.body)
		}
	}
	_, fresh := mint(t, e.srv.URL, "site-b")
	if a := get(t, nil, e.srv.URL, "/ui/job/site-b/job-b1", fresh, true); a.status != 200 {
		t.Errorf("a token of the new site-b: %d %s", a.status, a.body)
	}
	// A merge that keeps site-b keeps its generation: the token lives on.
	if _, err := e.proj.Merge(context.Background(), []byte(`{"consents":[{"owner":"carol","siteId":"site-b"}]}`)); err != nil {
		t.Fatal(err)
	}
	if a := get(t, nil, e.srv.URL, "/ui/job/site-b/job-b1", fresh, true); a.status != 200 {
		t.Errorf("after a merge keeping site-b: %d %s", a.status, a.body)
	}
}

// clientFrom is an HTTP client whose connections come from a loopback
// address of the test's choosing (127.0.0.x), so two clients are two
// addresses to the view; it follows no redirects.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{
		Transport:     &http.Transport{DialContext: d.DialContext},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Issue 27, defect 7: site-token pages are rate-limited per token and per
// address (50 concurrent pages of one token were 780 pages/s and 7.7 s of
// Valkey time in 10 s). Past the burst a token gets 429 with Retry-After,
// from any address; a fresh token from a fresh address is served; made-up
// tokens from one address are cut off the same way; the admin never is.
func TestSiteTokenPagesRateLimited(t *testing.T) {
	t.Parallel()
	e := setup(t)
	srv, _ := replicaOn(t, e, Options{SiteRate: 1}) // bursts of 10
	_, tokA := mint(t, e.srv.URL, "site-a")
	_, tokB := mint(t, e.srv.URL, "site-b")
	one, two, three := clientFrom("127.0.0.1"), clientFrom("127.0.0.2"), clientFrom("127.0.0.3")
	served := 0
	var last answer
	for range 40 {
		last = get(t, one, srv.URL, "/ui/site/site-a", tokA, true)
		if last.status != 200 {
			break
		}
		served++
	}
	if served < 5 || served > 15 || last.status != http.StatusTooManyRequests || !strings.Contains(last.body, `"error":"rate-limited"`) {
		t.Fatalf("one token, one address: %d served, then %d %s", served, last.status, last.body)
	}
	if s, err := strconv.Atoi(last.header.Get("Retry-After")); err != nil || s < 1 || s > 2 {
		t.Errorf("Retry-After %q", last.header.Get("Retry-After"))
	}
	// The same token from another address: the token's bucket is empty.
	if a := get(t, two, srv.URL, "/ui/site/site-a", tokA, true); a.status != http.StatusTooManyRequests {
		t.Errorf("spent token from another address: %d", a.status)
	}
	// Another token from a fresh address is served.
	if a := get(t, three, srv.URL, "/ui/site/site-b", tokB, true); a.status != 200 {
		t.Errorf("fresh token, fresh address: %d %s", a.status, a.body)
	}
	// The admin is never limited, from the busy address too.
	for range 20 {
		if a := get(t, one, srv.URL, "/ui/site/site-a", adminToken, true); a.status != 200 {
			t.Fatalf("admin: %d %s", a.status, a.body)
		}
	}
	// Guessing tokens from one address: refused as unknown, then slowed.
	guess := clientFrom("127.0.0.4")
	var got []int
	for i := range 15 {
		got = append(got, get(t, guess, srv.URL, "/ui/site/site-a", "rvt_guess"+strconv.Itoa(i), true).status)
	}
	if got[0] != 401 || got[len(got)-1] != http.StatusTooManyRequests {
		t.Errorf("guessed tokens: %v", got)
	}
	// Waiting the Retry-After serves the token again.
	relaytest.WaitFor(t, 5*time.Second, "the spent token served again after its Retry-After", func() bool {
		return get(t, one, srv.URL, "/ui/site/site-a", tokA, true).status == 200
	})
}

// Issue 27, defect 7: links work for ids holding "/", "?", "#", "%" or
// only dots: each is one escaped path segment, and following it opens the
// page of that id (before, "a/b" linked to /ui/site/a/b, a 404).
func TestLinksEscapeIDs(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, site := range []string{"a/b", "q?x=1#f", "50%", "..", "sp ace/é"} {
		t.Run(url.PathEscape(site), func(t *testing.T) {
			doc := strings.NewReplacer("site-a", site).Replace(fixture)
			doc = strings.Replace(doc, `"alice-laptop"`, `"laptop/`+strings.ReplaceAll(site, `"`, ``)+`"`, 1)
			// One namespace per subtest would be cleaner; the fixture is
			// replaced whole, so each subtest sees only its own ids.
			replace(t, e, doc)
			job := "job/" + site
			enqueue(t, e.st, site, job, "alice")
			fleet := get(t, nil, e.srv.URL, "/ui/", adminToken, false)
			href := "/ui/site/" + pathSegment(site)
			if !strings.Contains(fleet.body, `href="`+href+`"`) {
				t.Fatalf("fleet page has no link %q:\n%s", href, fleet.body)
			}
			page := get(t, nil, e.srv.URL, href, adminToken, false)
			if page.status != 200 {
				t.Fatalf("following %s: %d", href, page.status)
			}
			jobHref := "/ui/job/" + pathSegment(site) + "/" + pathSegment(job)
			devHref := "/ui/device/" + pathSegment("laptop/"+site)
			for _, h := range []string{jobHref, devHref} {
				if !strings.Contains(page.body, `href="`+h+`"`) {
					t.Fatalf("site page has no link %q:\n%s", h, page.body)
				}
				if a := get(t, nil, e.srv.URL, h, adminToken, true); a.status != 200 {
					t.Errorf("following %s: %d %s", h, a.status, a.body)
				}
			}
			if a := get(t, nil, e.srv.URL, jobHref, adminToken, true); !strings.Contains(a.body, `"siteId":`) || !strings.Contains(a.body, `"jobId":`) {
				t.Errorf("job page: %s", a.body)
			}
			// The job lookup form redirects to the same escaped link.
			if a := get(t, nil, e.srv.URL, "/ui/job?site="+url.QueryEscape(site)+"&id="+url.QueryEscape(job), adminToken, true); a.header.Get("Location") != jobHref {
				t.Errorf("lookup redirect: %q, want %q", a.header.Get("Location"), jobHref)
			}
		})
	}
}

func login(t *testing.T, c *http.Client, base, tok string, header map[string]string) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/ui/login", strings.NewReader(url.Values{"token": {tok}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return do(t, c, req)
}

func sessionCookie(t *testing.T, a answer) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: a.header}).Cookies() {
		if c.Name == cookieName {
			return c
		}
	}
	t.Fatalf("no %s cookie: %d %v", cookieName, a.status, a.header)
	return nil
}

func withCookie(t *testing.T, base, path string, c *http.Cookie) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+path, nil)
	req.Header.Set("Accept", "application/json")
	req.AddCookie(c)
	return do(t, nil, req)
}

// Issue 27, defect 7: the login cookie is not the token (it was the raw
// admin token): a session derived with an HMAC, honoured by every replica
// sharing the admin token without state, expiring, ended by revoking a
// site token; tampered or expired sessions are refused; Secure over TLS,
// HttpOnly and SameSite=Strict always.
func TestLoginSessionIsNotTheToken(t *testing.T) {
	t.Parallel()
	e := setup(t)
	other, _ := replicaOn(t, e, Options{})
	id, tokA := mint(t, e.srv.URL, "site-a")
	for _, tok := range []string{adminToken, tokA} {
		a := login(t, nil, e.srv.URL, tok, nil)
		c := sessionCookie(t, a)
		if strings.Contains(c.Value, tok) || strings.Contains(c.Value, tok[4:]) || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Secure {
			t.Fatalf("cookie %+v for token %q", c, tok)
		}
		if c.MaxAge <= 0 || c.MaxAge > 12*3600 {
			t.Errorf("cookie max-age %d", c.MaxAge)
		}
		// The other replica honours it.
		if a := withCookie(t, other.URL, "/ui/site/site-a", c); a.status != 200 {
			t.Errorf("session on the other replica: %d %s", a.status, a.body)
		}
		// Tampered: refused.
		bad := *c
		bad.Value = strings.Replace(c.Value, "v1.", "v1.9", 1)
		if a := withCookie(t, e.srv.URL, "/ui/site/site-a", &bad); a.status != 401 {
			t.Errorf("tampered session: %d", a.status)
		}
	}
	// Expired: refused (made with the same key, an expiry in the past).
	old := &http.Cookie{Name: cookieName, Value: newSessions(adminToken).issue(sessionAdmin, time.Now().Add(-13*time.Hour))}
	if a := withCookie(t, e.srv.URL, "/ui/", old); a.status != 401 {
		t.Errorf("expired session: %d", a.status)
	}
	// Another admin token's session: refused.
	forged := &http.Cookie{Name: cookieName, Value: newSessions("another-token").issue(sessionAdmin, time.Now())}
	if a := withCookie(t, e.srv.URL, "/ui/", forged); a.status != 401 {
		t.Errorf("session of another admin token: %d", a.status)
	}
	// Revoking the site token ends its session.
	site := sessionCookie(t, login(t, nil, e.srv.URL, tokA, nil))
	req, _ := http.NewRequest(http.MethodDelete, e.srv.URL+"/ui/tokens/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	if a := do(t, nil, req); a.status != 200 {
		t.Fatalf("revoke: %d", a.status)
	}
	if a := withCookie(t, e.srv.URL, "/ui/site/site-a", site); a.status != 401 {
		t.Errorf("session of a revoked token: %d", a.status)
	}

	// Over TLS the cookie is Secure.
	tlsSrv := httptest.NewTLSServer(New(Options{Source: StoreSource{Store: e.st, Client: e.client, Proj: e.proj.Current},
		AdminToken: adminToken, Logger: relaytest.Logger(t)}))
	t.Cleanup(tlsSrv.Close)
	c := tlsSrv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.Transport.(*http.Transport).TLSClientConfig.MinVersion = tls.VersionTLS12
	if ck := sessionCookie(t, login(t, c, tlsSrv.URL, adminToken, nil)); !ck.Secure || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode {
		t.Errorf("cookie over TLS: %+v", ck)
	}
}

// Issue 27, defect 7: the login's Origin check compares scheme, host and
// port (it compared the host only, so https://127.0.0.1:PORT was accepted
// on the http listener).
func TestLoginOriginSchemeHostPort(t *testing.T) {
	t.Parallel()
	e := setup(t)
	u, _ := url.Parse(e.srv.URL)
	_, port, _ := net.SplitHostPort(u.Host)
	for _, tc := range []struct {
		header map[string]string
		want   int
	}{
		{map[string]string{"Origin": "http://" + u.Host}, http.StatusSeeOther},
		{map[string]string{"Referer": "http://" + u.Host + "/ui/login"}, http.StatusSeeOther},
		{nil, http.StatusSeeOther}, // no Origin: a non-browser client
		{map[string]string{"Origin": "https://" + u.Host}, http.StatusForbidden},
		{map[string]string{"Origin": "http://127.0.0.1:1"}, http.StatusForbidden},
		{map[string]string{"Origin": "http://127.0.0.1"}, http.StatusForbidden},
		{map[string]string{"Origin": "http://localhost:" + port}, http.StatusForbidden},
		{map[string]string{"Origin": "null"}, http.StatusForbidden},
		{map[string]string{"Referer": "https://" + u.Host + "/ui/login"}, http.StatusForbidden},
		// Behind a TLS proxy that says so, the browser's origin is https.
		{map[string]string{"X-Forwarded-Proto": "https", "Origin": "https://" + u.Host}, http.StatusSeeOther},
		{map[string]string{"X-Forwarded-Proto": "https", "Origin": "http://" + u.Host}, http.StatusForbidden},
	} {
		if a := login(t, nil, e.srv.URL, adminToken, tc.header); a.status != tc.want {
			t.Errorf("login with %v: %d, want %d", tc.header, a.status, tc.want)
		}
	}
	// Default ports are the same origin written or not.
	req := httptest.NewRequest(http.MethodPost, "http://relay.example/ui/login", nil)
	req.Header.Set("Origin", "http://relay.example:80")
	h := New(Options{AdminToken: adminToken})
	if !h.sameOrigin(req) {
		t.Error("http://relay.example:80 vs Host relay.example: refused")
	}
	req.Header.Set("Origin", "http://relay.example:8080")
	if h.sameOrigin(req) {
		t.Error("http://relay.example:8080 vs Host relay.example: accepted")
	}
}
