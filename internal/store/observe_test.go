package store

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/byollm/relay-go/internal/valkeyconn"
)

// Every script call goes through one runner that tells the observer its
// name and, on failure, a classed error, whoever calls: here a claim, a
// sweep with something due (as the background sweeper runs it) and a call
// on a cancelled context.
func TestEveryScriptCallIsObserved(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	calls := map[string]int{}
	var failed []error
	obs := func(ctx context.Context, name string) (context.Context, func(error)) {
		return ctx, func(err error) {
			mu.Lock()
			defer mu.Unlock()
			calls[name]++
			if err != nil {
				failed = append(failed, err)
			}
		}
	}
	h := newFixture(t, realBackend(t), Options{ObserveScript: obs})
	h.enqueue("a", "alice")
	h.enqueue("b", "alice")
	got := h.claim(leaseMs(1))
	h.seal(stubID(got[0]))
	h.s.Testing().AdvanceClock(10)
	if _, more, err := h.s.SweepBatch(h.ctx, 0); err != nil || more {
		t.Fatalf("sweep batch: %v %v", more, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := h.s.Job(ctx, site, "a"); err == nil {
		t.Fatal("a call on a cancelled context succeeded")
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"enqueue", "claim", "seal", "sweep", "due_heads"}
	if valkeyconn.IsCluster(h.b.client) {
		// A claim's read before its script; one that is not a cluster
		// claims on one shard in the script alone (claimFused).
		want = append(want, "claim_heads")
	}
	for _, name := range want {
		if calls[name] == 0 {
			t.Errorf("no %s call observed (saw %v)", name, calls)
		}
	}
	var se *ScriptError
	if len(failed) != 1 || !errors.As(failed[0], &se) || se.ErrorClass() != "canceled" {
		t.Fatalf("failures observed: %v", failed)
	}
}

// A due-heads read carries the clock in its own pipeline (on a cluster, to
// the node of the first due key): one round trip, no "now" call of its
// own. The clock it reads is the store clock: an overdue grant is found
// due and requeued.
func TestDueHeadsCarryTheClock(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, be backend) {
		var mu sync.Mutex
		calls := map[string]int{}
		obs := func(ctx context.Context, name string) (context.Context, func(error)) {
			return ctx, func(error) {
				mu.Lock()
				defer mu.Unlock()
				calls[name]++
			}
		}
		h := newFixture(t, be, Options{ObserveScript: obs})
		h.enqueue("a", "alice")
		got := h.claim(leaseMs(60_000))
		if len(got) != 1 {
			t.Fatalf("claimed %d jobs", len(got))
		}
		h.seal(stubID(got[0]))
		if jobs, _, err := h.s.SweepBatch(h.ctx, 0); err != nil || len(jobs) != 0 {
			t.Fatalf("sweep before the grant is due: %v %v", jobs, err)
		}
		h.s.Testing().AdvanceClock(60_001)
		jobs, _, err := h.s.SweepBatch(h.ctx, 0)
		if err != nil || len(jobs) != 1 || jobs[0].ID != "a" || jobs[0].State != StateQueued {
			t.Fatalf("sweep after the grant is due: %+v %v", jobs, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if calls["due_heads"] < 2 {
			t.Fatalf("due_heads calls: %v", calls)
		}
		if calls["now"] > 0 {
			t.Fatalf("a due-heads read made a clock call of its own (on a cluster: %v); store calls: %v", valkeyconn.IsCluster(be.client), calls)
		}
	})
}
