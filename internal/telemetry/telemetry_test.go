package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/byollm/relay-go/internal/telemetry"
)

// setup builds telemetry that records spans in memory and never reads the
// process environment (so an OTEL_* variable on the machine cannot leak in).
func setup(t *testing.T) (*telemetry.Telemetry, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tel, err := telemetry.Setup(context.Background(), telemetry.Config{
		ServiceVersion: "test",
		SpanExporter:   exp,
		Getenv:         func(string) string { return "" },
	})
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	return tel, exp
}

// scrape fetches /metrics over real HTTP and parses the exposition text.
func scrape(t *testing.T, tel *telemetry.Telemetry) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(tel.MetricsHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape status %d", resp.StatusCode)
	}
	body, _ := io.ReadAll(resp.Body)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse scrape: %v\n%s", err, body)
	}
	return fams
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

// find returns the sample of family name whose labels include want.
func find(fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	fam := fams[name]
	if fam == nil {
		return nil
	}
next:
	for _, m := range fam.GetMetric() {
		got := labelsOf(m)
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		return m
	}
	return nil
}

// fakeRoutes stands in for the relay's dispatcher, which decides the route
// of every request before the telemetry middleware runs (its own test,
// internal/relay TestRouteOf, covers the real decision): the route of the
// few targets these tests send.
var fakeRoutes = map[string]telemetry.Route{
	"/byollm/claim":          {Name: "/byollm/claim", Plane: telemetry.PlaneDaemon},
	"/byollm/anything/claim": {Name: "/byollm/claim", Plane: telemetry.PlaneDaemon},
	"/byollm/x/claim":        {Name: "/byollm/claim", Plane: telemetry.PlaneDaemon},
	"/relay/site/pending":    {Name: "/relay/site/pending", Plane: telemetry.PlaneSite},
	"/relay/site/enqueue":    {Name: "/relay/site/enqueue", Plane: telemetry.PlaneSite},
}

// fakeRelay answers like the relay would: it records the route first, then
// the telemetry middleware runs, then a handler that runs a store script
// inside the request so the script span has the request span as parent.
func fakeRelay(tel *telemetry.Telemetry, cfg telemetry.MiddlewareConfig) http.Handler {
	obs := tel.ScriptObserver()
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if r, ok := fakeRoutes[c.Request().URL.EscapedPath()]; ok {
				r.CallerKind = telemetry.CallerAnonymous
				if r.Plane == telemetry.PlaneDaemon && c.Request().Header.Get("x-byollm-runner") != "" {
					r.CallerKind = telemetry.CallerRunner
				}
				if r.Plane == telemetry.PlaneSite && c.Request().Header.Get("x-byollm-site") != "" {
					r.CallerKind = telemetry.CallerSite
				}
				telemetry.SetRoute(c, r)
			}
			return next(c)
		}
	})
	e.Use(tel.Middleware(cfg))
	h := func(c echo.Context) error {
		r, _ := telemetry.RouteOf(c)
		switch r.Name {
		case "/byollm/claim":
			_, end := obs(c.Request().Context(), "claim")
			end(nil)
			return c.Blob(http.StatusOK, "application/json", []byte(`{"jobs":[]}`))
		case "/relay/site/pending":
			_, end := obs(c.Request().Context(), "awaiting")
			end(errors.New("valkey: connection refused"))
			return c.Blob(http.StatusServiceUnavailable, "application/json", []byte(`{"error":"server-error"}`))
		case "/relay/site/enqueue":
			return c.NoContent(http.StatusForbidden)
		}
		return c.NoContent(http.StatusNotFound)
	}
	e.Any("/*", h)
	e.RouteNotFound("/*", h)
	return e
}

const (
	secretRunner    = "runner_secret_identity"
	secretSignature = "c2lnbmF0dXJlLXRoYXQtbXVzdC1ub3QtbGVhaw"
)

