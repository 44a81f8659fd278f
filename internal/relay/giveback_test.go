package relay

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/test/relaytest"
)

// leaseCounts records LeaseObserver calls.
type leaseCounts struct {
	mu            sync.Mutex
	claims, given int
	abandoned     int
}

func (c *leaseCounts) RecordUnansweredClaim(_ context.Context, given int, abandoned bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.claims++
	c.given += given
	if abandoned {
		c.abandoned++
	}
}

func (c *leaseCounts) snapshot() (claims, given, abandoned int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.claims, c.given, c.abandoned
}

// A claim whose store call outlives the store timeout after its script was
// sent is answered 503; the script still runs when the store answers again
// and grants the job to a runner that will never see the lease. The relay
// gives that grant back: the job returns to its queue as a plain release
// leaves it (no seal attempt counted, not sticky to the lost runner) and is
// claimed again at once. Before, it sat awaiting for 10 s and then went
// back sticky to the lost runner alone (or, sealed, waited out the 60 s
// lease). The server is this test's own, frozen with SIGSTOP the moment
// the claim script is sent.
func TestClaimAnswered503AfterItsScriptRanIsGivenBack(t *testing.T) {
	srv := relaytest.StartServer(t)
	c := relaytest.Open(t, srv.URL())
	t.Cleanup(func() { _ = srv.Signal(syscall.SIGCONT) })
	var armed atomic.Bool
	st := newStore(t, c, store.Options{
		CallTimeout: 300 * time.Millisecond,
		ObserveScript: func(ctx context.Context, name string) (context.Context, func(error)) {
			if name == "claim" && armed.CompareAndSwap(true, false) {
				if err := srv.Signal(syscall.SIGSTOP); err != nil {
					t.Errorf("SIGSTOP: %v", err)
				}
			}
			return ctx, func(error) {}
		},
	})
	counts := &leaseCounts{}
	logs := relaytest.RecordLogs(t)
	e := newEnvOn(t, st, func(cfg *Config) {
		cfg.Clock = func() int64 { return time.Now().UnixMilli() } // the store's would freeze too
		cfg.LeaseObserver = counts
		cfg.Logger = logs.Logger
	})
	w := newWorld(t)
	w.install(e)
	post := func(k keys, runner, endpoint string, body []byte) resp {
		h := signed(protocol.HeaderRunner, k, runner, endpoint, time.Now().UnixMilli(), body)
		return e.do("POST", "/byollm/"+endpoint, h, body)
	}
	expect(t, post(w.alice, "runner_alice", "claim", claimJSON(t, "runner_alice", 1)), 200, `{"jobs":[],"leaseMs":60000}`)
	if got := e.sitePost(w.siteA, "site_a", "enqueue", enqueueJSON(t, "site_a", e.stub("lost", "alice", w.siteA))); got.status != 200 {
		t.Fatalf("enqueue: %d %s", got.status, got.body)
	}

	armed.Store(true)
	expect(t, post(w.alice, "runner_alice", "claim", claimJSON(t, "runner_alice", 1)), 503,
		`{"error":"server-error","message":"the relay cannot reach its routing store just now — try again shortly"}`)
	if err := srv.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT: %v", err)
	}
	thawed := time.Now()

	// The script and the relay's give-back reach the thawed server in
	// either order: the script first (it grants, the give-back requeues
	// the grant) or the give-back first (it revokes the claim's token, the
	// script grants nothing). Either way the give-back is done once, and
	// the job is then queued as a plain release leaves it: unclaimed, no
	// seal attempt, no re-offer. Without the give-back the job sits
	// awaiting runner_alice for 10 s, then goes back sticky to her alone.
	relaytest.WaitFor(t, 20*time.Second, "the lost claim given back", func() bool {
		claims, _, _ := counts.snapshot()
		return claims > 0
	})
	claims, given, abandoned := counts.snapshot()
	t.Logf("given back %v after the store answered again: %d lease(s) requeued (0: the revocation came first, or an earlier attempt whose answer was lost requeued it)",
		time.Since(thawed).Round(time.Millisecond), given)
	if claims != 1 || given > 1 || abandoned != 0 {
		t.Fatalf("give-backs: %d claims, %d leases, %d abandoned; want one claim given back", claims, given, abandoned)
	}
	if logs.Count("gave back the grants of a claim whose answer was lost") != 1 {
		t.Fatal("no log line for the give-back")
	}
	j, err := st.Job(context.Background(), "site_a", "lost")
	if err != nil || j == nil || j.State != store.StateQueued || j.ClaimedBy != nil || j.SealAttempts != 0 || j.ReofferTo != "" {
		t.Fatalf("after the give-back: %+v %v; want queued, unclaimed, not sticky", j, err)
	}
	jobs := e.claim(t, w.alice, "runner_alice", 1)
	if len(jobs) != 1 || jobs[0].ID != "lost" {
		t.Fatalf("claim after the give-back: %+v", jobs)
	}
}

// Shutting down while a give-back cannot reach the store stops retrying,
// counts the claim as abandoned and says so in the log.
func TestGiveBackAbandonedAtClose(t *testing.T) {
	counts := &leaseCounts{}
	logs := relaytest.RecordLogs(t)
	gate := make(chan struct{})
	e := newEnv(t, func(cfg *Config) {
		cfg.Store = stuckGiveBack{Store: cfg.Store, gate: gate}
		cfg.LeaseObserver = counts
		cfg.Logger = logs.Logger
		cfg.StoreTimeout = 100 * time.Millisecond
	})
	e.relay.returns.add(&store.UnansweredClaim{RunnerID: "runner_x", Token: "t", Leases: []string{"00000000-0000-4000-8000-000000000000"}})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	e.relay.Close(ctx)
	close(gate)
	if claims, given, abandoned := counts.snapshot(); claims != 1 || given != 0 || abandoned != 1 {
		t.Fatalf("after close: %d claims, %d given, %d abandoned; want 1 abandoned", claims, given, abandoned)
	}
	if logs.Count("were not given back; they return when their leases lapse") != 1 {
		t.Fatal("the abandoned give-back was not logged")
	}
	// After close nothing more is tried.
	e.relay.returns.add(&store.UnansweredClaim{RunnerID: "runner_y", Token: "t", Leases: []string{"00000000-0000-4000-8000-000000000000"}})
	if claims, _, abandoned := counts.snapshot(); claims != 2 || abandoned != 2 {
		t.Fatalf("a give-back after close: %d claims, %d abandoned", claims, abandoned)
	}
}

// stuckGiveBack is the real store whose GiveBack fails (as a timed-out
// store call does) until gate closes.
type stuckGiveBack struct {
	Store
	gate chan struct{}
}

func (s stuckGiveBack) GiveBack(ctx context.Context, u store.UnansweredClaim) ([]string, error) {
	select {
	case <-s.gate:
		return s.Store.GiveBack(ctx, u)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
