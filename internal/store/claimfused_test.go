package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/valkeyconn"
)

// fusedReady runs s's work view when the server announces queue entries
// (sharded pub/sub), and answers a wait for the view to hear that one of
// in's queues on site's shard gained an entry: what makes a claim one
// call (claimFused). Elsewhere the wait returns at once, and the claims
// take the path with a read first.
func fusedReady(t *testing.T, s *Store) (wait func(in ClaimInput)) {
	t.Helper()
	if !s.announce {
		return func(ClaimInput) {}
	}
	withView(t, s)
	return func(in ClaimInput) {
		t.Helper()
		sh := placedShard(s, site)
		waitView(t, "the enqueue's announcement", func() bool {
			return s.view.RecentlyAnnounced(sh, s.claimQueues(in, in.Routes, in.Kinds))
		})
	}
}

// oneClaimCall: were calls (a claim's store calls, by name) the one claim
// call claimFused makes, where s takes that path (a server that is not a
// cluster, with announcements)? Elsewhere any calls are.
func oneClaimCall(s *Store, calls map[string]int) bool {
	if !s.announce || valkeyconn.IsCluster(s.c) {
		return true
	}
	return len(calls) == 1 && calls["claim"] == 1
}

// A claim whose work lies on one shard, lately announced, on a server that
// is not a cluster, is one script call: no read before it (queue heads,
// due heads, the runner's records) and no runner_shards_add after it. It
// still does all they did: it checks the presence record, settles what is
// due on other shards (here after its one grant used up Max), and writes
// the runner's record of shards before it answers. On a cluster the same
// claim takes the longer path, with the same outcome.
func TestClaimOnOneShardIsOneCall(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		counter := &countingObserver{n: map[string]int{}}
		h := newFixture(t, b, Options{ObserveScript: counter.observe})
		announced := fusedReady(t, h.s)
		dev := freshDevice()
		h.seen("runner_1", "alice", dev, `[]`, `[]`)
		other := otherShardSite(h.s, site)
		late := stub("late", "bob")
		late.DeadlineAt = h.now() + 1000
		h.enqueueStub(other, late)
		h.enqueue("j1", "alice")
		h.enqueue("j2", "alice")
		h.s.Testing().AdvanceClock(2000) // late's deadline has passed: due
		in := claimArgs(maxJobs(1), func(in *ClaimInput) { in.Device, in.RequirePresence = dev, true })
		announced(in)

		counter.take()
		got, verified, err := h.s.ClaimVerified(h.ctx, in)
		if err != nil || !equalIDs(ids(got), []string{"j1"}) || !verified {
			t.Fatalf("claim: %q verified %v: %v", ids(got), verified, err)
		}
		calls := counter.take()
		if !oneClaimCall(h.s, calls) {
			t.Fatalf("the claim made %v, want one claim call", calls)
		}
		if j, err := h.s.Job(h.ctx, other, "late"); err != nil || j != nil {
			t.Fatalf("the due job on another shard after the claim: %+v, %v", j, err)
		}
		z, err := b.client.Do(h.ctx, b.client.B().Zrange().Key(h.s.k.runnerShards("runner_1")).Min("0").Max("-1").Withscores().Build()).AsZScores()
		if err != nil || len(z) != 1 || z[0].Member != fmt.Sprint(placedShard(h.s, site)) || z[0].Score < float64(h.now()) {
			t.Fatalf("the runner's record of shards after the claim: %v, %v", z, err)
		}
		h.mustState("j2", StateQueued)
	})
}

// The settling a one-call claim does on other shards is bounded like its
// own: a shard with more due than ClaimSettleBudget stops the call there,
// and Go sweeps it before the claim answers; nothing due is left behind.
func TestClaimSettlesAnotherShardsBacklog(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{ClaimSettleBudget: 3, SweepBatch: 2})
		announced := fusedReady(t, h.s)
		other := otherShardSite(h.s, site)
		var stubs []protocol.JobStub
		for i := range 9 {
			st := stub(fmt.Sprint("old", i), "bob")
			st.DeadlineAt = h.now() + 1000
			stubs = append(stubs, st)
		}
		enqueueMany(t, h.s, b.client, other, stubs)
		h.enqueue("live", "alice")
		h.s.Testing().AdvanceClock(2000)
		announced(claimArgs())
		got := h.claim()
		equalStrings(t, "grants", ids(got), []string{"live"})
		jobs, err := h.s.Jobs(h.ctx)
		if err != nil || len(jobs) != 1 || jobs[0].ID != "live" {
			t.Fatalf("jobs after the claim: %v (%v)", jobIDs(jobs), err)
		}
	})
}

