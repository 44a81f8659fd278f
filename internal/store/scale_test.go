package store

import (
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/protocol"
)

// foreignStubs builds n queued jobs spread over many pairs the claimant has
// no route to.
func foreignStubs(n, owners int) []protocol.JobStub {
	out := make([]protocol.JobStub, 0, n)
	for i := range n {
		st := stub(fmt.Sprintf("f%d", i), fmt.Sprintf("foreign_%d", i%owners))
		if i%2 == 0 {
			st.Audience = protocol.AudienceTeam
		}
		out = append(out, st)
	}
	return out
}

// A claim's work does not depend on jobs queued on other routes: with four
// times its scan budget of foreign jobs queued (and a tenth as many again on
// its own site, for other owners) it examines exactly the entries it
// examines with none. Behavioural, not timed: the claim script counts the
// queue entries it looked at. The budget is lowered so the foreign jobs
// outnumber it on every backend without queueing 100k of them (which took
// the unit tier 130 s).
func TestClaimCostIgnoresForeignJobs(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		const budget = 500
		foreign := 4 * budget
		setup := func(withForeign bool) (*storeFixture, claimStats, []string, time.Duration) {
			h := newFixture(t, b, Options{ClaimScanBudget: budget})
			if withForeign {
				start := time.Now()
				enqueueMany(t, h.s, b.client, "site_theirs", foreignStubs(foreign, 1000))
				enqueueMany(t, h.s, b.client, site, foreignStubs(foreign/10, 100)) // same site, other owners
				t.Logf("%s: queued %d foreign jobs in %v", b.name, foreign+foreign/10, time.Since(start).Round(time.Millisecond))
			}
			h.enqueue("m1", "alice")
			h.enqueue("m2", "alice")
			h.enqueue("m3", "alice")
			start := time.Now()
			got, stats, err := h.s.claim(h.ctx, claimArgs(routes([]string{site, "site_empty"}, []string{"alice", "bob"})))
			if err != nil {
				t.Fatal(err)
			}
			return h, stats, ids(got), time.Since(start)
		}
		_, base, baseIDs, baseTook := setup(false)
		_, loaded, loadedIDs, loadedTook := setup(true)
		equalStrings(t, "grants", loadedIDs, baseIDs)
		equalStrings(t, "grants", baseIDs, []string{"m1", "m2"})
		if base.Scanned != 2 || loaded.Scanned != base.Scanned || loaded.Attempts != 1 {
			t.Fatalf("scanned %d with foreign jobs, %d without (attempts %d)", loaded.Scanned, base.Scanned, loaded.Attempts)
		}
		t.Logf("%s: claim took %v empty, %v with foreign jobs (scanned %d both)", b.name, baseTook, loadedTook, base.Scanned)
	})
}

// Skipped entries (refusedBy, retryAfter) are the only ones that cost scans
// without granting; the scan budget bounds them.
func TestClaimScanBudget(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{ClaimScanBudget: 5})
		for i := range 8 {
			h.enqueue(fmt.Sprint("r", i), "alice")
		}
		for range 4 { // runner_1 refuses r0..r7, two at a time
			var grants []protocol.GrantRef
			for _, g := range h.claim() {
				grants = append(grants, grant(g))
			}
			h.release("runner_1", grants, ReasonRefused, nil)
		}
		h.enqueue("fresh", "alice")
		got, stats, err := h.s.claim(h.ctx, claimArgs())
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 0 || !stats.Truncated || stats.Scanned != 5 {
			t.Fatalf("got %q stats %+v", ids(got), stats)
		}
		h2 := newFixture(t, b, Options{})
		for i := range 8 {
			h2.enqueue(fmt.Sprint("r", i), "alice")
		}
		for range 4 {
			var grants []protocol.GrantRef
			for _, g := range h2.claim() {
				grants = append(grants, grant(g))
			}
			h2.release("runner_1", grants, ReasonRefused, nil)
		}
		h2.enqueue("fresh", "alice")
		got, stats, err = h2.s.claim(h2.ctx, claimArgs())
		if err != nil {
			t.Fatal(err)
		}
		if !equalIDs(ids(got), []string{"fresh"}) || stats.Truncated || stats.Scanned != 9 {
			t.Fatalf("got %q stats %+v", ids(got), stats)
		}
	})
}

func equalIDs(a, b []string) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

// Claim's settle-first is bounded: with more due than ClaimSettleBudget the
// claim script writes nothing, Go sweeps in batches, and the claim reruns.
func TestClaimSettlesABacklogThroughSweep(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{ClaimSettleBudget: 10, SweepBatch: 7})
		var stubs []protocol.JobStub
		for i := range 45 {
			st := stub(fmt.Sprint("old", i), fmt.Sprint("o", i))
			st.DeadlineAt = h.now() + 1000
			stubs = append(stubs, st)
		}
		enqueueMany(t, h.s, b.client, site, stubs)
		h.enqueue("live", "alice")
		h.s.Testing().AdvanceClock(2000)
		got, stats, err := h.s.claim(h.ctx, claimArgs())
		if err != nil {
			t.Fatal(err)
		}
		equalStrings(t, "grants", ids(got), []string{"live"})
		if stats.Attempts != 2 {
			t.Fatalf("attempts %d", stats.Attempts)
		}
		jobs, _ := h.s.Jobs(h.ctx)
		if len(jobs) != 1 {
			t.Fatalf("%d jobs left", len(jobs))
		}
	})
}

