package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/byollm/relay-go/internal/httpserve"
	"github.com/byollm/relay-go/internal/projectionsync"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/test/relaytest"
)

const token = "test-admin-token-0123456789"

const site1 = `{"siteId":"site-1","site":{"identity":"aWRlbnRpdHktMQ","encryption":"ZW5jLTE","encryptionSig":"c2lnLTE"}}`

func doc(owners ...string) string {
	var cs []string
	for _, o := range owners {
		cs = append(cs, `{"owner":"`+o+`","siteId":"site-1"}`)
	}
	return `{"sites":[` + site1 + `],"consents":[` + strings.Join(cs, ",") + `]}`
}

// setup starts an admin server over a real Valkey in a fresh namespace.
func setup(t *testing.T, opts Options) (*httptest.Server, *projectionsync.Sync) {
	t.Helper()
	c := relaytest.Client(t)
	ns := relaytest.Namespace(t, c)
	sync := projectionsync.New(c, projectionsync.Options{Namespace: ns, Logger: relaytest.Logger(t)})
	if err := sync.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	opts.Projections = sync
	opts.Logger = relaytest.Logger(t)
	srv := httptest.NewServer(New(opts))
	t.Cleanup(srv.Close)
	return srv, sync
}

type answer struct {
	status int
	header http.Header
	body   string
}

func call(t *testing.T, srv *httptest.Server, method, path, auth, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	srv, _ := setup(t, Options{Token: token})
	tests := []struct {
		name, auth string
		want       int
	}{
		{"missing", "", 401},
		{"wrong", "Bearer wrong-token-wrong-token", 401},
		{"right token, wrong scheme", "Basic " + token, 401},
		{"prefix of the token", "Bearer " + token[:len(token)-1], 401},
		{"token plus junk", "Bearer " + token + "x", 401},
		{"right", "Bearer " + token, 200},
		// The scheme is case-insensitive (RFC 9110 §11.1).
		{"lower-case scheme", "bearer " + token, 200},
		{"upper-case scheme", "BEARER " + token, 200},
		{"mixed-case scheme", "bEaReR " + token, 200},
		// RFC 6750 §2.1: "Bearer" 1*SP b64token.
		{"two spaces", "Bearer  " + token, 200},
		{"no space", "Bearer" + token, 401},
		{"lower-case, no space", "bearer" + token, 401},
		{"tab instead of space", "Bearer\t" + token, 401},
		{"empty token", "Bearer ", 401},
		{"lower-case scheme, empty token", "bearer  ", 401},
		{"token without scheme", token, 401},
		{"scheme twice", "Bearer Bearer " + token, 401},
		{"token then more", "Bearer " + token + " " + token, 401},
		{"truncated scheme", "Bear " + token, 401},
		{"longer scheme", "Bearerx " + token, 401},
		{"lower-case scheme, prefix of the token", "bearer " + token[:len(token)-1], 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, route := range [][2]string{{"GET", "/projection"}, {"PUT", "/projection"}, {"POST", "/projection/merge"}, {"GET", "/nowhere"}} {
				a := call(t, srv, route[0], route[1], tt.auth, doc("alice"))
				want := tt.want
				if want == 200 && route[1] == "/nowhere" {
					want = 404
				}
				if a.status != want {
					t.Fatalf("%s %s: %d %s, want %d", route[0], route[1], a.status, a.body, want)
				}
				if want == 401 {
					if a.body != `{"error":"unauthorized","message":"admin token required"}` {
						t.Fatalf("401 body %s", a.body)
					}
					if !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
						t.Fatalf("401 without WWW-Authenticate: Bearer")
					}
				}
			}
		})
	}
}

// Two Authorization headers are refused even when one of them is right:
// which one a proxy in front would have checked is anyone's guess.
func TestAuthTwoHeaders(t *testing.T) {
	t.Parallel()
	srv, _ := setup(t, Options{Token: token})
	for _, pair := range [][2]string{{"Bearer " + token, "Bearer wrong-token-wrong-token"}, {"Bearer " + token, "Bearer " + token}} {
		req, err := http.NewRequest("GET", srv.URL+"/projection", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Add("Authorization", pair[0])
		req.Header.Add("Authorization", pair[1])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Fatalf("two Authorization headers %q: %d, want 401", pair, resp.StatusCode)
		}
	}
}

