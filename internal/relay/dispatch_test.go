package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/internal/telemetry"
	"github.com/byollm/relay-go/test/relaytest"
)

const (
	notFoundBody  = `{"error":"not-found"}`
	notSignedBody = `{"error":"unauthorized","message":"this request is not signed"}`
	schemaBody    = `{"error":"bad-request","message":"request failed schema validation"}`
	noVersionBody = "{\"error\":\"unsupported-protocol-version\",\"message\":\"this request declared no protocol version. Upgrade the daemon: `npm i -g byollm@latest`.\",\"supported\":[\"2\"],\"minimum\":\"2\"}"
)

func versionBody(v, tail string) string {
	return `{"error":"unsupported-protocol-version","message":"this server speaks protocol 2 and the daemon asked for ` +
		v + `. ` + tail + `","supported":["2"],"minimum":"2"}`
}

const (
	olderTail = "Upgrade the daemon: `npm i -g byollm@latest`."
	newerTail = "This daemon is newer than the server; the server needs upgrading."
)

// TestDispatch covers wire.md §3: the route table, the prefix-only
// handshake, last-segment routing, unread escapes, dot segments, methods.
func TestDispatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	newWorld(t).install(e)
	v2 := []byte(`{"protocolVersion":"2"}`)
	cases := []struct {
		name, method, path string
		body               []byte
		status             int
		want               string
	}{
		{"health is not a route", "GET", "/healthz", nil, 404, notFoundBody},
		{"root", "GET", "/", nil, 404, notFoundBody},
		{"outside both prefixes", "POST", "/literally/anything/claim", v2, 404, notFoundBody},
		{"bare /byollm skips the handshake", "GET", "/byollm", nil, 404, notFoundBody},
		{"bare /relay skips the handshake", "GET", "/relay", nil, 404, notFoundBody},
		{"unknown endpoint without version", "GET", "/byollm/nope", nil, 400, noVersionBody},
		{"unknown endpoint with query version", "GET", "/byollm/nope?protocolVersion=2", nil, 404, notFoundBody},
		{"unknown site path with version", "GET", "/relay/site/nope?protocolVersion=2", nil, 404, notFoundBody},
		{"site path is exact (trailing slash)", "POST", "/relay/site/enqueue/", v2, 404, notFoundBody},
		{"site path is case-sensitive", "POST", "/relay/site/Enqueue", v2, 404, notFoundBody},
		{"trailing slash", "POST", "/byollm/claim/", v2, 404, notFoundBody},
		{"escape not decoded", "POST", "/byollm/cl%61im", v2, 404, notFoundBody},
		{"last segment routes", "POST", "/byollm/a/b/claim", v2, 401, notSignedBody},
		{"empty segment routes", "POST", "/byollm//claim", v2, 401, notSignedBody},
		{"dot segments resolve", "POST", "/byollm/x/../claim", v2, 401, notSignedBody},
		{"encoded dot segments resolve", "POST", "/byollm/x/%2E%2e/claim", v2, 401, notSignedBody},
		{"method never checked (GET claim)", "GET", "/byollm/claim?protocolVersion=2", nil, 401, notSignedBody},
		{"method never checked (POST pending)", "POST", "/relay/site/pending?protocolVersion=2", nil, 401, notSignedBody},
		{"PUT body is not read", "PUT", "/byollm/claim", v2, 400, noVersionBody},
		{"lower-case post is POST", "post", "/byollm/claim", v2, 401, notSignedBody},
		{"a method echo does not know routes too", "FOO", "/byollm/claim?protocolVersion=2", nil, 401, notSignedBody},
		{"and on an unknown path", "FOO", "/nope", nil, 404, notFoundBody},
		{"every daemon endpoint exists: pair", "POST", "/byollm/pair", v2, 400, `{"error":"bad-request","message":"pair request failed schema validation"}`},
		{"fetch", "POST", "/byollm/fetch", v2, 401, notSignedBody},
		{"result", "POST", "/byollm/result", v2, 401, notSignedBody},
		{"heartbeat", "POST", "/byollm/heartbeat", v2, 401, notSignedBody},
		{"release", "POST", "/byollm/release", v2, 401, notSignedBody},
		{"enqueue", "POST", "/relay/site/enqueue", v2, 401, notSignedBody},
		{"payload", "POST", "/relay/site/payload", v2, 401, notSignedBody},
		{"cancel", "POST", "/relay/site/cancel", v2, 401, notSignedBody},
		{"pending", "GET", "/relay/site/pending?siteId=site_a&protocolVersion=2", nil, 401, notSignedBody},
		{"results", "GET", "/relay/site/results?siteId=site_a&protocolVersion=2", nil, 401, notSignedBody},
		{"debug off", "GET", "/debug?site=site_a", nil, 404, notFoundBody},
		{"debug off under basePath", "POST", "/byollm/debug", []byte("garbage"), 404, notFoundBody},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			expect(t, e.do(tc.method, tc.path, nil, tc.body), tc.status, tc.want)
		})
	}
}

