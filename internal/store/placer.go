package store

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/layout"
)

// LayoutVersion is the key layout this store reads and writes (mode S,
// sharded by site; doc.go): internal/layout's.
const LayoutVersion = layout.Version

// DefaultShards is the number of shards a new namespace is laid out over.
const DefaultShards = layout.DefaultShards

// MaxPlacedSites bounds the placement record (internal/layout).
const MaxPlacedSites = layout.MaxPlacedSites

// DefaultPlacementCacheSites is the default Options.PlacementCacheSites.
const DefaultPlacementCacheSites = layout.DefaultPlacementCacheSites

// ErrLayout is New's answer for a namespace whose layout record names a
// version other than LayoutVersion. The error text gives the steps.
var ErrLayout = layout.ErrLayout

// PlacementReport is what an operator sees of the placement.
type PlacementReport = layout.PlacementReport

// ShardPlacement is one shard's line of the placement report.
type ShardPlacement = layout.ShardPlacement

// MigrateReport is what Migrate found and did.
type MigrateReport = layout.Report

// placer is what the store asks of placement (layout.Placer): where a
// site is, placing it when a call may.
type placer interface {
	Cached(site string) (int, bool)
	Read(site string) (int, bool)
	Ensure(ctx context.Context, sites ...string) error
	Place(ctx context.Context, sites []string, pins map[string]int) error
	Lookup(ctx context.Context, sites ...string) ([]string, error)
	Report(ctx context.Context, withSites bool) (PlacementReport, error)
}

// layoutScripts are the store's scripts internal/layout runs.
var layoutScripts = map[string]Script{scLayout.Name: scLayout, scLayoutMove.Name: scLayoutMove, scPlace.Name: scPlace,
	scPlaceBackfill.Name: scPlaceBackfill, scPlaceReap.Name: scPlaceReap}

// layoutRunner runs internal/layout's scripts as the store runs its own.
type layoutRunner struct{ s *Store }

func (r layoutRunner) RunScript(ctx context.Context, name string, keys []string, args ...string) (valkey.ValkeyMessage, error) {
	sc, ok := layoutScripts[name]
	if !ok {
		return valkey.ValkeyMessage{}, fmt.Errorf("no layout script %q", name)
	}
	return r.s.run(ctx, sc, keys, args...)
}

// loadLayout reads the namespace's layout record (writing one for a new
// namespace) and fixes the shard keys and the placer from it.
func (s *Store) loadLayout(ctx context.Context) error {
	// The salt of a new namespace is derived from its name, so a record
	// lost with the data (a restart without persistence, FLUSHALL) comes
	// back identical whichever replica writes it first: replicas that
	// loaded the old record keep agreeing with new ones. An operator may
	// write a secret salt into the record before the first relay starts.
	salt := sha256.Sum256([]byte("byollm relay layout salt\x00" + s.opts.Namespace))
	rec, err := layout.Load(ctx, layoutRunner{s}, s.k.layout(), salt[:16])
	if err != nil {
		return fmt.Errorf("namespace %q: %w", s.opts.Namespace, err)
	}
	if rec.Version != LayoutVersion && !s.opts.migrating {
		return layout.Refusal(s.opts.Namespace, rec.Version, migrations, LayoutVersion)
	}
	s.layoutV.Store(int32(rec.Version))
	if s.k.shards != nil {
		// Written again after a data loss (the placer's Reload): the keys
		// this Store built must still be the namespace's.
		if rec.Shards != len(s.k.shards) || !bytes.Equal(rec.Salt, s.k.salt) {
			return fmt.Errorf("layout: namespace %q's record changed under a running relay (%d shards); restart the relays", s.opts.Namespace, rec.Shards)
		}
		return nil
	}
	s.k = s.k.withLayout(rec.Shards, rec.Salt)
	slots := make([]int, len(s.k.shards))
	for i, p := range s.k.shards {
		slots[i] = int(keySlot(hashTagOf(p)))
	}
	refresh := cmp.Or(s.opts.PlacementRefresh, layout.DefaultRefreshAge)
	var retention time.Duration
	if s.opts.DeviceRetention > refresh {
		// The same retention as a device's: a site unused that long (and
		// holding no state) is forgotten.
		retention = s.opts.DeviceRetention
	}
	s.placer = layout.NewPlacer(layout.Config{
		Keys: layout.Keys{Layout: s.k.layout(), Place: s.k.p + "place", PlaceN: s.k.p + "placen",
			PlaceT: s.k.p + "placet", PlaceTFill: s.k.p + "placetfill"},
		Slots:      slots,
		CacheSites: s.opts.PlacementCacheSites,
		RefreshAge: refresh,
		Retention:  retention,
		Busy:       s.sitesBusy,
		Scripts:    layoutRunner{s},
		Runner:     s.runner,
		Reload:     s.loadLayout,
		Log:        s.log,
	})
	s.k.place = s.placer
	return nil
}

// hashTagOf is the tag of a "<ns>:{<tag>}:" prefix.
func hashTagOf(prefix string) string {
	open := strings.IndexByte(prefix, '{')
	end := strings.IndexByte(prefix, '}')
	return prefix[open+1 : end]
}