func TestNoTokenRefusesEverything(t *testing.T) {
	t.Parallel()
	srv, sync := setup(t, Options{})
	for _, auth := range []string{"", "Bearer ", "Bearer anything-at-all-here"} {
		a := call(t, srv, "PUT", "/projection", auth, doc("alice"))
		if a.status != 401 || !strings.Contains(a.body, "RELAY_ADMIN_TOKEN is not set") {
			t.Fatalf("auth %q: %d %s", auth, a.status, a.body)
		}
	}
	if d, _ := sync.Get(context.Background()); d.Version != 0 {
		t.Fatal("a write got through with no token configured")
	}
}

func TestOpenRoutesBypassToken(t *testing.T) {
	t.Parallel()
	s := New(Options{Logger: relaytest.Logger(t)})
	s.HandleOpen("GET", "/healthz", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	s.Handle("GET", "/metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "m") }))
	srv := httptest.NewServer(s)
	defer srv.Close()
	if a := call(t, srv, "GET", "/healthz", "", ""); a.status != 200 || a.body != "ok" {
		t.Fatalf("open route: %d %s", a.status, a.body)
	}
	if a := call(t, srv, "GET", "/metrics", "", ""); a.status != 401 {
		t.Fatalf("authenticated route without token: %d", a.status)
	}
}

func TestProjectionRoutes(t *testing.T) {
	t.Parallel()
	srv, sync := setup(t, Options{Token: token, MaxBody: 4096})
	auth := "Bearer " + token

	a := call(t, srv, "GET", "/projection", auth, "")
	if a.status != 200 || a.header.Get("X-Projection-Version") != "0" ||
		a.body != `{"sites":[],"consents":[],"devices":[],"rosters":[],"revoked":[]}` {
		t.Fatalf("GET with nothing stored: %d %v %s", a.status, a.header, a.body)
	}

	a = call(t, srv, "PUT", "/projection", auth, doc("alice", "bob"))
	var res projectionsync.Result
	if a.status != 200 || json.Unmarshal([]byte(a.body), &res) != nil || res.Version != 1 || !res.Changed || res.Consents != 2 || res.Sites != 1 {
		t.Fatalf("PUT: %d %s", a.status, a.body)
	}
	for _, k := range []string{`"sites":1`, `"consents":2`, `"devices":0`, `"rosters":0`, `"revoked":0`, `"version":1`} {
		if !strings.Contains(a.body, k) {
			t.Fatalf("PUT answer %s lacks %s", a.body, k)
		}
	}
	if !sync.Current().MayRouteFor("bob", "site-1") {
		t.Fatal("PUT not in force on the answering replica")
	}

	a = call(t, srv, "POST", "/projection/merge", auth, `{"consents":[{"owner":"carol","siteId":"site-1"}]}`)
	if a.status != 200 || !strings.Contains(a.body, `"consents":3`) || !strings.Contains(a.body, `"version":2`) {
		t.Fatalf("merge: %d %s", a.status, a.body)
	}

	a = call(t, srv, "GET", "/projection", auth, "")
	if a.status != 200 || a.header.Get("X-Projection-Version") != "2" || !strings.Contains(a.body, `"owner":"carol"`) {
		t.Fatalf("GET: %d %v %s", a.status, a.header, a.body)
	}
	a = call(t, srv, "GET", "/projection/status", auth, "")
	if a.status != 200 || !strings.Contains(a.body, `"version":2`) || !strings.Contains(a.body, `"replica":{"loaded":true,"version":2`) {
		t.Fatalf("status: %d %s", a.status, a.body)
	}

	refusals := []struct {
		name, method, path, body string
		status                   int
		error, mention           string
	}{
		{"unknown field", "PUT", "/projection", `{"consents":[{"owner":"x","siteId":"s","colour":1}]}`, 400, "bad-request", "colour"},
		{"missing consents", "PUT", "/projection", `{"sites":[]}`, 400, "bad-request", "consents"},
		{"not JSON", "PUT", "/projection", `{`, 400, "bad-request", "JSON"},
		{"merge record", "POST", "/projection/merge", `{"devices":[{"owner":"x"}]}`, 400, "bad-request", "runnerId"},
		{"too large", "PUT", "/projection", `{"consents":[],"x":"` + strings.Repeat("a", 5000) + `"}`, 413, "too-large", "RELAY_ADMIN_MAX_BODY"},
		{"wrong method", "DELETE", "/projection", "", 405, "method-not-allowed", ""},
		{"wrong method on merge", "GET", "/projection/merge", "", 405, "method-not-allowed", ""},
	}
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			a := call(t, srv, tt.method, tt.path, auth, tt.body)
			var e errorBody
			if a.status != tt.status || json.Unmarshal([]byte(a.body), &e) != nil || e.Error != tt.error || !strings.Contains(e.Message, tt.mention) {
				t.Fatalf("%d %s, want %d %s mentioning %q", a.status, a.body, tt.status, tt.error, tt.mention)
			}
			if a.header.Get("Content-Type") != "application/json" {
				t.Fatalf("content-type %q", a.header.Get("Content-Type"))
			}
		})
	}
	if sync.Version() != 2 || !sync.Current().MayRouteFor("carol", "site-1") {
		t.Fatal("a refused document changed the projection in force")
	}
}

