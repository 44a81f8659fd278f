package store

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/byollm/relay-go/test/relaytest"
)

// placeOpts shortens the placement's refresh age and retention for a test.
func placeOpts(refresh, retention time.Duration, places *atomic.Int64) Options {
	return Options{PlacementRefresh: refresh, DeviceRetention: retention,
		ObserveScript: func(ctx context.Context, name string) (context.Context, func(error)) {
			if name == "place" && places != nil {
				places.Add(1)
			}
			return ctx, func(error) {}
		}}
}

func placedCount(t *testing.T, h *storeFixture) (sites, counted int) {
	t.Helper()
	c := h.b.client
	n, err := c.Do(h.ctx, c.B().Hlen().Key(h.s.k.p+"place").Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	counts, err := c.Do(h.ctx, c.B().Hgetall().Key(h.s.k.p+"placen").Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range counts {
		x, _ := strconv.Atoi(v)
		counted += x
	}
	return int(n), counted
}

// A site no replica has read for longer than the retention, and that holds
// nothing, is forgotten and leaves placen; a site in use (read again every
// refresh age) and one holding a job are kept. The reaper takes at most
// ReapBatch entries a call, and a replica writes a site's last read at
// most once per refresh age however often it uses the site.
func TestUnusedSitesAreForgotten(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		t.Parallel()
		const refresh, retention = 150 * time.Millisecond, 600 * time.Millisecond
		var places atomic.Int64
		h := newFixture(t, b, placeOpts(refresh, retention, &places))
		const idle = 200
		idleSites := make([]string, idle)
		for i := range idleSites {
			idleSites[i] = fmt.Sprint("idle_", i)
		}
		if err := h.s.placeSites(h.ctx, idleSites...); err != nil {
			t.Fatal(err)
		}
		h.enqueue("busy-job", "alice") // places `site` and keeps state there
		if err := h.s.placeSites(h.ctx, "used"); err != nil {
			t.Fatal(err)
		}
		if n, c := placedCount(t, h); n != idle+2 || c != idle+2 {
			t.Fatalf("placed %d sites, placen counts %d; want %d", n, c, idle+2)
		}

		// Use "used" every 10 ms for well past the retention.
		places.Store(0)
		start := time.Now()
		uses := 0
		for time.Since(start) < retention+2*refresh {
			if err := h.s.placeSites(h.ctx, "used"); err != nil {
				t.Fatal(err)
			}
			uses++
			time.Sleep(10 * time.Millisecond)
		}
		elapsed := time.Since(start)
		if got, most := places.Load(), int64(elapsed/refresh)+1; got > most || got < 2 {
			t.Fatalf("%d uses over %v ran place.lua %d times; want 2..%d (once per refresh age %v)", uses, elapsed, got, most, refresh)
		}

		forgotten, calls := 0, 0
		for {
			n, more, err := h.s.ReapSites(h.ctx, 1000)
			if err != nil {
				t.Fatal(err)
			}
			if n > 128 {
				t.Fatalf("one reap call forgot %d sites (at most 128)", n)
			}
			forgotten += n
			calls++
			if !more {
				break
			}
		}
		if forgotten != idle || calls < 2 {
			t.Fatalf("forgot %d sites in %d calls, want %d in at least 2", forgotten, calls, idle)
		}
		if n, c := placedCount(t, h); n != 2 || c != 2 {
			t.Fatalf("after the reap: %d sites placed, placen counts %d; want the used and the busy site", n, c)
		}
		for _, s := range []string{"used", site} {
			if _, ok, err := h.s.SiteShard(h.ctx, s); err != nil || !ok {
				t.Fatalf("site %s: placed %v (%v)", s, ok, err)
			}
		}
		if _, ok, err := twin(t, b, h.s).SiteShard(h.ctx, "idle_0"); err != nil || ok {
			t.Fatalf("idle_0 is still placed (%v)", err)
		}
	})
}

// After a site is forgotten and placed anew on another shard, a replica
// that cached the old entry follows the record once its entry is older
// than the refresh age, for reads and for placing calls alike: no split.
func TestReplicaFollowsARePlacement(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		t.Parallel()
		const refresh, retention = 100 * time.Millisecond, 300 * time.Millisecond
		h := newFixture(t, b, placeOpts(refresh, retention, nil))
		if h.s.Shards() < 2 {
			t.Skip("one shard")
		}
		other, err := New(h.ctx, b.client, Options{Namespace: h.s.Namespace(), Logger: relaytest.Discard(), PlacementRefresh: refresh, DeviceRetention: retention})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.s.place(h.ctx, []string{"moving"}, map[string]int{"moving": 0}); err != nil {
			t.Fatal(err)
		}
		if sh, ok, _ := other.SiteShard(h.ctx, "moving"); !ok || sh != 0 {
			t.Fatalf("the other replica reads shard %d (%v), want 0", sh, ok)
		}
		time.Sleep(retention + 50*time.Millisecond)
		if n, _, err := h.s.ReapSites(h.ctx, 10); err != nil || n != 1 {
			t.Fatalf("reap: %d %v", n, err)
		}
		if err := h.s.place(h.ctx, []string{"moving"}, map[string]int{"moving": 1}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(refresh)
		if sh, ok, err := other.SiteShard(h.ctx, "moving"); err != nil || !ok || sh != 1 {
			t.Fatalf("the other replica reads shard %d (%v, %v), want the record's 1", sh, ok, err)
		}
		time.Sleep(refresh)
		if err := other.placeSites(h.ctx, "moving"); err != nil {
			t.Fatal(err)
		}
		if got := other.k.siteShard("moving"); got != 1 {
			t.Fatalf("a placing call on the other replica uses shard %d, want 1", got)
		}
	})
}

// Sites placed before the index existed are indexed by the backfill, so
// one never read again still ends.
func TestPlacementBackfill(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		t.Parallel()
		const refresh, retention = 50 * time.Millisecond, 200 * time.Millisecond
		h := newFixture(t, b, placeOpts(refresh, retention, nil))
		if err := h.s.placeSites(h.ctx, "old_a", "old_b"); err != nil {
			t.Fatal(err)
		}
		c := b.client
		if err := c.Do(h.ctx, c.B().Del().Key(h.s.k.p+"placet").Build()).Error(); err != nil {
			t.Fatal(err) // as an older relay left it
		}
		if n, _, err := h.s.ReapSites(h.ctx, 10); err != nil || n != 0 {
			t.Fatalf("first reap: %d %v (backfilled entries are read now)", n, err)
		}
		time.Sleep(retention + 50*time.Millisecond)
		if n, _, err := h.s.ReapSites(h.ctx, 10); err != nil || n != 2 {
			t.Fatalf("reap after the retention: %d %v, want 2", n, err)
		}
	})
}
