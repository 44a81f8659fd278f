package replica

// The graceful drain of the binary (drain.go), on real listeners.

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/health"
	"github.com/byollm/relay-go/test/relaytest"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func serveHealth(c *health.Checker) *httptest.Server {
	mux := http.NewServeMux()
	mux.Handle("/healthz", c.Healthz())
	mux.Handle("/readyz", c.Readyz())
	return httptest.NewServer(mux)
}

// getJSON GETs a health report.
func getJSON(t *testing.T, url string) (int, health.Report) {
	t.Helper()
	var rep health.Report
	return relaytest.GetJSON(t, url, &rep), rep
}

// slowServer serves /slow (waits for its release channel) and /fast on a
// real listener, like the relay's protocol listener, wrapped as the relay
// wraps its listeners (Connection: close once c is draining). arrived gets
// a value when a /slow request has reached the handler.
func slowServer(t *testing.T, c *health.Checker, release <-chan struct{}) (srv *http.Server, base string, arrived <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	in := make(chan struct{}, 16)
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		in <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "slow done")
	})
	mux.HandleFunc("/fast", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "fast") })
	srv = &http.Server{Addr: ln.Addr().String(), Handler: c.CloseWhileDraining(mux)}
	go func() { _ = srv.Serve(ln) }()
	return srv, "http://" + ln.Addr().String(), in
}

func TestDrainServesThenShutsDown(t *testing.T) {
	t.Parallel()
	c := health.New(health.Options{Logger: quiet()})
	admin := serveHealth(c)
	defer admin.Close()
	release := make(chan struct{})
	srv, base, arrived := slowServer(t, c, release)

	// A request in flight when SIGTERM arrives.
	slowDone := make(chan error, 1)
	go func() {
		resp, err := http.Get(base + "/slow")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) != "slow done" {
				err = errors.New("slow body " + string(body))
			}
		}
		slowDone <- err
	}()
	<-arrived

	const drainPeriod = 400 * time.Millisecond
	start := time.Now()
	drained := make(chan error, 1)
	go func() { drained <- drain(context.Background(), c, quiet(), drainPeriod, 3*time.Second, srv) }()
	relaytest.WaitFor(t, 2*time.Second, "the checker never reported draining", c.Draining)

	// Readiness fails at once; liveness does not.
	if code, rep := getJSON(t, admin.URL+"/readyz"); code != 503 || rep.Status != "draining" {
		t.Errorf("/readyz during drain: %d %q", code, rep.Status)
	}
	if code, _ := getJSON(t, admin.URL+"/healthz"); code != 200 {
		t.Errorf("/healthz during drain: %d", code)
	}
	// Arriving requests are still served, told to close their connection.
	resp, err := http.Get(base + "/fast")
	if err != nil {
		t.Fatalf("request during drain period refused: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "fast" || !resp.Close {
		t.Errorf("during drain: %d %q close=%v", resp.StatusCode, body, resp.Close)
	}

	// The in-flight request finishes after the drain period, within the
	// deadline; Drain waits for it: once the listener is closed (the drain
	// period over), Drain has still not returned.
	relaytest.WaitFor(t, 5*time.Second, "the listener still accepts after the drain period", func() bool {
		res, err := http.Get(base + "/fast")
		if err == nil {
			res.Body.Close()
		}
		return err != nil
	})
	select {
	case err := <-drained:
		t.Fatalf("Drain returned %v while a request was in flight", err)
	default:
	}
	close(release)
	if err := <-slowDone; err != nil {
		t.Errorf("in-flight request: %v", err)
	}
	if err := <-drained; err != nil {
		t.Errorf("Drain: %v", err)
	}
	if elapsed := time.Since(start); elapsed < drainPeriod {
		t.Errorf("Drain returned after %v, before the drain period %v", elapsed, drainPeriod)
	}
	if _, err := http.Get(base + "/fast"); err == nil {
		t.Error("listener still accepts after Drain")
	}
}

func TestDrainDeadlineClosesStuckRequests(t *testing.T) {
	t.Parallel()
	c := health.New(health.Options{Logger: quiet()})
	release := make(chan struct{}) // never closed: the request is stuck
	srv, base, arrived := slowServer(t, c, release)
	stuck := make(chan error, 1)
	go func() {
		resp, err := http.Get(base + "/slow")
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		stuck <- err
	}()
	<-arrived

	start := time.Now()
	err := drain(context.Background(), c, quiet(), 100*time.Millisecond, 300*time.Millisecond, srv)
	elapsed := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Drain = %v, want a deadline error", err)
	}
	if elapsed < 400*time.Millisecond || elapsed > 2*time.Second {
		t.Errorf("Drain took %v, want about drain period + deadline (400ms)", elapsed)
	}
	select {
	case err := <-stuck:
		if err == nil {
			t.Error("stuck request completed normally; want its connection cut")
		}
	case <-time.After(2 * time.Second):
		t.Error("stuck request still open after Drain")
	}
}

func TestDrainCutShortByContext(t *testing.T) {
	t.Parallel()
	c := health.New(health.Options{Logger: quiet()})
	srv, _, _ := slowServer(t, c, nil)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	start := time.Now()
	if err := drain(ctx, c, quiet(), 10*time.Second, time.Second, srv); err != nil {
		t.Errorf("Drain: %v", err)
	}
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("a cancelled context did not cut the drain period short: %v", elapsed)
	}
}
