package layout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/byollm/relay-go/internal/scriptrun"
	"github.com/byollm/relay-go/internal/valkeyconn"
)

// Placement of sites on shards (see internal/store/doc.go, "Placement").
//
// The fleet-wide placement record maps each site to its shard. lua/place.lua
// writes a site's entry once, atomically with the choice, and nothing
// changes it while the site is in use; each Placer caches what it has read
// (bounded, placeCache). So two replicas placing one site at once get one
// answer, a restart reads the same answer back, and no cache is ever
// stale. A replica asks Valkey only when it meets a site it does not hold
// (one script for all the sites of a call).

// MaxPlacedSites bounds the placement record. Sites reach the store only
// after the projection named them, so this is far above any real fleet.
const MaxPlacedSites = 1 << 20

// placeChunk is how many sites one place script call handles.
const placeChunk = 256

// topologyTTL is how long a replica trusts its copy of the cluster's slot
// map when placing. Only new placements read it; a stale one only makes a
// placement less even, never wrong.
const topologyTTL = 30 * time.Second

// DefaultRefreshAge is how long a replica trusts a cached placement
// before it reads the record again (Config.RefreshAge).
const DefaultRefreshAge = 10 * time.Minute

// placeCache is this Placer's copy of placement record entries. Each entry
// is trusted for the refresh age from the read that made it (see Placer),
// and memory is bounded apart from that: sites come and go over the life
// of a hub, and the cache keeps at most two generations of limit entries
// each. A lookup finds the current generation or the previous one (and
// moves the entry to the current); when the current one is full it
// becomes the previous, and what the old previous held is forgotten:
// sites not used during a whole generation. A miss reads the record again
// (Ensure, Lookup; Read reads through, so an entry forgotten between a
// call's placement and its use is read back, never guessed).
type placeCache struct {
	mu        sync.RWMutex
	cur, prev map[string]placed
	limit     int
}

// placed is one cached entry: the site's shard, when the read that
// found it started, and whether that read was place.lua's (which also
// refreshed the site's last-read time in the record's index).
type placed struct {
	shard     int
	at        time.Time
	refreshed bool
}

// DefaultPlacementCacheSites is the default Options.PlacementCacheSites.
const DefaultPlacementCacheSites = 65536

func newPlaceCache(limit int) *placeCache {
	return &placeCache{cur: map[string]placed{}, limit: max(limit, 1)}
}

func (p *placeCache) get(site string) (placed, bool) {
	p.mu.RLock()
	e, ok := p.cur[site]
	if ok {
		p.mu.RUnlock()
		return e, true
	}
	e, ok = p.prev[site]
	p.mu.RUnlock()
	if ok {
		p.put(site, e)
	}
	return e, ok
}

func (p *placeCache) put(site string, e placed) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.cur[site]; !ok && len(p.cur) >= p.limit {
		p.prev, p.cur = p.cur, make(map[string]placed, p.limit/4)
	}
	p.cur[site] = e
}

// size is the entries held, both generations (tests).
func (p *placeCache) size() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return len(p.cur) + len(p.prev)
}

// Keys are the fleet-wide keys placement uses (the store's key
// vocabulary names them).
type Keys struct {
	Layout string // the layout record
	Place  string // site id -> shard
	PlaceN string // shard -> sites placed there
	PlaceT string // ZSET site id -> its last read through place.lua (ms)
	// PlaceTFill is place_backfill.lua's cursor over Place.
	PlaceTFill string
}

// Config is what a Placer is built from.
type Config struct {
	Keys Keys
	// Slots is each shard's cluster slot, by shard index.
	Slots []int
	// CacheSites bounds the cache: two generations of this many sites.
	CacheSites int
	// RefreshAge is how long a cached entry is trusted (default
	// DefaultRefreshAge); Retention, when positive, is how long after
	// its last read through place.lua a site unused is forgotten (Reap).
	// Retention must exceed RefreshAge (see Reap).
	RefreshAge time.Duration
	Retention  time.Duration
	// Busy says which of the sites (site -> shard) still hold state on
	// their shard (jobs, results, stored bytes): Reap keeps those.
	Busy func(ctx context.Context, sites map[string]int) (map[string]bool, error)
	// Scripts runs place.lua; Runner sends the plain reads (observed and
	// bounded like every call).
	Scripts Scripts
	Runner  *scriptrun.Runner
	// Reload writes the layout record again after Valkey lost its data
	// (a NOLAYOUT reply from place.lua), the same salt and shards.
	Reload func(ctx context.Context) error
	Log    *slog.Logger
}