// Layout is the namespace's layout version as this Store last read it.
func (s *Store) Layout() int { return int(s.layoutV.Load()) }

// Shards is the number of shards of the namespace (from its layout record).
func (s *Store) Shards() int { return len(s.k.shards) }

// placeSites makes sure every named site has a shard, placing those that
// have none. Callers have checked the ids.
func (s *Store) placeSites(ctx context.Context, siteIDs ...string) error {
	return placeErr(s.k.place.Ensure(ctx, siteIDs...))
}

// place places sites (pins: shards some must take if they have none yet).
func (s *Store) place(ctx context.Context, sites []string, pins map[string]int) error {
	return placeErr(s.k.place.Place(ctx, sites, pins))
}

// placeErr answers a full placement record as invalid input, as before
// the placer moved out.
func placeErr(err error) error {
	if errors.Is(err, layout.ErrFull) {
		return fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	return err
}

// Placement reports how sites are placed: per shard and per primary, and
// with withSites every site's shard. It only reads.
func (s *Store) Placement(ctx context.Context, withSites bool) (PlacementReport, error) {
	return s.k.place.Report(ctx, withSites)
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
// record does not name is read on its hash shard for this call only: such
// a site has no keys anywhere, so any shard answers "nothing".
func (s *Store) siteKeys(ctx context.Context, siteIDs ...string) (keys, error) {
	unplaced, err := s.k.place.Lookup(ctx, siteIDs...)
	if err != nil {
		return keys{}, err
	}
	if len(unplaced) == 0 {
		return s.k, nil
	}
	k := s.k
	k.unplaced = make(map[string]int, len(unplaced))
	for _, id := range unplaced {
		k.unplaced[id] = s.k.siteHashShard(id)
	}
	return k, nil
}

// migrations are the steps this relay can run, on a Store opened on the
// namespace as it is. Layout 4 is the first layout any release wrote.
var migrations = layout.Steps[*Store]{
	4: {From: 4, Run: compactJobIDs},
}

// Migrate moves a namespace to LayoutVersion (layout.Migrate). ready, when
// not nil, runs once before the first step and refuses with its error.
func Migrate(ctx context.Context, c valkey.Client, namespace string, ready func(context.Context, *Store) error) (MigrateReport, error) {
	return migrate(ctx, c, namespace, migrations, LayoutVersion, ready)
}

// migrate is Migrate over steps up to target, so a test can register a step.
func migrate(ctx context.Context, c valkey.Client, namespace string, steps layout.Steps[*Store], target int, ready func(context.Context, *Store) error) (MigrateReport, error) {
	k, err := newKeys(namespace)
	if err != nil {
		return MigrateReport{}, fmt.Errorf("migrate: %w", err)
	}
	return layout.Migrate(ctx, migrationNS{c: c, k: k}, steps, target, ready)
}

// migrationNS is a namespace as layout.Migrate moves it.
type migrationNS struct {
	c valkey.Client
	k keys
}

func (m migrationNS) Name() string { return m.k.ns }

func (m migrationNS) Version(ctx context.Context) (int, bool, error) {
	v, err := m.c.Do(ctx, m.c.B().Hget().Key(m.k.layout()).Field("version").Build()).AsInt64()
	if valkey.IsValkeyNil(err) {
		return 0, false, nil
	}
	return int(v), err == nil, err
}

func (m migrationNS) Create(ctx context.Context) error {
	_, err := New(ctx, m.c, Options{Namespace: m.k.ns, Logger: slog.New(slog.DiscardHandler)})
	return err
}

func (m migrationNS) Open(ctx context.Context) (*Store, error) {
	return New(ctx, m.c, Options{Namespace: m.k.ns, Logger: slog.New(slog.DiscardHandler), migrating: true})
}

func (m migrationNS) Record(ctx context.Context, s *Store, from, to int) error {
	if err := layout.Move(ctx, layoutRunner{s}, s.k.layout(), from, to); err != nil {
		return err
	}
	s.layoutV.Store(int32(to))
	return nil
}

// ReapSites forgets sites no replica has used for longer than
// Options.DeviceRetention and holding nothing on their shard (layout
// Placer.Reap): at most limit (up to layout.ReapBatch) a call. more: more
// may be due.
func (s *Store) ReapSites(ctx context.Context, limit int) (forgotten int, more bool, err error) {
	return s.placer.Reap(ctx, limit)
}

// sitesBusy says which sites (site -> shard) still hold state on their
// shard: live jobs, finished results, jobs awaiting their payload, stored
// bytes. One pipeline of EXISTS, one per site.
func (s *Store) sitesBusy(ctx context.Context, sites map[string]int) (map[string]bool, error) {
	ids := make([]string, 0, len(sites))
	cmds := make([]valkey.Completed, 0, len(sites))
	for id, sh := range sites {
		ids = append(ids, id)
		cmds = append(cmds, s.c.B().Exists().Key(s.k.siteState(sh, id)...).Build())
	}
	busy := make(map[string]bool, len(sites))
	for i, r := range s.doMulti(ctx, "place_busy", cmds...) {
		n, err := r.AsInt64()
		if err != nil {
			return nil, fmt.Errorf("site state: %w", err)
		}
		busy[ids[i]] = n > 0
	}
	return busy, nil
}