const emptyLists = `{"sites":[],"consents":[],"devices":[],"rosters":[],"revoked":[]}`

// TestMergeEmptyLists: what a control plane sends when it has nothing new,
// before any projection exists and after one does. A merge of empty lists is
// a no-op (200, changed false, the version stays, nothing written); a merge
// onto nothing merges onto the empty projection.
func TestMergeEmptyLists(t *testing.T) {
	t.Parallel()
	srv, sync := setup(t, Options{Token: token})
	auth := "Bearer " + token
	result := func(a answer) projectionsync.Result {
		t.Helper()
		var res projectionsync.Result
		if a.status != 200 || json.Unmarshal([]byte(a.body), &res) != nil {
			t.Fatalf("merge: %d %s", a.status, a.body)
		}
		return res
	}

	for _, body := range []string{emptyLists, `{}`, `{"devices":[]}`} {
		if res := result(call(t, srv, "POST", "/projection/merge", auth, body)); res.Changed || res.Version != 0 {
			t.Fatalf("merge %s onto nothing: %+v", body, res)
		}
	}
	a := call(t, srv, "GET", "/projection", auth, "")
	if a.status != 200 || a.header.Get("X-Projection-Version") != "0" || a.body != emptyLists {
		t.Fatalf("GET after no-op merges: %d %v %s", a.status, a.header, a.body)
	}

	// A merge onto nothing naming empty lists beside real records.
	res := result(call(t, srv, "POST", "/projection/merge", auth,
		`{"sites":[`+site1+`],"consents":[{"owner":"alice","siteId":"site-1"}],"devices":[],"rosters":[],"revoked":[]}`))
	if !res.Changed || res.Version != 1 || res.Sites != 1 || res.Consents != 1 {
		t.Fatalf("merge onto nothing: %+v", res)
	}
	if !sync.Current().MayRouteFor("alice", "site-1") {
		t.Fatal("merge onto nothing not in force")
	}

	again := result(call(t, srv, "POST", "/projection/merge", auth, emptyLists))
	if again.Changed || again.Version != 1 || again.UpdatedAt != res.UpdatedAt || again.Consents != 1 || again.Sites != 1 {
		t.Fatalf("merge of empty lists onto version 1: %+v", again)
	}
	a = call(t, srv, "GET", "/projection", auth, "")
	if a.header.Get("X-Projection-Version") != "1" || !strings.Contains(a.body, `"owner":"alice"`) {
		t.Fatalf("GET after the no-op merge: %v %s", a.header, a.body)
	}
}

// TestMergeLoneSurrogateIDs: runner ids differing only in a lone surrogate
// (or a literal U+FFFD) are three devices, as in the reference, whose keys
// are JSON.stringify of the exact JS strings.
func TestMergeLoneSurrogateIDs(t *testing.T) {
	t.Parallel()
	srv, sync := setup(t, Options{Token: token})
	auth := "Bearer " + token
	dev := func(id string) string {
		return `{"owner":"o","runnerId":"` + id + `","device":{"identity":"aWQ","encryption":"ZW5j","encryptionSig":"c2ln"}}`
	}
	for _, id := range []string{`r\ud800`, `r\udbff`, `r\ufffd`} {
		if a := call(t, srv, "POST", "/projection/merge", auth, `{"devices":[`+dev(id)+`]}`); a.status != 200 {
			t.Fatalf("merge %s: %d %s", id, a.status, a.body)
		}
	}
	a := call(t, srv, "GET", "/projection", auth, "")
	want := `"devices":[` + dev(`r\ud800`) + `,` + dev(`r\udbff`) + `,` + dev("r\ufffd") + `]`
	if a.header.Get("X-Projection-Version") != "3" || !strings.Contains(a.body, want) {
		t.Fatalf("GET: %v %s\nwant it to contain %s", a.header, a.body, want)
	}
	for _, id := range []string{"r\xed\xa0\x80", "r\xed\xaf\xbf", "r\ufffd"} {
		if sync.Current().DeviceFor(id) == nil {
			t.Errorf("device %q not in force", id)
		}
	}
}