// A Placer places sites on shards and remembers where they are.
type Placer struct {
	cfg   Config
	cache *placeCache
	topo  topology
	// filled: the backfill of placet is done (place_backfill.lua).
	filled atomic.Bool
}

// NewPlacer is a Placer for one namespace's layout.
func NewPlacer(cfg Config) *Placer {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.RefreshAge <= 0 {
		cfg.RefreshAge = DefaultRefreshAge
	}
	if cfg.CacheSites <= 0 {
		cfg.CacheSites = DefaultPlacementCacheSites
	}
	return &Placer{cfg: cfg, cache: newPlaceCache(cfg.CacheSites)}
}

func (p *Placer) shards() int { return len(p.cfg.Slots) }

// Cached is a site's shard if this Placer holds an entry younger than the
// refresh age, without asking Valkey.
func (p *Placer) Cached(site string) (int, bool) {
	e, ok := p.cache.get(site)
	if !ok || time.Since(e.at) >= p.cfg.RefreshAge {
		return 0, false
	}
	return e.shard, true
}

// fresh says whether a call that may place can use the cached entry: one
// place.lua read within the refresh age, which refreshed the site's
// last-read time in the record, so the record keeps it (Reap).
func (p *Placer) fresh(site string) bool {
	e, ok := p.cache.get(site)
	return ok && e.refreshed && time.Since(e.at) < p.cfg.RefreshAge
}

// CacheSize is the entries the cache holds, both generations.
func (p *Placer) CacheSize() int { return p.cache.size() }

// Read looks one placed site up in the record and caches it: the
// read-through of a site placed by this call and forgotten by the bounded
// cache before its use. It has no caller context, so its own deadline.
func (p *Placer) Read(site string) (int, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	at := time.Now()
	v, err := p.cfg.Runner.Do(ctx, "place_get", p.cfg.Runner.Client().B().Hget().Key(p.cfg.Keys.Place).Field(site).Build()).ToString()
	if err != nil {
		return 0, false
	}
	sh, err := strconv.Atoi(v)
	if err != nil || sh < 0 || sh >= p.shards() {
		return 0, false
	}
	p.cache.put(site, placed{shard: sh, at: at})
	return sh, true
}

// Ensure makes sure every named site has a fresh shard in the cache,
// placing those that have none: a site the cache lacks, or holds from a
// read older than the refresh age or not made by place.lua, goes through
// place.lua, which refreshes its last-read time. Callers have checked the
// ids.
func (p *Placer) Ensure(ctx context.Context, sites ...string) error {
	var miss []string
	for _, id := range sites {
		if !p.fresh(id) && !slices.Contains(miss, id) {
			miss = append(miss, id)
		}
	}
	if len(miss) == 0 {
		return nil
	}
	return p.Place(ctx, miss, nil)
}

// Place runs lua/place.lua over sites (pins: shards some of them must take
// if they have none yet) and caches the answers. A site that did not fit
// under MaxPlacedSites is ErrFull.
func (p *Placer) Place(ctx context.Context, sites []string, pins map[string]int) error {
	primaries, err := p.Primaries(ctx)
	if err != nil {
		// Placing without the slot map still balances over shards.
		p.cfg.Log.Warn("store: cluster slot map unreadable; placing sites by shard only", "err", err)
		primaries = make([]string, p.shards())
	}
	groups := shardGroups(primaries)
	keys := []string{p.cfg.Keys.Layout, p.cfg.Keys.Place, p.cfg.Keys.PlaceN, p.cfg.Keys.PlaceT}
	for len(sites) > 0 {
		n := min(len(sites), placeChunk)
		chunk := sites[:n]
		sites = sites[n:]
		args := []string{strconv.Itoa(p.shards()), groups, strconv.Itoa(MaxPlacedSites)}
		for _, id := range chunk {
			pin := ""
			if sh, ok := pins[id]; ok {
				pin = strconv.Itoa(sh)
			}
			args = append(args, id, pin)
		}
		at := time.Now()
		msg, err := p.cfg.Scripts.RunScript(ctx, "place", keys, args...)
		if scriptrun.ReplyPrefix(err) == scriptrun.CodeNoLayout && p.cfg.Reload != nil {
			// Valkey lost its data since this Placer started: write the
			// record again (the same salt and shards) and place anew.
			if err := p.cfg.Reload(ctx); err != nil {
				return fmt.Errorf("place sites: %w", err)
			}
			msg, err = p.cfg.Scripts.RunScript(ctx, "place", keys, args...)
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
			if sh < 0 || sh >= p.shards() {
				return fmt.Errorf("place site %q: %w: the placement record holds %d sites already", id, ErrFull, MaxPlacedSites)
			}
			p.cache.put(id, placed{shard: sh, at: at, refreshed: true})
		}
	}
	return nil
}

