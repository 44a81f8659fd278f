package relaytest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Balancer is an HTTP load balancer in front of relay replicas, doing what
// a Kubernetes Service with readiness probes or HAProxy does:
//
//   - new requests go round robin to the backends in rotation: live (not
//     taken out by SetLive) and, with Gate, ready (their admin /readyz
//     answered 200 on the last poll, every 100 ms; fall 1, rise 1);
//   - with RetryDial, a request whose connection to the backend could not be
//     opened (nothing reached the relay) is tried on the next backend, like
//     HAProxy's `retry-on conn-failure`;
//   - nothing else is retried. A request that was sent and then lost its
//     connection may have been served (an enqueue or a claim is not
//     idempotent), so it is answered 502, and the client sees it.
//
// Its own answers (502, 503) carry the header X-Balancer-Error (the
// backend's name, or "none") and a protocol-shaped server-error body, so a
// client can tell them from a relay's. It records every answer it gives.
type Balancer struct {
	t        testing.TB
	opts     BalancerOptions
	backends []*backend
	tr       *http.Transport
	srv      *httptest.Server
	epoch    time.Time
	next     int // round robin position, under mu

	dialRetries atomic.Int64 // requests moved to another backend after a failed dial
	own5xx      atomic.Int64 // 502/503 the balancer answered itself

	mu       sync.Mutex
	statuses map[int]int
	records  []Record // every answered request, in completion order
	events   []string // rotation changes, for the log
}

// BalancerOptions: Gate polls each backend's ReadyURL and keeps only the
// ready ones in rotation; RetryDial retries failed dials on another backend.
type BalancerOptions struct {
	Gate      bool
	RetryDial bool
}

// Backend is one upstream: its planes' base URL and admin /readyz URL.
type Backend struct {
	Name     string
	URL      string
	ReadyURL string
}

// Backends are the relays as balancer backends.
func Backends(relays ...*Relay) []Backend {
	var out []Backend
	for _, r := range relays {
		out = append(out, Backend{Name: r.Name, URL: r.URL(), ReadyURL: r.AdminURL() + "/readyz"})
	}
	return out
}

type backend struct {
	Backend
	live     bool // under Balancer.mu
	ready    atomic.Bool
	requests atomic.Int64 // sent to it
	inflight atomic.Int64
	served   atomic.Int64 // answered by it
	failures atomic.Int64 // lost on the way (the balancer answered 502)
}

// Record is one request as the client saw it.
type Record struct {
	Path    string
	Backend string // "" when the balancer answered itself
	Status  int
	Start   time.Time
	Elapsed time.Duration
	Body    string // kept for 5xx answers only
}

// NewBalancer serves a balancer over backends on a loopback port until the
// test ends.
func NewBalancer(t testing.TB, opts BalancerOptions, backends ...Backend) *Balancer {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Keep connections to the backends open, as a real balancer does: a
	// drain must cope with reused connections, not only fresh ones.
	tr.MaxIdleConns = 0
	tr.MaxIdleConnsPerHost = 256
	tr.IdleConnTimeout = 90 * time.Second
	tr.DisableCompression = true
	b := &Balancer{t: t, opts: opts, tr: tr, statuses: map[int]int{}, epoch: time.Now()}
	for _, be := range backends {
		b.backends = append(b.backends, &backend{Backend: be, live: true})
	}
	b.srv = httptest.NewServer(b)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if opts.Gate {
		for _, be := range b.backends {
			wg.Add(1)
			go func() { defer wg.Done(); b.check(ctx, be) }()
		}
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		b.srv.Close()
		tr.CloseIdleConnections()
	})
	return b
}

// URL is the balancer's base URL.
func (b *Balancer) URL() string { return b.srv.URL }

