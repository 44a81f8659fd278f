package relay

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/test/relaytest"
)

func withFetchWait(d time.Duration) envOption { return func(c *Config) { c.FetchWait = d } }

// liveViews runs st's work view for the test and waits until a seal on any
// replica would be heard (AwaitPayload says so).
func liveViews(t *testing.T, st *store.Store) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { st.RunWorkView(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	relaytest.WaitFor(t, 10*time.Second, "the store hears seals", func() bool {
		_, _, stop, ok := st.AwaitPayload(store.HolderInput{LeaseID: "probe"})
		stop()
		return ok
	})
}

type fetchAnswer struct {
	r    resp
	took time.Duration
}

// takeCounter counts a store's take scripts (ObserveScript).
func takeCounter(n *atomic.Int64) store.Options {
	return store.Options{ObserveScript: func(ctx context.Context, name string) (context.Context, func(error)) {
		if name == "take" {
			n.Add(1)
		}
		return ctx, func(error) {}
	}}
}

// With RELAY_FETCH_WAIT, a fetch made before the site seals is held and
// answered with the payload once the seal lands, on this replica or on
// another one sharing the store: one request where the daemon would have
// polled. Without a seal it answers not-ready when the wait ends. A fetch
// waits before it reads: on the replica that made the grant by its note of
// it, on another replica because a plain read of the record shows the
// grant still awaits its payload. A seal on the replica where the fetch
// waits takes the payload for it (no take script at all); a seal
// elsewhere wakes it to run take.lua once.
func TestFetchWaitsForTheSeal(t *testing.T) {
	t.Parallel()
	const wait = 8 * time.Second
	for _, c := range []struct {
		name      string
		sealElse  bool // the seal lands on another replica
		fetchElse bool // the fetch lands on another replica than the claim
		takes     int64
	}{
		{"this replica", false, false, 0},
		{"sealed on another replica", true, false, 1},
		{"fetched on another replica", false, true, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var takes atomic.Int64
			e := newEnvOn(t, newStore(t, relaytest.Client(t), takeCounter(&takes)), withFetchWait(wait))
			liveViews(t, e.st)
			second := func(opts store.Options) *env {
				opts.Namespace, opts.Logger = e.st.Namespace(), relaytest.Logger(t)
				other, err := store.New(context.Background(), relaytest.Client(t), opts)
				if err != nil {
					t.Fatal(err)
				}
				o := newEnvOn(t, other, withFetchWait(wait))
				liveViews(t, other)
				return o
			}
			sealer, fetcher := e, e
			if c.sealElse {
				sealer = second(store.Options{})
			}
			if c.fetchElse {
				takes.Store(0)
				fetcher = second(takeCounter(&takes))
			}
			w := newWorld(t)
			w.install(e)
			if sealer != e {
				w.install(sealer)
			}
			if fetcher != e {
				w.install(fetcher)
			}
			stub := e.stub("job-1", "alice", w.siteA)
			expect(t, e.sitePost(w.siteA, "site_a", "enqueue", enqueueJSON(t, "site_a", stub)), 200, `{"jobId":"job-1","state":"queued"}`)
			jobs := e.claim(t, w.alice, "runner_alice", 1)
			if len(jobs) != 1 {
				t.Fatalf("claimed %d", len(jobs))
			}
			takes.Store(0)
			answered := make(chan fetchAnswer, 1)
			go func() {
				start := time.Now()
				r := fetcher.daemonPost(w.alice, "runner_alice", "fetch", fetchJSON(t, "runner_alice", "job-1", jobs[0].Lease.ID))
				answered <- fetchAnswer{r, time.Since(start)}
			}()
			relaytest.WaitFor(t, 5*time.Second, "the fetch waits", func() bool { return fetcher.st.Testing().PayloadWaits() == 1 })
			payload := envelope("payload")
			expect(t, sealer.sitePost(w.siteA, "site_a", "payload", payloadJSON(t, "site_a", "job-1", payload)), 200, `{"jobId":"job-1","state":"ready"}`)
			got := <-answered
			expect(t, got.r, 200, `{"envelope":`+string(mustJSON(t, payload))+`}`)
			// Woken by the seal, not by the end of the wait (after which
			// the fetch reads once more and would find the payload too).
			if got.took >= wait/2 {
				t.Fatalf("the fetch answered after %v: the seal did not wake it (wait %v)", got.took, wait)
			}
			if n := takes.Load(); n != c.takes {
				t.Fatalf("the fetch ran %d take scripts, want %d", n, c.takes)
			}
			if n := fetcher.st.Testing().PayloadWaits(); n != 0 {
				t.Fatalf("%d waits left after the answer", n)
			}
		})
	}

	t.Run("no seal", func(t *testing.T) {
		t.Parallel()
		const short = 300 * time.Millisecond
		e := newEnv(t, withFetchWait(short))
		liveViews(t, e.st)
		w := newWorld(t)
		w.install(e)
		expect(t, e.sitePost(w.siteA, "site_a", "enqueue", enqueueJSON(t, "site_a", e.stub("job-1", "alice", w.siteA))), 200, `{"jobId":"job-1","state":"queued"}`)
		jobs := e.claim(t, w.alice, "runner_alice", 1)
		start := time.Now()
		got := e.daemonPost(w.alice, "runner_alice", "fetch", fetchJSON(t, "runner_alice", "job-1", jobs[0].Lease.ID))
		expect(t, got, 409, `{"error":"not-ready","message":"the site has not sealed this job yet"}`)
		if took := time.Since(start); took < short {
			t.Fatalf("answered not-ready after %v, before the %v wait ended", took, short)
		}
		// A stale lease is refused at once, whatever the wait.
		start = time.Now()
		got = e.daemonPost(w.alice, "runner_alice", "fetch", fetchJSON(t, "runner_alice", "job-1", "not-a-lease"))
		if got.status == 200 || got.status == 409 && time.Since(start) >= short {
			t.Fatalf("a fetch with a lease that is not the job's: %d %s after %v", got.status, got.body, time.Since(start))
		}
		if n := e.st.Testing().PayloadWaits(); n != 0 {
			t.Fatalf("%d waits left", n)
		}
	})
}
