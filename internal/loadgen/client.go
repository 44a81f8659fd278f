package loadgen

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/byollm/relay-go/internal/protocol"
)

// client sends signed requests, rotating over the replicas, and records
// every response in stats.
type client struct {
	http     *http.Client
	replicas []string
	basePath string
	next     atomic.Uint64
	stats    *requestStats
	retryFor time.Duration // how long do keeps retrying what a restart or an outage refuses
	// failoverFor is how long do sends a request that got no answer to the
	// other replicas (Config.FailoverFor, after defaults).
	failoverFor time.Duration
	// unreached counts requests given up without any HTTP answer: they
	// never reached a relay (or its answer never came back).
	unreached atomic.Int64
	// failedOver counts requests sent to another replica after one gave no
	// answer.
	failedOver atomic.Int64
}

// idleConnTimeout is how long a pooled connection stays unused: 4 s, as
// the Node clients of the real peers keep theirs (undici's default). It
// must stay under the relay's header timeout (httpserve.HeaderTimeout, 5 s
// from the accept): a connection dialed for a request that another
// connection served first sits in the pool unused, and the relay closes it
// silently at that timeout, so a request sent on it just then fails with
// EOF, which a POST cannot safely retry. At Go's default of 90 s such
// connections also piled up against the relay's per-address share.
const idleConnTimeout = 4 * time.Second

func newClient(c Config, stats *requestStats) *client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Every simulated party keeps connections open the way a long-running
	// daemon or site would; the default of 2 idle per host would turn each
	// request into a new TCP connection at load.
	tr.MaxIdleConns = 0
	tr.MaxIdleConnsPerHost = 1024
	tr.IdleConnTimeout = idleConnTimeout
	trim := make([]string, len(c.Replicas))
	for i, r := range c.Replicas {
		trim[i] = strings.TrimRight(r, "/")
	}
	return &client{
		http:        &http.Client{Transport: tr, Timeout: c.Timeout},
		replicas:    trim,
		basePath:    c.BasePath,
		stats:       stats,
		retryFor:    c.RetryFor,
		failoverFor: c.FailoverFor,
	}
}

func (c *client) base() string {
	return c.replicas[c.next.Add(1)%uint64(len(c.replicas))]
}

// other is a replica other than the one target was sent to (the next in
// order), so a retry after a transport failure never lands on the replica
// that just failed.
func (c *client) other(target string) string {
	for i, r := range c.replicas {
		if strings.HasPrefix(target, r) {
			return c.replicas[(i+1)%len(c.replicas)]
		}
	}
	return c.base()
}

// signer is who signs a request: a daemon (x-byollm-runner) or a site
// (x-byollm-site).
type signer struct {
	header string
	caller string
	key    ed25519.PrivateKey
}

// response is what the callers look at.
type response struct {
	status int
	body   []byte
}

// errorCode is the "error" field of a refusal body, "" if none.
func (r response) errorCode() string {
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(r.body, &e)
	return e.Error
}

func (c *client) daemon(ctx context.Context, s signer, endpoint string, body any) (response, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return response{}, fmt.Errorf("%s: encode: %w", endpoint, err)
	}
	return c.do(ctx, endpoint, http.MethodPost, "", c.basePath+"/"+endpoint, endpoint, raw, &s)
}

func (c *client) sitePost(ctx context.Context, s signer, endpoint string, body any) (response, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return response{}, fmt.Errorf("site/%s: encode: %w", endpoint, err)
	}
	return c.do(ctx, "site/"+endpoint, http.MethodPost, "", "/relay/site/"+endpoint, "site/"+endpoint, raw, &s)
}

func (c *client) siteGet(ctx context.Context, s signer, endpoint string) (response, error) {
	return c.siteGetAt(ctx, "site/"+endpoint, "", s, endpoint)
}

// siteGetAt reads from one given replica (base "": the rotation),
// recording the request as name.
func (c *client) siteGetAt(ctx context.Context, name, base string, s signer, endpoint string) (response, error) {
	q := url.Values{"siteId": {s.caller}, "protocolVersion": {protocol.ProtocolVersion}}
	return c.do(ctx, name, http.MethodGet, base, "/relay/site/"+endpoint+"?"+q.Encode(), "site/"+endpoint, nil, &s)
}

