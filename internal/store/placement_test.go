package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/byollm/relay-go/test/relaytest"
)

// twin opens a second Store (another replica, or the same one restarted) on
// s's namespace.
func twin(t *testing.T, b backend, s *Store) *Store {
	t.Helper()
	// migrating: a twin of a v2 namespace is what Migrate opens (a relay
	// refuses v2 at start), so the v2 placement rules stay testable.
	o, err := New(context.Background(), b.client, Options{Namespace: s.Namespace(), Logger: relaytest.Discard(), migrating: true})
	if err != nil {
		t.Fatalf("New on %s: %v", s.Namespace(), err)
	}
	return o
}

// A site is placed once: a second replica, and a restarted one, find every
// site where the first put it, and a job enqueued through one is read and
// claimed through the other.
func TestPlacementStableAcrossReplicasAndRestarts(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		sites := make([]string, 20)
		want := map[string]int{}
		for i := range sites {
			sites[i] = fmt.Sprint("stable_", i)
			h.enqueueStub(sites[i], stub(fmt.Sprint("j", i), "alice"))
			want[sites[i]] = h.s.k.siteShard(sites[i])
		}
		for round := range 2 {
			o := twin(t, b, h.s)
			for i, site := range sites {
				sh, placed, err := o.SiteShard(h.ctx, site)
				if err != nil || !placed || sh != want[site] {
					t.Fatalf("round %d: %s on shard %d placed=%v (%v), want %d", round, site, sh, placed, err, want[site])
				}
				if j, err := o.Job(h.ctx, site, fmt.Sprint("j", i)); err != nil || j == nil {
					t.Fatalf("round %d: job of %s through another replica: %v %v", round, site, j, err)
				}
			}
		}
		rep, err := h.s.Placement(h.ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Layout != LayoutVersion || len(rep.Sites) != len(sites) {
			t.Fatalf("report: layout %d, %d sites: %+v", rep.Layout, len(rep.Sites), rep)
		}
		total := 0
		for _, sh := range rep.Shards {
			total += sh.Sites
		}
		for site, sh := range rep.Sites {
			if want[site] != sh {
				t.Errorf("report puts %s on %d, store on %d", site, sh, want[site])
			}
		}
		if total != len(sites) {
			t.Errorf("shards count %d sites, want %d", total, len(sites))
		}
	})
}

// Replicas placing the same new sites at the same moment agree: each site
// gets one shard, recorded once.
func TestConcurrentPlacementOneShard(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		stores := []*Store{h.s, twin(t, b, h.s), twin(t, b, h.s), twin(t, b, h.s)}
		const n = 24
		got := make([][]int, len(stores))
		var wg sync.WaitGroup
		errs := make(chan error, len(stores))
		for r, s := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[r] = make([]int, n)
				// Each replica meets the sites in its own order, one
				// enqueue each, as sites would arrive through any replica.
				for k := range n {
					i := (k + 7*r) % n
					if r%2 == 1 {
						i = n - 1 - i
					}
					site := fmt.Sprint("race_", i)
					if _, err := s.Enqueue(h.ctx, EnqueueInput{ID: fmt.Sprint("r", r, "_", i), SiteID: site, Stub: stub(fmt.Sprint("r", r, "_", i), "alice")}); err != nil {
						errs <- err
						return
					}
					got[r][i] = s.k.siteShard(site)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for r := 1; r < len(stores); r++ {
			for i := range n {
				if got[r][i] != got[0][i] {
					t.Fatalf("site race_%d: replica 0 says shard %d, replica %d says %d", i, got[0][i], r, got[r][i])
				}
			}
		}
		rep, err := h.s.Placement(h.ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		total := 0
		for _, sh := range rep.Shards {
			total += sh.Sites
		}
		if len(rep.Sites) != n || total != n {
			t.Fatalf("record holds %d sites, counts %d; want %d each", len(rep.Sites), total, n)
		}
		// Every job of a site is on the one shard its placement names.
		for i := range n {
			site := fmt.Sprint("race_", i)
			for r := range stores {
				if j, err := stores[(r+1)%len(stores)].Job(h.ctx, site, fmt.Sprint("r", r, "_", i)); err != nil || j == nil {
					t.Fatalf("job r%d_%d not found through another replica: %v", r, i, err)
				}
			}
		}
	})
}