// An idle sweep over a large store is one short script that finds nothing.
func TestIdleSweepOverLargeStore(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	h := newFixture(t, b, Options{})
	enqueueMany(t, h.s, b.client, site, foreignStubs(20_000, 500))
	jobs, more, err := h.s.SweepBatch(h.ctx, 100)
	if err != nil || more || len(jobs) != 0 {
		t.Fatalf("idle sweep: %d jobs, more %v, %v", len(jobs), more, err)
	}
}

// A claim examines at most claimScan entries per script and continues in the
// next call where the last one stopped: whatever the slice, it grants what
// one call examining everything would, in the same order, under the same
// caps, and counts every examined entry once against ClaimScanBudget.
func TestClaimContinuesAcrossCalls(t *testing.T) {
	t.Parallel()
	type outcome struct {
		grants  []string
		scanned int
		calls   int
	}
	run := func(t *testing.T, b backend, slice int) outcome {
		h := newFixture(t, b, Options{})
		h.s.limits.claimScan = slice
		for i := range 8 {
			h.enqueue(fmt.Sprint("r", i), "alice")
		}
		for range 4 { // runner_1 refuses r0..r7, two at a time
			var grants []protocol.GrantRef
			for _, g := range h.claim() {
				grants = append(grants, grant(g))
			}
			h.release("runner_1", grants, ReasonRefused, nil)
		}
		// Three fresh jobs for alice (cap 2), two team jobs of bob's at
		// another site on the same shard (one script sees both), interleaved
		// in seq.
		siteB := sameShardSite(h.s, site)
		h.enqueue("a1", "alice")
		bob := stub("b1", "bob")
		bob.Audience = protocol.AudienceTeam
		h.enqueueStub(siteB, bob)
		h.enqueue("a2", "alice")
		bob.ID = "b2"
		h.enqueueStub(siteB, bob)
		h.enqueue("a3", "alice")
		got, stats, err := h.s.claim(h.ctx, claimArgs(maxJobs(3), func(in *ClaimInput) {
			in.Routes = []Route{{SiteID: site, Owner: "alice"}, {SiteID: siteB, Owner: "bob"}}
		}))
		if err != nil {
			t.Fatal(err)
		}
		if stats.Truncated {
			t.Fatalf("slice %d: truncated", slice)
		}
		return outcome{ids(got), stats.Scanned, stats.Attempts}
	}
	eachBackend(t, func(t *testing.T, b backend) {
		whole := run(t, b, 1000)
		equalStrings(t, "grants", whole.grants, []string{"a1", "b1", "a2"})
		if whole.calls != 1 || whole.scanned != 11 {
			t.Fatalf("one call: %+v", whole)
		}
		for _, slice := range []int{1, 2, 3, 5} {
			got := run(t, b, slice)
			equalStrings(t, fmt.Sprint("grants, slice ", slice), got.grants, whole.grants)
			if got.scanned != whole.scanned || got.calls != (whole.scanned+slice-1)/slice {
				t.Fatalf("slice %d: scanned %d in %d calls", slice, got.scanned, got.calls)
			}
		}
	})
}

// RequirePresence: the claim happens only while the runner's presence
// record holds exactly the claim's owner and device; otherwise nothing is
// written at all.
func TestClaimRequirePresence(t *testing.T) {
	t.Parallel()
	dev, other := freshDevice(), freshDevice()
	cases := []struct {
		name   string
		record func(h *storeFixture)
		want   bool
	}{
		{"no record", func(*storeFixture) {}, false},
		{"same owner and device", func(h *storeFixture) { h.seen("runner_1", "alice", dev, "[]", "[]") }, true},
		{"other device", func(h *storeFixture) { h.seen("runner_1", "alice", other, "[]", "[]") }, false},
		{"other owner", func(h *storeFixture) { h.seen("runner_1", "bob", dev, "[]", "[]") }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, b backend) {
				h := newFixture(t, b, Options{})
				h.enqueue("j1", "alice")
				tc.record(h)
				before := dump(t, b, h.s)
				got, err := h.s.Claim(h.ctx, claimArgs(func(in *ClaimInput) { in.Device, in.RequirePresence = dev, true }))
				if !tc.want {
					if !errors.Is(err, ErrPresenceChanged) || len(got) != 0 {
						t.Fatalf("got %q %v, want ErrPresenceChanged", ids(got), err)
					}
					if after := dump(t, b, h.s); !maps.Equal(before, after) {
						t.Fatal("a refused claim wrote")
					}
					return
				}
				if err != nil || !equalIDs(ids(got), []string{"j1"}) {
					t.Fatalf("got %q %v", ids(got), err)
				}
			})
		})
	}
}
