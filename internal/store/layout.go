package store

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/valkeyconn"
)

// ErrLegacyLayout is New's answer for a namespace that an older relay wrote
// in the single-slot key layout (v1). The error text says how to move it.
var ErrLegacyLayout = errors.New("namespace holds the single-slot key layout (v1)")

// ErrOlderLayout is New's answer for a namespace of layout v2, which this
// store reads once Migrate has written its version.
var ErrOlderLayout = errors.New("namespace holds layout v2")

// legacyKeys are keys only layout v1 wrote: their presence without a layout
// record means an older relay owns the namespace. Pairing codes, the
// projection and the policy kept their names and tag, so they carry over.
var legacyKeys = []string{"seq", "all", "due", "lease", "pidx", "pseq", "epoch"}

func (k keys) legacy() []string {
	out := make([]string, len(legacyKeys))
	for i, n := range legacyKeys {
		out[i] = k.p + n
	}
	return out
}

// loadLayout reads the namespace's layout record (writing one with a fresh
// salt for a new namespace) and fixes the shard keys from it.
func (s *Store) loadLayout(ctx context.Context) error {
	// The salt of a new namespace is derived from its name, so a record
	// lost with the data (a restart without persistence, FLUSHALL) comes
	// back identical whichever replica writes it first: replicas that
	// loaded the old record keep agreeing with new ones. An operator may
	// write a secret salt into the record before the first relay starts.
	salt := sha256.Sum256([]byte("byollm relay layout salt\x00" + s.opts.Namespace))
	keys := append([]string{s.k.layout()}, s.k.legacy()...)
	msg, err := s.run(ctx, scLayout, keys, strconv.Itoa(LayoutVersion), strconv.Itoa(DefaultShards), hex.EncodeToString(salt[:16]))
	if err != nil {
		return fmt.Errorf("layout: %w", err)
	}
	f, err := msg.AsStrSlice()
	if err != nil || len(f) < 2 {
		return fmt.Errorf("layout: reply %v (%v)", f, err)
	}
	if f[0] == "v1" {
		return fmt.Errorf("%w: namespace %q was written by an older relay, and this relay (layout v%d, sharded by site) "+
			"cannot read it. Move it with `relay migrate` (see deploy/docs/operating.md, \"Moving to the sharded layout\"): stop the "+
			"sites' traffic, let the old relays drain it, then run `relay migrate`, which checks nothing is left and "+
			"writes the new layout record; or start this relay on a new RELAY_NAMESPACE", ErrLegacyLayout, s.opts.Namespace, LayoutVersion)
	}
	if len(f) != 4 {
		return fmt.Errorf("layout: reply %v", f)
	}
	s.v2States = f[3] == "1"
	v, err1 := strconv.Atoi(f[0])
	n, err2 := strconv.Atoi(f[1])
	raw, err3 := hex.DecodeString(f[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		return fmt.Errorf("layout record: %w", err)
	}
	switch {
	case v == compatLayout && !s.opts.migrating:
		return fmt.Errorf("%w: namespace %q has layout v%d; this relay (v%d) reads its data as it is, but relays of "+
			"v%d cannot read the job records it writes, and it places new sites balanced where they put them on a hash "+
			"of the id. Stop the v%d relays, then run `relay migrate`, which moves no data: it pins every site with "+
			"stored jobs to the shard holding them and writes v%d into the layout record", ErrOlderLayout, s.opts.Namespace, v, LayoutVersion, v, v, LayoutVersion)
	case v == compatLayout:
		// Migrate's own Store: it pins sites, then moves the record on.
	case v > LayoutVersion:
		return fmt.Errorf("layout: namespace %q has layout v%d, newer than this relay's v%d: run a relay of that version or later", s.opts.Namespace, v, LayoutVersion)
	case v != LayoutVersion && v != rollingLayout:
		return fmt.Errorf("layout: namespace %q has layout v%d; this relay reads v%d and v%d (and moves v%d with `relay migrate`)", s.opts.Namespace, v, rollingLayout, LayoutVersion, compatLayout)
	}
	if s.k.shards == nil || v == LayoutVersion {
		s.layoutV.Store(int32(v))
		s.checkedAt.Store(time.Now().UnixMilli())
	}
	if n < 1 || n > maxShards {
		return fmt.Errorf("layout: namespace %q records %d shards (want 1-%d)", s.opts.Namespace, n, maxShards)
	}
	if s.k.shards != nil {
		// Written again after a data loss (placement.go): the keys this
		// Store built must still be the namespace's.
		if n != len(s.k.shards) || !bytes.Equal(raw, s.k.salt) {
			return fmt.Errorf("layout: namespace %q's record changed under a running relay (%d shards); restart the relays", s.opts.Namespace, n)
		}
		return nil
	}
	s.k = s.k.withLayout(n, raw, cmp.Or(s.opts.PlacementCacheSites, DefaultPlacementCacheSites))
	s.k.place.read = s.readPlacement
	return nil
}

// readPlacement is one site's entry of the placement record, read with a
// deadline of its own (siteShard's read-through has no caller context).
func (s *Store) readPlacement(site string) (int, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := s.c.Do(ctx, s.c.B().Hget().Key(s.k.p+"place").Field(site).Build()).ToString()
	if err != nil {
		return 0, false
	}
	sh, err := strconv.Atoi(v)
	if err != nil || sh < 0 || sh >= len(s.k.shards) {
		return 0, false
	}
	return sh, true
}

// layoutRecheck is how often a Store serving a v3 namespace reads the
// layout record again, so that soon after Migrate moves it to v4 every
// replica writes compact records (until then they write v3's, which every
// relay of either version reads).
const layoutRecheck = 10 * time.Second

// recheckLayout reads the layout record of a v3 namespace again in the
// background, at most once per layoutRecheck.
func (s *Store) recheckLayout() {
	now, last := time.Now().UnixMilli(), s.checkedAt.Load()
	if now-last < layoutRecheck.Milliseconds() || !s.checkedAt.CompareAndSwap(last, now) {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		v, err := s.c.Do(ctx, s.c.B().Hget().Key(s.k.layout()).Field("version").Build()).AsInt64()
		if err == nil && v == LayoutVersion && s.layoutV.Swap(LayoutVersion) != LayoutVersion {
			s.log.Info("store: the namespace moved to layout v4; writing compact job records", "namespace", s.opts.Namespace)
		}
	}()
}

// Layout is the namespace's layout version as this Store last read it.
func (s *Store) Layout() int { return int(s.layoutV.Load()) }

// Shards is the number of shards of the namespace (from its layout record).
func (s *Store) Shards() int { return len(s.k.shards) }

// MigrateReport is what Migrate found in a v1 namespace.
type MigrateReport struct {
	Jobs     int64            // jobs still stored in the v1 layout
	ByState  map[string]int64 // of them, by state
	Presence int64            // v1 presence records (rebuilt by heartbeats)
	Deleted  int              // v1 routing keys deleted
	Written  bool             // the layout record was written (or moved to this version)
	Upgraded bool             // a v2 or v3 record moved to v4 (no data moved)
	From     int              // the layout version found (0: none, a new namespace)
	// Pinned is how many sites with stored jobs a v2 namespace had that
	// were pinned to the shard holding them (v2 to v3).
	Pinned int
}

// Migrate moves a namespace to this layout. From layout v3 it writes version
// 4 into the layout record and moves no data (moveLayout; run it once no v3
// relay is left). From layout v2 it moves no data either (run it once every
// v2 relay is stopped): this store reads v2's job records and state sets as
// they are, and every site with a stored job is pinned to the shard that
// holds it, after which new sites are placed balanced (migratePlacement);
// the record then says v3, marked v2=1 (jobs may still be counted in v2's
// state sets), and moves on to 4. From the single-slot layout (v1):
// pairing codes, the projection, approvals and the policy keep their keys
// (they were fleet-wide in v1 and still are). Routing state is not copied:
// jobs are short-lived (a deadline of minutes), so the namespace is drained
// instead. While any v1 job is stored Migrate only reports them and writes
// nothing, unless dropJobs; presence needs no draining, since the daemon
// plane rebuilds a record from the projection on the next heartbeat. Then it
// deletes the v1 routing keys and writes the layout record, after which
// relays of this version start on the namespace.
func Migrate(ctx context.Context, c valkey.Client, namespace string, dropJobs bool) (MigrateReport, error) {
	rep := MigrateReport{ByState: map[string]int64{}}
	k, err := newKeys(namespace)
	if err != nil {
		return rep, fmt.Errorf("migrate: %w", err)
	}
	if v, err := c.Do(ctx, c.B().Hget().Key(k.layout()).Field("version").Build()).AsInt64(); err == nil {
		rep.From = int(v)
		if v == compatLayout {
			if rep, err = migratePlacement(ctx, c, namespace, rep); err != nil || !rep.Written {
				return rep, err
			}
			v = rollingLayout
		}
		if v == rollingLayout {
			if err := moveLayout(ctx, c, namespace); err != nil {
				return rep, err
			}
			rep.Written, rep.Upgraded = true, true
		}
		return rep, nil // now (or already) in this layout
	} else if !valkey.IsValkeyNil(err) {
		return rep, fmt.Errorf("migrate: %w", err)
	}
	rep.From = 1
	if rep.Jobs, err = c.Do(ctx, c.B().Zcard().Key(k.p+"all").Build()).AsInt64(); err != nil {
		return rep, fmt.Errorf("migrate: count jobs: %w", err)
	}
	for _, st := range []string{StateQueued, StateAwaitingPayload, StateReady, StateRunning, StateDone} {
		n, err := c.Do(ctx, c.B().Scard().Key(k.p+"st:"+st).Build()).AsInt64()
		if err != nil {
			return rep, fmt.Errorf("migrate: count %s: %w", st, err)
		}
		if n > 0 {
			rep.ByState[st] = n
		}
	}
	if rep.Presence, err = c.Do(ctx, c.B().Zcard().Key(k.p+"pidx").Build()).AsInt64(); err != nil {
		return rep, fmt.Errorf("migrate: count presence: %w", err)
	}
	if rep.Jobs > 0 && !dropJobs {
		return rep, nil
	}
	// Every v1 key but the ones that carry over.
	keep := func(name string) bool {
		for _, p := range []string{"pc:", "projection", "pol:", "layout"} {
			if len(name) >= len(p) && name[:len(p)] == p {
				return true
			}
		}
		return false
	}
	// Every primary's keyspace: on a cluster a plain SCAN sees one node.
	keys, err := valkeyconn.Keys(ctx, c, k.p+"*")
	if err != nil {
		return rep, fmt.Errorf("migrate: %w", err)
	}
	for _, key := range keys {
		if keep(key[len(k.p):]) {
			continue
		}
		if err := c.Do(ctx, c.B().Del().Key(key).Build()).Error(); err != nil {
			return rep, fmt.Errorf("migrate: delete %s: %w", key, err)
		}
		rep.Deleted++
	}
	// The record itself: New writes it once no v1 key is left.
	s, err := New(ctx, c, Options{Namespace: namespace})
	if err != nil {
		return rep, fmt.Errorf("migrate: %w", err)
	}
	rep.Written = s.Shards() > 0
	return rep, nil
}

// migratePlacement moves a v2 namespace to v3. Relays of layout v2 compute
// a site's shard from its id and know no placement record, so it must run
// once none is left (their replacements record every site they meet, on
// the same hash shard). Each shard's due index names the sites with stored
// jobs there; each is pinned to that shard if it has no record yet, and the
// record moves to v3 in the last placement script, so a site placed by a
// running relay meanwhile keeps its shard too. A site whose jobs lie on two
// shards, or away from its record, is refused: nothing is written.
func migratePlacement(ctx context.Context, c valkey.Client, namespace string, rep MigrateReport) (MigrateReport, error) {
	s, err := New(ctx, c, Options{Namespace: namespace, Logger: slog.New(slog.DiscardHandler), migrating: true})
	if err != nil {
		return rep, fmt.Errorf("migrate: %w", err)
	}
	pins := map[string]int{}
	for sh := range s.k.shards {
		// The due index holds every job (each has a deadline); v2 relays
		// also wrote "all", which this relay no longer does, so a site it
		// served while the namespace was still v2 is found here too.
		members, err := s.scanMembers(ctx, s.k.due(sh))
		if err != nil {
			return rep, fmt.Errorf("migrate: jobs of shard %d: %w", sh, err)
		}
		for _, m := range members {
			rep.Jobs++
			eS, _, ok := strings.Cut(m, ":")
			raw, err := base64.RawURLEncoding.DecodeString(eS)
			if !ok || err != nil {
				return rep, fmt.Errorf("migrate: shard %d holds a job member %q this relay cannot read", sh, m)
			}
			site := string(raw)
			if was, seen := pins[site]; seen && was != sh {
				return rep, fmt.Errorf("migrate: site %q has jobs on shards %d and %d; nothing written", site, was, sh)
			}
			pins[site] = sh
		}
	}
	sites := make([]string, 0, len(pins))
	for site := range pins {
		sites = append(sites, site)
	}
	sort.Strings(sites)
	// Sites already recorded keep their record; check it agrees first.
	if len(sites) > 0 {
		if _, err := s.place(ctx, sites, pins, false); err != nil {
			return rep, fmt.Errorf("migrate: %w", err)
		}
		for _, site := range sites {
			if got := s.k.siteShard(site); got != pins[site] {
				return rep, fmt.Errorf("migrate: site %q is recorded on shard %d but has jobs on shard %d; nothing moved to v%d", site, got, pins[site], LayoutVersion)
			}
		}
	}
	v, err := s.place(ctx, nil, nil, true)
	if err != nil {
		return rep, fmt.Errorf("migrate: %w", err)
	}
	rep.Pinned, rep.Written = len(sites), v == rollingLayout
	return rep, nil
}

// moveLayout moves a v3 namespace's record to v4. No data moves: this
// version reads v3's job records as they are, and writes compact ones
// from then on (Stores of this version serving the namespace notice within
// layoutRecheck). Relays of v3 cannot read compact records, so it must run
// once none is left (cmd/relay's migrate checks the replica records).
func moveLayout(ctx context.Context, c valkey.Client, namespace string) error {
	s, err := New(ctx, c, Options{Namespace: namespace, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	got, err := s.run(ctx, scLayoutMove, []string{s.k.layout()}, strconv.Itoa(rollingLayout), strconv.Itoa(LayoutVersion))
	if err == nil {
		var v string
		if v, err = got.ToString(); err == nil && v != strconv.Itoa(LayoutVersion) {
			err = fmt.Errorf("the layout record says v%s", v)
		}
	}
	if err != nil {
		return fmt.Errorf("migrate: move the layout record to v%d: %w", LayoutVersion, err)
	}
	return nil
}