// TestRouteOf: the route the dispatcher decides is the one the middleware
// after it (telemetry) reads, from the echo context: one routing table.
func TestRouteOf(t *testing.T) {
	t.Parallel()
	cases := []struct {
		base, target string
		hdr          map[string]string
		route, plane string
		caller       string
	}{
		{"/byollm", "/byollm/claim", map[string]string{"x-byollm-runner": "r"}, "/byollm/claim", "daemon", "runner"},
		{"/byollm", "/byollm//claim", nil, "/byollm/claim", "daemon", "anonymous"},
		{"/byollm", "/byollm/a/b/heartbeat", nil, "/byollm/heartbeat", "daemon", "anonymous"},
		{"/byollm", "/byollm/pair", map[string]string{"x-byollm-runner": "r"}, "/byollm/pair", "daemon", "anonymous"},
		{"/byollm", "/byollm/x/../release", nil, "/byollm/release", "daemon", "anonymous"},
		{"/byollm", `/byollm\fetch`, nil, "/byollm/fetch", "daemon", "anonymous"},
		{"/byollm", "/byollm/x/%2e%2e/result", nil, "/byollm/result", "daemon", "anonymous"},
		{"/byollm", "/byollm/claim/", nil, "unmatched", "none", "anonymous"},
		{"/byollm", "/byollm/cl%61im", nil, "unmatched", "none", "anonymous"},
		{"/byollm", "/byollm%5Cclaim", nil, "unmatched", "none", "anonymous"},
		{"/byollm", "/literally/anything/claim", nil, "unmatched", "none", "anonymous"},
		{"/byollm", "/byollm", nil, "unmatched", "none", "anonymous"},
		{"/byollm", "/byollm/x/debug", nil, "unmatched", "none", "anonymous"},
		{"/byollm", "/relay/site/results?siteId=x", map[string]string{"x-byollm-site": "s"}, "/relay/site/results", "site", "site"},
		{"/byollm", "/relay/site/enqueue/", nil, "unmatched", "none", "anonymous"},
		{"/byollm", "/relay/site/Enqueue", nil, "unmatched", "none", "anonymous"},
		{"/byollm", "/debug", nil, "/debug", "debug", "anonymous"},
		{"/byollm", "/byollm/debug", nil, "/debug", "debug", "anonymous"},
		{"/custom/", "/custom/claim", nil, "/custom/claim", "daemon", "anonymous"},
		{"/custom", "/custom/debug", nil, "/debug", "debug", "anonymous"},
		{"/custom", "/byollm/claim", nil, "unmatched", "none", "anonymous"},
	}
	base := newEnv(t)
	for _, tc := range cases {
		t.Run(tc.base+" "+tc.target, func(t *testing.T) {
			var seen telemetry.Route
			e := newEnvOn(t, base.st, func(c *Config) {
				c.BasePath = tc.base
				c.Middleware = []echo.MiddlewareFunc{func(next echo.HandlerFunc) echo.HandlerFunc {
					return func(c echo.Context) error {
						seen, _ = telemetry.RouteOf(c)
						return next(c)
					}
				}}
			})
			// A raw request line: the client libraries would clean the
			// target up before sending it.
			conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			req := "GET " + tc.target + " HTTP/1.1\r\nHost: relay\r\nConnection: close\r\n"
			for k, v := range tc.hdr {
				req += k + ": " + v + "\r\n"
			}
			if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadAll(conn); err != nil {
				t.Fatal(err)
			}
			if seen.Name != tc.route || seen.Plane != tc.plane || seen.CallerKind != tc.caller {
				t.Errorf("route of %q under %q = %+v, want {%s %s %s}", tc.target, tc.base, seen, tc.route, tc.plane, tc.caller)
			}
		})
	}
}

