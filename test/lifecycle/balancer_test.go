package lifecycle_test

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

// balancer is a small HTTP load balancer in front of the replicas, doing
// what a Kubernetes Service with readiness probes or HAProxy with
// `option httpchk GET /readyz` does:
//
//   - with gating on, it polls every backend's admin /readyz and sends new
//     requests only to backends that answered 200 on the last poll
//     (fall 1, rise 1), round robin;
//   - a request whose connection to the backend could not be opened (the
//     dial failed: nothing reached the relay) is retried on the next
//     backend, like HAProxy's `retry-on conn-failure`;
//   - nothing else is retried. A request that was sent and then lost its
//     connection may have been served (an enqueue or a claim is not
//     idempotent), so it is answered 502, like HAProxy does, and the test
//     sees it. A request that got an HTTP answer is passed through as is.
//
// It records every answer it gives, so the tests can count 5xx responses
// and time refused requests from the client's side.
type balancer struct {
	t        *testing.T
	backends []*backend
	gate     bool
	tr       *http.Transport
	srv      *httptest.Server
	next     atomic.Uint64
	epoch    time.Time

	dialRetries atomic.Int64 // requests moved to another backend after a failed dial
	own5xx      atomic.Int64 // 502/503 the balancer answered itself

	mu       sync.Mutex
	statuses map[int]int
	records  []record // every answered request, in completion order
	events   []string // readiness transitions, for the log
}

type backend struct {
	name   string
	base   string // http://host:port of the planes
	readyz string // admin /readyz URL
	ready  atomic.Bool
	served atomic.Int64
}

// record is one request as the client saw it.
type record struct {
	path    string
	backend string // "" when the balancer answered itself
	status  int
	start   time.Time
	elapsed time.Duration
	body    string // kept for 5xx answers only
}

func newBalancer(t *testing.T, gate bool, replicas ...*replica) *balancer {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Keep connections to the backends open, as a real balancer does: the
	// drain must cope with reused connections, not only fresh ones.
	tr.MaxIdleConns = 0
	tr.MaxIdleConnsPerHost = 256
	tr.IdleConnTimeout = 90 * time.Second
	tr.DisableCompression = true
	b := &balancer{t: t, gate: gate, tr: tr, statuses: map[int]int{}, epoch: time.Now()}
	for _, r := range replicas {
		b.backends = append(b.backends, &backend{name: r.name, base: r.url(), readyz: r.adminURL() + "/readyz"})
	}
	b.srv = httptest.NewServer(b)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if gate {
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

func (b *balancer) url() string { return b.srv.URL }

// check is the health checker of one backend: every 100 ms, GET /readyz
// with a 500 ms timeout. Only a 200 puts the backend in rotation.
func (b *balancer) check(ctx context.Context, be *backend) {
	hc := &http.Client{Timeout: 500 * time.Millisecond}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		st, _ := probe(ctx, hc, be.readyz)
		up := st == http.StatusOK
		if be.ready.Swap(up) != up {
			state := "out of rotation"
			if up {
				state = "in rotation"
			}
			b.event(fmt.Sprintf("%s %s (readyz %d)", be.name, state, st))
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

func (b *balancer) event(s string) {
	b.mu.Lock()
	b.events = append(b.events, fmt.Sprintf("%7.3fs %s", time.Since(b.epoch).Seconds(), s))
	b.mu.Unlock()
}

// waitReady blocks until the balancer has the named backend in rotation.
func (b *balancer) waitReady(t *testing.T, name string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for _, be := range b.backends {
		if be.name != name {
			continue
		}
		for !be.ready.Load() {
			if time.Now().After(deadline) {
				t.Fatalf("balancer: %s not in rotation after %v", name, within)
			}
			time.Sleep(20 * time.Millisecond)
		}
		return
	}
	t.Fatalf("balancer: no backend %s", name)
}

// pick chooses the next backend in rotation that this request has not
// tried yet; nil when there is none.
func (b *balancer) pick(tried []*backend) *backend {
	n := len(b.backends)
	start := int(b.next.Add(1))
	for i := range n {
		be := b.backends[(start+i)%n]
		if (b.gate && !be.ready.Load()) || slices.Contains(tried, be) {
			continue
		}
		return be
	}
	return nil
}

// hopHeaders are not forwarded in either direction (RFC 9110 §7.6.1).
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func (b *balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
			b.answer(w, r, start, "", http.StatusServiceUnavailable, nil, []byte(`{"error":"lb: no backend in rotation"}`))
			return
		}
		tried = append(tried, be)
		out, err := http.NewRequestWithContext(r.Context(), r.Method, be.base+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			b.t.Errorf("balancer: %v", err)
			return
		}
		out.Header = r.Header.Clone()
		for _, h := range hopHeaders {
			out.Header.Del(h)
		}
		res, err := b.tr.RoundTrip(out)
		if err != nil {
			if r.Context().Err() != nil {
				return // the client gave up; nobody to answer
			}
			if isDialFailure(err) {
				// Nothing reached the relay: safe to try another one.
				b.dialRetries.Add(1)
				continue
			}
			b.own5xx.Add(1)
			b.event(fmt.Sprintf("502 for %s %s via %s: %v", r.Method, r.URL.Path, be.name, err))
			b.answer(w, r, start, be.name, http.StatusBadGateway, nil, []byte(fmt.Sprintf(`{"error":"lb: %s"}`, jsonEscape(err.Error()))))
			return
		}
		resBody, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			// The status line came, the body did not: the request was
			// served. Pass the failure on as the client would see it.
			b.own5xx.Add(1)
			b.event(fmt.Sprintf("502 (body cut) for %s %s via %s: %v", r.Method, r.URL.Path, be.name, err))
			b.answer(w, r, start, be.name, http.StatusBadGateway, nil, []byte(`{"error":"lb: response body cut"}`))
			return
		}
		be.served.Add(1)
		b.answer(w, r, start, be.name, res.StatusCode, res.Header, resBody)
		return
	}
}

// isDialFailure reports whether err means the connection to the backend was
// never opened (refused, unreachable): the request was not sent.
func isDialFailure(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func (b *balancer) answer(w http.ResponseWriter, r *http.Request, start time.Time, via string, status int, hdr http.Header, body []byte) {
	for k, vs := range hdr {
		if slices.Contains(hopHeaders, http.CanonicalHeaderKey(k)) {
			continue
		}
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if hdr == nil {
		w.Header().Set("content-type", "application/json")
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
	rec := record{path: r.URL.Path, backend: via, status: status, start: start, elapsed: time.Since(start)}
	if status >= 500 {
		rec.body = string(body)
	}
	b.mu.Lock()
	b.statuses[status]++
	b.records = append(b.records, rec)
	b.mu.Unlock()
}

func jsonEscape(s string) string {
	q, _ := json.Marshal(s)
	return string(q[1 : len(q)-1])
}

// snapshot returns copies of what has been recorded so far.
func (b *balancer) snapshot() (map[int]int, []record, []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := map[int]int{}
	for k, v := range b.statuses {
		st[k] = v
	}
	return st, slices.Clone(b.records), slices.Clone(b.events)
}

// summary is the balancer's line for the test log.
func (b *balancer) summary() string {
	st, recs, _ := b.snapshot()
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
	for _, be := range b.backends {
		per = append(per, fmt.Sprintf("%s:%d", be.name, be.served.Load()))
	}
	return fmt.Sprintf("requests %d  statuses %s  5xx %d (balancer's own %d)  dial retries %d  per backend %s",
		len(recs), strings.Join(parts, " "), n5xx, b.own5xx.Load(), b.dialRetries.Load(), strings.Join(per, " "))
}
