package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/byollm/relay-go/test/relaytest"
)

// Valkey losing its data (a restart without persistence, FLUSHALL, a
// failover to a stale replica) restarts seq, so a job enqueued afterwards
// can carry the seq of a vanished one. A replica that cached the vanished
// job's result under that seq must not serve it for the new job: the cache
// is filed under the namespace's epoch, and the flush ends that epoch.
// The loss is simulated by deleting every key of the test's namespace (the
// server is shared, so never FLUSHALL), while two replicas read results
// without pause and a third reads only before and after.
func TestResultCacheDoesNotOutliveDataLoss(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		// busy polls results through the loss; quiet reads before and after
		// only, so its cache still holds what it read before.
		var busy, quiet *Store
		for _, p := range []**Store{&busy, &quiet} {
			var err error
			if *p, err = New(h.ctx, b.client, Options{Namespace: h.s.opts.Namespace, Logger: relaytest.Discard()}); err != nil {
				t.Fatal(err)
			}
		}
		finish := func(id string, result json.RawMessage) {
			t.Helper()
			h.enqueue(id, "alice")
			g := h.claim()
			if len(g) != 1 || stubID(g[0]) != id {
				t.Fatalf("claim %s: %q", id, ids(g))
			}
			h.seal(id)
			r, err := h.s.Complete(h.ctx, CompleteInput{JobID: id, RunnerID: "runner_1", LeaseID: g[0].Lease.ID, Envelope: result, Disposition: "ok"})
			if err != nil || !r.Accepted {
				t.Fatalf("complete %s: %+v %v", id, r, err)
			}
		}
		read := func(s *Store) []*ResultJob {
			res, err := s.ResultJobs(h.ctx, site)
			if err != nil {
				t.Error(err)
			}
			return res
		}

		old := json.RawMessage(`{"ciphertext":"vanished"}`)
		finish("x", old)
		for _, s := range []*Store{h.s, busy, quiet} {
			for range 2 { // the second read is served from the cache
				if res := read(s); len(res) != 1 || string(res[0].Result) != string(old) {
					t.Fatalf("before the loss: %+v", res)
				}
			}
		}

		// Readers keep polling through the loss and the new job's life.
		var stop atomic.Bool
		var wg sync.WaitGroup
		var newSeen atomic.Bool
		for _, s := range []*Store{h.s, busy} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					after := newSeen.Load() // before the read: the read then started after y finished
					res := read(s)
					if after && (len(res) != 1 || res[0].JobID != "y") {
						t.Errorf("after the new job finished, a read served %s", describe(res))
						return
					}
				}
			}()
		}
		defer func() { stop.Store(true); wg.Wait() }()
		if _, err := relaytest.DeleteKeys(h.ctx, b.client, h.s.KeyPattern()); err != nil {
			t.Fatal(err)
		}
		fresh := json.RawMessage(`{"ciphertext":"fresh"}`)
		finish("y", fresh)
		newSeen.Store(true)
		for range 20 {
			for _, s := range []*Store{quiet, h.s, busy} {
				res := read(s)
				if len(res) != 1 || res[0].JobID != "y" || string(res[0].Result) != string(fresh) {
					t.Fatalf("after the loss: %s", describe(res))
				}
			}
		}
		// Seqs now come from the server's clock (next_seq), so a loss on
		// its own no longer hands an old seq out again; a clock stepping
		// back after a failover still can, which is what the epoch guards
		// (the failover test below rolls the shard's seq back by hand).
	})
}

func describe(res []*ResultJob) string {
	out := ""
	for _, r := range res {
		out += fmt.Sprintf("[%s %s] ", r.JobID, r.Result)
	}
	return out
}