// pair is unauthenticated.
func (c *client) pair(ctx context.Context, body any) (response, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return response{}, fmt.Errorf("pair: encode: %w", err)
	}
	return c.do(ctx, "pair", http.MethodPost, "", c.basePath+"/pair", "", raw, nil)
}

// do sends one request. signedEndpoint is the canonical endpoint (site plane
// with its "site/" prefix); s nil means unsigned. With a retry budget it
// sends again, signed afresh, after a transport error or a 502/503/504, as
// real clients do while a replica restarts or the store is away; every
// attempt is counted in stats.
// base "" sends each attempt to the next replica of the rotation; otherwise
// every attempt goes to base.
func (c *client) do(ctx context.Context, name, method, base, path, signedEndpoint string, body []byte, s *signer) (response, error) {
	target := base + path
	if base == "" {
		target = c.base() + path
	}
	first := time.Now()
	for attempt := 0; ; attempt++ {
		res, err := c.once(ctx, name, method, target, signedEndpoint, body, s)
		// A request with no answer is sent to another replica for
		// failoverFor (only when the rotation chooses: base ""); any
		// retryable refusal for retryFor.
		budget := c.retryFor
		if err != nil && base == "" {
			budget = max(budget, c.failoverFor)
		}
		retryable := err != nil || res.status == http.StatusBadGateway || res.status == http.StatusServiceUnavailable || res.status == http.StatusGatewayTimeout
		if retryable && err == nil && ctx.Err() != nil {
			// The caller gave up while retrying (a daemon dropping a job
			// whose lease it heard was lost): the refusal it would have
			// retried is not its answer.
			return res, ctx.Err()
		}
		if !retryable || ctx.Err() != nil || time.Since(first) >= budget {
			if err != nil && ctx.Err() == nil {
				c.unreached.Add(1)
				err = &unreachedError{err: err}
			}
			return res, err
		}
		pause := min(50*time.Millisecond<<min(attempt, 4), 500*time.Millisecond)
		t := time.NewTimer(pause/2 + rand.N(pause/2+1)) //nolint:gosec // jitter
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			if err == nil {
				err = ctx.Err() // as above
			}
			return res, err
		}
		if base == "" {
			if err != nil {
				c.failedOver.Add(1)
				target = c.other(target) + path // that replica did not answer
			} else {
				target = c.base() + path // another replica may answer
			}
		}
	}
}

// unreachedError is a request given up without an HTTP answer: it never
// reached a relay, or the relay's answer never came back.
type unreachedError struct{ err error }

func (e *unreachedError) Error() string { return e.err.Error() + " (no answer from the relay)" }
func (e *unreachedError) Unwrap() error { return e.err }

func (c *client) once(ctx context.Context, name, method, target, signedEndpoint string, body []byte, s *signer) (response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return response{}, fmt.Errorf("%s: %w", name, err)
	}
	if body != nil {
		req.Header.Set("content-type", "application/json")
	}
	req.Header.Set("accept", "application/json")
	if s != nil {
		now := time.Now().UnixMilli()
		req.Header.Set(s.header, s.caller)
		req.Header.Set("x-byollm-issued-at", strconv.FormatInt(now, 10))
		req.Header.Set("x-byollm-signature", protocol.SignRequest(s.key, signedEndpoint, s.caller, now, body))
	}
	start := time.Now()
	res, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			c.stats.record(name, 0, time.Since(start), 0)
		}
		return response{}, fmt.Errorf("%s: %w", name, err)
	}
	defer res.Body.Close()
	out, err := readBody(res)
	elapsed := time.Since(start)
	if err != nil {
		if ctx.Err() == nil {
			c.stats.record(name, 0, elapsed, 0)
		}
		return response{}, fmt.Errorf("%s: read body: %w", name, err)
	}
	c.stats.record(name, res.StatusCode, elapsed, len(out))
	return response{status: res.StatusCode, body: out}, nil
}

