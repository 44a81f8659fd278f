package opsview

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/opsstore"
	"github.com/byollm/relay-go/internal/projectionsync"
	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/test/relaytest"
)

const adminToken = "opsview-admin-token-0123456789"

// Two sites; alice consents to both, bob to site-b only.
const fixture = `{"sites":[
 {"siteId":"site-a","site":{"identity":"aWQtYQ","encryption":"ZW5jLWE","encryptionSig":"c2lnLWE"}},
 {"siteId":"site-b","site":{"identity":"aWQtYg","encryption":"ZW5jLWI","encryptionSig":"c2lnLWI"}}],
 "consents":[{"owner":"alice","siteId":"site-a"},{"owner":"alice","siteId":"site-b"},{"owner":"bob","siteId":"site-b"}],
 "devices":[
 {"owner":"alice","runnerId":"alice-laptop","device":{"identity":"ZGV2LWE","encryption":"ZS1h","encryptionSig":"cy1h"}},
 {"owner":"bob","runnerId":"bob-laptop","device":{"identity":"ZGV2LWI","encryption":"ZS1i","encryptionSig":"cy1i"}}]}`

type env struct {
	srv    *httptest.Server
	st     *store.Store
	client valkey.Client
	ns     string
	proj   *projectionsync.Sync
}

func setup(t testing.TB) env { return setupOn(t, false) }

