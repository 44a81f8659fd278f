// Package health serves the relay's liveness and readiness endpoints on the
// admin listener and holds the draining flag readiness reports (the
// graceful shutdown that sets it is the binary's, cmd/relay).
//
// /healthz answers 200 while the process can serve HTTP at all: a liveness
// probe that failed on a Valkey outage would have the orchestrator restart
// every replica at once for a fault none of them can fix. /readyz runs the
// registered checks (Valkey answers, scripts loaded, a projection loaded) and
// answers 503 when one fails or when the replica is draining, so the load
// balancer stops sending it work. Checks run live on each probe, so
// readiness comes back by itself when the store does.
//
// Neither path is part of the wire protocol: they live on the admin
// listener only (on the protocol listener /healthz is a 404, wire §3.1).
package health

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/valkeyconn"
)

// CheckFunc reports whether one dependency is ready; nil means ready.
type CheckFunc func(ctx context.Context) error

// DefaultTimeout bounds each check when Options.Timeout is zero. Probes
// usually time out after 1 s, so a check must answer well before that.
const DefaultTimeout = 800 * time.Millisecond

// Options configures a Checker.
type Options struct {
	// Timeout bounds each check; DefaultTimeout when zero.
	Timeout time.Duration
	// Logger receives readiness transitions and drain progress; nil means
	// slog.Default().
	Logger *slog.Logger
}

type namedCheck struct {
	name string
	fn   CheckFunc
}

// Checker holds the readiness checks and the draining flag.
type Checker struct {
	timeout  time.Duration
	log      *slog.Logger
	draining atomic.Bool

	mu     sync.RWMutex
	checks []namedCheck

	// lastReady remembers the previous readiness so only transitions are
	// logged, not every probe.
	lastReady atomic.Int32 // 0 unknown, 1 ready, 2 not ready
}

// New makes a Checker with no checks: ready until checks are added.
func New(opts Options) *Checker {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Checker{timeout: opts.Timeout, log: opts.Logger}
}

// Add registers a readiness check under name (shown in the /readyz body).
func (c *Checker) Add(name string, fn CheckFunc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checks = append(c.checks, namedCheck{name: name, fn: fn})
}

// SetDraining marks the replica as draining (readiness fails) or not.
func (c *Checker) SetDraining(v bool) { c.draining.Store(v) }

// Draining reports whether SetDraining has started draining.
func (c *Checker) Draining() bool { return c.draining.Load() }

// Status values in Report.
const (
	StatusOK       = "ok"
	StatusReady    = "ready"
	StatusNotReady = "not-ready"
	StatusDraining = "draining"
)

// Report is the /readyz body.
type Report struct {
	Status string `json:"status"`
	// Checks maps each check to "ok" or its failure.
	Checks map[string]string `json:"checks,omitempty"`
}

// Ready reports whether the report means ready.
func (r Report) Ready() bool { return r.Status == StatusReady }

// Check runs every check concurrently, each under the timeout.
func (c *Checker) Check(ctx context.Context) Report {
	if c.Draining() {
		return Report{Status: StatusDraining}
	}
	c.mu.RLock()
	checks := append([]namedCheck(nil), c.checks...)
	c.mu.RUnlock()

	results := make([]string, len(checks))
	var wg sync.WaitGroup
	for i, ch := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = c.run(ctx, ch)
		}()
	}
	wg.Wait()

	rep := Report{Status: StatusReady, Checks: make(map[string]string, len(checks))}
	var failed []string
	for i, ch := range checks {
		rep.Checks[ch.name] = results[i]
		if results[i] != StatusOK {
			rep.Status = StatusNotReady
			failed = append(failed, ch.name+": "+results[i])
		}
	}
	c.logTransition(ctx, rep.Ready(), failed)
	return rep
}

// run executes one check under the timeout. A check that ignores its
// context still cannot hold the probe past the timeout.
func (c *Checker) run(ctx context.Context, ch namedCheck) string {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("check panicked: %v", p)
			}
		}()
		done <- ch.fn(ctx)
	}()
	select {
	case err := <-done:
		if err != nil {
			return err.Error()
		}
		return StatusOK
	case <-ctx.Done():
		return fmt.Sprintf("no answer within %v", c.timeout)
	}
}

func (c *Checker) logTransition(ctx context.Context, ready bool, failed []string) {
	now := int32(2)
	if ready {
		now = 1
	}
	if c.lastReady.Swap(now) == now {
		return
	}
	if ready {
		c.log.InfoContext(ctx, "replica ready")
		return
	}
	sort.Strings(failed)
	c.log.WarnContext(ctx, "replica not ready", slog.Any("failed", failed))
}

// Healthz is the liveness handler: 200 {"status":"ok"} whenever the process
// serves HTTP, draining or not.
func (c *Checker) Healthz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, r, http.StatusOK, Report{Status: StatusOK})
	})
}

// Readyz is the readiness handler: 200 with every check "ok", else 503.
func (c *Checker) Readyz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rep := c.Check(r.Context())
		status := http.StatusOK
		if !rep.Ready() {
			status = http.StatusServiceUnavailable
		}
		writeJSON(w, r, status, rep)
	})
}

func writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	body, _ := json.Marshal(v)
	w.Header().Set("content-type", "application/json")
	w.Header().Set("cache-control", "no-store")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(append(body, '\n'))
	}
}

// CloseWhileDraining wraps a server's handler so that, once draining has
// started, every answer carries "Connection: close": the client gets its
// answer and then a closed connection it knows not to reuse. Idle
// keep-alive connections are deliberately not closed at that moment: a load
// balancer that has not yet seen /readyz fail may be sending a request on
// one right then, and would get EOF with no answer (a 502 it cannot safely
// retry). test/lifecycle's rolling restart caught exactly that.
func (c *Checker) CloseWhileDraining(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.Draining() {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}

// Probe GETs url (typically http://127.0.0.1:8081/healthz) and returns nil
// on a 2xx answer. It backs `relay healthcheck`, which a container
// HEALTHCHECK runs where no shell or curl exists.
func Probe(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("probe %s: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("probe %s: status %d: %s", url, resp.StatusCode, bytesTrim(body))
	}
	return nil
}

func bytesTrim(b []byte) string {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return string(b)
}

// ValkeyPing is the "Valkey answers" check.
func ValkeyPing(client valkey.Client) CheckFunc {
	return func(ctx context.Context) error {
		if err := valkeyconn.Ping(ctx, client); err != nil {
			return fmt.Errorf("valkey ping: %w", err)
		}
		return nil
	}
}