func do(t *testing.T, method, url string, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(`{"protocolVersion":"2","secret":"payload-bytes"}`))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func TestMiddlewareMetricsScrape(t *testing.T) {
	tel, _ := setup(t)
	srv := httptest.NewServer(fakeRelay(tel, telemetry.MiddlewareConfig{}))
	defer srv.Close()

	runner := map[string]string{"x-byollm-runner": secretRunner, "x-byollm-signature": secretSignature}
	do(t, "POST", srv.URL+"/byollm/claim", runner)
	do(t, "POST", srv.URL+"/byollm/anything/claim", runner) // last-segment routing: still claim
	do(t, "GET", srv.URL+"/relay/site/pending?siteId=site_a&protocolVersion=2", map[string]string{"x-byollm-site": "site_a"})
	do(t, "POST", srv.URL+"/relay/site/enqueue", nil)
	do(t, "GET", srv.URL+"/healthz", nil)
	do(t, "GET", srv.URL+"/byollm/cl%61im", nil)        // escapes are not decoded: unmatched
	do(t, "GET", srv.URL+"/some/random/path/1234", nil) // must not become a label

	fams := scrape(t, tel)
	cases := []struct {
		route, plane, status string
		want                 float64
	}{
		{"/byollm/claim", "daemon", "200", 2},
		{"/relay/site/pending", "site", "503", 1},
		{"/relay/site/enqueue", "site", "403", 1},
		{"unmatched", "none", "404", 3},
	}
	for _, c := range cases {
		lbl := map[string]string{"route": c.route, "plane": c.plane, "status": c.status}
		m := find(fams, "relay_http_requests_total", lbl)
		if m == nil {
			t.Errorf("no relay_http_requests_total%v", lbl)
			continue
		}
		if got := m.GetCounter().GetValue(); got != c.want {
			t.Errorf("relay_http_requests_total%v = %v, want %v", lbl, got, c.want)
		}
		h := find(fams, "relay_http_request_duration_seconds", lbl)
		if h == nil || float64(h.GetHistogram().GetSampleCount()) != c.want {
			t.Errorf("relay_http_request_duration_seconds%v count wrong: %v", lbl, h)
		}
	}
	if n := len(fams["relay_http_requests_total"].GetMetric()); n != len(cases) {
		t.Errorf("relay_http_requests_total has %d series, want %d (unbounded labels?)", n, len(cases))
	}
	if m := find(fams, "relay_http_active_requests", map[string]string{"plane": "daemon"}); m == nil || m.GetGauge().GetValue() != 0 {
		t.Errorf("relay_http_active_requests{plane=daemon} = %v, want 0 after all requests end", m)
	}
	if m := find(fams, "relay_valkey_script_errors_total", map[string]string{"script": "awaiting"}); m == nil || m.GetCounter().GetValue() != 1 {
		t.Errorf("relay_valkey_script_errors_total{script=awaiting} = %v, want 1", m)
	}
	if m := find(fams, "relay_valkey_script_duration_seconds", map[string]string{"script": "claim", "outcome": "ok"}); m == nil || m.GetHistogram().GetSampleCount() != 2 {
		t.Errorf("relay_valkey_script_duration_seconds{script=claim,outcome=ok} = %v, want 2 samples", m)
	}
	if fams["go_goroutines"] == nil {
		t.Error("runtime collector missing from /metrics")
	}

	// Nothing a caller sent may appear in a label.
	for name, fam := range fams {
		for _, m := range fam.GetMetric() {
			for _, lp := range m.GetLabel() {
				for _, bad := range []string{secretRunner, secretSignature, "site_a", "payload", "1234"} {
					if strings.Contains(lp.GetValue(), bad) {
						t.Errorf("%s label %s=%q carries caller data", name, lp.GetName(), lp.GetValue())
					}
				}
			}
		}
	}
}

