// Package hostile_test runs hostile clients against real relay processes on
// Valkey, the attacks of the hardening issues kept as tests so no change
// brings one back: a client that holds the shared body budget with
// trickling uploads, one address holding thousands of idle keep-alive
// connections, over-cap Content-Lengths left waiting, and a request that
// could never fit answered as if a retry could help. The hostile client
// plays from its own loopback address (127.0.0.2); everyone else from
// others, so the relay's per-address shares are what is tested.
package hostile_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/loadgen"
	"github.com/byollm/relay-go/test/relaytest"
)

func TestMain(m *testing.M) { relaytest.Main(m) }

// baseline runs TestHostileClientLeavesFleetServed's fleet with no hostile
// client, for the figure to compare with:
// go test ./test/hostile -run TestHostileClientLeavesFleetServed -v -args -baseline
var baseline = flag.Bool("baseline", false, "run the fleet without the hostile client")

// hostileAddr is the one address the hostile client plays from.
const hostileAddr = "127.0.0.2"

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// startRelay runs one relay on the shared test Valkey, in a namespace of
// the test's own, with its defaults unless env says otherwise.
func startRelay(t *testing.T, env ...string) *relaytest.Relay {
	t.Helper()
	url := relaytest.ValkeyURL()
	ns := relaytest.Namespace(t, relaytest.Open(t, url))
	token := "hostile-" + randomHex(12)
	return relaytest.StartRelay(t, relaytest.RelayConfig{Name: "relay", Token: token,
		Env: append([]string{"RELAY_VALKEY_URL=" + url, "RELAY_NAMESPACE=" + ns, "RELAY_LOG_LEVEL=info"}, env...)})
}

// dialFrom connects to addr from a loopback source address.
func dialFrom(src, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	return d.Dial("tcp", addr)
}

// exchange sends one raw request from src and reads its answer.
func exchange(src, addr, req string) (*http.Response, string, error) {
	c, err := dialFrom(src, addr)
	if err != nil {
		return nil, "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		return nil, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, "", err
	}
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b), nil
}

// idleConns opens n keep-alive connections from src, each answering one
// request, and leaves them open (idle) until the test ends. It returns how
// many were served and how many refused (a 503, or closed unanswered).
func idleConns(t *testing.T, src, addr string, n int) (served, refused int) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := dialFrom(src, addr)
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(20 * time.Second))
			var resp *http.Response
			if _, err = io.WriteString(c, "GET /nothing-here HTTP/1.1\r\nHost: relay\r\n\r\n"); err == nil {
				if resp, err = http.ReadResponse(bufio.NewReader(c), nil); err == nil {
					io.Copy(io.Discard, resp.Body) //nolint:errcheck // only the status matters
					resp.Body.Close()
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil || resp.StatusCode == http.StatusServiceUnavailable {
				refused++ // answered 503, or closed unanswered
				c.Close()
				return
			}
			served++
			c.SetDeadline(time.Time{})
			t.Cleanup(func() { c.Close() })
		}()
	}
	wg.Wait()
	return served, refused
}

// trickler is the hostile body holder of issue 27: connections that upload
// most of the largest body the planes accept at once, then one byte every
// two seconds, reopened as the relay cuts or refuses them (no faster than
// every half second each, so the test machine is not what gives out).
type trickler struct {
	held     atomic.Int64 // connections past their burst, waiting
	cut      atomic.Int64 // answered "did not arrive in time"
	refused  atomic.Int64 // answered otherwise (busy, too large)
	mu       sync.Mutex
	longest  time.Duration // longest a connection was held before its answer
	answered []string
}

func (h *trickler) run(ctx context.Context, addr string, conns int) *sync.WaitGroup {
	var wg sync.WaitGroup
	burst := make([]byte, 12<<20)
	for i := range burst {
		burst[i] = 'a'
	}
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				next := time.Now().Add(500 * time.Millisecond)
				h.once(ctx, addr, burst)
				select {
				case <-ctx.Done():
				case <-time.After(time.Until(next)):
				}
			}
		}()
	}
	return &wg
}

func (h *trickler) once(ctx context.Context, addr string, burst []byte) {
	c, err := dialFrom(hostileAddr, addr)
	if err != nil {
		return
	}
	defer c.Close()
	go func() { <-ctx.Done(); c.Close() }()
	start := time.Now()
	answered := make(chan string, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			answered <- ""
			return
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		answered <- fmt.Sprintf("%d %s", resp.StatusCode, b)
	}()
	fmt.Fprintf(c, "POST /byollm/claim HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", 13<<20)
	if _, err := c.Write(burst); err != nil {
		h.note(<-answered, start)
		return
	}
	h.held.Add(1)
	defer h.held.Add(-1)
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case a := <-answered:
			h.note(a, start)
			return
		case <-ctx.Done():
			return
		case <-tick.C:
			c.Write([]byte("a")) //nolint:errcheck // the answer says what happened
		}
	}
}

