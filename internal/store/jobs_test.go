package store

import (
	"fmt"
	"slices"
	"testing"
)

// Jobs finds the jobs of each shard by its due index (no index of every
// job is written since 2026-12-01): every job, in every state, cancelled
// ones included, over several sites and shards, once each, in enqueue
// order, whatever the page limits; a job a relay of the earlier v3 also
// entered in "all" is listed once, and its "all" entry goes when the job
// does.
func TestJobsListsEveryJobOnceInEnqueueOrder(t *testing.T) {
	t.Parallel()
	limits := []struct {
		name string
		l    pageLimits
	}{
		{"default pages", defaultPageLimits},
		{"one job per call, one byte", pageLimits{snapshotEntries: 1, snapshotBytes: 1, leanEntries: 1, resultsEntries: 1, getJobs: 1, getBytes: 1, claimScan: 1}},
		{"three per call, byte-bounded", pageLimits{snapshotEntries: 3, snapshotBytes: 400, leanEntries: 2, resultsEntries: 2, getJobs: 3, getBytes: 150, claimScan: 2}},
	}
	for _, tc := range limits {
		t.Run(tc.name, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, b backend) {
				h := newFixture(t, b, Options{})
				h.s.limits = tc.l
				if jobs, err := h.s.Jobs(h.ctx); err != nil || len(jobs) != 0 {
					t.Fatalf("empty store: %v %v", jobIDs(jobs), err)
				}
				// Five sites (so several shards), jobs enqueued round robin.
				sites := []string{site, "s_b", "s_c", "s_d", "s_e"}
				var want []string
				for i := range 15 {
					siteID := sites[i%len(sites)]
					id := fmt.Sprint("j", i)
					h.enqueueStub(siteID, stub(id, "alice"))
					want = append(want, siteID+"/"+id)
				}
				shards := map[int]bool{}
				for _, s := range sites {
					shards[h.s.k.siteShard(s)] = true
				}
				if len(shards) < 2 && b.name != "cluster" {
					t.Fatalf("five sites on %d shard(s)", len(shards))
				}
				// One job of site_store in each state, one cancelled.
				g := h.claim(maxJobs(2)) // the unsealed cap: two per pair
				if len(g) != 2 {
					t.Fatalf("claimed %d", len(g))
				}
				h.seal(stubID(g[0]))
				h.seal(stubID(g[1]))
				h.take(stubID(g[1]), "runner_1", g[1].Lease.ID)
				if r := h.complete(stubID(g[1]), "runner_1", g[1].Lease.ID, "ok"); !r.Accepted {
					t.Fatalf("complete: %+v", r)
				}
				if g := h.claim(maxJobs(1)); len(g) != 1 {
					t.Fatalf("third claim: %d", len(g))
				}
				if ok, err := h.s.Cancel(h.ctx, "s_b", "j6"); err != nil || !ok {
					t.Fatalf("cancel: %v %v", ok, err)
				}
				jobs, err := h.s.Jobs(h.ctx)
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				states := map[string]int{}
				for _, j := range jobs {
					got = append(got, j.SiteID+"/"+j.ID)
					states[j.State]++
				}
				if !slices.Equal(got, want) {
					t.Fatalf("jobs %v\nwant %v", got, want)
				}
				if states[StateQueued] != 12 || states[StateAwaitingPayload] != 1 || states[StateReady] != 1 || states[StateDone] != 1 {
					t.Fatalf("states %v", states)
				}
				for _, j := range jobs {
					if j.Cancelled != (j.ID == "j6") {
						t.Fatalf("%s cancelled=%v", j.ID, j.Cancelled)
					}
					if one := h.job(j.SiteID, j.ID); one == nil || one.State != j.State || !slices.Equal(one.Stub, j.Stub) {
						t.Fatalf("Jobs' %s differs from Job's: %+v", j.ID, one)
					}
				}

				// Past every deadline, a sweep forgets them all.
				h.s.Testing().AdvanceClock(farDeadline)
				h.sweep()
				if jobs, err := h.s.Jobs(h.ctx); err != nil || len(jobs) != 0 {
					t.Fatalf("after the deadline: %v %v", jobIDs(jobs), err)
				}
			})
		})
	}
}