func TestSpansFollowTraceparent(t *testing.T) {
	tel, exp := setup(t)
	srv := httptest.NewServer(fakeRelay(tel, telemetry.MiddlewareConfig{}))
	defer srv.Close()

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	const parentID = "00f067aa0ba902b7"
	do(t, "POST", srv.URL+"/byollm/x/claim", map[string]string{
		"traceparent":        "00-" + traceID + "-" + parentID + "-01",
		"x-byollm-runner":    secretRunner,
		"x-byollm-signature": secretSignature,
	})
	do(t, "GET", srv.URL+"/relay/site/pending?siteId=site_a", map[string]string{"x-byollm-site": "site_a"})

	spans := exp.GetSpans()
	byName := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		byName[s.Name] = s
	}
	server, ok := byName["POST /byollm/claim"]
	if !ok {
		t.Fatalf("no server span for claim; got %v", names(spans))
	}
	if server.SpanKind != trace.SpanKindServer {
		t.Errorf("server span kind %v", server.SpanKind)
	}
	if got := server.SpanContext.TraceID().String(); got != traceID {
		t.Errorf("trace id %s, want %s from traceparent", got, traceID)
	}
	if got := server.Parent.SpanID().String(); got != parentID || !server.Parent.IsRemote() {
		t.Errorf("parent %s (remote %v), want remote %s", got, server.Parent.IsRemote(), parentID)
	}
	attrs := attrMap(server.Attributes)
	for k, want := range map[string]string{
		"http.route": "/byollm/claim", "relay.plane": "daemon", "relay.caller_kind": "runner",
		"http.response.status_code": "200", "http.request.method": "POST",
	} {
		if attrs[k] != want {
			t.Errorf("server span %s = %q, want %q", k, attrs[k], want)
		}
	}
	script, ok := byName["valkey claim"]
	if !ok {
		t.Fatalf("no script span; got %v", names(spans))
	}
	if script.Parent.SpanID() != server.SpanContext.SpanID() || script.SpanContext.TraceID().String() != traceID {
		t.Errorf("script span parent %s, want the server span %s", script.Parent.SpanID(), server.SpanContext.SpanID())
	}

	failed := byName["valkey awaiting"]
	if failed.Status.Code != codes.Error {
		t.Errorf("failed script span status %v, want Error", failed.Status)
	}
	pending := byName["GET /relay/site/pending"]
	if pending.Status.Code != codes.Error || attrMap(pending.Attributes)["relay.caller_kind"] != "site" {
		t.Errorf("503 site span: status %v attrs %v", pending.Status, attrMap(pending.Attributes))
	}
	if pending.Parent.IsValid() {
		t.Errorf("request without traceparent got parent %v", pending.Parent)
	}

	for _, s := range spans {
		for k, v := range attrMap(s.Attributes) {
			for _, bad := range []string{secretRunner, secretSignature, "site_a", "payload"} {
				if strings.Contains(v, bad) {
					t.Errorf("span %s attribute %s=%q carries caller data", s.Name, k, v)
				}
			}
		}
	}
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

func attrMap(kvs []attribute.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		out[string(kv.Key)] = kv.Value.Emit()
	}
	return out
}