// TestVersionHandshake covers wire.md §4 on both planes.
func TestVersionHandshake(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	newWorld(t).install(e)
	cases := []struct {
		name, path, body string
		status           int
		want             string
	}{
		{"missing", "/byollm/claim", `{}`, 400, noVersionBody},
		{"no body, no query", "/byollm/fetch", ``, 400, noVersionBody},
		{"empty string", "/byollm/claim", `{"protocolVersion":""}`, 400, noVersionBody},
		{"number is no version", "/byollm/claim", `{"protocolVersion":2}`, 400, noVersionBody},
		{"body null beats query", "/byollm/claim?protocolVersion=2", `{"protocolVersion":null}`, 400, noVersionBody},
		{"older", "/byollm/claim", `{"protocolVersion":"1"}`, 400, versionBody("1", olderTail)},
		{"newer", "/byollm/claim", `{"protocolVersion":"3"}`, 400, versionBody("3", newerTail)},
		{"string order: 10 is older", "/byollm/claim", `{"protocolVersion":"10"}`, 400, versionBody("10", olderTail)},
		{"site plane says daemon too", "/relay/site/cancel", `{"protocolVersion":"0"}`, 400, versionBody("0", olderTail)},
		{"site plane missing", "/relay/site/enqueue", `{"siteId":"site_a"}`, 400, noVersionBody},
		{"body wins over query", "/relay/site/enqueue?protocolVersion=2", `{"protocolVersion":"1"}`, 400, versionBody("1", olderTail)},
		{"invalid JSON falls back to query", "/byollm/claim?protocolVersion=2", `{not json`, 401, notSignedBody},
		{"array body falls back to query", "/byollm/claim?protocolVersion=2", `["protocolVersion"]`, 401, notSignedBody},
		{"first query value wins", "/byollm/claim?protocolVersion=2&protocolVersion=1", ``, 401, notSignedBody},
		{"query value percent-decoded", "/byollm/claim?protocolVersion=%32", ``, 401, notSignedBody},
		{"good version reaches auth", "/byollm/claim", `{"protocolVersion":"2"}`, 401, notSignedBody},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			expect(t, e.do("POST", tc.path, nil, []byte(tc.body)), tc.status, tc.want)
		})
	}
	t.Run("site read without version", func(t *testing.T) {
		expect(t, e.do("GET", "/relay/site/pending?siteId=site_a", nil, nil), 400, noVersionBody)
	})
	t.Run("site read with an old version", func(t *testing.T) {
		expect(t, e.do("GET", "/relay/site/results?siteId=site_a&protocolVersion=1", nil, nil), 400, versionBody("1", olderTail))
	})
}

