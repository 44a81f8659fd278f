package store

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/valkey-io/valkey-go"
)

// ErrLayout is New's answer for a namespace whose layout record names a
// version other than LayoutVersion. The error text gives the steps.
var ErrLayout = errors.New("namespace holds another key layout")

// loadLayout reads the namespace's layout record (writing one with a fresh
// salt for a new namespace) and fixes the shard keys from it.
func (s *Store) loadLayout(ctx context.Context) error {
	// The salt of a new namespace is derived from its name, so a record
	// lost with the data (a restart without persistence, FLUSHALL) comes
	// back identical whichever replica writes it first: replicas that
	// loaded the old record keep agreeing with new ones. An operator may
	// write a secret salt into the record before the first relay starts.
	salt := sha256.Sum256([]byte("byollm relay layout salt\x00" + s.opts.Namespace))
	msg, err := s.run(ctx, scLayout, []string{s.k.layout()}, strconv.Itoa(LayoutVersion), strconv.Itoa(DefaultShards), hex.EncodeToString(salt[:16]))
	if err != nil {
		return fmt.Errorf("layout: %w", err)
	}
	f, err := msg.AsStrSlice()
	if err != nil || len(f) != 3 {
		return fmt.Errorf("layout: reply %v (%v)", f, err)
	}
	v, err1 := strconv.Atoi(f[0])
	n, err2 := strconv.Atoi(f[1])
	raw, err3 := hex.DecodeString(f[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		return fmt.Errorf("layout record: %w", err)
	}
	if v != LayoutVersion && !s.opts.migrating {
		return layoutRefusal(s.opts.Namespace, v, migrations, LayoutVersion)
	}
	s.layoutV.Store(int32(v))
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

// layoutRefusal is why a relay of layout target does not start on a
// namespace of layout v, with the steps that fix it.
func layoutRefusal(ns string, v int, steps map[int]migrationStep, target int) error {
	if v > target {
		return fmt.Errorf("%w: namespace %q has layout v%d, newer than this relay's v%d: run a relay of that version or later", ErrLayout, ns, v, target)
	}
	if !migrationPath(steps, v, target) {
		return fmt.Errorf("%w: namespace %q has layout v%d, which this relay (v%d) can neither read nor move: "+
			"start it on a new RELAY_NAMESPACE, or run a relay of layout v%d on this one", ErrLayout, ns, v, target, v)
	}
	return fmt.Errorf("%w: namespace %q has layout v%d and this relay reads v%d. Stop the relays of v%d, run `relay migrate` "+
		"(the same RELAY_VALKEY_URL and RELAY_NAMESPACE), then start the relays of this version", ErrLayout, ns, v, target, v)
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

// Layout is the namespace's layout version as this Store last read it.
func (s *Store) Layout() int { return int(s.layoutV.Load()) }

// Shards is the number of shards of the namespace (from its layout record).
func (s *Store) Shards() int { return len(s.k.shards) }

// A migrationStep moves a namespace's data from layout From to From+1.
// It runs on a Store opened on the namespace as it is (the record still
// says From); Migrate records From+1 once it returns nil, so a step must be
// safe to run again after a failure. Steps live in migrations, keyed by
// From; a layout change adds its step there with a test of its own.
type migrationStep struct {
	From int
	Run  func(ctx context.Context, s *Store) error
}

// migrations are the steps this relay can run. Layout 4 is the first
// layout any release wrote, so there is none yet.
var migrations = map[int]migrationStep{}

// migrationPath says whether steps lead from layout v to target.
func migrationPath(steps map[int]migrationStep, v, target int) bool {
	for ; v < target; v++ {
		if _, ok := steps[v]; !ok {
			return false
		}
	}
	return v == target
}

// MigrateReport is what Migrate found and did.
type MigrateReport struct {
	From    int   // the layout version found (0: none, a new namespace)
	To      int   // the version recorded afterwards
	Steps   []int // the steps run, each by the version it moved from
	Written bool  // the layout record was written (new, or moved on)
}

// Migrate moves a namespace to LayoutVersion: a new namespace gets its
// layout record; an older one runs each registered step in turn and
// records each version as it is reached; one in this layout is left alone.
// ready, when not nil, runs once before the first step (relay migrate
// checks there that no replica of an older version is live) and refuses
// the move with its error.
func Migrate(ctx context.Context, c valkey.Client, namespace string, ready func(context.Context, *Store) error) (MigrateReport, error) {
	return migrate(ctx, c, namespace, migrations, LayoutVersion, ready)
}

// migrate is Migrate over steps up to target, so a test can register a step.
func migrate(ctx context.Context, c valkey.Client, namespace string, steps map[int]migrationStep, target int, ready func(context.Context, *Store) error) (MigrateReport, error) {
	rep := MigrateReport{}
	k, err := newKeys(namespace)
	if err != nil {
		return rep, fmt.Errorf("migrate: %w", err)
	}
	v, err := c.Do(ctx, c.B().Hget().Key(k.layout()).Field("version").Build()).AsInt64()
	if valkey.IsValkeyNil(err) {
		// A new namespace: New writes the record.
		if _, err := New(ctx, c, Options{Namespace: namespace, Logger: slog.New(slog.DiscardHandler)}); err != nil {
			return rep, fmt.Errorf("migrate: %w", err)
		}
		rep.To, rep.Written = LayoutVersion, true
		return rep, nil
	}
	if err != nil {
		return rep, fmt.Errorf("migrate: read the layout record: %w", err)
	}
	rep.From, rep.To = int(v), int(v)
	if rep.From == target {
		return rep, nil
	}
	if rep.From > target || !migrationPath(steps, rep.From, target) {
		return rep, layoutRefusal(namespace, rep.From, steps, target)
	}
	s, err := New(ctx, c, Options{Namespace: namespace, Logger: slog.New(slog.DiscardHandler), migrating: true})
	if err != nil {
		return rep, fmt.Errorf("migrate: %w", err)
	}
	if ready != nil {
		if err := ready(ctx, s); err != nil {
			return rep, fmt.Errorf("migrate: %w", err)
		}
	}
	for from := rep.From; from < target; from++ {
		if err := steps[from].Run(ctx, s); err != nil {
			return rep, fmt.Errorf("migrate: layout v%d to v%d: %w", from, from+1, err)
		}
		if err := s.recordLayout(ctx, from, from+1); err != nil {
			return rep, err
		}
		rep.Steps = append(rep.Steps, from)
		rep.To, rep.Written = from+1, true
	}
	return rep, nil
}

// recordLayout moves the layout record from version from to to, only if it
// still says from (lua/layout_move.lua).
func (s *Store) recordLayout(ctx context.Context, from, to int) error {
	got, err := s.run(ctx, scLayoutMove, []string{s.k.layout()}, strconv.Itoa(from), strconv.Itoa(to))
	if err == nil {
		var v string
		if v, err = got.ToString(); err == nil && v != strconv.Itoa(to) {
			err = fmt.Errorf("the layout record says v%s", v)
		}
	}
	if err != nil {
		return fmt.Errorf("migrate: move the layout record to v%d: %w", to, err)
	}
	s.layoutV.Store(int32(to))
	return nil
}
