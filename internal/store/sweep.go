package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/workview"
)

// SweepBatch settles at most limit due jobs on each shard that has due jobs
// (§4, §9.7), one script per such shard, and reports whether more are due.
// Requeued snapshots (taken after the requeue) come first, then removed ones
// (taken before the forget, SweptAway set). Snapshots carry no payload or
// result ciphertext.
func (s *Store) SweepBatch(ctx context.Context, limit int) (jobs []Job, more bool, err error) {
	shards, err := s.dueShards(ctx, nil)
	if err != nil {
		return nil, false, err
	}
	var requeued, removed []snapshot
	for _, sh := range shards {
		rq, rm, m, err := s.sweepBatch(ctx, sh, limit)
		if err != nil {
			return nil, false, err
		}
		requeued, removed = append(requeued, rq...), append(removed, rm...)
		more = more || m
	}
	return append(jobsOf(requeued), jobsOf(removed)...), more, nil
}

// dueShards is the shards (of only, or all when nil) whose due index holds
// a job due now: one TIME and one pipelined ZRANGE per shard, no script, so
// a sweep with nothing due costs no Lua at all. The due score is a candidate
// filter only (settle re-reads every record), so a job becoming due right
// after this read is simply left for the next sweep.
func (s *Store) dueShards(ctx context.Context, only []int) ([]int, error) {
	if only == nil {
		only = make([]int, len(s.k.shards))
		for i := range only {
			only[i] = i
		}
	}
	if len(only) == 0 {
		return nil, nil
	}
	// Shards the work view knows have nothing due are not read.
	at := s.view.Now()
	offset := s.offset.Load()
	var read []int
	for _, sh := range only {
		if !s.view.NotDue(sh, at, offset) {
			read = append(read, sh)
		}
	}
	if len(read) == 0 {
		return nil, nil
	}
	heads, now, err := s.dueHeads(ctx, "due_heads", read, nil)
	if err != nil {
		return nil, fmt.Errorf("sweep: %w", err)
	}
	var out []int
	for i, sh := range read {
		if heads[i] <= now {
			out = append(out, sh)
		}
	}
	return out, nil
}

// maxScore is the due head of a shard with nothing indexed.
const maxScore = int64(1) << 62

// dueHeads reads the due head of each of shards (maxScore for none) and the
// store clock, and, pipelined with them, extra single-key commands (their
// replies after the heads). What it reads it tells the work view.
func (s *Store) dueHeads(ctx context.Context, name string, shards []int, extra []valkey.Completed) (heads []int64, now int64, err error) {
	return s.dueHeadsWith(ctx, name, shards, extra, nil)
}

func (s *Store) dueHeadsWith(ctx context.Context, name string, shards []int, extra []valkey.Completed, extraOut *[]valkey.ValkeyResult) (heads []int64, now int64, err error) {
	at := s.view.Now()
	vers := make([]workview.Stamp, len(shards))
	cmds := make([]valkey.Completed, 0, len(shards)+len(extra))
	for i, sh := range shards {
		vers[i] = s.view.Stamp(sh)
		cmds = append(cmds, s.c.B().Zrange().Key(s.k.due(sh)).Min("0").Max("0").Withscores().Build())
	}
	cmds = append(cmds, extra...)
	var clock clockReading
	var res []valkey.ValkeyResult
	if len(shards) > 0 {
		clock, res = s.nowAnd(ctx, name, s.k.due(shards[0]), cmds)
		if clock.err != nil {
			return nil, 0, clock.err
		}
	} else if len(cmds) > 0 {
		res = s.doMulti(ctx, name, cmds...)
	}
	heads = make([]int64, len(shards))
	for i, sh := range shards {
		z, err := res[i].AsZScores()
		if err != nil {
			return nil, 0, fmt.Errorf("due head: %w", err)
		}
		heads[i] = maxScore
		if len(z) > 0 {
			heads[i] = int64(z[0].Score)
		}
		s.view.SawDue(sh, vers[i], at, clock.ms-s.offset.Load(), heads[i])
	}
	if extraOut != nil {
		*extraOut = res[len(shards):]
	}
	return heads, clock.ms, nil
}

