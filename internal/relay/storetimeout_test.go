package relay

import (
	"context"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/test/relaytest"
)

// A frozen store gets the retryable 503 server-error within the store
// timeout, not when the connection is finally declared dead, and the relay
// serves again as soon as the store answers.
func TestFrozenStoreAnswersFast503(t *testing.T) {
	// A server of this test's own, which it stops with SIGSTOP (the process
	// keeps its sockets open and answers nothing, as a Valkey that is
	// swapping, paused or stuck in a long fork does) and resumes with
	// SIGCONT. The shared test server is never frozen.
	srv := relaytest.StartServer(t)
	c := relaytest.Open(t, srv.URL())
	const timeout = 300 * time.Millisecond
	// The bound is the store runner's (store.Options.CallTimeout, set from
	// RELAY_STORE_TIMEOUT as cfg.StoreTimeout is).
	st := newStore(t, c, store.Options{CallTimeout: timeout})
	// Runs before the namespace cleanup, should the test stop while frozen.
	t.Cleanup(func() { _ = srv.Signal(syscall.SIGCONT) })
	// The plane clock and the signing clock are local here: the harness's
	// default reads the store, which is the thing being frozen.
	e := newEnvOn(t, st, func(cfg *Config) {
		cfg.StoreTimeout = timeout
		cfg.Clock = func() int64 { return time.Now().UnixMilli() }
	})
	w := newWorld(t)
	w.install(e)
	post := func(k keys, runner, endpoint string, body []byte) resp {
		h := signed(protocol.HeaderRunner, k, runner, endpoint, time.Now().UnixMilli(), body)
		return e.do("POST", "/byollm/"+endpoint, h, body)
	}
	site := func(endpoint string, body []byte) resp {
		h := signed(protocol.HeaderSite, w.siteA, "site_a", "site/"+endpoint, time.Now().UnixMilli(), body)
		return e.do("POST", "/relay/site/"+endpoint, h, body)
	}
	expect(t, post(w.alice, "runner_alice", "claim", claimJSON(t, "runner_alice", 1)), 200, `{"jobs":[],"leaseMs":60000}`)
	// Bodies made now: a stub's deadline is read from the store clock.
	frozenStub := enqueueJSON(t, "site_a", e.stub("frozen", "alice", w.siteA))
	thawedStub := enqueueJSON(t, "site_a", e.stub("after-thaw", "alice", w.siteA))

	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP: %v", err)
	}
	down := `{"error":"server-error","message":"the relay cannot reach its routing store just now — try again shortly"}`
	// Without the bound these wait until valkey-go gives up on the
	// connection (about 15 s measured). Allow the timeout plus generous
	// slack for a loaded machine.
	const within = 3 * time.Second
	for i, call := range []func() resp{
		func() resp { return post(w.alice, "runner_alice", "claim", claimJSON(t, "runner_alice", 1)) },
		func() resp { return post(w.bob, "runner_bob", "heartbeat", heartbeatJSON(t, "runner_bob", "0.1.1")) },
		func() resp { return site("enqueue", frozenStub) },
	} {
		start := time.Now()
		got := call()
		took := time.Since(start)
		expect(t, got, 503, down)
		t.Logf("request %d: 503 after %v", i, took.Round(time.Millisecond))
		if took > within {
			t.Fatalf("request %d answered after %v with the store frozen; want within %v", i, took, within)
		}
	}

	if err := srv.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT: %v", err)
	}
	// Back: the next requests are served (the connection was never cut,
	// the replies to the abandoned calls are read and dropped).
	relaytest.WaitFor(t, 10*time.Second, "an enqueue served once the store is back", func() bool {
		return site("enqueue", thawedStub).status == 200
	})
	// A 503 after the bound says the outcome is unknown, not that nothing
	// happened: the enqueue sent before the freeze may run when the server
	// resumes (whether it was written to the socket in time is a race).
	// Either way it runs once, and the thawed one is there.
	jobs := e.claim(t, w.alice, "runner_alice", 2)
	ids := map[string]int{}
	for _, j := range jobs {
		ids[j.ID]++
	}
	if ids["after-thaw"] != 1 || ids["frozen"] > 1 || len(jobs) != 1+ids["frozen"] {
		t.Fatalf("after thaw: claimed %+v", jobs)
	}
}

// beatRecorder is the real store with its Heartbeat calls recorded: what
// the plane asked. Only the recording is not the real thing; the store
// below it is.
type beatRecorder struct {
	Store
	mu   sync.Mutex
	idle []*store.IdleClaim
}

func (b *beatRecorder) Heartbeat(ctx context.Context, in store.HeartbeatInput) (store.HeartbeatResult, error) {
	b.mu.Lock()
	b.idle = append(b.idle, in.Idle)
	b.mu.Unlock()
	return b.Store.Heartbeat(ctx, in)
}

// A heartbeat that reports no active lease says it is idle, naming the
// routes and kinds its claim would ask for; one that holds a lease is not
// idle. (The store bounds the write itself once its batch sends it, so
// the wait for the batch is not charged: scriptrun's and the store's
// batch tests.)
func TestIdleHeartbeatNamesItsClaim(t *testing.T) {
	t.Parallel()
	rec := &beatRecorder{}
	e := newEnv(t, func(c *Config) {
		rec.Store = c.Store
		c.Store = rec
	})
	w := newWorld(t)
	w.install(e)
	if got := e.daemonPost(w.alice, "runner_alice", "heartbeat", heartbeatJSON(t, "runner_alice", "0.1.1")); got.status != 200 {
		t.Fatalf("idle heartbeat: %d %s", got.status, got.body)
	}
	lease := protocol.GrantRef{JobID: "job_1", LeaseID: "00000000-0000-4000-8000-000000000000"}
	got := e.daemonPost(w.alice, "runner_alice", "heartbeat", heartbeatJSON(t, "runner_alice", "0.1.1", lease))
	if got.status != 200 {
		t.Fatalf("heartbeat with a lease: %d %s", got.status, got.body)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.idle) != 2 {
		t.Fatalf("%d store heartbeats, want 2", len(rec.idle))
	}
	in := rec.idle[0]
	if in == nil {
		t.Fatal("a heartbeat without active leases was not marked idle")
	}
	if want := []store.Route{{SiteID: "site_a", Owner: "alice"}}; !slices.Equal(in.Routes, want) {
		t.Fatalf("idle routes %v, want alice's %v", in.Routes, want)
	}
	if !slices.Equal(in.Kinds, []string{chatCapability.Kind}) {
		t.Fatalf("idle kinds %v, want the heartbeat's capability kinds", in.Kinds)
	}
	if rec.idle[1] != nil {
		t.Fatalf("a heartbeat holding a lease was marked idle: %+v", rec.idle[1])
	}
}