// TestPushCommand runs the CLI against a running admin server.
func TestPushCommand(t *testing.T) {
	t.Parallel()
	srv, sync := setup(t, Options{Token: token})
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	patch := filepath.Join(dir, "patch.json")
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(good, []byte(doc("alice")), 0o600)
	os.WriteFile(patch, []byte(`{"consents":[{"owner":"bob","siteId":"site-1"}]}`), 0o600)
	os.WriteFile(bad, []byte(`{"consents":[{"owner":"bob"}]}`), 0o600)
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	withToken := env(map[string]string{"RELAY_ADMIN_TOKEN": token, "RELAY_ADMIN_URL": srv.URL})

	tests := []struct {
		name       string
		args       []string
		getenv     func(string) string
		code       int
		out, errs  string
		wantVer    int64
		wantRoutes []string
	}{
		{"push replaces", []string{"push", good}, withToken, ExitOK, `"version":1`, "", 1, []string{"alice"}},
		{"push --merge after the file", []string{"push", patch, "--merge"}, withToken, ExitOK, `"consents":2`, "", 2, []string{"alice", "bob"}},
		{"bad file refused", []string{"push", bad}, withToken, ExitRefused, "", "refused (400): bad-request: projection: consents[0].siteId", 2, nil},
		{"wrong token", []string{"push", "--token", "nope-nope-nope-nope", good}, withToken, ExitRefused, "", "refused (401)", 2, nil},
		{"token and url from flags", []string{"push", "--admin", srv.URL, "--token", token, good}, env(nil), ExitOK, `"version":3`, "", 3, []string{"alice"}},
		{"no token", []string{"push", good}, env(map[string]string{"RELAY_ADMIN_URL": srv.URL}), ExitUsage, "", "no token", 3, nil},
		{"missing file", []string{"push", filepath.Join(dir, "nope.json")}, withToken, ExitUsage, "", "cannot read", 3, nil},
		{"unreachable", []string{"push", "--admin", "http://127.0.0.1:1", good}, withToken, ExitUsage, "", "cannot reach", 3, nil},
		{"get prints the document", []string{"get"}, withToken, ExitOK, `"consents":[{"owner":"alice","siteId":"site-1","paused":false}]`, "", 3, nil},
		{"status", []string{"status"}, withToken, ExitOK, `"version":3`, "", 3, nil},
		{"unknown command", []string{"pull"}, withToken, ExitUsage, "", "unknown command", 3, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errs bytes.Buffer
			code := RunCLI(context.Background(), tt.args, tt.getenv, &out, &errs)
			if code != tt.code || !strings.Contains(out.String(), tt.out) || !strings.Contains(errs.String(), tt.errs) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, stdout ~%q, stderr ~%q", code, out.String(), errs.String(), tt.code, tt.out, tt.errs)
			}
			if err := sync.Refresh(context.Background()); err != nil {
				t.Fatal(err)
			}
			if v := sync.Version(); v != tt.wantVer {
				t.Fatalf("version %d after, want %d", v, tt.wantVer)
			}
			for _, o := range tt.wantRoutes {
				if !sync.Current().MayRouteFor(o, "site-1") {
					t.Fatalf("%s has no route after", o)
				}
			}
		})
	}
}

func TestDefaultAdminURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env  map[string]string
		want string
	}{
		{nil, "http://127.0.0.1:8081"},
		{map[string]string{"RELAY_ADMIN_LISTEN": ":9000"}, "http://127.0.0.1:9000"},
		{map[string]string{"RELAY_ADMIN_LISTEN": "10.0.0.1:9000"}, "http://10.0.0.1:9000"},
		{map[string]string{"RELAY_ADMIN_LISTEN": "10.0.0.1:9000", "RELAY_ADMIN_URL": "https://admin.example"}, "https://admin.example"},
	}
	for i, tt := range tests {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			if got := defaultAdminURL(func(k string) string { return tt.env[k] }); got != tt.want {
				t.Fatalf("got %s, want %s", got, tt.want)
			}
		})
	}
}