// A failover to a replica that missed the latest writes keeps the epoch
// key but hands out seqs again, possibly to the same job id (a site
// retrying an enqueue that timed out during the failover). The promoted
// server has a new replication id, which is part of the generation the
// cache is filed under. Simulated on a private redis-server (the shared one
// is never demoted): the job and its index entry removed and seq rolled
// back, as on the stale replica, then REPLICAOF towards a closed port and
// REPLICAOF NO ONE, which promotes the server under a new replication id
// with its data kept.
func TestResultCacheDoesNotOutliveFailover(t *testing.T) {
	t.Parallel()
	c := relaytest.Open(t, relaytest.StartServer(t).URL())
	ctx := context.Background()
	h := newFixture(t, backend{"private", c}, Options{})

	finish := func(result string) {
		t.Helper()
		h.enqueue("x", "alice")
		g := h.claim()
		if len(g) != 1 {
			t.Fatalf("claim: %q", ids(g))
		}
		h.seal("x")
		if r, err := h.s.Complete(ctx, CompleteInput{JobID: "x", RunnerID: "runner_1", LeaseID: g[0].Lease.ID, Envelope: json.RawMessage(result), Disposition: "ok"}); err != nil || !r.Accepted {
			t.Fatalf("complete: %+v %v", r, err)
		}
	}
	resultOf := func() string {
		t.Helper()
		res, err := h.s.ResultJobs(ctx, site)
		if err != nil || len(res) != 1 {
			t.Fatalf("results: %d %v", len(res), err)
		}
		return string(res[0].Result)
	}
	finish(`{"ciphertext":"lost"}`)
	resultOf()
	if got := resultOf(); got != `{"ciphertext":"lost"}` { // from the cache
		t.Fatal(got)
	}

	// The stale replica: no job x, seq back to 0, the same epoch.
	for _, k := range scanKeys(t, c, h.s.KeyPattern()) {
		if !strings.HasSuffix(k, "}:epoch") && k != h.s.k.layout() {
			if err := c.Do(ctx, c.B().Del().Key(k).Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	do := func(args ...string) {
		t.Helper()
		if err := c.Do(ctx, c.B().Arbitrary(args...).Build()).Error(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
	do("REPLICAOF", "127.0.0.1", "1") // port 1: nothing listens there
	do("REPLICAOF", "NO", "ONE")

	finish(`{"ciphertext":"after the failover"}`)
	if got := resultOf(); got != `{"ciphertext":"after the failover"}` {
		t.Fatalf("served %s after the failover", got)
	}
}

// Sites on different shards name different generations (each shard has its
// own epoch), and reading one site's results must not throw away what the
// cache holds for another: a second read of a site whose results did not
// change runs no results_get, whatever site was read in between. Fails on
// a cache keeping one generation for every site, which refetched every
// result on almost every read once a namespace had sites on two shards.
func TestResultCacheKeepsSitesOfOtherShards(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		counter := &countingObserver{n: map[string]int{}}
		h := newFixture(t, b, Options{ObserveScript: counter.observe})
		other := otherShardSite(h.s, site)
		for _, st := range []string{site, other} {
			j := h.enqueueStub(st, stub("j-"+st, "alice"))
			g := h.claim(routes([]string{st}, []string{"alice"}))
			if len(g) != 1 {
				t.Fatalf("claim on %s: %d grants", st, len(g))
			}
			if r, err := h.s.Seal(h.ctx, st, j.ID, envelope); err != nil || r.Refused != "" {
				t.Fatalf("seal %s: %+v %v", st, r, err)
			}
			r, err := h.s.Complete(h.ctx, CompleteInput{JobID: j.ID, RunnerID: "runner_1", LeaseID: g[0].Lease.ID, Envelope: []byte(`{"r":1}`), Disposition: "ok"})
			if err != nil || !r.Accepted {
				t.Fatalf("complete %s: %+v %v", st, r, err)
			}
		}
		for _, st := range []string{site, other} {
			if res, err := h.s.ResultJobs(h.ctx, st); err != nil || len(res) != 1 {
				t.Fatalf("results of %s: %d %v", st, len(res), err)
			}
		}
		counter.take()
		for _, st := range []string{site, other, site} {
			if res, err := h.s.ResultJobs(h.ctx, st); err != nil || len(res) != 1 {
				t.Fatalf("results of %s again: %d %v", st, len(res), err)
			}
		}
		if n := counter.take()["results_get"]; n != 0 {
			t.Fatalf("cached results fetched again: %d results_get calls", n)
		}
	})
}