// ErrFull is Place's answer for a site that did not fit in the record.
var ErrFull = errors.New("placement record full")

// Lookup finds the shards of sites the cache lacks in the record (one
// HMGET, no script) and caches them; it answers the sites the record does
// not name. It never places.
func (p *Placer) Lookup(ctx context.Context, sites ...string) (unplaced []string, err error) {
	var miss []string
	for _, id := range sites {
		if _, ok := p.Cached(id); !ok && !slices.Contains(miss, id) {
			miss = append(miss, id)
		}
	}
	if len(miss) == 0 {
		return nil, nil
	}
	at := time.Now()
	got, err := p.cfg.Runner.Do(ctx, "place_get", p.cfg.Runner.Client().B().Hmget().Key(p.cfg.Keys.Place).Field(miss...).Build()).ToArray()
	if err != nil {
		return nil, fmt.Errorf("placement: %w", err)
	}
	for i, id := range miss {
		if v, err := got[i].ToString(); err == nil {
			if sh, err := strconv.Atoi(v); err == nil && sh >= 0 && sh < p.shards() {
				p.cache.put(id, placed{shard: sh, at: at})
				continue
			}
			return nil, fmt.Errorf("placement of site %q: %q is no shard of this namespace", id, v)
		}
		unplaced = append(unplaced, id)
	}
	return unplaced, nil
}

