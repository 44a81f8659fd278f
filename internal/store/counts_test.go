package store

import (
	"context"
	"testing"

	"github.com/byollm/relay-go/internal/protocol"
)

// The state counts follow every transition: enqueue, claim, seal, take,
// complete, release (requeue), and removal at the deadline.
func TestCountsFollowTransitions(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		want := func(step string, q, aw, rd, rn, dn int64) {
			t.Helper()
			got, err := h.s.Counts(context.Background())
			if err != nil {
				t.Fatalf("%s: %v", step, err)
			}
			w := StateCounts{Queued: q, AwaitingPayload: aw, Ready: rd, Running: rn, Done: dn}
			if got != w {
				t.Fatalf("%s: counts = %+v, want %+v", step, got, w)
			}
			if got.ActiveLeases() != aw+rd+rn {
				t.Fatalf("%s: active leases = %d", step, got.ActiveLeases())
			}
		}
		want("empty", 0, 0, 0, 0, 0)
		for _, id := range []string{"a", "b", "c"} {
			h.enqueue(id, "alice")
		}
		h.enqueue("a", "alice") // idempotent: no second member
		want("enqueued", 3, 0, 0, 0, 0)

		grants := h.claim()
		if len(grants) != 2 {
			t.Fatalf("grants = %d, want 2", len(grants))
		}
		want("claimed", 1, 2, 0, 0, 0)

		first, second := stubID(grants[0]), stubID(grants[1])
		h.seal(first)
		want("sealed", 1, 1, 1, 0, 0)

		h.take(first, "runner_1", grants[0].Lease.ID)
		want("taken", 1, 1, 0, 1, 0)
		h.take(first, "runner_1", grants[0].Lease.ID) // repeated fetch
		want("taken twice", 1, 1, 0, 1, 0)

		h.complete(first, "runner_1", grants[0].Lease.ID, "ok")
		want("completed", 1, 1, 0, 0, 1)

		h.release("runner_1", []protocol.GrantRef{{JobID: second, LeaseID: grants[1].Lease.ID}}, ReasonShutdown, nil)
		want("released", 2, 0, 0, 0, 1)

		// Past every deadline: the sweep forgets all of them, done included.
		h.s.Testing().AdvanceClock(stub("x", "alice").DeadlineAt - h.now() + 1)
		h.sweep()
		want("swept", 0, 0, 0, 0, 0)
	})
}
