package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

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
			"cannot read it. Move it with `relay migrate` (see README \"Moving to the sharded layout\"): stop the "+
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
	if v == compatLayout {
		return fmt.Errorf("%w: namespace %q has layout v%d; this relay (v%d) reads its data as it is, but relays of "+
			"v%d cannot read the job records it writes. Stop the v%d relays, then run `relay migrate`, which moves "+
			"nothing and writes v%d into the layout record", ErrOlderLayout, s.opts.Namespace, v, LayoutVersion, v, v, LayoutVersion)
	}
	if v != LayoutVersion {
		return fmt.Errorf("layout: namespace %q has layout v%d; this relay reads v%d only", s.opts.Namespace, v, LayoutVersion)
	}
	if n < 1 || n > maxShards {
		return fmt.Errorf("layout: namespace %q records %d shards (want 1-%d)", s.opts.Namespace, n, maxShards)
	}
	s.k = s.k.withLayout(n, raw)
	return nil
}

// Shards is the number of shards of the namespace (from its layout record).
func (s *Store) Shards() int { return len(s.k.shards) }

// MigrateReport is what Migrate found in a v1 namespace.
type MigrateReport struct {
	Jobs     int64            // jobs still stored in the v1 layout
	ByState  map[string]int64 // of them, by state
	Presence int64            // v1 presence records (rebuilt by heartbeats)
	Deleted  int              // v1 routing keys deleted
	Written  bool             // the layout record was written
	Upgraded bool             // a v2 record's version was rewritten (no data moved)
}

// Migrate moves a namespace to this layout. From v2 it only rewrites the
// record's version (run it once every v2 relay is stopped). From the
// single-slot layout (v1): pairing codes, the projection, approvals and the
// policy keep their keys (they were fleet-wide in v1 and still are).
// Routing state is not copied:
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
	if v, err := c.Do(ctx, c.B().Hget().Key(k.layout()).Field("version").Build()).ToString(); err == nil {
		if v != strconv.Itoa(compatLayout) {
			return rep, nil // already in this layout
		}
		// v2 → v3: the same keys; v3 reads v2 records and state sets as
		// they are (lib/blob.lua, move_state), so only the version changes.
		// v2 marks that jobs may still be counted in v2's state sets.
		if err := c.Do(ctx, c.B().Hset().Key(k.layout()).FieldValue().FieldValue("v2", "1").
			FieldValue("version", strconv.Itoa(LayoutVersion)).Build()).Error(); err != nil {
			return rep, fmt.Errorf("migrate: write version: %w", err)
		}
		rep.Upgraded, rep.Written = true, true
		return rep, nil
	} else if !valkey.IsValkeyNil(err) {
		return rep, fmt.Errorf("migrate: %w", err)
	}
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