// topology is the primary that serves each shard's slot.
type topology struct {
	mu      sync.Mutex
	at      time.Time
	primary []string // by shard: the primary's address ("" on a single node)
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

// Primaries is the address of the primary serving each shard's slot,
// from CLUSTER SLOTS (cached for topologyTTL); all "" when the server is
// not a cluster.
func (p *Placer) Primaries(ctx context.Context) ([]string, error) {
	t := &p.topo
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.primary != nil && time.Since(t.at) < topologyTTL {
		return t.primary, nil
	}
	out := make([]string, p.shards())
	r := p.cfg.Runner
	if valkeyconn.IsCluster(r.Client()) {
		ranges, err := r.Do(ctx, "cluster_slots", r.Client().B().ClusterSlots().Build()).ToArray()
		if err != nil {
			return nil, fmt.Errorf("cluster slots: %w", err)
		}
		for i, slot := range p.cfg.Slots {
			for _, rg := range ranges {
				e, err := rg.ToArray()
				if err != nil || len(e) < 3 {
					continue
				}
				lo, err1 := e[0].AsInt64()
				hi, err2 := e[1].AsInt64()
				node, err3 := e[2].ToArray()
				if err1 != nil || err2 != nil || err3 != nil || len(node) < 2 || int64(slot) < lo || int64(slot) > hi {
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

// Report reports how sites are placed: per shard and per primary, and
// with withSites every site's shard. It only reads.
func (p *Placer) Report(ctx context.Context, withSites bool) (PlacementReport, error) {
	rep := PlacementReport{}
	r := p.cfg.Runner
	b := r.Client().B()
	v, err := r.Do(ctx, "placement_layout", b.Hget().Key(p.cfg.Keys.Layout).Field("version").Build()).AsInt64()
	if err != nil {
		return rep, fmt.Errorf("placement: layout: %w", err)
	}
	rep.Layout = int(v)
	counts, err := r.Do(ctx, "placement_counts", b.Hgetall().Key(p.cfg.Keys.PlaceN).Build()).AsStrMap()
	if err != nil {
		return rep, fmt.Errorf("placement: counts: %w", err)
	}
	primaries, err := p.Primaries(ctx)
	if err != nil {
		return rep, fmt.Errorf("placement: %w", err)
	}
	for i, slot := range p.cfg.Slots {
		n, _ := strconv.Atoi(counts[strconv.Itoa(i)])
		rep.Shards = append(rep.Shards, ShardPlacement{Shard: i, Slot: slot, Primary: primaries[i], Sites: n})
		if primaries[i] != "" {
			if rep.Primaries == nil {
				rep.Primaries = map[string]int{}
			}
			rep.Primaries[primaries[i]] += n
		}
	}
	if withSites {
		all, err := r.Do(ctx, "placement_sites", b.Hgetall().Key(p.cfg.Keys.Place).Build()).AsStrMap()
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

// ReapBatch is the most due entries one Reap call examines.
const ReapBatch = 128

// Reap forgets sites no replica has read through place.lua for longer than
// Config.Retention and that hold no state on their shard (Busy): their
// entry in the record and the index, and their count in placen
// (lua/place_reap.lua). At most min(limit, ReapBatch) entries, from the
// head of the index, never a scan. The first calls also index, a page a
// call, entries placed before the index existed (place_backfill.lua).
//
// Why no site splits: a replica uses a cached entry only while it is
// younger than RefreshAge, and a call that may place (Ensure) only one
// read through place.lua, which set the site's last read then. So while
// any replica may write with an entry, the site's last read is within
// RefreshAge, and Reap, which forgets only sites whose last read is older
// than Retention (> RefreshAge), re-checked inside the script, leaves it.
// A site that returns after it was forgotten is placed anew, and every
// replica follows the record, since no cached entry outlives RefreshAge.
// Busy covers what a site's state may outlive: a job's deadline is the
// client's to choose, so no retention alone could bound it.
// more: more entries may be due.
func (p *Placer) Reap(ctx context.Context, limit int) (forgotten int, more bool, err error) {
	ret := p.cfg.Retention.Milliseconds()
	if ret <= 0 {
		return 0, false, nil
	}
	if p.cfg.Retention <= p.cfg.RefreshAge {
		return 0, false, fmt.Errorf("reap sites: the retention %v must exceed the refresh age %v", p.cfg.Retention, p.cfg.RefreshAge)
	}
	limit = min(max(limit, 1), ReapBatch)
	if !p.filled.Load() {
		msg, err := p.cfg.Scripts.RunScript(ctx, "place_backfill", []string{p.cfg.Keys.Place, p.cfg.Keys.PlaceT, p.cfg.Keys.PlaceTFill}, strconv.Itoa(limit))
		if err != nil {
			return 0, false, fmt.Errorf("reap sites: backfill: %w", err)
		}
		if got, err := msg.AsIntSlice(); err == nil && len(got) == 2 && got[1] == 1 {
			p.filled.Store(true)
		}
	}
	keys := []string{p.cfg.Keys.Place, p.cfg.Keys.PlaceN, p.cfg.Keys.PlaceT}
	args := []string{strconv.FormatInt(ret, 10), strconv.Itoa(limit), "0"}
	due, _, err := p.reapCall(ctx, keys, args)
	if err != nil || len(due) == 0 {
		return 0, false, err
	}
	busy := map[string]bool{}
	if p.cfg.Busy != nil {
		if busy, err = p.cfg.Busy(ctx, due); err != nil {
			return 0, false, fmt.Errorf("reap sites: %w", err)
		}
	}
	var forget, keep []string
	for site := range due {
		if busy[site] {
			keep = append(keep, site)
		} else {
			forget = append(forget, site)
		}
	}
	args = append(append(append(args[:2], strconv.Itoa(len(forget))), forget...), keep...)
	next, n, err := p.reapCall(ctx, keys, args)
	if err != nil {
		return 0, false, err
	}
	return n, len(next) > 0, nil
}

// reapCall runs place_reap.lua once: the sites it forgot and the next due
// entries (site -> shard).
func (p *Placer) reapCall(ctx context.Context, keys, args []string) (map[string]int, int, error) {
	msg, err := p.cfg.Scripts.RunScript(ctx, "place_reap", keys, args...)
	if err != nil {
		return nil, 0, fmt.Errorf("reap sites: %w", err)
	}
	f, err := msg.ToArray()
	if err != nil || len(f)%2 != 1 {
		return nil, 0, fmt.Errorf("reap sites: reply %v (%v)", f, err)
	}
	n, err := f[0].AsInt64()
	if err != nil {
		return nil, 0, fmt.Errorf("reap sites: reply: %w", err)
	}
	due := make(map[string]int, len(f)/2)
	for i := 1; i+1 < len(f); i += 2 {
		site, err1 := f[i].ToString()
		v, err2 := f[i+1].ToString()
		sh, err3 := strconv.Atoi(v)
		if err := errors.Join(err1, err2, err3); err != nil || sh < 0 || sh >= p.shards() {
			return nil, 0, fmt.Errorf("reap sites: entry %d: %v (shard %q)", i, err, v)
		}
		due[site] = sh
	}
	return due, int(n), nil
}