func TestDomainMetricsAndGauges(t *testing.T) {
	tel, _ := setup(t)
	m := tel.Metrics()
	ctx := context.Background()
	m.RecordClaim(ctx, 0)
	m.RecordClaim(ctx, 3)
	m.RecordClaim(ctx, 2)
	m.RecordSweep(ctx, 4, 1)
	m.RecordSweep(ctx, 0, 0)
	m.RecordChurnReport(ctx)
	m.RecordSiteLimit(ctx, "site_a", "jobs")
	m.RecordSiteLimit(ctx, "site_a", "jobs")
	m.ObserveSiteUse(func(context.Context) (map[string]telemetry.SiteUse, error) {
		return map[string]telemetry.SiteUse{"site_a": {LiveJobs: 9, StoredBytes: 4096}, "site_b": {}}, nil
	})

	loadedAt := time.Now().Add(-90 * time.Second)
	m.ObserveJobsByState(func(ctx context.Context) (map[string]int64, error) {
		if _, ok := ctx.Deadline(); !ok {
			return nil, errors.New("gauge callback without a deadline")
		}
		return map[string]int64{"queued": 5, "leased": 2}, nil
	})
	m.ObserveActiveLeases(func(context.Context) (int64, error) { return 2, nil })
	m.ObserveProjection(func() telemetry.ProjectionState {
		return telemetry.ProjectionState{Loaded: true, Version: 7, LoadedAt: loadedAt}
	})

	fams := scrape(t, tel)
	counters := []struct {
		name string
		lbl  map[string]string
		want float64
	}{
		{"relay_claims_total", map[string]string{"outcome": "empty"}, 1},
		{"relay_claims_total", map[string]string{"outcome": "granted"}, 2},
		{"relay_claimed_jobs_total", nil, 5},
		{"relay_sweeps_total", nil, 2},
		{"relay_swept_jobs_total", map[string]string{"outcome": "requeued"}, 4},
		{"relay_swept_jobs_total", map[string]string{"outcome": "removed"}, 1},
		{"relay_unsealed_churn_reports_total", nil, 1},
		{"relay_site_limit_refusals_total", map[string]string{"site": "site_a", "limit": "jobs"}, 2},
	}
	for _, c := range counters {
		s := find(fams, c.name, c.lbl)
		if s == nil || s.GetCounter().GetValue() != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.lbl, s, c.want)
		}
	}
	gauges := []struct {
		name string
		lbl  map[string]string
		want float64
	}{
		{"relay_jobs", map[string]string{"state": "queued"}, 5},
		{"relay_jobs", map[string]string{"state": "leased"}, 2},
		{"relay_leases_active", nil, 2},
		{"relay_projection_version", nil, 7},
		{"relay_projection_loaded", nil, 1},
		{"relay_site_jobs_live", map[string]string{"site": "site_a"}, 9},
		{"relay_site_stored_bytes", map[string]string{"site": "site_a"}, 4096},
		{"relay_site_jobs_live", map[string]string{"site": "site_b"}, 0},
	}
	for _, c := range gauges {
		s := find(fams, c.name, c.lbl)
		if s == nil || s.GetGauge().GetValue() != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.lbl, s, c.want)
		}
	}
	age := find(fams, "relay_projection_age_seconds", nil)
	if age == nil || age.GetGauge().GetValue() < 89 || age.GetGauge().GetValue() > 120 {
		t.Errorf("relay_projection_age_seconds = %v, want about 90", age)
	}

	// A store outage makes the store gauges vanish, not the scrape.
	m.ObserveJobsByState(func(context.Context) (map[string]int64, error) { return nil, errors.New("valkey down") })
	m.ObserveProjection(func() telemetry.ProjectionState { return telemetry.ProjectionState{} })
	fams = scrape(t, tel)
	if s := find(fams, "relay_jobs", map[string]string{"state": "queued"}); s != nil {
		t.Errorf("relay_jobs still reported during an outage: %v", s)
	}
	if s := find(fams, "relay_projection_loaded", nil); s == nil || s.GetGauge().GetValue() != 0 {
		t.Errorf("relay_projection_loaded = %v, want 0", s)
	}
	if find(fams, "relay_leases_active", nil) == nil {
		t.Error("relay_leases_active vanished with an unrelated callback failing")
	}
}

// syncBuffer is a bytes.Buffer safe for the server goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines(t *testing.T) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		out = append(out, m)
	}
	return out
}

