package store

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/test/relaytest"
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
func withView(t testing.TB, s *Store) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.RunWorkView(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	relaytest.WaitFor(t, 10*time.Second, "the work view is live", s.view.Live)
}

// With the work view live, an idle device's second empty claim and sweep
// ask Valkey nothing; a job another replica enqueues is announced and the
// next claim finds it; a job this replica requeues itself is claimable at
// once.
func TestWorkViewMakesIdleTicksFree(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	counter := &countingObserver{n: map[string]int{}}
	a := newStore(t, b, Options{ObserveScript: counter.observe})
	other, err := New(context.Background(), b.client, Options{Namespace: a.Namespace(), Logger: relaytest.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	if !a.announce {
		t.Skip("the server has no sharded pub/sub")
	}
	withView(t, a)
	ha := &storeFixture{t: t, b: b, s: a, ctx: context.Background()}
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
	ho := &storeFixture{t: t, b: b, s: other, ctx: context.Background()}
	ho.enqueueStub(c, stub("from-b", "alice"))
	var held []ClaimedStub
	relaytest.WaitFor(t, 5*time.Second, "the announced job is claimed", func() bool {
		got := ha.claim(both)
		if len(got) != 0 && (len(got) != 1 || stubID(got[0]) != "from-b") {
			t.Fatalf("claimed %v, want the announced job", ids(got))
		}
		held = got
		return len(got) == 1
	})

	// a's own release requeues the job: claimable at once, announcement or not.
	if got := ha.claim(both); len(got) != 0 {
		t.Fatalf("claimed %v again while held", ids(got))
	}
	ha.release("runner_1", []protocol.GrantRef{grant(held[0])}, "", nil)
	if got := ha.claim(both); len(got) != 1 {
		t.Fatalf("released job not claimed at once: %v", ids(got))
	}
}

// viewShard is shard i's counters, read under the view's lock.
func viewShard(s *Store, i int) (own, fenced, ann uint64) {
	return s.view.Testing().Shard(i)
}

// waitView polls cond (the view's state, not time) for at most 5 s.
func waitView(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5 s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Job traffic on a shard, this replica's own included, leaves the other
// empty queues of that shard known: an idle device whose queues nobody
// announced asks Valkey nothing once this replica's fence is back.
func TestWorkViewForgetsOnlyAnnouncedQueues(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	counter := &countingObserver{n: map[string]int{}}
	a := newStore(t, b, Options{ObserveScript: counter.observe})
	if !a.announce {
		t.Skip("the server has no sharded pub/sub")
	}
	other, err := New(context.Background(), b.client, Options{Namespace: a.Namespace(), Logger: relaytest.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	withView(t, a)
	ha := &storeFixture{t: t, b: b, s: a, ctx: context.Background()}
	ho := &storeFixture{t: t, b: b, s: other, ctx: context.Background()}
	sh := placedShard(a, site)
	busy := sameShardSite(a, site)
	d1 := []func(*ClaimInput){runner("d1"), routes([]string{site}, []string{"alice"})}
	d2 := []func(*ClaimInput){runner("d2"), deviceOwner("bob"), routes([]string{site}, []string{"bob"})}
	idle := func(when string) {
		t.Helper()
		counter.take()
		if got := ha.claim(d1...); len(got) != 0 {
			t.Fatalf("%s: d1 claimed %v", when, ids(got))
		}
		if got := ha.claim(d2...); len(got) != 0 {
			t.Fatalf("%s: d2 claimed %v", when, ids(got))
		}
	}
	idle("first")
	idle("second")
	if calls := counter.take(); len(calls) != 0 {
		t.Fatalf("idle claims asked Valkey: %v", calls)
	}

	// Another replica queues a job on the same shard, another site.
	_, _, ann := viewShard(a, sh)
	ho.enqueueStub(busy, stub("b1", "carol"))
	waitView(t, "announcement", func() bool { _, _, n := viewShard(a, sh); return n > ann })
	idle("after another replica's enqueue")
	if calls := counter.take(); len(calls) != 0 {
		t.Fatalf("an announcement of another queue made idle claims ask Valkey: %v", calls)
	}

	// This replica queues one itself: the first claim after it reads (the
	// announcement may not be back yet) and sends the fence; once the
	// fence is back, d2's queues, read before the write, are trusted again.
	ha.enqueueStub(busy, stub("a1", "carol"))
	counter.take()
	if got := ha.claim(d1...); len(got) != 0 {
		t.Fatalf("d1 claimed %v", ids(got))
	}
	if calls := counter.take(); calls["claim_heads"] == 0 && calls["claim"] == 0 {
		t.Fatalf("the claim after this replica's write trusted the view unfenced: %v", calls)
	}
	waitView(t, "fence", func() bool { own, fenced, _ := viewShard(a, sh); return fenced >= own })
	counter.take()
	if got := ha.claim(d2...); len(got) != 0 {
		t.Fatalf("d2 claimed %v", ids(got))
	}
	if calls := counter.take(); len(calls) != 0 {
		t.Fatalf("d2's idle claim asked Valkey after the fence: %v", calls)
	}

	// The jobs themselves are claimable through a at once.
	got := ha.claim(runner("d3"), deviceOwner("carol"), routes([]string{busy}, []string{"carol"}))
	equalStrings(t, "carol's jobs", ids(got), []string{"b1", "a1"})
}

// An announcement that never arrives costs at most the view's re-check (workview.emptyTTL): the
// periodic re-check reads the queue again and the job is granted.
func TestWorkViewRecoversALostAnnouncement(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	counter := &countingObserver{n: map[string]int{}}
	a := newStore(t, b, Options{ObserveScript: counter.observe})
	if !a.announce {
		t.Skip("the server has no sharded pub/sub")
	}
	silent, err := New(context.Background(), b.client, Options{Namespace: a.Namespace(), Logger: relaytest.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	silent.announce = false // its enqueue publishes nothing: the announcement is lost
	withView(t, a)
	ha := &storeFixture{t: t, b: b, s: a, ctx: context.Background()}
	hs := &storeFixture{t: t, b: b, s: silent, ctx: context.Background()}
	if got := ha.claim(); len(got) != 0 {
		t.Fatalf("claimed %v from an empty store", ids(got))
	}
	hs.enqueue("lost", "alice")
	counter.take()
	if got := ha.claim(); len(got) != 0 {
		t.Fatalf("claimed %v: the view did not trust its empty queue", ids(got))
	}
	if calls := counter.take(); len(calls) != 0 {
		t.Fatalf("the claim asked Valkey: %v", calls)
	}
	a.view.Testing().PassEmptyTTL()
	got := ha.claim()
	equalStrings(t, "after the re-check", ids(got), []string{"lost"})
}