// setupOn serves the view over a fresh namespace of the test Valkey, or of
// the embedded store the relay uses without RELAY_VALKEY_URL.
func setupOn(t testing.TB, embedded bool) env {
	t.Helper()
	c := relaytest.Client(t)
	if embedded {
		c = relaytest.Embedded(t)
	}
	ns := relaytest.Namespace(t, c)
	logger := relaytest.Logger(t)
	ctx := context.Background()
	st, err := store.New(ctx, c, store.Options{Namespace: ns, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	proj := projectionsync.New(c, projectionsync.Options{Namespace: ns, Logger: logger})
	if _, err := proj.Replace(ctx, []byte(fixture)); err != nil {
		t.Fatal(err)
	}
	if err := proj.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	h := New(Options{Source: StoreSource{Store: st, Client: c, Proj: proj.Current}, AdminToken: adminToken, Logger: logger})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return env{srv: srv, st: st, client: c, ns: ns, proj: proj}
}

func enqueue(t testing.TB, st *store.Store, site, id, owner string) {
	t.Helper()
	_, err := st.Enqueue(context.Background(), store.EnqueueInput{SiteID: site, ID: id, Stub: protocol.JobStub{
		ID: id, Kind: protocol.KindGenerate, Owner: owner, Site: site, Audience: protocol.AudiencePrivate, SizeClass: "small", DeadlineAt: 4_000_000_000_000}})
	if err != nil {
		t.Fatal(err)
	}
}

func claim(t testing.TB, st *store.Store, runner, owner string, routes ...store.Route) []store.ClaimedStub {
	t.Helper()
	dev := protocol.PublicIdentity{Identity: "ZGV2LWE", Encryption: "ZS1h", EncryptionSig: "cy1h"}
	got, err := st.Claim(context.Background(), store.ClaimInput{RunnerID: runner, Owner: owner, Device: dev,
		Routes: routes, Kinds: []string{protocol.KindGenerate}, Max: 10, LeaseMs: 60_000})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

type answer struct {
	status int
	header http.Header
	body   string
}

func get(t *testing.T, c *http.Client, base, path, bearerTok string, asJSON bool) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+path, nil)
	if bearerTok != "" {
		req.Header.Set("Authorization", "Bearer "+bearerTok)
	}
	if asJSON {
		req.Header.Set("Accept", "application/json")
	}
	return do(t, c, req)
}

func do(t *testing.T, c *http.Client, req *http.Request) answer {
	t.Helper()
	if c == nil {
		c = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return answer{res.StatusCode, res.Header, string(b)}
}

func mint(t *testing.T, base, site string) (id, tok string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/ui/tokens", strings.NewReader(`{"site":"`+site+`"}`))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	a := do(t, nil, req)
	if a.status != http.StatusCreated {
		t.Fatalf("mint: %d %s", a.status, a.body)
	}
	var out struct{ ID, Token, Site string }
	if err := json.Unmarshal([]byte(a.body), &out); err != nil || out.Site != site || out.Token == "" {
		t.Fatalf("mint answer %s (%v)", a.body, err)
	}
	return out.ID, out.Token
}

// A site token sees its site and nothing of the other: not its page, not
// its jobs, not a device whose owner does not consent to the token's site,
// not the other site's leases or consents on a shared device; the fleet
// page sends it to its site. Revoked, it is refused.
func TestSiteTokenSeesOnlyItsSite(t *testing.T) {
	t.Parallel()
	e := setup(t)
	enqueue(t, e.st, "site-a", "job-a1", "alice")
	enqueue(t, e.st, "site-b", "job-b1", "alice")
	if got := claim(t, e.st, "alice-laptop", "alice", store.Route{SiteID: "site-a", Owner: "alice"}, store.Route{SiteID: "site-b", Owner: "alice"}); len(got) != 2 {
		t.Fatalf("claimed %d jobs, want 2", len(got))
	}
	_, tokA := mint(t, e.srv.URL, "site-a")
	base := e.srv.URL

	if a := get(t, nil, base, "/ui/", tokA, true); a.status != http.StatusSeeOther || a.header.Get("Location") != "/ui/site/site-a" {
		t.Fatalf("fleet with a site token: %d %q", a.status, a.header.Get("Location"))
	}
	for _, p := range []string{"/ui/site/site-b", "/ui/job/site-b/job-b1", "/ui/device/bob-laptop", "/ui/site/nope"} {
		a := get(t, nil, base, p, tokA, true)
		if a.status != http.StatusNotFound || strings.Contains(a.body, "job-b1") || !strings.Contains(a.body, `"error":"not-found"`) {
			t.Errorf("%s with site-a's token: %d %s", p, a.status, a.body)
		}
	}
	if a := get(t, nil, base, "/ui/job/site-a/job-a1", tokA, true); a.status != 200 || !strings.Contains(a.body, `"holder":"alice-laptop"`) {
		t.Errorf("own job: %d %s", a.status, a.body)
	}
	// alice's laptop serves both sites and holds a job of each: site-a's
	// token sees only site-a's.
	a := get(t, nil, base, "/ui/device/alice-laptop", tokA, true)
	if a.status != 200 || strings.Contains(a.body, "site-b") || strings.Contains(a.body, "job-b1") || !strings.Contains(a.body, "job-a1") {
		t.Errorf("shared device with site-a's token: %d %s", a.status, a.body)
	}
	var dv DeviceView
	json.Unmarshal([]byte(a.body), &dv)
	if dv.Held != 1 || len(dv.Sites) != 1 {
		t.Errorf("device view for site-a: held %d, sites %+v", dv.Held, dv.Sites)
	}
	// The admin sees both.
	a = get(t, nil, base, "/ui/device/alice-laptop", adminToken, true)
	if !strings.Contains(a.body, "job-b1") || !strings.Contains(a.body, "job-a1") {
		t.Errorf("device with the admin token: %s", a.body)
	}
	// The site page lists only devices whose owner consents to the site.
	a = get(t, nil, base, "/ui/site/site-a", tokA, false)
	if a.status != 200 || strings.Contains(a.body, "bob-laptop") || !strings.Contains(a.body, "alice-laptop") || strings.Contains(a.body, "site-b") {
		t.Errorf("site page: %d\n%s", a.status, a.body)
	}
	// No token: refused, as JSON and as a login page.
	if a := get(t, nil, base, "/ui/site/site-a", "", true); a.status != 401 || !strings.Contains(a.body, `"error":"unauthorized"`) {
		t.Errorf("no token: %d %s", a.status, a.body)
	}
	if a := get(t, nil, base, "/ui/site/site-a", "", false); a.status != 401 || !strings.Contains(a.body, `name="token"`) {
		t.Errorf("no token, HTML: %d", a.status)
	}
	if a := get(t, nil, base, "/ui/site/site-a", "rvt_not-a-token", true); a.status != 401 {
		t.Errorf("unknown token: %d", a.status)
	}
	// A site token cannot mint or list tokens.
	req, _ := http.NewRequest(http.MethodPost, base+"/ui/tokens", strings.NewReader(`{"site":"site-b"}`))
	req.Header.Set("Authorization", "Bearer "+tokA)
	if a := do(t, nil, req); a.status != 401 {
		t.Errorf("mint with a site token: %d %s", a.status, a.body)
	}
}

// Tokens: minted for a known site only, listed without the secret,
// revoked by id (then refused), and the API is never reachable with the
// login cookie alone.
func TestTokenLifecycle(t *testing.T) {
	t.Parallel()
	e := setup(t)
	base := e.srv.URL
	for _, body := range []string{`{"site":"nope"}`, `{"site":""}`, `{}`, `{"site":"site-a","x":1}`, `[`} {
		req, _ := http.NewRequest(http.MethodPost, base+"/ui/tokens", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+adminToken)
		if a := do(t, nil, req); a.status != 400 || !strings.Contains(a.body, `"error":"invalid-request"`) {
			t.Errorf("mint %s: %d %s", body, a.status, a.body)
		}
	}
	id, tok := mint(t, base, "site-b")
	if a := get(t, nil, base, "/ui/tokens", adminToken, true); !strings.Contains(a.body, id) || strings.Contains(a.body, tok) {
		t.Errorf("list: %s", a.body)
	}
	if a := get(t, nil, base, "/ui/site/site-b", tok, true); a.status != 200 {
		t.Fatalf("fresh token: %d %s", a.status, a.body)
	}

	// Log in with the admin token: the cookie opens the pages, not the API.
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	res, err := c.PostForm(base+"/ui/login", url.Values{"token": {adminToken}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	u, _ := url.Parse(base + "/ui/")
	ck := jar.Cookies(u)
	if res.StatusCode != 200 || len(ck) != 1 || ck[0].Name != cookieName {
		t.Fatalf("login: %d cookies %v", res.StatusCode, ck)
	}
	req, _ := http.NewRequest(http.MethodDelete, base+"/ui/tokens/"+id, nil)
	if a := do(t, c, req); a.status != 401 {
		t.Errorf("revoke with the cookie only: %d %s", a.status, a.body)
	}
	req, _ = http.NewRequest(http.MethodDelete, base+"/ui/tokens/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	if a := do(t, nil, req); a.status != 200 {
		t.Fatalf("revoke: %d %s", a.status, a.body)
	}
	if a := get(t, nil, base, "/ui/site/site-b", tok, true); a.status != 401 {
		t.Errorf("revoked token: %d %s", a.status, a.body)
	}
	req, _ = http.NewRequest(http.MethodDelete, base+"/ui/tokens/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	if a := do(t, nil, req); a.status != 404 {
		t.Errorf("revoke twice: %d %s", a.status, a.body)
	}
	// The cookie's flags: HttpOnly and SameSite=Strict always, Secure when
	// the browser came over TLS (here: a proxy that says so).
	for _, proto := range []string{"", "https"} {
		req, _ = http.NewRequest(http.MethodPost, base+"/ui/login", strings.NewReader("token="+adminToken))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if proto != "" {
			req.Header.Set("X-Forwarded-Proto", proto)
		}
		a := do(t, nil, req)
		sc := a.header.Get("Set-Cookie")
		if a.status != http.StatusSeeOther || !strings.Contains(sc, "HttpOnly") || !strings.Contains(sc, "SameSite=Strict") ||
			!strings.Contains(sc, "Path=/ui/") || strings.Contains(sc, "Secure") != (proto == "https") {
			t.Errorf("login (proto %q): %d Set-Cookie %q", proto, a.status, sc)
		}
	}
	// A login posted from another origin is refused.
	req, _ = http.NewRequest(http.MethodPost, base+"/ui/login", strings.NewReader("token="+adminToken))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	if a := do(t, nil, req); a.status != 403 {
		t.Errorf("cross-origin login: %d", a.status)
	}
}

// The site page's counts are the store's, whichever pages the live set is
// read in; the job page never carries payload bytes. On the real server and
// on the embedded one (a relay without RELAY_VALKEY_URL).
func TestSiteCountsMatchTheStore(t *testing.T) {
	t.Parallel()
	for _, embedded := range []bool{false, true} {
		t.Run(map[bool]string{false: "valkey", true: "embedded"}[embedded], func(t *testing.T) { siteCounts(t, embedded) })
	}
}

// requireTruthfulPartial: a read that does not say Partial counted every
// live job (its counts are the whole read's); one that says so counted no
// more than there are.
func requireTruthfulPartial(t *testing.T, cut, whole opsstore.SiteStates) {
	t.Helper()
	if cut.Live != whole.Live || cut.AwaitingPayload != whole.AwaitingPayload {
		t.Errorf("set sizes differ between reads: %+v vs %+v", cut, whole)
	}
	if !cut.Partial && (cut.Queued != whole.Queued || cut.Ready != whole.Ready || cut.Running != whole.Running || cut.OldestQueuedID != whole.OldestQueuedID) {
		t.Errorf("a read that does not say Partial must be complete: %+v, whole %+v", cut, whole)
	}
	if cut.Queued > whole.Queued || cut.Ready > whole.Ready || cut.Running > whole.Running {
		t.Errorf("a partial read counted more than there is: %+v, whole %+v", cut, whole)
	}
}

// TestSiteCountsCutShort: a site with more live jobs than any server keeps
// in a compact set encoding (the default bound is 128 members) read one
// page at a time with one page allowed is cut short, and says so (required
// where the server reports the set hashtable-encoded; Partial must be
// truthful everywhere).
func TestSiteCountsCutShort(t *testing.T) {
	t.Parallel()
	for _, embedded := range []bool{false, true} {
		t.Run(map[bool]string{false: "valkey", true: "embedded"}[embedded], func(t *testing.T) {
			e := setupOn(t, embedded)
			ctx := context.Background()
			const n = 300
			for i := range n {
				enqueue(t, e.st, "site-a", fmt.Sprintf("job-%03d", i), "alice")
			}
			whole, err := opsstore.New(e.st).SiteStates(ctx, "site-a", 1000, 100)
			if err != nil || whole.Partial || whole.Live != n || whole.Queued != n || whole.OldestQueuedID != "job-000" {
				t.Fatalf("whole read: %+v %v", whole, err)
			}
			cut, err := opsstore.New(e.st).SiteStates(ctx, "site-a", 1, 1)
			if err != nil {
				t.Fatal(err)
			}
			requireTruthfulPartial(t, cut, whole)
			enc := setEncoding(t, e, "*sl:*")
			t.Logf("live set encoding %q, one-page read %+v", enc, cut)
			if enc == "hashtable" && (!cut.Partial || cut.Queued >= n) {
				t.Errorf("a hashtable-encoded set of %d read one member per page, one page: want a partial read, got %+v", n, cut)
			}
		})
	}
}

// setEncoding is OBJECT ENCODING of the one key of e's namespace matching
// pattern ("" when the server does not say, as the embedded store does not).
func setEncoding(t *testing.T, e env, pattern string) string {
	t.Helper()
	ctx := context.Background()
	keys, err := e.client.Do(ctx, e.client.B().Keys().Pattern(e.ns+pattern).Build()).AsStrSlice()
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys %s%s: %v %v", e.ns, pattern, keys, err)
	}
	enc, err := e.client.Do(ctx, e.client.B().ObjectEncoding().Key(keys[0]).Build()).ToString()
	if err != nil {
		return ""
	}
	return enc
}

func siteCounts(t *testing.T, embedded bool) {
	e := setupOn(t, embedded)
	ctx := context.Background()
	var q3Before, q3After int64 // the store clock around q3's enqueue
	for _, id := range []string{"q1", "q2", "q3", "q4", "q5"} {
		if id == "q3" {
			q3Before = now(t, e.st)
		}
		enqueue(t, e.st, "site-a", id, "alice")
		if id == "q3" {
			q3After = now(t, e.st)
		}
	}
	enqueue(t, e.st, "site-b", "other", "bob")
	got := claim(t, e.st, "alice-laptop", "alice", store.Route{SiteID: "site-a", Owner: "alice"})
	if len(got) != 2 { // the unsealed cap per pair
		t.Fatalf("claimed %d", len(got))
	}
	const marker = "PAYLOAD-MARKER-7f3a"
	if r, err := e.st.Seal(ctx, "site-a", "q1", json.RawMessage(`{"ciphertext":"`+marker+`","recipientKeyId":"k"}`)); err != nil || r.Refused != "" {
		t.Fatalf("seal: %+v %v", r, err)
	}

	want := map[string]int64{}
	jobs, err := e.st.Jobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if j.SiteID == "site-a" {
			want[j.State]++
		}
	}
	a := get(t, nil, e.srv.URL, "/ui/site/site-a", adminToken, true)
	var sv SiteView
	if err := json.Unmarshal([]byte(a.body), &sv); err != nil {
		t.Fatalf("%d %s", a.status, a.body)
	}
	for _, s := range []string{store.StateQueued, store.StateAwaitingPayload, store.StateReady, store.StateRunning, store.StateDone} {
		if sv.Jobs[s] != want[s] {
			t.Errorf("%s: view %d, store %d", s, sv.Jobs[s], want[s])
		}
	}
	if sv.Jobs[store.StateQueued] != 3 || sv.OldestQueued != "q3" {
		t.Errorf("queued %d, oldest %q; want 3, q3", sv.Jobs[store.StateQueued], sv.OldestQueued)
	}
	// One live job per script: the same counts across five pages.
	small, err := opsstore.New(e.st).SiteStates(ctx, "site-a", 1, 100)
	if err != nil || small.Queued != 3 || small.Ready != 1 || small.AwaitingPayload != 1 || small.Partial || small.OldestQueuedID != "q3" {
		t.Errorf("paged read: %+v %v", small, err)
	}
	// One page of a one-member hint: whether the server hands back the whole
	// set in that page depends on its encoding (since Redis 7.2 and in
	// Valkey a small set is a listpack and SSCAN returns it whole), so what
	// must hold is that Partial tells the truth either way.
	cut, err := opsstore.New(e.st).SiteStates(ctx, "site-a", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	requireTruthfulPartial(t, cut, small)
	for _, asJSON := range []bool{true, false} {
		a = get(t, nil, e.srv.URL, "/ui/job/site-a/q1", adminToken, asJSON)
		if a.status != 200 || strings.Contains(a.body, marker) || !strings.Contains(a.body, "ready") {
			t.Errorf("job page (json %v): %d %s", asJSON, a.status, a.body)
		}
	}
	// The oldest queued job's age is its true age, from the enqueue
	// instant the store keeps (seq), not from when this replica first saw
	// it: an hour later, a first look at the page says an hour.
	e.st.Testing().AdvanceClock(3_600_000)
	a = get(t, nil, e.srv.URL, "/ui/site/site-a", adminToken, true)
	sv = SiteView{}
	if err := json.Unmarshal([]byte(a.body), &sv); err != nil {
		t.Fatalf("%d %s", a.status, a.body)
	}
	if sv.OldestQueued != "q3" || sv.OldestQueuedAt < q3Before || sv.OldestQueuedAt > q3After ||
		sv.OldestQueuedAgeMs != sv.Now-sv.OldestQueuedAt || sv.OldestQueuedAgeMs < 3_600_000 {
		t.Errorf("oldest queued %q at %d (enqueued within [%d, %d]), age %d ms at %d; want q3, its enqueue instant, over an hour",
			sv.OldestQueued, sv.OldestQueuedAt, q3Before, q3After, sv.OldestQueuedAgeMs, sv.Now)
	}
	if h := get(t, nil, e.srv.URL, "/ui/site/site-a", adminToken, false); !strings.Contains(h.body, `enqueued <span id="oldest-age">1h`) {
		t.Errorf("the page does not say the age exactly: %s", h.body)
	}
}

func now(t *testing.T, st *store.Store) int64 {
	t.Helper()
	n, err := st.Now(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A site-plane refusal is counted under the site it names, by its error
// code, only for a site the projection knows; other routes and unknown
// sites count nothing.
func TestRefusalsCounted(t *testing.T) {
	t.Parallel()
	a := NewActivity(func(s string) bool { return s == "site-a" })
	h := a.Refusals(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("ok") != "" {
			w.Write([]byte(`{}`))
			return
		}
		writeError(w, http.StatusTooManyRequests, "rate-limited", "slow down")
	}))
	send := func(path, site string) {
		req := httptest.NewRequest(http.MethodPost, path, nil)
		if site != "" {
			req.Header.Set("x-byollm-site", site)
		}
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	send("/relay/site/enqueue", "site-a")
	send("/relay/site/pending", "site-a")
	send("/relay/site/enqueue?ok=1", "site-a")
	send("/relay/site/enqueue", "made-up")
	send("/byollm/claim", "site-a")
	send("/relay/site/enqueue", "")
	sites, _ := a.snapshot()
	if len(sites) != 1 || len(sites["site-a"]) != 1 || sites["site-a"][0].Refusals["rate-limited"] != 2 || len(sites["site-a"][0].Refusals) != 1 {
		t.Fatalf("counted %+v", sites)
	}
	mins, reasons := siteActivity([]Replica{{Sites: sites}, {Sites: sites}}, "site-a", nowFunc().UnixMilli())
	if len(mins) != 1 || reasons["rate-limited"] != 4 {
		t.Fatalf("summed over two replicas: %+v %v", mins, reasons)
	}
}