// A presence record that no longer holds the claimant refuses the claim
// before it settles anything, in one call or on a cluster: the due job on
// another shard is still there, as is the queued one.
func TestClaimRefusedForPresenceSettlesNothing(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		counter := &countingObserver{n: map[string]int{}}
		h := newFixture(t, b, Options{ObserveScript: counter.observe})
		announced := fusedReady(t, h.s)
		h.seen("runner_1", "alice", freshDevice(), `[]`, `[]`)
		other := otherShardSite(h.s, site)
		late := stub("late", "bob")
		late.DeadlineAt = h.now() + 1000
		h.enqueueStub(other, late)
		h.enqueue("j1", "alice")
		h.s.Testing().AdvanceClock(2000)
		in := claimArgs(func(in *ClaimInput) { in.RequirePresence = true })
		announced(in)
		before := dump(t, b, h.s)
		counter.take()
		_, err := h.s.Claim(h.ctx, in)
		if !errors.Is(err, ErrPresenceChanged) {
			t.Fatalf("claim with another device: %v, want ErrPresenceChanged", err)
		}
		if calls := counter.take(); !oneClaimCall(h.s, calls) {
			t.Fatalf("the refused claim made %v, want one claim call", calls)
		}
		if after := dump(t, b, h.s); !maps.Equal(before, after) {
			for k, v := range after {
				if before[k] != v {
					t.Logf("%s: %q -> %q", k, before[k], v)
				}
			}
			for k := range before {
				if _, ok := after[k]; !ok {
					t.Logf("%s: gone", k)
				}
			}
			t.Fatal("a refused claim wrote")
		}
	})
}

// What a claim script finds empty when it ends, the work view trusts: a
// claim that took a queue's last job leaves the next claim on that queue
// nothing to ask Valkey. A queue that still holds an entry is never taken
// for empty: one left for later (Max reached) or one this runner may not
// take (it refused the job) goes to the next claimant.
func TestClaimTeachesTheViewWhatItEmptied(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	counter := &countingObserver{n: map[string]int{}}
	h := newFixture(t, b, Options{ObserveScript: counter.observe})
	if !h.s.announce {
		t.Skip("the server has no sharded pub/sub")
	}
	announced := fusedReady(t, h.s)
	one := claimArgs(maxJobs(1))
	other := claimArgs(maxJobs(1), runner("runner_2"))
	sh := placedShard(h.s, site)
	// The queue the jobs go to (alice's own, private) and whether the view
	// holds it as seen empty.
	queue := h.s.k.readyQueue(site, "alice", protocol.KindGenerate, protocol.AudiencePrivate)
	seenEmpty := func() bool { return h.s.view.Testing().SeenEmpty(sh, queue) }

	h.enqueue("j1", "alice")
	h.enqueue("j2", "alice")
	announced(one)
	equalStrings(t, "first claim", ids(h.claim(maxJobs(1))), []string{"j1"})
	if seenEmpty() {
		t.Fatal("a claim that left j2 queued (Max reached) told the view its queue was empty")
	}
	equalStrings(t, "second claim", ids(h.claim(maxJobs(1), runner("runner_2"))), []string{"j2"})
	if !seenEmpty() {
		t.Fatal("a claim that took the queue's last job did not tell the view it was empty")
	}
	counter.take()
	if got := h.claim(maxJobs(1), runner("runner_2")); len(got) != 0 { // the queues its last claim left empty
		t.Fatalf("third claim: %q", ids(got))
	}
	if calls := counter.take(); len(calls) != 0 {
		t.Fatalf("a claim on the queue the last claim emptied asked Valkey: %v", calls)
	}

	// runner_1 refuses j3 for a minute: its claim leaves j3 queued, and
	// runner_2's claim after it gets j3.
	h.seal("j1") // the pair's cap of two unsealed grants
	h.seal("j2")
	h.enqueue("j3", "alice")
	announced(one)
	got := h.claim(maxJobs(1))
	equalStrings(t, "claim of j3", ids(got), []string{"j3"})
	wait := int64(60_000)
	h.release("runner_1", []protocol.GrantRef{grant(got[0])}, ReasonRefused, &wait)
	announced(one)
	if got := h.claim(maxJobs(1)); len(got) != 0 {
		t.Fatalf("runner_1 claimed %q it refused", ids(got))
	}
	if seenEmpty() {
		t.Fatal("a claim that skipped j3 told the view its queue was empty")
	}
	equalStrings(t, "runner_2 after runner_1 skipped j3", ids(h.s.mustClaim(t, other)), []string{"j3"})
}

func (s *Store) mustClaim(t *testing.T, in ClaimInput) []ClaimedStub {
	t.Helper()
	out, err := s.Claim(context.Background(), in)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return out
}
