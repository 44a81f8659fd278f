package store

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/byollm/relay-go/internal/valkeyconn"
)

// Placement of sites on shards (see doc.go, "Placement").
//
// The fleet-wide placement record maps each site to its shard. lua/place.lua
// writes a site's entry once, atomically with the choice, and nothing ever
// changes or deletes it while the namespace lives; each Store caches what it
// has read (bounded, placeCache). So two replicas placing one site at once
// get one answer, a restart reads the same answer back, and no cache is
// ever stale. A replica asks Valkey only when it meets a site it does not
// hold (one script for all the sites of a call).

// MaxPlacedSites bounds the placement record. Sites reach the store only
// after the projection named them, so this is far above any real fleet.
const MaxPlacedSites = 1 << 20

// placeChunk is how many sites one place script call handles.
const placeChunk = 256

// topologyTTL is how long a replica trusts its copy of the cluster's slot
// map when placing. Only new placements read it; a stale one only makes a
// placement less even, never wrong.
const topologyTTL = 30 * time.Second

// placeCache is this Store's copy of placement record entries. An entry
// never goes stale (the record is written once per site), so the only
// question is memory: sites come and go over the life of a hub, and the
// cache keeps at most two generations of limit entries each. A lookup
// finds the current generation or the previous one (and moves the entry
// to the current); when the current one is full it becomes the previous,
// and what the old previous held is forgotten: sites not used during a
// whole generation. A miss reads the record again (placeSites, siteKeys;
// siteShard reads through, so an entry forgotten between a call's
// placement and its use is read back, never guessed).
type placeCache struct {
	mu        sync.RWMutex
	cur, prev map[string]int
	limit     int
	// read looks one site up in the record (siteShard's read-through).
	read func(site string) (int, bool)
}

// DefaultPlacementCacheSites is the default Options.PlacementCacheSites.
const DefaultPlacementCacheSites = 65536

func newPlaceCache(limit int) *placeCache {
	return &placeCache{cur: map[string]int{}, limit: max(limit, 1)}
}

func (p *placeCache) get(site string) (int, bool) {
	p.mu.RLock()
	sh, ok := p.cur[site]
	if ok {
		p.mu.RUnlock()
		return sh, true
	}
	sh, ok = p.prev[site]
	p.mu.RUnlock()
	if ok {
		p.put(site, sh)
	}
	return sh, ok
}

func (p *placeCache) put(site string, sh int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.cur[site]; !ok && len(p.cur) >= p.limit {
		p.prev, p.cur = p.cur, make(map[string]int, p.limit/4)
	}
	p.cur[site] = sh
}

// size is the entries held, both generations (tests).
func (p *placeCache) size() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return len(p.cur) + len(p.prev)
}

// topology is the primary that serves each shard's slot.
type topology struct {
	mu      sync.Mutex
	at      time.Time
	primary []string // by shard: the primary's address ("" on a single node)
}

// placeSites makes sure every named site has a shard in the cache, placing
// those that have none. Callers have checked the ids.
func (s *Store) placeSites(ctx context.Context, siteIDs ...string) error {
	var miss []string
	for _, id := range siteIDs {
		if _, ok := s.k.place.get(id); !ok && !slices.Contains(miss, id) {
			miss = append(miss, id)
		}
	}
	if len(miss) == 0 {
		return nil
	}
	return s.place(ctx, miss, nil)
}

