package deploy_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/byollm/relay-go/test/outageproxy"
	"github.com/byollm/relay-go/test/relaytest"
	"github.com/valkey-io/valkey-go"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// These tests run the binary the image would contain, as the container
// would: healthcheck subcommand, admin probes and metrics, drain on
// SIGTERM, and a Valkey outage.

// relayProc is a running relay and the environment it was given.
type relayProc struct {
	*relaytest.Relay
	env []string
}

// startRelay runs the relay on loopback ports chosen by the kernel, in its
// own Valkey namespace (removed afterwards), and waits for its ready line.
func startRelay(t *testing.T, valkeyURL string, extra ...string) *relayProc {
	t.Helper()
	env := []string{
		"RELAY_VALKEY_URL=" + valkeyURL,
		"RELAY_NAMESPACE=" + relaytest.Namespace(t, relaytest.Open(t, relaytest.ValkeyURL())),
		"RELAY_LISTEN=127.0.0.1:0",
		"RELAY_ADMIN_LISTEN=127.0.0.1:0",
		"RELAY_LOG_FORMAT=json",
		"RELAY_LOG_LEVEL=debug",
		"RELAY_SWEEP_INTERVAL=off",
	}
	env = append(env, extra...)
	r := relaytest.StartRelay(t, relaytest.RelayConfig{Bin: relayBinary(t), Env: env})
	return &relayProc{Relay: r, env: env}
}

// healthcheck runs `relay healthcheck` as the image's HEALTHCHECK would.
func (p *relayProc) healthcheck(t *testing.T) (int, string) {
	t.Helper()
	cmd := exec.Command(relayBinary(t), "healthcheck")
	cmd.Env = append(append([]string{}, p.env...), "RELAY_ADMIN_LISTEN="+p.Admin)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatalf("healthcheck: %v", err)
	}
	return 0, string(out)
}

type reply struct {
	status int
	body   map[string]any
	raw    string
	close  bool
}

func call(t *testing.T, method, url, body string, hdr map[string]string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, raw: string(b), close: resp.Close}
	_ = json.Unmarshal(b, &r.body)
	return r
}

const pollBody = `{"protocolVersion":"2","action":"poll","deviceCode":"abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG"}`

