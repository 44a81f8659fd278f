package loadgen

import (
	"io"
	"net"
	"net/http"
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
