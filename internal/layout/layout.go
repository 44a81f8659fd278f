// Package layout is a namespace's key layout: the layout record (its
// version, shard count and salt), the migration mechanism that moves a
// namespace from one layout to the next, and the placement of sites on
// shards (placement.go). Its Lua operations (lua/layout.lua,
// layout_move.lua, place.lua, place_reap.lua) run through the store's one
// script runner, which the caller hands in (Scripts); key names come from
// the caller too, so the namespace prefix is still built in one place.
package layout

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/valkey-io/valkey-go"
)

// Version is the key layout this relay reads and writes, and the version
// its layout record says. A namespace of any other version is refused at
// start; a layout change bumps it and registers the step that moves data
// from the previous one (Steps).
const Version = 5

// DefaultShards is the number of shards a new namespace is laid out over.
// It is fixed for the life of the namespace (it is in the layout record).
const DefaultShards = 16

// MaxShards keeps a shard index in the first byte of a lease id.
const MaxShards = 256

// ErrLayout is the answer for a namespace whose layout record names a
// version other than Version. The error text gives the steps.
var ErrLayout = errors.New("namespace holds another key layout")

// Scripts runs one of the namespace's Lua operations (lua/<name>.lua)
// the way the store runs all of them: through its one script runner,
// observed, bounded and classified, with the store's common arguments.
type Scripts interface {
	RunScript(ctx context.Context, name string, keys []string, args ...string) (valkey.ValkeyMessage, error)
}

// Record is a namespace's layout record.
type Record struct {
	Version int
	Shards  int
	Salt    []byte
}

// Load reads the layout record at key (lua/layout.lua), writing one of
// Version over DefaultShards with salt for a new namespace.
func Load(ctx context.Context, run Scripts, key string, salt []byte) (Record, error) {
	msg, err := run.RunScript(ctx, "layout", []string{key}, strconv.Itoa(Version), strconv.Itoa(DefaultShards), hex.EncodeToString(salt))
	if err != nil {
		return Record{}, fmt.Errorf("layout: %w", err)
	}
	f, err := msg.AsStrSlice()
	if err != nil || len(f) != 3 {
		return Record{}, fmt.Errorf("layout: reply %v (%v)", f, err)
	}
	v, err1 := strconv.Atoi(f[0])
	n, err2 := strconv.Atoi(f[1])
	raw, err3 := hex.DecodeString(f[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		return Record{}, fmt.Errorf("layout record: %w", err)
	}
	if n < 1 || n > MaxShards {
		return Record{}, fmt.Errorf("layout: the record names %d shards (want 1-%d)", n, MaxShards)
	}
	return Record{Version: v, Shards: n, Salt: raw}, nil
}

// Move moves the layout record at key from version from to to, only if
// it still says from (lua/layout_move.lua).
func Move(ctx context.Context, run Scripts, key string, from, to int) error {
	got, err := run.RunScript(ctx, "layout_move", []string{key}, strconv.Itoa(from), strconv.Itoa(to))
	if err == nil {
		var v string
		if v, err = got.ToString(); err == nil && v != strconv.Itoa(to) {
			err = fmt.Errorf("the layout record says v%s", v)
		}
	}
	if err != nil {
		return fmt.Errorf("migrate: move the layout record to v%d: %w", to, err)
	}
	return nil
}

// A Step moves a namespace's data from layout From to From+1, on an S
// opened on the namespace as it is (the record still says From). Migrate
// records From+1 once it returns nil, so a step must be safe to run again
// after a failure. A layout change adds its step with a test of its own.
type Step[S any] struct {
	From int
	Run  func(ctx context.Context, s S) error
}

// Steps are the steps a relay can run, keyed by From.
type Steps[S any] map[int]Step[S]

// path says whether steps lead from layout v to target.
func (steps Steps[S]) path(v, target int) bool {
	for ; v < target; v++ {
		if _, ok := steps[v]; !ok {
			return false
		}
	}
	return v == target
}

// Refusal is why a relay of layout target does not start on namespace ns
// of layout v, with the steps that fix it.
func Refusal[S any](ns string, v int, steps Steps[S], target int) error {
	if v > target {
		return fmt.Errorf("%w: namespace %q has layout v%d, newer than this relay's v%d: run a relay of that version or later", ErrLayout, ns, v, target)
	}
	if !steps.path(v, target) {
		return fmt.Errorf("%w: namespace %q has layout v%d, which this relay (v%d) can neither read nor move: "+
			"start it on a new RELAY_NAMESPACE, or run a relay of layout v%d on this one", ErrLayout, ns, v, target, v)
	}
	return fmt.Errorf("%w: namespace %q has layout v%d and this relay reads v%d. Stop the relays of v%d, run `relay migrate` "+
		"(the same RELAY_VALKEY_URL and RELAY_NAMESPACE), then start the relays of this version", ErrLayout, ns, v, target, v)
}

// Report is what Migrate found and did.
type Report struct {
	From    int   // the layout version found (0: none, a new namespace)
	To      int   // the version recorded afterwards
	Steps   []int // the steps run, each by the version it moved from
	Written bool  // the layout record was written (new, or moved on)
}

// Namespace is what Migrate needs of the namespace it moves, an S being
// what its steps run on (the store opened on it).
type Namespace[S any] interface {
	// Name is the namespace's name, for the refusal.
	Name() string
	// Version is the layout record's version; false with no record.
	Version(ctx context.Context) (int, bool, error)
	// Create lays out a new namespace (writes its record).
	Create(ctx context.Context) error
	// Open opens the namespace as it is, of whatever layout.
	Open(ctx context.Context) (S, error)
	// Record moves s's layout record from version from to to (Move).
	Record(ctx context.Context, s S, from, to int) error
}

// Migrate moves ns to target: a new namespace gets its layout record; an
// older one runs each step in turn and records each version as it is
// reached; one in target is left alone. ready, when not nil, runs once
// before the first step (relay migrate checks there that no replica of an
// older version is live) and refuses the move with its error.
func Migrate[S any](ctx context.Context, ns Namespace[S], steps Steps[S], target int, ready func(context.Context, S) error) (Report, error) {
	rep := Report{}
	v, ok, err := ns.Version(ctx)
	if err != nil {
		return rep, fmt.Errorf("migrate: read the layout record: %w", err)
	}
	if !ok {
		if err := ns.Create(ctx); err != nil {
			return rep, fmt.Errorf("migrate: %w", err)
		}
		rep.To, rep.Written = target, true
		return rep, nil
	}
	rep.From, rep.To = v, v
	if rep.From == target {
		return rep, nil
	}
	if rep.From > target || !steps.path(rep.From, target) {
		return rep, Refusal(ns.Name(), rep.From, steps, target)
	}
	s, err := ns.Open(ctx)
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
		if err := ns.Record(ctx, s, from, from+1); err != nil {
			return rep, err
		}
		rep.Steps = append(rep.Steps, from)
		rep.To, rep.Written = from+1, true
	}
	return rep, nil
}