// TestBodies covers body handling: the size cap before reading, invalid JSON
// as an absent body, a BOM, and the schema refusal for signed garbage.
func TestBodies(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := newWorld(t)
	w.install(e)
	tooLargeBody := `{"error":"bad-request","message":"this request is too large for the relay to read"}`

	t.Run("declared length over the cap is refused unread", func(t *testing.T) {
		big := strings.Repeat("a", MaxBodyBytes+1)
		expect(t, e.do("POST", "/byollm/claim", nil, []byte(big)), 400, tooLargeBody)
	})
	t.Run("chunked body over the cap is refused", func(t *testing.T) {
		req, err := http.NewRequest("POST", e.srv.URL+"/relay/site/enqueue", io.NopCloser(strings.NewReader(strings.Repeat("b", MaxBodyBytes+10))))
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = -1 // unknown: sent chunked
		res, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != 400 || string(b) != tooLargeBody {
			t.Fatalf("got %d %s", res.StatusCode, b)
		}
	})
	t.Run("a body at the cap is read", func(t *testing.T) {
		// Valid JSON padded with whitespace to exactly the cap: it parses,
		// so it reaches auth.
		body := `{"protocolVersion":"2"}` + strings.Repeat(" ", MaxBodyBytes-len(`{"protocolVersion":"2"}`))
		expect(t, e.do("POST", "/byollm/claim", nil, []byte(body)), 401, notSignedBody)
	})
	t.Run("unsigned garbage is not signed", func(t *testing.T) {
		expect(t, e.do("POST", "/byollm/claim?protocolVersion=2", nil, []byte("\x00garbage")), 401, notSignedBody)
	})
	t.Run("signed garbage is a schema failure", func(t *testing.T) {
		body := []byte("{garbage")
		h := signed(protocol.HeaderRunner, w.alice, "runner_alice", "claim", e.now(), body)
		expect(t, e.do("POST", "/byollm/claim?protocolVersion=2", h, body), 400, schemaBody)
	})
	t.Run("signed invalid UTF-8 hashes the replaced text", func(t *testing.T) {
		raw := []byte("{\"protocolVersion\":\"2\",\"runnerId\":\"runner_alice\",\"capabilities\":[],\"max\":1,\"x\":\"\xff\"}")
		// The signer signs the WHATWG text (U+FFFD), as a JS client would.
		h := signed(protocol.HeaderRunner, w.alice, "runner_alice", "claim", e.now(), protocol.RequestText(raw))
		expect(t, e.do("POST", "/byollm/claim", h, raw), 400, schemaBody) // unknown key x
	})
	t.Run("a leading BOM is stripped before hashing and parsing", func(t *testing.T) {
		body := claimJSON(t, "runner_alice", 1)
		h := signed(protocol.HeaderRunner, w.alice, "runner_alice", "claim", e.now(), body)
		got := e.do("POST", "/byollm/claim", h, append([]byte("\xef\xbb\xbf"), body...))
		expect(t, got, 200, `{"jobs":[],"leaseMs":60000}`)
	})
	t.Run("store limits are a schema failure, not an outage", func(t *testing.T) {
		body := fetchJSON(t, "runner_alice", "job\u0000x", "lease")
		expect(t, e.daemonPost(w.alice, "runner_alice", "fetch", body), 400, schemaBody)
	})
}

// TestNotReady: before a projection is loaded the planes answer the
// retryable 503 not-ready; unknown paths still get 404.
func TestNotReady(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	nr := `{"error":"not-ready","message":"the relay has not loaded its routing projection yet — try again shortly"}`
	expect(t, e.do("POST", "/byollm/claim", nil, []byte(`{"protocolVersion":"2"}`)), 503, nr)
	expect(t, e.do("GET", "/relay/site/pending?siteId=a&protocolVersion=2", nil, nil), 503, nr)
	expect(t, e.do("GET", "/nope", nil, nil), 404, notFoundBody)
	expect(t, e.do("GET", "/byollm/nope?protocolVersion=2", nil, nil), 404, notFoundBody)
}