// check is one backend's health checker: every 100 ms, GET /readyz with a
// 500 ms timeout; only a 200 puts the backend in rotation.
func (b *Balancer) check(ctx context.Context, be *backend) {
	hc := &http.Client{Timeout: 500 * time.Millisecond}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		st := 0
		if req, err := http.NewRequestWithContext(ctx, http.MethodGet, be.ReadyURL, nil); err == nil {
			if res, err := hc.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				st = res.StatusCode
			}
		}
		up := st == http.StatusOK
		if be.ready.Swap(up) != up {
			state := "out of rotation"
			if up {
				state = "in rotation"
			}
			b.Event(fmt.Sprintf("%s %s (readyz %d)", be.Name, state, st))
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// Event adds a line to the balancer's timeline (Snapshot's events).
func (b *Balancer) Event(s string) {
	b.mu.Lock()
	b.events = append(b.events, fmt.Sprintf("%7.3fs %s", time.Since(b.epoch).Seconds(), s))
	b.mu.Unlock()
}

func (b *Balancer) backend(name string) *backend {
	for _, be := range b.backends {
		if be.Name == name {
			return be
		}
	}
	b.t.Fatalf("balancer: no backend %s", name)
	return nil
}

// WaitReady waits until the gated balancer has the named backend in
// rotation.
func (b *Balancer) WaitReady(t testing.TB, name string, within time.Duration) {
	t.Helper()
	be := b.backend(name)
	if !poll(within, 20*time.Millisecond, be.ready.Load) {
		t.Fatalf("balancer: %s not in rotation after %v", name, within)
	}
}

// SetLive puts the named backend in or out of rotation by hand (a replica
// about to be killed). It returns the backend's counters at that moment:
// every request picked for it before is counted.
func (b *Balancer) SetLive(name string, live bool) BackendStats {
	be := b.backend(name)
	b.mu.Lock()
	defer b.mu.Unlock()
	be.live = live
	return b.statsOf(be)
}

// BackendStats are one backend's counters.
type BackendStats struct {
	Name     string
	Live     bool
	Requests int64
	Inflight int64
	Served   int64
	Failures int64
}

// Stats are every backend's counters, in the order they were given.
func (b *Balancer) Stats() []BackendStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []BackendStats
	for _, be := range b.backends {
		out = append(out, b.statsOf(be))
	}
	return out
}

// Served is how many requests the named backend has answered.
func (b *Balancer) Served(name string) int64 { return b.backend(name).served.Load() }

// Own5xx is how many requests the balancer answered itself with a 5xx
// (no backend, or the connection lost); DialRetries how many it moved to
// another backend after a failed dial.
func (b *Balancer) Own5xx() int64      { return b.own5xx.Load() }
func (b *Balancer) DialRetries() int64 { return b.dialRetries.Load() }

func (b *Balancer) statsOf(be *backend) BackendStats {
	return BackendStats{Name: be.Name, Live: be.live, Requests: be.requests.Load(), Inflight: be.inflight.Load(),
		Served: be.served.Load(), Failures: be.failures.Load()}
}

// pick chooses the next backend in rotation this request has not tried,
// counting the request against it; nil when there is none.
func (b *Balancer) pick(tried []*backend) *backend {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.backends)
	b.next++
	for i := range n {
		be := b.backends[(b.next+i)%n]
		if !be.live || (b.opts.Gate && !be.ready.Load()) || slices.Contains(tried, be) {
			continue
		}
		// Counted under the lock, so SetLive sees every request sent to
		// the backend before it left the rotation.
		be.requests.Add(1)
		be.inflight.Add(1)
		return be
	}
	return nil
}

