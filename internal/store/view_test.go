package store

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/protocol"
)

// countingObserver counts the Valkey calls a Store makes (scripts and plain
// commands alike: every one goes through the observer).
type countingObserver struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *countingObserver) observe(ctx context.Context, name string) (context.Context, func(error)) {
	c.mu.Lock()
	c.n[name]++
	c.mu.Unlock()
	return ctx, func(error) {}
}

func (c *countingObserver) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.n
	c.n = map[string]int{}
	return out
}

// withView runs s's work view for the test and waits until every shard's
// subscription is live.
func withView(t *testing.T, s *Store) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.RunWorkView(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(10 * time.Second)
	for !s.viewLive() {
		if time.Now().After(deadline) {
			t.Fatal("work view not live after 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// With the work view live, an idle device's second empty claim and sweep
// ask Valkey nothing; a job another replica enqueues is announced and the
// next claim finds it; a job this replica requeues itself is claimable at
// once.
func TestWorkViewMakesIdleTicksFree(t *testing.T) {
	b := realBackend(t)
	counter := &countingObserver{n: map[string]int{}}
	a := newStore(t, b, Options{ObserveScript: counter.observe})
	other, err := New(context.Background(), b.client, Options{Namespace: a.Namespace(), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if !a.announce {
		t.Skip("the server has no sharded pub/sub")
	}
	withView(t, a)
	ha := &h{t: t, b: b, s: a, ctx: context.Background()}
	c := otherShardSite(a, site)
	both := routes([]string{site, c}, []string{"alice"})

	if got := ha.claim(both); len(got) != 0 {
		t.Fatalf("claimed %d from an empty store", len(got))
	}
	ha.sweep()
	counter.take()
	for range 5 {
		if got := ha.claim(both); len(got) != 0 {
			t.Fatal("claimed from an empty store")
		}
		ha.sweep()
	}
	if calls := counter.take(); len(calls) != 0 {
		t.Fatalf("idle claims and sweeps asked Valkey: %v", calls)
	}

	// Another replica enqueues: the announcement reaches a's view.
	ho := &h{t: t, b: b, s: other, ctx: context.Background()}
	ho.enqueueStub(c, stub("from-b", "alice"))
	deadline := time.Now().Add(5 * time.Second)
	var held []ClaimedStub
	for {
		got := ha.claim(both)
		if len(got) == 1 && stubID(got[0]) == "from-b" {
			held = got
			break
		}
		if len(got) != 0 || time.Now().After(deadline) {
			t.Fatalf("the announced job was not claimed within 5 s: %v", ids(got))
		}
		time.Sleep(5 * time.Millisecond)
	}

	// a's own release requeues the job: claimable at once, announcement or not.
	if got := ha.claim(both); len(got) != 0 {
		t.Fatalf("claimed %v again while held", ids(got))
	}
	ha.release("runner_1", []protocol.GrantRef{grant(held[0])}, "", nil)
	if got := ha.claim(both); len(got) != 1 {
		t.Fatalf("released job not claimed at once: %v", ids(got))
	}
}