// TestStoreDown: a store that cannot be reached is a fast, retryable 503
// server-error. The store is a real one on a private server, killed.
func TestStoreDown(t *testing.T) {
	t.Parallel()
	srv := relaytest.StartServer(t)
	// The server and its keys die with the test: no namespace cleanup.
	st, err := store.New(t.Context(), relaytest.Open(t, srv.URL()), store.Options{Namespace: relaytest.NewName(), Logger: relaytest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	w := newWorld(t)
	e := newEnvOn(t, st, func(cfg *Config) { cfg.Clock = func() int64 { return time.Now().UnixMilli() } })
	w.install(e)
	stub := enqueueJSON(t, "site_a", e.stub("j1", "alice", w.siteA))
	srv.Kill()
	down := `{"error":"server-error","message":"the relay cannot reach its routing store just now — try again shortly"}`
	// Signed on the local clock: the harness's default reads the store.
	claim := claimJSON(t, "runner_alice", 1)
	h := signed(protocol.HeaderRunner, w.alice, "runner_alice", "claim", time.Now().UnixMilli(), claim)
	expect(t, e.do("POST", "/byollm/claim", h, claim), 503, down)
	h = signed(protocol.HeaderSite, w.siteA, "site_a", "site/enqueue", time.Now().UnixMilli(), stub)
	expect(t, e.do("POST", "/relay/site/enqueue", h, stub), 503, down)
}

// brokenStore answers as a store whose replies the code does not
// understand. A double: a real Valkey cannot be made to answer a script
// with a shape its header does not promise without changing the script
// (store.TestClassify classifies real decode failures and script errors).
type brokenStore struct{ *store.Store }

var errBroken = fmt.Errorf("presence: %w: array of 2 elements, want at least 3", store.ErrUnexpectedReply)

func (brokenStore) PresenceHead(context.Context, string) (*store.Presence, error) {
	return nil, errBroken
}
func (brokenStore) Enqueue(context.Context, store.EnqueueInput) (store.Job, error) {
	return store.Job{}, errBroken
}

// TestStoreBug: a reply the relay does not understand is its own bug, not
// an outage: 500 server-error (no retry fixes it) and an error-level log
// line carrying the request's trace id.
func TestStoreBug(t *testing.T) {
	t.Parallel()
	base := newEnv(t)
	w := newWorld(t)
	tel, err := telemetry.Setup(context.Background(), telemetry.Config{Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	e := newEnvOn(t, base.st, func(c *Config) {
		c.Store = brokenStore{base.st}
		c.Logger = telemetry.NewLogger(&logs, true, slog.LevelInfo)
		c.Middleware = []echo.MiddlewareFunc{tel.Middleware(telemetry.MiddlewareConfig{})}
	})
	w.install(e)
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	traced := func(h http.Header) http.Header {
		h.Set("traceparent", "00-"+traceID+"-b7ad6b7169203331-01")
		return h
	}
	bug := `{"error":"server-error","message":"the relay failed to handle this request"}`
	claim := claimJSON(t, "runner_alice", 1)
	expect(t, e.do("POST", "/byollm/claim", traced(signed(protocol.HeaderRunner, w.alice, "runner_alice", "claim", e.now(), claim)), claim), 500, bug)
	stub := enqueueJSON(t, "site_a", e.stub("j1", "alice", w.siteA))
	expect(t, e.do("POST", "/relay/site/enqueue", traced(signed(protocol.HeaderSite, w.siteA, "site_a", "site/enqueue", e.now(), stub)), stub), 500, bug)
	errorLines := 0
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var l map[string]any
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if l["level"] == "ERROR" && strings.Contains(fmt.Sprint(l["err"]), store.ErrUnexpectedReply.Error()) && l["trace_id"] == traceID {
			errorLines++
		}
	}
	if errorLines != 2 {
		t.Fatalf("want one error-level line with the trace id per failed request, got %d in:\n%s", errorLines, logs.String())
	}
}

// panickyStore panics where a store call would answer, as a bug would.
type panickyStore struct{ *store.Store }

func (panickyStore) PresenceHead(context.Context, string) (*store.Presence, error) {
	panic("a broken invariant")
}

// TestHandlerPanic: a panic in a handler is recovered by the planes' echo
// middleware and answered with the protocol's 500 server-error.
func TestHandlerPanic(t *testing.T) {
	t.Parallel()
	base := newEnv(t)
	w := newWorld(t)
	var logs syncBuffer
	e := newEnvOn(t, base.st, func(c *Config) {
		c.Store = panickyStore{base.st}
		c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	w.install(e)
	expect(t, e.daemonPost(w.alice, "runner_alice", "claim", claimJSON(t, "runner_alice", 1)), 500,
		`{"error":"server-error","message":"the relay failed to handle this request"}`)
	if !strings.Contains(logs.String(), `"level":"ERROR","msg":"relay: handler panic"`) {
		t.Fatalf("no error line for the panic:\n%s", logs.String())
	}
	// The relay still serves.
	expect(t, e.do("GET", "/nope", nil, nil), 404, notFoundBody)
}
