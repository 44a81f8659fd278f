package store

import (
	"context"
	"fmt"
	"sort"
	"testing"

	"github.com/byollm/relay-go/internal/protocol"
)

// A runner's held and cancelled sets are per shard: the device read visits
// every shard of the runner's record (here two, jobs of sites on different
// shards), sums the counts and bounds the jobs it lists over all of them.
func TestOpsDeviceLeasesSpanTheRunnersShards(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		ctx := context.Background()
		a, c := site, otherShardSite(h.s, site)
		h.enqueueStub(a, stub("a1", "alice"))
		h.enqueueStub(c, stub("c1", "alice"))
		got := h.claim(routes([]string{a, c}, []string{"alice"}), runner("runner_1"))
		if len(got) != 2 {
			t.Fatalf("claimed %d", len(got))
		}
		d, err := h.s.OpsDeviceLeases(ctx, "runner_1", 64)
		if err != nil {
			t.Fatal(err)
		}
		var active []string
		for _, j := range d.Active {
			active = append(active, j.SiteID+"/"+j.JobID+"/"+j.State)
		}
		sort.Strings(active)
		want := []string{a + "/a1/" + StateAwaitingPayload, c + "/c1/" + StateAwaitingPayload}
		sort.Strings(want)
		if d.Held != 2 || d.Cancelled != 0 || fmt.Sprint(active) != fmt.Sprint(want) {
			t.Errorf("device leases: held %d, cancelled %d, active %v; want 2, 0, %v", d.Held, d.Cancelled, active, want)
		}
		if _, err := h.s.Cancel(ctx, c, "c1"); err != nil {
			t.Fatal(err)
		}
		one, err := h.s.OpsDeviceLeases(ctx, "runner_1", 1)
		if err != nil || one.Held != 2 || one.Cancelled != 1 || len(one.Active) != 1 {
			t.Errorf("limit 1 after a cancel: %+v %v; want held 2, cancelled 1, one listed", one, err)
		}
		if none, err := h.s.OpsDeviceLeases(ctx, "runner_never", 64); err != nil || none.Held != 0 || len(none.Active) != 0 {
			t.Errorf("a runner with no record: %+v %v", none, err)
		}
	})
}

// Presence records live on their runners' shards; one read of runners on
// several shards finds each of them, and leaves out runners without one.
func TestOpsPresenceSpansShards(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		ctx := context.Background()
		var rs []string
		shards := map[int]bool{}
		for i := 0; len(rs) < 3; i++ {
			r := fmt.Sprint("runner_p", i)
			if sh := h.s.k.runnerShard(r); !shards[sh] {
				shards[sh] = true
				rs = append(rs, r)
				h.seen(r, fmt.Sprint("owner_", len(rs)), freshDevice(), `["llm.generate"]`, "[]")
			}
		}
		got, err := h.s.OpsPresence(ctx, append(rs, "runner_absent"))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 {
			t.Fatalf("read %d records, want 3: %v", len(got), got)
		}
		for i, r := range rs {
			if p := got[r]; p.Owner != fmt.Sprint("owner_", i+1) || p.LastSeenAt == 0 || string(p.Capabilities) != `["llm.generate"]` {
				t.Errorf("%s: %+v", r, p)
			}
		}
	})
}

// The device page counts a runner's grants from hid:⟨R⟩, done ones
// included.
func TestOpsDeviceLeasesFromTheBareIDIndex(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		ctx := context.Background()
		for i := range 3 {
			h.enqueue(fmt.Sprint("d", i), "alice")
		}
		g := h.claim(maxJobs(2))
		if len(g) != 2 {
			t.Fatalf("claimed %d", len(g))
		}
		h.seal(stubID(g[1]))
		h.take(stubID(g[1]), "runner_1", g[1].Lease.ID)
		if r := h.complete(stubID(g[1]), "runner_1", g[1].Lease.ID, "ok"); !r.Accepted {
			t.Fatalf("complete: %+v", r)
		}
		d, err := h.s.OpsDeviceLeases(ctx, "runner_1", 64)
		if err != nil || d.Held != 2 || len(d.Active) != 1 || d.Active[0].JobID != stubID(g[0]) ||
			d.Active[0].State != StateAwaitingPayload || d.Active[0].SiteID != site || d.Active[0].LeaseExpiresAt != g[0].Lease.ExpiresAt {
			t.Fatalf("device leases %+v %v; want 2 held, %s awaiting", d, err, stubID(g[0]))
		}
		if d, err := h.s.OpsDeviceLeases(ctx, "runner_1", 0); err != nil || d.Held != 2 || len(d.Active) != 0 {
			t.Fatalf("limit 0: %+v %v", d, err)
		}
		if r := h.release("runner_1", []protocol.GrantRef{grant(g[0])}, "", nil); len(r) != 1 || r[0] != stubID(g[0]) {
			t.Fatalf("release: %v", r)
		}
		if d, err := h.s.OpsDeviceLeases(ctx, "runner_1", 64); err != nil || d.Held != 1 || len(d.Active) != 0 {
			t.Fatalf("after the release: %+v %v; want the done job only", d, err)
		}
	})
}
