package relay

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/httpserve"
	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/test/relaytest"
)

// Signed results reads whose answers are never read: each used to be held
// (as a whole answer of every result) until the client left. Now an
// answer carries at most MaxResultsAnswerBytes and a client that does not
// read is cut WriteTimeout after its socket buffers fill, so the heap comes
// back down while the connections are still open.
func TestUnreadResultsReleased(t *testing.T) {
	e := newEnv(t)
	w := newWorld(t)
	w.install(e)
	// Count the answers whose handler has returned (written whole, or
	// cut): an unread one used to block in its write until the client left.
	var returned atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	planes := e.relay.Handler()
	s := httpserve.New(ln, httpserve.Options{MaxConns: 100, MaxConnsPerAddress: 100, WriteTimeout: time.Second, Logger: relaytest.Logger(t),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer returned.Add(1)
			planes.ServeHTTP(w, r)
		})})
	go s.Serve() //nolint:errcheck // ends with Close below
	t.Cleanup(func() { s.HTTP.Close() })
	addr := s.Addr().String()

	const jobs, size, conns = 8, 700_000, 12
	for i := range jobs {
		id := "big-" + strconv.Itoa(i)
		lease := e.enqueueAndClaim(t, w, id, "alice", w.alice, "runner_alice")
		env := envelope("result")
		env.Ciphertext = strings.Repeat("A", size)
		expect(t, e.daemonPost(w.alice, "runner_alice", "result", resultJSON(t, "runner_alice", id, lease.ID, env)), 200, `{"accepted":true,"state":"done"}`)
	}
	// One read, read whole: at most the cap, at least one result.
	got := e.siteGet(w.siteA, "site_a", "results", "site_a")
	var answer struct {
		Jobs []json.RawMessage `json:"jobs"`
	}
	if got.status != 200 || json.Unmarshal(got.body, &answer) != nil || len(answer.Jobs) == 0 || len(got.body) > MaxResultsAnswerBytes+64<<10 {
		t.Fatalf("results: %d, %d bytes, %d jobs; want at most %d bytes", got.status, len(got.body), len(answer.Jobs), MaxResultsAnswerBytes)
	}
	t.Logf("one results answer: %d of %d results, %d bytes", len(answer.Jobs), jobs, len(got.body))

	baseline := heapInUse()
	for range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var req strings.Builder
		req.WriteString("GET /relay/site/results?siteId=site_a&protocolVersion=2 HTTP/1.1\r\nHost: relay\r\n")
		for k, vs := range signed(protocol.HeaderSite, w.siteA, "site_a", "site/results", e.now(), nil) {
			req.WriteString(k + ": " + vs[0] + "\r\n")
		}
		req.WriteString("\r\n")
		if _, err := io.WriteString(c, req.String()); err != nil {
			t.Fatal(err)
		}
		// Never read.
	}
	var peak int64
	relaytest.WaitFor(t, 30*time.Second, "every unread answer cut off (its handler returned)", func() bool {
		peak = max(peak, heapInUse()-baseline)
		return returned.Load() == conns
	})
	relaytest.WaitFor(t, 30*time.Second, "the unread answers' memory released", func() bool { return heapInUse()-baseline < 16<<20 })
	t.Logf("%d unread results answers, connections still open: cut off, heap grew at most %.1f MiB and came back", conns, float64(peak)/(1<<20))
}