// Admin bodies are charged to the body budget shared with the planes: when
// it is spent, a write is refused (retryable) and nothing is applied.
func TestBodyBudgetSpent(t *testing.T) {
	t.Parallel()
	bodies := httpserve.NewBudget(16 << 10)
	bodies.SetClientShare(16 << 10)
	srv, sync := setup(t, Options{Token: token, Bodies: bodies})
	// A body larger than the whole budget could never be read: too large,
	// not the retryable 503 a client would repeat forever.
	if a := call(t, srv, "PUT", "/projection", "Bearer "+token, doc("alice")+strings.Repeat(" ", 20<<10)); a.status != 413 || !strings.Contains(a.body, `"error":"too-large"`) {
		t.Fatalf("a body over the whole budget: %d %s", a.status, a.body)
	}
	held, err := bodies.Reserve(12 << 10) // other requests hold most of it
	if err != nil {
		t.Fatal(err)
	}
	a := call(t, srv, "PUT", "/projection", "Bearer "+token, doc("alice")+strings.Repeat(" ", 6<<10))
	held()
	if a.status != 503 || !strings.Contains(a.body, `"error":"unavailable"`) || !strings.Contains(a.body, "RELAY_BODY_BYTES_IN_FLIGHT") {
		t.Fatalf("over the budget: %d %s", a.status, a.body)
	}
	if d, _ := sync.Get(context.Background()); d.Version != 0 {
		t.Fatal("a write got through past the body budget")
	}
	if bodies.Held() != 0 {
		t.Fatalf("the budget still holds %d bytes", bodies.Held())
	}
	if a := call(t, srv, "PUT", "/projection", "Bearer "+token, doc("alice")); a.status != 200 {
		t.Fatalf("a small body within the budget: %d %s", a.status, a.body)
	}
}

// brokenProjections answers like a projection store whose replies the code
// does not understand. A double: a real Valkey cannot be made to answer a
// script with a shape its header does not promise (store.TestClassify
// classifies real failures).
type brokenProjections struct{ Projections }

func (brokenProjections) Get(context.Context) (projectionsync.Document, error) {
	return projectionsync.Document{}, fmt.Errorf("projection: %w", store.ErrUnexpectedReply)
}

// Errors say whose fault: a store that cannot answer is the retryable 503
// unavailable, a reply the code does not understand a 500 server-error,
// and a panic in a handler the same 500, in JSON like every answer.
func TestFailuresSayWhoseFault(t *testing.T) {
	t.Parallel()
	_, sync := setup(t, Options{Token: token})
	s := New(Options{Token: token, Projections: brokenProjections{sync}, Logger: relaytest.Logger(t)})
	s.Handle("GET", "/panics", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	srv := httptest.NewServer(s)
	defer srv.Close()
	if a := call(t, srv, "GET", "/projection", "Bearer "+token, ""); a.status != 500 || !strings.HasPrefix(a.body, `{"error":"server-error","message":"projection: unexpected reply`) {
		t.Errorf("a reply not understood: %d %s", a.status, a.body)
	}
	if a := call(t, srv, "GET", "/panics", "Bearer "+token, ""); a.status != 500 || a.body != `{"error":"server-error","message":"the admin listener failed to handle this request"}` {
		t.Errorf("a panic: %d %s", a.status, a.body)
	}

	// A real store that cannot answer: its client is closed.
	c := relaytest.Open(t, relaytest.ValkeyURL())
	down := projectionsync.New(c, projectionsync.Options{Namespace: "admintest-down", Logger: relaytest.Logger(t)})
	c.Close()
	s = New(Options{Token: token, Projections: down, Logger: relaytest.Logger(t)})
	srv2 := httptest.NewServer(s)
	defer srv2.Close()
	if a := call(t, srv2, "GET", "/projection", "Bearer "+token, ""); a.status != 503 || !strings.HasPrefix(a.body, `{"error":"unavailable"`) {
		t.Errorf("a store that cannot answer: %d %s", a.status, a.body)
	}
}
