package relay

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/test/relaytest"
)

// heldWriter holds every large write (an answer with results in it) until
// release is closed, as a client that does not read would; small answers
// (refusals, an empty results list) go through.
type heldWriter struct {
	http.ResponseWriter
	release <-chan struct{}
	held    *sync.WaitGroup
}

func (w heldWriter) Write(b []byte) (int, error) {
	select {
	case <-w.release: // released: every write goes through
	default:
		if len(b) > 1024 {
			w.held.Done()
			<-w.release
		}
	}
	return w.ResponseWriter.Write(b)
}

// One site key holds at most MaxResultsInFlightPerSite results answers in
// flight on a replica, however many it opens: one more is the retryable
// 503 at once, another site is served meanwhile, and the slots come back
// when the answers have been written.
func TestResultsInFlightPerSite(t *testing.T) {
	e := newEnv(t)
	w := newWorld(t)
	w.install(e)
	for i := range 2 {
		id := "res-" + strconv.Itoa(i)
		lease := e.enqueueAndClaim(t, w, id, "alice", w.alice, "runner_alice")
		env := envelope("result")
		env.Ciphertext = strings.Repeat("A", 4000)
		expect(t, e.daemonPost(w.alice, "runner_alice", "result", resultJSON(t, "runner_alice", id, lease.ID, env)), 200, `{"accepted":true,"state":"done"}`)
	}

	release := make(chan struct{})
	var held sync.WaitGroup
	planes := e.relay.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		planes.ServeHTTP(heldWriter{rw, release, &held}, r)
	}))
	defer srv.Close()
	read := func(k keys, site string) (int, string) {
		req, _ := http.NewRequest("GET", srv.URL+"/relay/site/results?siteId="+site+"&protocolVersion=2", nil)
		for h, vs := range signed(protocol.HeaderSite, k, site, "site/results", e.now(), nil) {
			req.Header[h] = vs
		}
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Errorf("results: %v", err)
			return 0, ""
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}

	held.Add(MaxResultsInFlightPerSite)
	var readers sync.WaitGroup
	for range MaxResultsInFlightPerSite {
		readers.Add(1)
		go func() {
			defer readers.Done()
			if status, body := read(w.siteA, "site_a"); status != 200 || !strings.Contains(body, "res-") {
				t.Errorf("a held read, once released: %d %.200s", status, body)
			}
		}()
	}
	held.Wait() // every slot is held by an answer being written

	status, body := read(w.siteA, "site_a")
	if status != 503 || !strings.Contains(body, `"error":"server-error"`) || !strings.Contains(body, "results reads in flight") {
		t.Errorf("one more read of the same site: %d %s; want the retryable 503", status, body)
	}
	if status, body := read(w.siteB, "site_b"); status != 200 || body != `{"jobs":[]}` {
		t.Errorf("another site meanwhile: %d %s", status, body)
	}

	close(release)
	readers.Wait()
	relaytest.WaitFor(t, 5*time.Second, "the site's slots given back once its answers were written", func() bool {
		status, body := read(w.siteA, "site_a")
		return status == 200 && strings.Contains(body, "res-")
	})
	e.relay.answers.mu.Lock()
	left := len(e.relay.answers.n)
	e.relay.answers.mu.Unlock()
	if left != 0 {
		t.Errorf("%d sites still counted with nothing in flight", left)
	}
}