// hopHeaders are not forwarded in either direction (RFC 9110 §7.6.1).
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func (b *Balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the client went away
	}
	var tried []*backend
	for {
		be := b.pick(tried)
		if be == nil {
			b.own5xx.Add(1)
			b.fail(w, r, start, nil, http.StatusServiceUnavailable, "no backend in rotation")
			return
		}
		tried = append(tried, be)
		res, err := b.forward(r, be, body)
		if err != nil {
			be.inflight.Add(-1)
			if r.Context().Err() != nil {
				return // the client gave up; nobody to answer
			}
			if b.opts.RetryDial && isDialFailure(err) {
				b.dialRetries.Add(1) // nothing reached the relay: try another
				continue
			}
			be.failures.Add(1)
			b.own5xx.Add(1)
			b.Event(fmt.Sprintf("502 for %s %s via %s: %v", r.Method, r.URL.Path, be.Name, err))
			b.fail(w, r, start, be, http.StatusBadGateway, be.Name+": "+err.Error())
			return
		}
		resBody, err := io.ReadAll(res.Body)
		res.Body.Close()
		be.inflight.Add(-1)
		if err != nil {
			// The status line came, the body did not: the request was
			// served. Pass the failure on as the client would see it.
			be.failures.Add(1)
			b.own5xx.Add(1)
			b.Event(fmt.Sprintf("502 (body cut) for %s %s via %s: %v", r.Method, r.URL.Path, be.Name, err))
			b.fail(w, r, start, be, http.StatusBadGateway, be.Name+": response body cut")
			return
		}
		be.served.Add(1)
		b.answer(w, r, start, be.Name, res.StatusCode, res.Header, resBody)
		return
	}
}

func (b *Balancer) forward(r *http.Request, be *backend, body []byte) (*http.Response, error) {
	out, err := http.NewRequestWithContext(r.Context(), r.Method, be.URL+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("balancer: %w", err)
	}
	out.Header = r.Header.Clone()
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	out.Host = r.Host
	return b.tr.RoundTrip(out)
}

// isDialFailure reports whether err means the connection to the backend was
// never opened (refused, unreachable): the request was not sent.
func isDialFailure(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// fail is the balancer's own answer.
func (b *Balancer) fail(w http.ResponseWriter, r *http.Request, start time.Time, be *backend, status int, msg string) {
	name, via := "none", ""
	if be != nil {
		name, via = be.Name, be.Name
	}
	hdr := http.Header{"Content-Type": {"application/json"}, "X-Balancer-Error": {name}}
	body, _ := json.Marshal(map[string]string{"error": "server-error", "message": "balancer: " + msg})
	b.answer(w, r, start, via, status, hdr, body)
}

func (b *Balancer) answer(w http.ResponseWriter, r *http.Request, start time.Time, via string, status int, hdr http.Header, body []byte) {
	for k, vs := range hdr {
		if slices.Contains(hopHeaders, http.CanonicalHeaderKey(k)) {
			continue
		}
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
	rec := Record{Path: r.URL.Path, Backend: via, Status: status, Start: start, Elapsed: time.Since(start)}
	if status >= 500 {
		rec.Body = string(body)
	}
	b.mu.Lock()
	b.statuses[status]++
	b.records = append(b.records, rec)
	b.mu.Unlock()
}

// Snapshot is a copy of what has been recorded so far: answers by status,
// every answer, and the timeline.
func (b *Balancer) Snapshot() (map[int]int, []Record, []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := map[int]int{}
	for k, v := range b.statuses {
		st[k] = v
	}
	return st, slices.Clone(b.records), slices.Clone(b.events)
}

// Summary is the balancer's line for the test log.
func (b *Balancer) Summary() string {
	st, recs, _ := b.Snapshot()
	codes := make([]int, 0, len(st))
	for c := range st {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	var parts []string
	n5xx := 0
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%d:%d", c, st[c]))
		if c >= 500 {
			n5xx += st[c]
		}
	}
	var per []string
	for _, s := range b.Stats() {
		per = append(per, fmt.Sprintf("%s:%d", s.Name, s.Served))
	}
	return fmt.Sprintf("requests %d  statuses %s  5xx %d (balancer's own %d)  dial retries %d  per backend %s",
		len(recs), strings.Join(parts, " "), n5xx, b.own5xx.Load(), b.dialRetries.Load(), strings.Join(per, " "))
}
