package layout

import (
	"fmt"
	"testing"
	"time"
)

// A Placer configured without a cache bound keeps the default bound, not
// one site: the relay leaves CacheSites unset, and a cache of one site
// sent every claim over several sites back to Valkey for the others (and,
// with Valkey away, past its placement check).
func TestPlacerDefaultCacheBound(t *testing.T) {
	t.Parallel()
	p := NewPlacer(Config{Slots: make([]int, 4)})
	for i := range 100 {
		p.cache.put(fmt.Sprintf("site-%d", i), placed{shard: i % 4, at: time.Now(), refreshed: true})
	}
	for i := range 100 {
		if sh, ok := p.Cached(fmt.Sprintf("site-%d", i)); !ok || sh != i%4 {
			t.Fatalf("site-%d: cached %v (shard %d), want shard %d", i, ok, sh, i%4)
		}
	}
}
