package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valkey-io/valkey-go"
)

// Device retention (doc.go, "What ends each key"). A device silent for
// longer than Options.DeviceRetention loses its presence record, its
// owner-index entry, its runner-index entries and its record of shards,
// all on its own shard, in one script (lua/presence_reap.lua). The sweep
// finds them by the shard's retention index ls (runner -> an instant at
// most an hour before its last heartbeat), reading only entries already
// past the cut.

// Retention bounds.
const (
	// DefaultDeviceRetention is the relay's default (RELAY_DEVICE_RETENTION):
	// a week, so a laptop left closed over a holiday weekend keeps its record.
	DefaultDeviceRetention = 7 * 24 * time.Hour
	// MinDeviceRetention is the shortest retention the relay accepts: a
	// device asleep overnight must find its record in the morning. The
	// store takes any positive value (tests shorten it).
	MinDeviceRetention = 24 * time.Hour
	// reapBatch is the most index entries one presence_reap call examines.
	reapBatch = 128
	// reapRecheck is how long a shard's known retention head is trusted
	// before it is read again (another replica's backfill may index older
	// records).
	reapRecheck = time.Minute
	// forgetChunk is the most runners one presence_forget call takes.
	forgetChunk = 256
)

// retentionState is what this Store remembers between sweeps: per shard,
// the store-clock instant before which its retention index has nothing
// due, and whether the backfill of pre-index records is done.
type retentionState struct {
	mu       sync.Mutex
	quietTil []int64 // by shard, store-clock ms
	readAt   []int64 // by shard, store-clock ms of the last head read
	filled   []bool  // by shard
	allDone  atomic.Bool
}

func (r *retentionState) init(shards int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.quietTil) != shards {
		r.quietTil, r.readAt, r.filled = make([]int64, shards), make([]int64, shards), make([]bool, shards)
	}
}

// DeviceRetention is the retention this Store reaps by (0: none).
func (s *Store) DeviceRetention() time.Duration { return s.opts.DeviceRetention }

// ReapDevices forgets devices silent for longer than
// Options.DeviceRetention: on each shard whose retention index has an
// entry past the cut (one pipelined ZRANGE per shard, at most once a
// minute per shard while nothing is due), one presence_reap call of at
// most limit entries. more: some shard may hold more due entries. A
// Store without a retention does nothing.
func (s *Store) ReapDevices(ctx context.Context, limit int) (forgotten int, more bool, err error) {
	ret := s.opts.DeviceRetention.Milliseconds()
	if ret <= 0 {
		return 0, false, nil
	}
	limit = min(max(limit, 1), 1000)
	r := &s.retention
	r.init(len(s.k.shards))
	now, err := s.Now(ctx)
	if err != nil {
		return 0, false, fmt.Errorf("reap devices: %w", err)
	}
	var read []int
	r.mu.Lock()
	for sh := range s.k.shards {
		if now >= r.quietTil[sh] || now-r.readAt[sh] >= reapRecheck.Milliseconds() {
			read = append(read, sh)
		}
	}
	r.mu.Unlock()
	if len(read) == 0 {
		return 0, false, nil
	}
	cmds := make([]valkey.Completed, len(read))
	for i, sh := range read {
		cmds[i] = s.c.B().Zrange().Key(s.k.retentionIndex(sh)).Min("0").Max("0").Withscores().Build()
	}
	res := s.doMulti(ctx, "reap_heads", cmds...)
	var due []int
	for i, sh := range read {
		z, err := res[i].AsZScores()
		if err != nil {
			return 0, false, fmt.Errorf("reap devices: head: %w", err)
		}
		// An entry written from now on is due a retention later at the
		// earliest; the recheck bounds how late an older one another
		// replica's backfill adds is seen.
		quiet := now + min(reapRecheck.Milliseconds(), ret)
		if len(z) > 0 {
			quiet = min(quiet, int64(z[0].Score)+ret)
		}
		r.mu.Lock()
		r.quietTil[sh], r.readAt[sh] = quiet, now
		r.mu.Unlock()
		if len(z) > 0 && int64(z[0].Score) < now-ret {
			due = append(due, sh)
		}
	}
	for _, sh := range due {
		msg, err := s.run(ctx, scPresenceReap, []string{s.k.retentionIndex(sh)}, fmt.Sprint(ret), fmt.Sprint(limit))
		if err != nil {
			return forgotten, more, fmt.Errorf("reap devices: %w", err)
		}
		v, err := msg.AsIntSlice()
		if err != nil || len(v) != 3 {
			return forgotten, more, fmt.Errorf("reap devices: %w: %v", ErrUnexpectedReply, err)
		}
		forgotten += int(v[0])
		if v[2] == 1 {
			more = true
			r.mu.Lock()
			r.quietTil[sh] = 0 // read it again on the next call
			r.mu.Unlock()
		}
	}
	return forgotten, more, nil
}

// ForgetDevices forgets the named runners at once, whatever their last
// heartbeat (a device the projection dropped or revoked): what
// ReapDevices takes from a silent one. One call per shard per 256
// runners; unknown runners cost nothing. The count is of presence records
// deleted.
func (s *Store) ForgetDevices(ctx context.Context, runnerIDs []string) (int, error) {
	byShard := map[int][]string{}
	for _, id := range runnerIDs {
		if err := s.checkID("runner id", id); err != nil {
			return 0, fmt.Errorf("forget devices: %w", err)
		}
		sh := s.k.runnerShard(id)
		byShard[sh] = append(byShard[sh], enc(id))
	}
	n := 0
	for sh, ers := range byShard {
		for len(ers) > 0 {
			chunk := ers[:min(len(ers), forgetChunk)]
			ers = ers[len(chunk):]
			got, err := s.run(ctx, scPresenceForget, []string{s.k.retentionIndex(sh)}, chunk...)
			if err != nil {
				return n, fmt.Errorf("forget devices: %w", err)
			}
			c, err := got.AsInt64()
			if err != nil {
				return n, fmt.Errorf("forget devices: %w: %v", ErrUnexpectedReply, err)
			}
			n += int(c)
		}
	}
	return n, nil
}

// BackfillRetention indexes, at most limit per shard per call, the
// presence records that relays before the retention index wrote and that
// have not beaten since (a heartbeat indexes its own record), so that a
// device that never beats again still ends. Each shard's progress is kept
// in Valkey (lsfill), so the work is done once per namespace, not once
// per replica; done when every shard is (then the call costs nothing).
func (s *Store) BackfillRetention(ctx context.Context, limit int) (done bool, err error) {
	r := &s.retention
	if r.allDone.Load() {
		return true, nil
	}
	r.init(len(s.k.shards))
	limit = min(max(limit, 1), 1000)
	all := true
	for sh := range s.k.shards {
		r.mu.Lock()
		filled := r.filled[sh]
		r.mu.Unlock()
		if filled {
			continue
		}
		msg, err := s.run(ctx, scPresenceBackfill, []string{s.k.presenceIndex(sh), s.k.retentionIndex(sh), s.k.retentionFill(sh)}, fmt.Sprint(limit))
		if err != nil {
			return false, fmt.Errorf("retention backfill: %w", err)
		}
		v, err := msg.AsIntSlice()
		if err != nil || len(v) != 2 {
			return false, fmt.Errorf("retention backfill: %w: %v", ErrUnexpectedReply, err)
		}
		r.mu.Lock()
		if v[0] > 0 {
			r.quietTil[sh] = 0 // older entries may be due now
		}
		r.filled[sh] = v[1] == 1
		all = all && r.filled[sh]
		r.mu.Unlock()
	}
	r.allDone.Store(all)
	return all, nil
}