func TestRelayHealthMetricsDrain(t *testing.T) {
	collector := newCollector(t)
	p := startRelay(t, relaytest.ValkeyURL(), "RELAY_DRAIN_PERIOD=1s", "RELAY_SHUTDOWN_TIMEOUT=3s",
		"RELAY_OTLP_ENDPOINT="+collector.srv.URL)
	admin := p.AdminURL()

	if code, out := p.healthcheck(t); code != 0 {
		t.Fatalf("relay healthcheck exit %d: %s", code, out)
	}
	r := call(t, "GET", admin+"/readyz", "", nil)
	checks, _ := r.body["checks"].(map[string]any)
	if r.status != 200 || r.body["status"] != "ready" || checks["valkey"] != "ok" || checks["scripts"] != "ok" || checks["projection"] != "ok" {
		t.Fatalf("/readyz %d %s", r.status, r.raw)
	}
	// Health lives on the admin listener only; the protocol listener keeps
	// the reference's 404.
	if r := call(t, "GET", p.URL()+"/healthz", "", nil); r.status != 404 || r.raw != `{"error":"not-found"}` {
		t.Errorf("protocol /healthz: %d %s", r.status, r.raw)
	}

	// A refused request, carrying a W3C trace context.
	const traceID = "5b8efff798038103d269b633813fc60c"
	tp := map[string]string{"traceparent": "00-" + traceID + "-eee19b7ec3c1b174-01", "x-byollm-runner": "runner-secret-id"}
	if r := call(t, "POST", p.URL()+"/byollm/claim", `{"protocolVersion":"2"}`, tp); r.status != 401 {
		t.Errorf("unsigned claim: %d %s", r.status, r.raw)
	}
	if r := call(t, "POST", p.URL()+"/byollm/pair", pollBody, nil); r.status != 200 || r.body["status"] != "expired" {
		t.Errorf("pair poll: %d %s", r.status, r.raw)
	}

	// /metrics on the admin listener, open without a token.
	m := call(t, "GET", admin+"/metrics", "", nil)
	for _, want := range []string{
		`relay_http_requests_total{plane="daemon",route="/byollm/claim",status="401"} 1`,
		`relay_http_requests_total{plane="daemon",route="/byollm/pair",status="200"} 1`,
		`relay_http_requests_total{plane="none",route="unmatched",status="404"} 1`,
		`relay_valkey_script_duration_seconds_count{outcome="ok",script="pairing_get"} 1`,
		`relay_projection_loaded 1`,
		`relay_projection_version 0`,
		`relay_jobs{state="queued"} 0`,
		`relay_jobs{state="done"} 0`,
		`relay_leases_active 0`,
		`go_goroutines `,
	} {
		if !strings.Contains(m.raw, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(m.raw, "runner-secret-id") {
		t.Error("/metrics carries a caller id")
	}
	var refusal map[string]any
	for _, line := range strings.Split(p.Log(), "\n") {
		if strings.Contains(line, `"request refused"`) && strings.Contains(line, `"/byollm/claim"`) {
			_ = json.Unmarshal([]byte(line), &refusal)
		}
	}
	if refusal["trace_id"] != traceID || refusal["status"] != float64(401) || refusal["level"] != "DEBUG" {
		t.Errorf("refusal log line %v, want DEBUG, status 401, trace_id %s", refusal, traceID)
	}
	if strings.Contains(p.Log(), "runner-secret-id") {
		t.Error("logs carry a caller id")
	}

	// SIGTERM: readiness fails at once, both listeners keep serving for the
	// drain period, then the process exits 0.
	start := time.Now()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(500 * time.Millisecond)
	for {
		r := call(t, "GET", admin+"/readyz", "", nil)
		if r.status == 503 && r.body["status"] == "draining" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d %s 500ms after SIGTERM", r.status, r.raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, out := p.healthcheck(t); code != 0 {
		t.Errorf("liveness failed while draining: %d %s", code, out)
	}
	r = call(t, "POST", p.URL()+"/byollm/pair", pollBody, nil)
	if r.status != 200 || !r.close {
		t.Errorf("request during drain: %d close=%v %s; want served with Connection: close", r.status, r.close, r.raw)
	}
	select {
	case <-p.Done():
		err, elapsed := p.ExitErr(), time.Since(start)
		if err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, p.Log())
		}
		if elapsed < time.Second || elapsed > 4*time.Second {
			t.Errorf("exited %v after SIGTERM; want after the 1s drain period, within drain + 3s", elapsed)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no exit 10s after SIGTERM\n%s", p.Log())
	}
	if code, _ := p.healthcheck(t); code == 0 {
		t.Error("relay healthcheck succeeds with the relay gone")
	}
	if !strings.Contains(p.Log(), `"msg":"drained"`) {
		t.Errorf("no drained log line\n%s", p.Log())
	}

	// The spans were flushed to the collector at exit: the refused claim's
	// server span continues the caller's trace, and the pair poll's store
	// call is a child of its request span.
	spans := collector.spans()
	var claim, pair, store *tracepb.Span
	for _, s := range spans {
		switch s.Name {
		case "POST /byollm/claim":
			claim = s
		case "POST /byollm/pair":
			if pair == nil {
				pair = s
			}
		case "valkey pairing_get":
			if store == nil {
				store = s
			}
		}
	}
	if claim == nil || pair == nil || store == nil {
		t.Fatalf("collector got spans %v", spanNames(spans))
	}
	if hex.EncodeToString(claim.TraceId) != traceID || hex.EncodeToString(claim.ParentSpanId) != "eee19b7ec3c1b174" {
		t.Errorf("claim span trace %x parent %x, want the traceparent's", claim.TraceId, claim.ParentSpanId)
	}
	if !bytes.Equal(store.ParentSpanId, pair.SpanId) || !bytes.Equal(store.TraceId, pair.TraceId) {
		t.Errorf("store span parent %x, want the pair request span %x", store.ParentSpanId, pair.SpanId)
	}
	for _, s := range spans {
		for _, a := range s.Attributes {
			if strings.Contains(a.GetValue().GetStringValue(), "runner-secret-id") {
				t.Errorf("span %s attribute %s carries a caller id", s.Name, a.Key)
			}
		}
	}
}

// fakeCollector is an OTLP/HTTP trace receiver.
type fakeCollector struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []*tracepb.Span
}