func (h *trickler) note(answer string, start time.Time) {
	if answer == "" {
		return
	}
	took := time.Since(start)
	if strings.Contains(answer, "did not arrive in time") {
		h.cut.Add(1)
	} else {
		h.refused.Add(1)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.longest = max(h.longest, took)
	if len(h.answered) < 5 {
		h.answered = append(h.answered, answer)
	}
}

// fleet runs a well-behaved fleet (sites and daemons from 127.0.0.1) that
// never retries: any 503 is an error of the run.
func fleet(t *testing.T, r *relaytest.Relay, d time.Duration) *loadgen.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d+90*time.Second)
	defer cancel()
	rep, err := loadgen.Run(ctx, loadgen.Config{
		Replicas:    []string{r.URL()},
		AdminURLs:   []string{r.AdminURL()},
		StatusURLs:  []string{r.AdminURL()},
		AdminToken:  r.Token,
		Sites:       2,
		Daemons:     4,
		Rate:        10,
		Duration:    d,
		Drain:       40 * time.Second,
		TTL:         90 * time.Second,
		Heartbeat:   2 * time.Second,
		ClaimPoll:   100 * time.Millisecond,
		PendingPoll: 50 * time.Millisecond,
		ResultsPoll: 200 * time.Millisecond,
		Timeout:     20 * time.Second,
	}, io.Discard)
	if err != nil {
		t.Fatalf("load generator: %v", err)
	}
	return rep
}

// The fairness figure of issue 27: one hostile address holds its share of
// the body budget with trickling uploads (defect 1) and 2,100 idle
// keep-alive connections (defect 2) while a well-behaved fleet runs from
// another address without retrying. Every claim and every job of the fleet
// must succeed; the claims' p99 is logged. The trickled bodies must be cut
// on the body schedule (each 64 KiB within RELAY_BODY_TIMEOUT), not held
// for minutes: the old rule let a 12 MiB start buy about 200 s.
func TestHostileClientLeavesFleetServed(t *testing.T) {
	// A generous store timeout: on a starved test machine a store call
	// that outlives the default 500 ms is a 503 of its own (issue 27's
	// defect 10), which is not what this test is about.
	r := startRelay(t, "RELAY_STORE_TIMEOUT=5s")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Bodies first, then idle connections for the rest of the address's
	// connection share (a connection cut or refused later is not
	// replaced: the address holds its whole share).
	var h trickler
	wg := &sync.WaitGroup{}
	if !*baseline {
		wg = h.run(ctx, r.Listen, 10)
		relaytest.WaitFor(t, 30*time.Second, "hostile bodies held past their burst", func() bool { return h.held.Load() >= 2 })
		served, refused := idleConns(t, hostileAddr, r.Listen, 2100)
		t.Logf("hostile address: %d bodies held, %d idle keep-alive connections held, %d refused", h.held.Load(), served, refused)
	}

	const loadFor = 15 * time.Second
	rep := fleet(t, r, loadFor)
	cancel()
	wg.Wait()

	claims := rep.Endpoints["claim"]
	j := rep.Jobs
	h.mu.Lock()
	longest, answers := h.longest, h.answered
	h.mu.Unlock()
	t.Logf("fleet beside the hostile client: %d jobs enqueued, %d collected, %d errors; claims %d (statuses %v) p50 %.1f ms p99 %.1f ms max %.1f ms",
		j.Enqueued, j.Collected, rep.Errors, claims.Requests, claims.Statuses, claims.Latency.P50Ms, claims.Latency.P99Ms, claims.Latency.MaxMs)
	t.Logf("hostile bodies: %d cut as too slow, %d refused, longest held %v; answers %q", h.cut.Load(), h.refused.Load(), longest.Round(time.Millisecond), answers)
	if rep.Errors != 0 || !rep.OK() {
		t.Errorf("the fleet was not served beside the hostile client: %d errors %v", rep.Errors, rep.Problems)
	}
	for status, n := range claims.Statuses {
		if status != http.StatusOK {
			t.Errorf("%d claims answered %d", n, status)
		}
	}
	if *baseline {
		return
	}
	if h.cut.Load() == 0 {
		t.Errorf("no trickled body was cut within the run (%v); the body schedule is not enforced", loadFor)
	}
	if longest > 60*time.Second {
		t.Errorf("a trickled body was held %v", longest)
	}
}