// adminSend sends the projection to every admin URL and returns the
// highest projection version they answered (0 when none said).
func adminSend(ctx context.Context, hc *http.Client, adminURLs []string, token, mode string, fixture []byte) (int64, error) {
	var version int64
	for _, base := range adminURLs {
		method, path := http.MethodPost, "/projection/merge"
		if mode == ProjectionPut {
			method, path = http.MethodPut, "/projection"
		}
		req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(base, "/")+path, bytes.NewReader(fixture))
		if err != nil {
			return 0, fmt.Errorf("projection %s: %w", base, err)
		}
		req.Header.Set("authorization", "Bearer "+token)
		req.Header.Set("content-type", "application/json")
		res, err := hc.Do(req)
		if err != nil {
			return 0, fmt.Errorf("projection %s: %w", base, err)
		}
		msg, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
		res.Body.Close()
		if res.StatusCode/100 != 2 {
			return 0, fmt.Errorf("projection %s %s%s: HTTP %d: %s", method, base, path, res.StatusCode, msg)
		}
		var answer struct {
			Version int64 `json:"version"`
		}
		if json.Unmarshal(msg, &answer) == nil {
			version = max(version, answer.Version)
		}
	}
	return version, nil
}

// projectionVersion is a replica's GET /projection/status: the version its
// in-memory copy holds, 0 while it has none.
func projectionVersion(ctx context.Context, hc *http.Client, adminURL, token string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(adminURL, "/")+"/projection/status", nil)
	if err != nil {
		return 0, fmt.Errorf("projection status %s: %w", adminURL, err)
	}
	req.Header.Set("authorization", "Bearer "+token)
	res, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("projection status %s: %w", adminURL, err)
	}
	defer res.Body.Close()
	var st struct {
		Replica struct {
			Loaded  bool  `json:"loaded"`
			Version int64 `json:"version"`
		} `json:"replica"`
	}
	if res.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("projection status %s: HTTP %d", adminURL, res.StatusCode)
	}
	if err := json.NewDecoder(io.LimitReader(res.Body, 1<<16)).Decode(&st); err != nil {
		return 0, fmt.Errorf("projection status %s: %w", adminURL, err)
	}
	if !st.Replica.Loaded {
		return 0, nil
	}
	return st.Replica.Version, nil
}

// adminPost POSTs body to path on every admin listener (the policy routes).
func adminPost(ctx context.Context, hc *http.Client, adminURLs []string, token, path string, body []byte) error {
	for _, base := range adminURLs {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+path, bytes.NewReader(body))
		if err != nil {
			return fmt.Errorf("POST %s: %w", path, err)
		}
		req.Header.Set("authorization", "Bearer "+token)
		req.Header.Set("content-type", "application/json")
		res, err := hc.Do(req)
		if err != nil {
			return fmt.Errorf("POST %s%s: %w", base, path, err)
		}
		msg, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
		res.Body.Close()
		if res.StatusCode/100 != 2 {
			return fmt.Errorf("POST %s%s: HTTP %d: %s", base, path, res.StatusCode, msg)
		}
	}
	return nil
}

// readBody reads an answer into one buffer of its Content-Length when that
// is given and below 64 MiB: results answers run to megabytes, and
// io.ReadAll's growing copies of them cost the load generator more than
// the relay spent writing them. A buffer for largeBody bytes or more comes
// from bodies when one there is big enough (releaseBody gives it back), and
// a new one has a quarter more room, as answers grow while results pile up.
func readBody(res *http.Response) ([]byte, error) {
	n := res.ContentLength
	if n <= 0 || n >= 64<<20 {
		return io.ReadAll(res.Body)
	}
	var b []byte
	if n >= largeBody {
		if p, _ := bodies.Get().(*[]byte); p != nil && int64(cap(*p)) >= n {
			b = (*p)[:n]
		}
	}
	if b == nil {
		room := n
		if n >= largeBody {
			room += n / 4
		}
		b = make([]byte, n, room)
	}
	if _, err := io.ReadFull(res.Body, b); err != nil {
		return nil, err
	}
	// Read on to the end, or the transport will not reuse the connection.
	if rest, err := io.ReadAll(io.LimitReader(res.Body, 1)); err != nil || len(rest) > 0 {
		return nil, fmt.Errorf("answer longer than its Content-Length %d (%v)", n, err)
	}
	return b, nil
}

// largeBody is the size from which answer buffers are reused: only results
// answers reach it.
const largeBody = 64 << 10

var bodies sync.Pool // of *[]byte, each at least largeBody

// releaseBody hands b back for reuse; nothing may read b afterwards.
func releaseBody(b []byte) {
	if cap(b) >= largeBody {
		bodies.Put(&b)
	}
}