// place runs lua/place.lua over sites (pins: shards some of them must take
// if they have none yet) and caches the answers.
func (s *Store) place(ctx context.Context, sites []string, pins map[string]int) error {
	primaries, err := s.shardPrimaries(ctx)
	if err != nil {
		// Placing without the slot map still balances over shards.
		s.log.Warn("store: cluster slot map unreadable; placing sites by shard only", "err", err)
		primaries = make([]string, len(s.k.shards))
	}
	groups := shardGroups(primaries)
	for len(sites) > 0 {
		n := min(len(sites), placeChunk)
		chunk := sites[:n]
		sites = sites[n:]
		args := []string{strconv.Itoa(len(s.k.shards)), groups, strconv.Itoa(MaxPlacedSites)}
		for _, id := range chunk {
			pin := ""
			if sh, ok := pins[id]; ok {
				pin = strconv.Itoa(sh)
			}
			args = append(args, id, pin)
		}
		msg, err := s.run(ctx, scPlace, []string{s.k.layout(), s.k.p + "place", s.k.p + "placen"}, args...)
		if err != nil && strings.Contains(err.Error(), "no layout record") {
			// Valkey lost its data since this Store started: write the
			// record again (the same salt and shards) and place anew.
			if err := s.loadLayout(ctx); err != nil {
				return fmt.Errorf("place sites: %w", err)
			}
			msg, err = s.run(ctx, scPlace, []string{s.k.layout(), s.k.p + "place", s.k.p + "placen"}, args...)
		}
		if err != nil {
			return fmt.Errorf("place sites: %w", err)
		}
		got, err := msg.AsIntSlice()
		if err != nil || len(got) != n {
			return fmt.Errorf("place sites: reply %v (%v)", got, err)
		}
		for i, id := range chunk {
			sh := int(got[i])
			if sh < 0 || sh >= len(s.k.shards) {
				return fmt.Errorf("place site %q: %w: the placement record holds %d sites already", id, ErrInvalidInput, MaxPlacedSites)
			}
			s.k.place.put(id, sh)
		}
	}
	return nil
}

// shardGroups numbers the distinct primaries (in sorted order, so every
// replica numbers them alike) and lists each shard's number, comma-separated.
func shardGroups(primaries []string) string {
	distinct := slices.Clone(primaries)
	sort.Strings(distinct)
	distinct = slices.Compact(distinct)
	out := make([]string, len(primaries))
	for i, p := range primaries {
		g, _ := slices.BinarySearch(distinct, p)
		out[i] = strconv.Itoa(g)
	}
	return strings.Join(out, ",")
}

// shardPrimaries is the address of the primary serving each shard's slot,
// from CLUSTER SLOTS (cached for topologyTTL); all "" when the server is
// not a cluster.
func (s *Store) shardPrimaries(ctx context.Context) ([]string, error) {
	t := &s.topo
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.primary != nil && time.Since(t.at) < topologyTTL {
		return t.primary, nil
	}
	out := make([]string, len(s.k.shards))
	if valkeyconn.IsCluster(s.c) {
		ranges, err := s.c.Do(ctx, s.c.B().ClusterSlots().Build()).ToArray()
		if err != nil {
			return nil, fmt.Errorf("cluster slots: %w", err)
		}
		for i, prefix := range s.k.shards {
			slot := int64(keySlot(hashTagOf(prefix)))
			for _, r := range ranges {
				e, err := r.ToArray()
				if err != nil || len(e) < 3 {
					continue
				}
				lo, err1 := e[0].AsInt64()
				hi, err2 := e[1].AsInt64()
				node, err3 := e[2].ToArray()
				if err1 != nil || err2 != nil || err3 != nil || len(node) < 2 || slot < lo || slot > hi {
					continue
				}
				host, _ := node[0].ToString()
				port, _ := node[1].AsInt64()
				out[i] = host + ":" + strconv.FormatInt(port, 10)
			}
		}
	}
	t.primary, t.at = out, time.Now()
	return out, nil
}

// hashTagOf is the tag of a "<ns>:{<tag>}:" prefix.
func hashTagOf(prefix string) string {
	open := strings.IndexByte(prefix, '{')
	end := strings.IndexByte(prefix, '}')
	return prefix[open+1 : end]
}

// ShardPlacement is one shard's line of the placement report.
type ShardPlacement struct {
	Shard   int    `json:"shard"`
	Slot    int    `json:"slot"`
	Primary string `json:"primary,omitempty"` // the primary serving the slot (cluster)
	Sites   int    `json:"sites"`
}