func TestRefusalLogsCarryTraceIDs(t *testing.T) {
	for _, tracing := range []bool{true, false} {
		t.Run(map[bool]string{true: "tracing", false: "no-exporter"}[tracing], func(t *testing.T) {
			var tel *telemetry.Telemetry
			if tracing {
				tel, _ = setup(t)
			} else {
				var err error
				tel, err = telemetry.Setup(context.Background(), telemetry.Config{Getenv: func(string) string { return "" }})
				if err != nil {
					t.Fatal(err)
				}
				if tel.Tracing() {
					t.Fatal("tracing on without an endpoint")
				}
			}
			var buf syncBuffer
			logger := telemetry.NewLogger(&buf, true, slog.LevelDebug)
			h := fakeRelay(tel, telemetry.MiddlewareConfig{Logger: logger})
			srv := httptest.NewServer(h)
			defer srv.Close()

			const traceID = "0af7651916cd43dd8448eb211c80319c"
			do(t, "POST", srv.URL+"/relay/site/enqueue", map[string]string{
				"traceparent":        "00-" + traceID + "-b7ad6b7169203331-01",
				"x-byollm-site":      "site_a",
				"x-byollm-signature": secretSignature,
			})
			do(t, "POST", srv.URL+"/byollm/claim", map[string]string{"x-byollm-runner": secretRunner})

			lines := buf.lines(t)
			if len(lines) != 1 {
				t.Fatalf("want one refusal line (the 200 is not logged), got %v", lines)
			}
			l := lines[0]
			if l["level"] != "DEBUG" || l["status"] != float64(403) || l["route"] != "/relay/site/enqueue" || l["caller_kind"] != "site" {
				t.Errorf("refusal line %v", l)
			}
			if l["trace_id"] != traceID {
				t.Errorf("trace_id %v, want %s", l["trace_id"], traceID)
			}
			if s, _ := l["span_id"].(string); len(s) != 16 {
				t.Errorf("span_id %v", l["span_id"])
			}
			raw, _ := json.Marshal(l)
			for _, bad := range []string{secretSignature, "site_a", "payload"} {
				if strings.Contains(string(raw), bad) {
					t.Errorf("log line carries %q: %s", bad, raw)
				}
			}
		})
	}
}

func TestLoggerWithoutSpanHasNoTraceIDs(t *testing.T) {
	var buf syncBuffer
	logger := telemetry.NewLogger(&buf, true, slog.LevelInfo).With("component", "sweeper")
	logger.InfoContext(context.Background(), "swept")
	logger.Debug("hidden below level")
	lines := buf.lines(t)
	if len(lines) != 1 || lines[0]["component"] != "sweeper" {
		t.Fatalf("lines %v", lines)
	}
	if _, ok := lines[0]["trace_id"]; ok {
		t.Errorf("trace_id without a span: %v", lines[0])
	}
}

// On a listener routed by echo's router (the admin listener) the route is
// echo's pattern, and whatever matched no route is one label.
func TestRoutedListenerLabels(t *testing.T) {
	tel, _ := setup(t)
	e := echo.New()
	e.Use(tel.Middleware(telemetry.MiddlewareConfig{Plane: telemetry.PlaneAdmin}))
	ok := func(c echo.Context) error { return c.NoContent(http.StatusOK) }
	e.GET("/metrics", ok)
	e.GET("/pairings/:userCode", ok)
	g := e.Group("", func(next echo.HandlerFunc) echo.HandlerFunc { return next })
	g.GET("/projection", ok)
	srv := httptest.NewServer(e)
	defer srv.Close()
	for _, p := range []string{"/metrics", "/pairings/ABCD-EFGH", "/pairings/WXYZ-1234", "/projection", "/x", "/some/random/path/1234"} {
		do(t, "GET", srv.URL+p, nil)
	}
	fams := scrape(t, tel)
	for route, want := range map[string]float64{"/metrics": 1, "/pairings/:userCode": 2, "/projection": 1, "unmatched": 2} {
		m := find(fams, "relay_http_requests_total", map[string]string{"route": route, "plane": "admin"})
		if m == nil || m.GetCounter().GetValue() != want {
			t.Errorf("relay_http_requests_total{route=%s,plane=admin} = %v, want %v", route, m, want)
		}
	}
	if n := len(fams["relay_http_requests_total"].GetMetric()); n != 4 {
		t.Errorf("relay_http_requests_total has %d series, want 4 (unbounded labels?)", n)
	}
}

