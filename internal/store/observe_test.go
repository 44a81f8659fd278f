package store

import (
	"context"
	"errors"
	"sync"
	"testing"
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
	for _, name := range []string{"enqueue", "claim", "seal", "sweep", "claim_heads", "due_heads"} {
		if calls[name] == 0 {
			t.Errorf("no %s call observed (saw %v)", name, calls)
		}
	}
	var se *ScriptError
	if len(failed) != 1 || !errors.As(failed[0], &se) || se.ErrorClass() != "canceled" {
		t.Fatalf("failures observed: %v", failed)
	}
}