// PlacementReport is what an operator sees of the placement.
type PlacementReport struct {
	// Layout is the namespace's layout version (its record's).
	Layout int              `json:"layout"`
	Shards []ShardPlacement `json:"shards"`
	// Primaries counts the sites placed on each primary (cluster only).
	Primaries map[string]int `json:"primaries,omitempty"`
	// Sites maps each placed site to its shard, when asked for.
	Sites map[string]int `json:"sites,omitempty"`
}

// Placement reports how sites are placed: per shard and per primary, and
// with withSites every site's shard. It only reads.
func (s *Store) Placement(ctx context.Context, withSites bool) (PlacementReport, error) {
	rep := PlacementReport{}
	v, err := s.c.Do(ctx, s.c.B().Hget().Key(s.k.layout()).Field("version").Build()).AsInt64()
	if err != nil {
		return rep, fmt.Errorf("placement: layout: %w", err)
	}
	rep.Layout = int(v)
	counts, err := s.c.Do(ctx, s.c.B().Hgetall().Key(s.k.p+"placen").Build()).AsStrMap()
	if err != nil {
		return rep, fmt.Errorf("placement: counts: %w", err)
	}
	primaries, err := s.shardPrimaries(ctx)
	if err != nil {
		return rep, fmt.Errorf("placement: %w", err)
	}
	for i, prefix := range s.k.shards {
		n, _ := strconv.Atoi(counts[strconv.Itoa(i)])
		rep.Shards = append(rep.Shards, ShardPlacement{Shard: i, Slot: int(keySlot(hashTagOf(prefix))), Primary: primaries[i], Sites: n})
		if primaries[i] != "" {
			if rep.Primaries == nil {
				rep.Primaries = map[string]int{}
			}
			rep.Primaries[primaries[i]] += n
		}
	}
	if withSites {
		all, err := s.c.Do(ctx, s.c.B().Hgetall().Key(s.k.p+"place").Build()).AsStrMap()
		if err != nil {
			return rep, fmt.Errorf("placement: sites: %w", err)
		}
		rep.Sites = make(map[string]int, len(all))
		for site, v := range all {
			if sh, err := strconv.Atoi(v); err == nil {
				rep.Sites[site] = sh
			}
		}
	}
	return rep, nil
}

// SiteShard is the shard a site is placed on, and false when it has none
// yet (its first job places it). It only reads.
func (s *Store) SiteShard(ctx context.Context, siteID string) (int, bool, error) {
	if err := s.checkID("site id", siteID); err != nil {
		return 0, false, fmt.Errorf("site shard: %w", err)
	}
	k, err := s.siteKeys(ctx, siteID)
	if err != nil {
		return 0, false, fmt.Errorf("site shard: %w", err)
	}
	_, unplaced := k.unplaced[siteID]
	return k.siteShard(siteID), !unplaced, nil
}

// siteKeys is the key set for a call that names sites but must not place
// them (reads, and writes to jobs that must already exist): each site the
// cache lacks is looked up in the record (one HMGET for all of them, no
// script), and one the record does not name either is read on its hash
// shard for this call only: such a site has no keys anywhere, so any
// shard answers "nothing".
func (s *Store) siteKeys(ctx context.Context, siteIDs ...string) (keys, error) {
	var miss []string
	for _, id := range siteIDs {
		if _, ok := s.k.place.get(id); !ok && !slices.Contains(miss, id) {
			miss = append(miss, id)
		}
	}
	if len(miss) == 0 {
		return s.k, nil
	}
	got, err := s.do(ctx, "place_get", s.c.B().Hmget().Key(s.k.p+"place").Field(miss...).Build()).ToArray()
	if err != nil {
		return keys{}, fmt.Errorf("placement: %w", err)
	}
	k := s.k
	k.unplaced = map[string]int{}
	for i, id := range miss {
		if v, err := got[i].ToString(); err == nil {
			if sh, err := strconv.Atoi(v); err == nil && sh >= 0 && sh < len(s.k.shards) {
				s.k.place.put(id, sh)
				continue
			}
			return keys{}, fmt.Errorf("placement of site %q: %q is no shard of this namespace", id, v)
		}
		k.unplaced[id] = s.k.siteHashShard(id)
	}
	return k, nil
}