func TestHandlerCanCorrectRoute(t *testing.T) {
	tel, exp := setup(t)
	e := echo.New()
	e.Use(tel.Middleware(telemetry.MiddlewareConfig{Plane: telemetry.PlaneAdmin}))
	e.PUT("/admin/*", func(c echo.Context) error {
		telemetry.SetRoute(c, telemetry.Route{Name: "/admin/projection", Plane: telemetry.PlaneAdmin, CallerKind: "operator"})
		return c.NoContent(http.StatusNoContent)
	})
	srv := httptest.NewServer(e)
	defer srv.Close()
	do(t, "PUT", srv.URL+"/admin/projection", nil)
	fams := scrape(t, tel)
	if find(fams, "relay_http_requests_total", map[string]string{"route": "/admin/projection", "status": "204"}) == nil {
		t.Errorf("corrected route not in metrics: %v", fams["relay_http_requests_total"])
	}
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Name != "PUT /admin/projection" || attrMap(spans[0].Attributes)["relay.caller_kind"] != "operator" {
		t.Errorf("spans %v", spans)
	}
}

// TestOTLPExport points the exporter at a fake collector over real HTTP and
// checks that spans arrive at /v1/traces when the endpoint is configured.
func TestOTLPExport(t *testing.T) {
	var mu sync.Mutex
	var posts []string
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		posts = append(posts, r.Method+" "+r.URL.Path+" "+r.Header.Get("content-type"))
		mu.Unlock()
		if len(body) == 0 {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Header().Set("content-type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()

	tel, err := telemetry.Setup(context.Background(), telemetry.Config{
		OTLPEndpoint: collector.URL + "/",
		Getenv:       func(string) string { return "" },
	})
	if err != nil {
		t.Fatal(err)
	}
	if !tel.Tracing() {
		t.Fatal("tracing off with an endpoint configured")
	}
	srv := httptest.NewServer(fakeRelay(tel, telemetry.MiddlewareConfig{}))
	defer srv.Close()
	do(t, "POST", srv.URL+"/byollm/claim", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(posts) == 0 || posts[0] != "POST /v1/traces application/x-protobuf" {
		t.Fatalf("collector saw %v, want a protobuf POST to /v1/traces", posts)
	}
}

func TestEndpointFromEnv(t *testing.T) {
	env := map[string]string{"RELAY_OTLP_ENDPOINT": " http://collector:4318 "}
	if got := telemetry.EndpointFromEnv(func(k string) string { return env[k] }); got != "http://collector:4318" {
		t.Errorf("EndpointFromEnv = %q", got)
	}
	// The OTEL_ variable alone switches tracing on (the SDK reads it).
	tel, err := telemetry.Setup(context.Background(), telemetry.Config{Getenv: func(k string) string {
		return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}[k]
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	if !tel.Tracing() {
		t.Error("OTEL_EXPORTER_OTLP_ENDPOINT did not switch tracing on")
	}
	off, err := telemetry.Setup(context.Background(), telemetry.Config{
		OTLPEndpoint: "http://127.0.0.1:1",
		Getenv:       func(k string) string { return map[string]string{"OTEL_SDK_DISABLED": "true"}[k] },
	})
	if err != nil {
		t.Fatal(err)
	}
	if off.Tracing() {
		t.Error("OTEL_SDK_DISABLED=true left tracing on")
	}
}

var _ sdktrace.SpanExporter = (*tracetest.InMemoryExporter)(nil)

// TestJSONLogDurations: durations in JSON logs read as Go durations, in
// groups too, and other values are left alone.
func TestJSONLogDurations(t *testing.T) {
	var buf bytes.Buffer
	log := telemetry.NewLogger(&buf, true, slog.LevelInfo)
	log.Info("x", slog.Duration("storeTimeout", 500*time.Millisecond), slog.Group("g", slog.Duration("d", 90*time.Second)), slog.Int("n", 3))
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	g, _ := got["g"].(map[string]any)
	if got["storeTimeout"] != "500ms" || g["d"] != "1m30s" || got["n"] != float64(3) {
		t.Fatalf("got %s", buf.String())
	}
}