func newCollector(t *testing.T) *fakeCollector {
	c := &fakeCollector{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || r.Header.Get("content-type") != "application/x-protobuf" || proto.Unmarshal(body, &req) != nil {
			t.Errorf("collector: unexpected %s %s %s", r.Method, r.URL.Path, r.Header.Get("content-type"))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				c.got = append(c.got, ss.Spans...)
			}
		}
		c.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("content-type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *fakeCollector) spans() []*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*tracepb.Span(nil), c.got...)
}

func spanNames(spans []*tracepb.Span) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

// TestRelayValkeyOutage: while Valkey is unreachable, store-backed
// requests fail fast with 503 server-error and readiness is false; both
// recover by themselves when Valkey is back.
func TestRelayValkeyOutage(t *testing.T) {
	opt, err := valkey.ParseURL(relaytest.ValkeyURL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := outageproxy.New(t, opt.InitAddress[0])
	u := strings.Replace(relaytest.ValkeyURL(), opt.InitAddress[0], proxy.Addr(), 1)
	if u == relaytest.ValkeyURL() {
		t.Fatalf("cannot point %s at the proxy", u)
	}
	p := startRelay(t, u)
	admin := p.AdminURL()

	if r := call(t, "POST", p.URL()+"/byollm/pair", pollBody, nil); r.status != 200 {
		t.Fatalf("before the outage: %d %s", r.status, r.raw)
	}
	proxy.Down()

	start := time.Now()
	r := call(t, "POST", p.URL()+"/byollm/pair", pollBody, nil)
	if elapsed := time.Since(start); elapsed > 3*time.Second {
		t.Errorf("request during the outage took %v; must fail fast", elapsed)
	}
	if r.status != 503 || r.body["error"] != "server-error" {
		t.Errorf("request during the outage: %d %s, want 503 server-error", r.status, r.raw)
	}
	start = time.Now()
	r = call(t, "GET", admin+"/readyz", "", nil)
	checks, _ := r.body["checks"].(map[string]any)
	if r.status != 503 || checks["valkey"] == "ok" {
		t.Errorf("/readyz during the outage: %d %s", r.status, r.raw)
	}
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("/readyz during the outage took %v", elapsed)
	}
	if code, out := p.healthcheck(t); code != 0 {
		t.Errorf("liveness follows the store (a restart cannot fix it): %d %s", code, out)
	}

	proxy.Up(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r = call(t, "GET", admin+"/readyz", "", nil)
		if r.status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readiness did not come back: %d %s\n%s", r.status, r.raw, p.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r := call(t, "POST", p.URL()+"/byollm/pair", pollBody, nil); r.status != 200 || r.body["status"] != "expired" {
		t.Errorf("after the outage: %d %s", r.status, r.raw)
	}
	m := call(t, "GET", admin+"/metrics", "", nil)
	// The store classes each failure: a Valkey that refuses connections is
	// "connection".
	if !strings.Contains(m.raw, `relay_valkey_script_errors_total{class="connection",script="pairing_get"} 1`) ||
		!strings.Contains(m.raw, `relay_http_requests_total{plane="daemon",route="/byollm/pair",status="503"} 1`) {
		t.Errorf("/metrics does not show the outage:\n%s", grepLines(m.raw, "relay_valkey_script_errors_total", `route="/byollm/pair"`))
	}
}

func grepLines(s string, subs ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, sub := range subs {
			if strings.Contains(l, sub) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