// New sites spread evenly: over the primaries of a cluster (12 sites on 3
// primaries: 4 each), and round robin over the shards of a single node.
func TestNewSitesBalance(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		for i := range 12 {
			if err := h.s.placeSites(h.ctx, fmt.Sprint("bal_", i)); err != nil {
				t.Fatal(err)
			}
		}
		rep, err := h.s.Placement(h.ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		if b.name == "cluster" {
			if len(rep.Primaries) != 3 {
				t.Fatalf("want 3 primaries, report has %v", rep.Primaries)
			}
			for p, n := range rep.Primaries {
				if n != 4 {
					t.Errorf("primary %s carries %d of 12 sites, want 4: %v", p, n, rep.Primaries)
				}
			}
		}
		// Within a primary (all shards on one node), a round robin: no
		// shard of a primary holds two more sites than another of it.
		per := map[string][]int{}
		for _, sh := range rep.Shards {
			per[sh.Primary] = append(per[sh.Primary], sh.Sites)
		}
		for p, counts := range per {
			lo, hi := counts[0], counts[0]
			for _, c := range counts {
				lo, hi = min(lo, c), max(hi, c)
			}
			if hi-lo > 1 {
				t.Errorf("primary %q: shard counts %v", p, counts)
			}
		}
	})
}

// Reads and writes to existing jobs never place a site: a read of a site
// nobody enqueued for answers empty and leaves the record as it was.
func TestReadsDoNotPlace(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		if j, err := h.s.Job(h.ctx, "never", "x"); err != nil || j != nil {
			t.Fatalf("job: %v %v", j, err)
		}
		if ok, err := h.s.Cancel(h.ctx, "never", "x"); err != nil || ok {
			t.Fatalf("cancel: %v %v", ok, err)
		}
		if _, err := h.s.SiteUse(h.ctx, []string{"never"}); err != nil {
			t.Fatal(err)
		}
		if _, placed, err := h.s.SiteShard(h.ctx, "never"); err != nil || placed {
			t.Fatalf("site shard: placed=%v %v", placed, err)
		}
		if rep, err := h.s.Placement(h.ctx, true); err != nil || len(rep.Sites) != 0 {
			t.Fatalf("record after reads: %+v %v", rep.Sites, err)
		}
	})
}

// asLayoutV2 turns a fresh namespace into one relays of layout v2 wrote:
// version 2 and no placement record.
func asLayoutV2(t *testing.T, b backend, s *Store) {
	t.Helper()
	ctx := context.Background()
	for _, cmd := range []string{"place", "placen"} {
		if err := b.client.Do(ctx, b.client.B().Del().Key(s.k.p+cmd).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.client.Do(ctx, b.client.B().Hset().Key(s.k.layout()).FieldValue().FieldValue("version", "2").Build()).Error(); err != nil {
		t.Fatal(err)
	}
}

// A relay meeting a layout newer than its own refuses to start, saying so.
func TestNewerLayoutRefused(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	h := newFixture(t, b, Options{})
	if err := b.client.Do(h.ctx, b.client.B().Hset().Key(h.s.k.layout()).FieldValue().FieldValue("version", fmt.Sprint(LayoutVersion+1)).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	_, err := New(h.ctx, b.client, Options{Namespace: h.s.Namespace(), Logger: relaytest.Discard()})
	if err == nil || !strings.Contains(err.Error(), "newer than this relay") || !errors.Is(err, ErrLayout) {
		t.Fatalf("New on a newer layout: %v", err)
	}
}

// After Valkey loses the namespace (a restart without persistence), a
// running Store writes the layout record again and keeps placing sites.
func TestPlacementAfterDataLoss(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		h.enqueueStub("before", stub("a", "alice"))
		if _, err := relaytest.DeleteKeys(h.ctx, b.client, h.s.KeyPattern()); err != nil {
			t.Fatal(err)
		}
		h.enqueueStub("after", stub("b", "alice"))
		if j := h.job("after", "b"); j == nil {
			t.Fatal("job after the loss not found")
		}
		if v, err := b.client.Do(h.ctx, b.client.B().Hget().Key(h.s.k.layout()).Field("version").Build()).AsInt64(); err != nil || v != LayoutVersion {
			t.Fatalf("layout record after the loss: %d %v", v, err)
		}
	})
}
