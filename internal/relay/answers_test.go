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
	// The last read's slot comes back just after its answer is written,
	// which may be just after the client has read it.
	relaytest.WaitFor(t, 5*time.Second, "no site counted with nothing in flight", func() bool {
		e.relay.answers.mu.Lock()
		defer e.relay.answers.mu.Unlock()
		return len(e.relay.answers.n) == 0
	})
}

// A results answer's buffer is reused only once the answer has been
// written: another site's answers, built while one is still being written
// to a slow client, never land in the bytes that client is sent.
func TestResultsBufferReusedOnlyAfterWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := newWorld(t)
	w.install(e)
	finish := func(site string, sk keys, id, owner string, dev keys, runner string, ciphertext string) {
		expect(t, e.sitePost(sk, site, "enqueue", enqueueJSON(t, site, e.stub(id, owner, sk))), 200,
			`{"jobId":"`+id+`","state":"queued"}`)
		jobs := e.claim(t, dev, runner, 1)
		if len(jobs) != 1 || jobs[0].ID != id {
			t.Fatalf("claim of %s: %+v", id, jobs)
		}
		env := envelope("result")
		env.Ciphertext = ciphertext
		expect(t, e.daemonPost(dev, runner, "result", resultJSON(t, runner, id, jobs[0].Lease.ID, env)), 200, `{"accepted":true,"state":"done"}`)
	}
	for i := range 2 {
		finish("site_a", w.siteA, "slow-"+strconv.Itoa(i), "alice", w.alice, "runner_alice", strings.Repeat("A", 4000))
	}
	finish("site_b", w.siteB, "fast-0", "bob", w.bob, "runner_bob", strings.Repeat("B", 200))

	release := make(chan struct{})
	var held sync.WaitGroup
	planes := e.relay.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("siteId") == "site_a" && r.Header.Get("X-Hold") != "" {
			rw = heldWriter{rw, release, &held}
		}
		planes.ServeHTTP(rw, r)
	}))
	defer srv.Close()
	read := func(k keys, site string, hold bool) string {
		req, _ := http.NewRequest("GET", srv.URL+"/relay/site/results?siteId="+site+"&protocolVersion=2", nil)
		for h, vs := range signed(protocol.HeaderSite, k, site, "site/results", e.now(), nil) {
			req.Header[h] = vs
		}
		if hold {
			req.Header.Set("X-Hold", "1")
		}
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Errorf("results of %s: %v", site, err)
			return ""
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 {
			t.Errorf("results of %s: %d %s", site, res.StatusCode, b)
		}
		return string(b)
	}
	wantA, wantB := read(w.siteA, "site_a", false), read(w.siteB, "site_b", false)
	if !strings.Contains(wantA, "slow-1") || !strings.Contains(wantB, "fast-0") || strings.Contains(wantB, "slow-") {
		t.Fatalf("the two sites' answers: %.120s / %.120s", wantA, wantB)
	}

	held.Add(1)
	gotA := make(chan string, 1)
	go func() { gotA <- read(w.siteA, "site_a", true) }()
	held.Wait() // site A's answer is being written, and stalls there

	var readers sync.WaitGroup
	for range 4 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for range 10 {
				if got := read(w.siteB, "site_b", false); got != wantB {
					t.Errorf("site B's answer meanwhile: %.200s", got)
					return
				}
			}
		}()
	}
	readers.Wait()
	close(release)
	if got := <-gotA; got != wantA {
		t.Errorf("site A's stalled answer was changed while it was written:\n got %.300s\nwant %.300s", got, wantA)
	}
}