func (s *Store) sweepBatch(ctx context.Context, shard, limit int) (requeued, removed []snapshot, more bool, err error) {
	if limit <= 0 {
		limit = s.opts.SweepBatch
	}
	msg, err := s.run(ctx, scSweep, []string{s.k.due(shard)}, strconv.Itoa(limit))
	if err != nil {
		return nil, nil, false, fmt.Errorf("sweep: %w", err)
	}
	parts, err := elems(msg, 4)
	if err != nil {
		return nil, nil, false, fmt.Errorf("sweep: %w", err)
	}
	if requeued, err = parseSnapshots(parts[0]); err != nil {
		return nil, nil, false, fmt.Errorf("sweep: requeued: %w", err)
	}
	if removed, err = parseSnapshots(parts[1]); err != nil {
		return nil, nil, false, fmt.Errorf("sweep: removed: %w", err)
	}
	for i := range removed {
		removed[i].SweptAway = true
	}
	reports, err := parseReports(parts[2])
	if err != nil {
		return nil, nil, false, fmt.Errorf("sweep: %w", err)
	}
	s.fireChurn(reports)
	flag, err := num(parts[3])
	if err != nil {
		return nil, nil, false, fmt.Errorf("sweep: more: %w", err)
	}
	return requeued, removed, flag == 1, nil
}

// Sweep settles everything due now, in bounded batches on each shard with
// due jobs, and returns the requeued jobs then the removed ones (B096:
// removed jobs are included and marked SweptAway), each list in insertion
// order, each job once.
func (s *Store) Sweep(ctx context.Context) ([]Job, error) {
	return s.sweepShards(ctx, nil)
}

// sweepShards is Sweep over some shards only (nil: all).
func (s *Store) sweepShards(ctx context.Context, only []int) ([]Job, error) {
	shards, err := s.dueShards(ctx, only)
	if err != nil {
		return nil, err
	}
	var requeued, removed []snapshot
	for _, sh := range shards {
		for range maxSweepBatchesPerCall {
			rq, rm, more, err := s.sweepBatch(ctx, sh, s.opts.SweepBatch)
			if err != nil {
				return nil, err
			}
			requeued = append(requeued, rq...)
			removed = append(removed, rm...)
			if !more {
				break
			}
		}
	}
	// A job requeued by one batch can be removed by a later one (its deadline
	// passed in between); report it once, as removed.
	gone := make(map[[2]string]bool, len(removed))
	for _, r := range removed {
		gone[[2]string{r.SiteID, r.ID}] = true
	}
	requeued = slices.DeleteFunc(requeued, func(r snapshot) bool { return gone[[2]string{r.SiteID, r.ID}] })
	bySeq := func(a, b snapshot) int {
		switch {
		case a.seq < b.seq:
			return -1
		case a.seq > b.seq:
			return 1
		}
		return 0
	}
	slices.SortStableFunc(requeued, bySeq)
	slices.SortStableFunc(removed, bySeq)
	return append(jobsOf(requeued), jobsOf(removed)...), nil
}

type clockReading struct {
	ms  int64
	err error
}

// nowAnd reads the store clock and runs the pipelined single-key commands
// in one round trip: TIME is the pipeline's last command (a separate TIME
// was a read event of its own on the server about as often as not, some
// 27 µs of Valkey CPU on this project's guest). TIME takes no key, and a
// cluster client may not mix a keyless command with commands on several
// slots in one pipeline, so it is sent to clockKey's slot: on a cluster
// the node holding that key reads the clock, in the round trip that node
// makes anyway for the commands on its slots.
func (s *Store) nowAnd(ctx context.Context, name, clockKey string, cmds []valkey.Completed) (clockReading, []valkey.ValkeyResult) {
	res := s.doMulti(ctx, name, append(cmds[:len(cmds):len(cmds)], s.c.B().Time().Build().SetSlot(clockKey))...)
	ms, err := s.timeReply(res[len(res)-1])
	return clockReading{ms, err}, res[:len(res)-1]
}