// Defect 2: one address opens 2,100 idle keep-alive connections; it gets
// its share (RELAY_MAX_CONNS_PER_ADDRESS, 512 of 2,048 by default) and the
// rest are refused, while other addresses are still served, and the
// refusals show in relay_connections_refused_total.
func TestIdleConnectionsFromOneAddress(t *testing.T) {
	r := startRelay(t)
	served, refused := idleConns(t, hostileAddr, r.Listen, 2100)
	t.Logf("one address: %d connections served and held idle, %d refused", served, refused)
	if served > 2048/4 || refused == 0 {
		t.Errorf("one address held %d connections (%d refused); want at most its share, 512", served, refused)
	}
	for _, other := range []string{"127.0.0.3", "127.0.0.4", "127.0.0.5"} {
		got, _ := idleConns(t, other, r.Listen, 20)
		if got != 20 {
			t.Errorf("%s: %d of 20 connections served beside the hostile address", other, got)
		}
	}
	resp, body, err := exchange("127.0.0.3", r.Admin, "GET /metrics HTTP/1.1\r\nHost: relay\r\nConnection: close\r\n\r\n")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("metrics: %v", err)
	}
	var lines []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "relay_connections_") {
			lines = append(lines, l)
		}
	}
	t.Logf("metrics:\n%s", strings.Join(lines, "\n"))
	if !strings.Contains(body, `relay_connections_refused_total{listener="planes",reason="address"`) {
		t.Errorf("no per-address refusal counted in relay_connections_refused_total")
	}
}

// Defect 5: an over-cap Content-Length without Connection: close, and no
// body following, is answered at once on both listeners (the old relay
// waited the 10 s body timeout to discard the body first) and the
// connection is closed. Not a speed target: 3 s is far from the old 10 s.
func TestOverCapContentLengthAnsweredAtOnce(t *testing.T) {
	r := startRelay(t)
	for _, tt := range []struct {
		name, addr, req string
		status          int
		code            string
	}{
		{"planes, over 13 MiB", r.Listen, fmt.Sprintf("POST /byollm/claim HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", 20<<20), 400, "bad-request"},
		{"planes, pairing over 64 KiB", r.Listen, "POST /byollm/pair HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", 400, "bad-request"},
		{"admin, over 16 MiB", r.Admin, fmt.Sprintf("PUT /projection HTTP/1.1\r\nHost: relay\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", r.Token, 17<<20), 413, "too-large"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			resp, body, err := exchange("127.0.0.3", tt.addr, tt.req)
			took := time.Since(start)
			if err != nil {
				t.Fatalf("no answer after %v: %v", took, err)
			}
			if resp.StatusCode != tt.status || !strings.Contains(body, `"error":"`+tt.code+`"`) {
				t.Fatalf("answer %d %s", resp.StatusCode, body)
			}
			if took > 3*time.Second {
				t.Fatalf("answered after %v; the old relay took the 10 s body timeout", took)
			}
			t.Logf("answered %d in %v", resp.StatusCode, took.Round(time.Millisecond))
		})
	}
}

// Defect 6: a claim of 4.8 MB with 40,000 capability rows costs more to
// parse than the whole body budget could ever hold; on an idle relay it was
// answered with the retryable 503, so a client retried it forever. It is
// refused as too large (400 bad-request, the wire's refusal for a body the
// relay will not read: no client retries it).
func TestNeverFittingBodyRefusedAsTooLarge(t *testing.T) {
	r := startRelay(t)
	var b strings.Builder
	b.WriteString(`{"protocolVersion":"2","runnerId":"runner_x","capabilities":[`)
	for i := range 40_000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"kind":"chat","service":"svc","backendId":"ollama","backendClass":"http","model":"m%05d","offerScope":"private"}`, i)
	}
	b.WriteString(`],"max":1}`)
	body := b.String()
	req := fmt.Sprintf("POST /byollm/claim HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	resp, answer, err := exchange("127.0.0.3", r.Listen, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%.1f MB claim: %d %s", float64(len(body))/1e6, resp.StatusCode, answer)
	if resp.StatusCode != 400 || !strings.Contains(answer, `"error":"bad-request"`) || !strings.Contains(answer, "too large") {
		t.Fatalf("a body that could never fit: %d %s; want 400 bad-request, too large", resp.StatusCode, answer)
	}
	// A small claim from the same address is still read (it fails on its
	// signature, after the body).
	small := `{"protocolVersion":"2","runnerId":"runner_x","capabilities":[],"max":1}`
	resp, answer, err = exchange("127.0.0.3", r.Listen, "POST /byollm/claim HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(small))+"\r\nConnection: close\r\n\r\n"+small)
	if err != nil || resp.StatusCode == 503 || strings.Contains(answer, "too large") {
		t.Fatalf("a small claim after it: %v %v %s", err, resp, answer)
	}
}
