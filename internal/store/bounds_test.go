package store

import (
	"context"
	"fmt"
	"testing"

	"github.com/byollm/relay-go/test/relaytest"
)

// The placement cache keeps at most two generations of
// PlacementCacheSites sites; a site it forgot is read back from the
// record (by a placing call, a reading call, and siteShard itself), and
// lands on the shard it was placed on, with its jobs.
func TestPlacementCacheBounded(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		const limit = 4
		h := newFixture(t, b, Options{PlacementCacheSites: limit})
		shards := map[string]int{}
		for i := range 25 {
			s := fmt.Sprint("site-", i)
			h.enqueueStub(s, stub("j", "alice"))
			shards[s] = placedShard(h.s, s)
			if n := h.s.placer.CacheSize(); n > 2*limit {
				t.Fatalf("after %d sites the cache holds %d, bound %d", i+1, n, 2*limit)
			}
		}
		for s, sh := range shards {
			if j, err := h.s.Job(h.ctx, s, "j"); err != nil || j == nil {
				t.Fatalf("job of %s after its entry was forgotten: %+v %v", s, j, err)
			}
			if _, err := h.s.Enqueue(h.ctx, EnqueueInput{ID: "k", SiteID: s, Stub: stub("k", "alice")}); err != nil {
				t.Fatal(err)
			}
			if got := placedShard(h.s, s); got != sh {
				t.Fatalf("%s read back on shard %d, placed on %d", s, got, sh)
			}
		}
		// siteShard itself reads through a miss (an entry forgotten between
		// a call's placement and its use): here a replica that holds none.
		other, err := New(context.Background(), b.client, Options{Namespace: h.s.Namespace(), Logger: relaytest.Discard(), PlacementCacheSites: limit})
		if err != nil {
			t.Fatal(err)
		}
		for s, sh := range shards {
			if got := other.k.siteShard(s); got != sh {
				t.Fatalf("siteShard(%s) read through as %d, placed on %d", s, got, sh)
			}
		}
		if n := other.placer.CacheSize(); n > 2*limit {
			t.Fatalf("after reading through the cache holds %d, bound %d", n, 2*limit)
		}
	})
}

// The results cache counts each site's entry against its byte bound,
// results or none, so sites that come and go cannot grow it.
func TestResultCacheCountsSites(t *testing.T) {
	t.Parallel()
	c := resultCache{limit: 64 << 10}
	for i := range 10_000 {
		c.put(fmt.Sprint("site-", i), "epoch", nil)
	}
	if n := len(c.sites); n > (64<<10)/256 {
		t.Fatalf("%d empty sites kept under a 64 KiB bound", n)
	}
	if c.bytes > c.limit {
		t.Fatalf("%d bytes counted, bound %d", c.bytes, c.limit)
	}
	// Replacing a site's entry does not double-count it.
	c = resultCache{limit: 64 << 10}
	one := &ResultJob{JobID: "a"}
	entries := []cachedResult{{l: listed{eJ: "a", seq: "1"}, r: one, cost: resultSize(one)}}
	for range 100 {
		c.put("one", "epoch", entries)
	}
	if want := 256 + len("one") + resultSize(one); c.bytes != want || len(c.sites) != 1 {
		t.Fatalf("one site put 100 times: %d bytes, %d sites; want %d, 1", c.bytes, len(c.sites), want)
	}
}
