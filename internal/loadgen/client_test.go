package loadgen

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/httpserve"
	"github.com/byollm/relay-go/test/relaytest"
)

// The load generator closes a pooled connection itself before the relay's
// listener would close it unannounced (HeaderTimeout after the accept, for
// a connection that never sent a request): a request sent on one the relay
// had just closed would fail with EOF, not retryable for a POST.
func TestPooledConnectionsCloseBeforeTheRelays(t *testing.T) {
	t.Parallel()
	if idleConnTimeout >= httpserve.HeaderTimeout {
		t.Fatalf("the pool keeps connections %v, the relay's listener closes unused ones after %v", idleConnTimeout, httpserve.HeaderTimeout)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httpserve.New(ln, httpserve.Options{Logger: relaytest.Logger(t), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})})
	go srv.Serve() //nolint:errcheck // ends at Shutdown
	t.Cleanup(func() { srv.HTTP.Close() })

	c := newClient(Config{Replicas: []string{"http://" + ln.Addr().String()}, Timeout: 10 * time.Second}, nil)
	resp, err := c.http.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body) //nolint:errcheck // draining only
	resp.Body.Close()
	if srv.OpenConns() != 1 {
		t.Fatalf("%d connections open after one request, want its kept-alive one", srv.OpenConns())
	}
	relaytest.WaitFor(t, idleConnTimeout+3*time.Second, "the client closed its idle connection", func() bool { return srv.OpenConns() == 0 })
}

// A caller that gives up while its request is being retried (a daemon
// dropping a job whose lease its heartbeat said was lost) gets its own
// context's error, not the refusal it would have retried: that refusal is
// no answer of the relay's to count against the run. A request that runs
// out of retries still gets the last refusal as its answer.
func TestRetriedRefusalIsNotTheAnswerOfACallerThatGaveUp(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":"server-error"}`))
	}))
	defer srv.Close()
	stats := &requestStats{}
	c := newClient(Config{Replicas: []string{srv.URL}, Timeout: 5 * time.Second, RetryFor: time.Minute}, stats)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	res, err := c.do(ctx, "fetch", "POST", "", "/byollm/fetch", "", []byte(`{}`), nil)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(began) > 5*time.Second {
		t.Fatalf("a caller that gave up while retrying: status %d, err %v after %v; want its context's error", res.status, err, time.Since(began))
	}
	if c.unreached.Load() != 0 {
		t.Fatalf("counted %d unreached: the relay did answer", c.unreached.Load())
	}

	c = newClient(Config{Replicas: []string{srv.URL}, Timeout: 5 * time.Second, RetryFor: 200 * time.Millisecond}, stats)
	res, err = c.do(context.Background(), "fetch", "POST", "", "/byollm/fetch", "", []byte(`{}`), nil)
	if err != nil || res.status != http.StatusServiceUnavailable {
		t.Fatalf("retries spent: status %d, err %v; want the last refusal", res.status, err)
	}
}
