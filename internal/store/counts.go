package store

import (
	"context"
	"fmt"
	"github.com/valkey-io/valkey-go"
)

// StateCounts is how many jobs the store holds in each state.
type StateCounts struct {
	Queued, AwaitingPayload, Ready, Running, Done int64
}

// ByState names the counts by their wire state.
func (c StateCounts) ByState() map[string]int64 {
	return map[string]int64{
		StateQueued: c.Queued, StateAwaitingPayload: c.AwaitingPayload,
		StateReady: c.Ready, StateRunning: c.Running, StateDone: c.Done,
	}
}

// ActiveLeases is the number of grants a device is working under: jobs
// awaiting their payload, ready or running (done jobs keep their grant, but
// nobody works on them).
func (c StateCounts) ActiveLeases() int64 {
	return c.AwaitingPayload + c.Ready + c.Running
}

// Counts reads the per-state job counts, for the relay_jobs and
// relay_leases_active gauges: one HMGET of each shard's state counters
// (move_state in lib/store.lua), pipelined (single-key commands, so a
// cluster routes each to its shard).
func (s *Store) Counts(ctx context.Context) (StateCounts, error) {
	states := []string{StateQueued, StateAwaitingPayload, StateReady, StateRunning, StateDone}
	cmds := make([]valkey.Completed, 0, len(s.k.shards))
	for sh := range s.k.shards {
		cmds = append(cmds, s.c.B().Hmget().Key(s.k.stateCounts(sh)).Field(states...).Build())
	}
	var vals [5]int64
	for _, r := range s.doMulti(ctx, "counts", cmds...) {
		got, err := r.ToArray()
		if err != nil || len(got) != len(states) {
			return StateCounts{}, fmt.Errorf("counts: %d counters (%w)", len(got), err)
		}
		for j, g := range got {
			if g.IsNil() {
				continue
			}
			n, err := g.AsInt64()
			if err != nil {
				return StateCounts{}, fmt.Errorf("counts: %w", err)
			}
			vals[j] += n
		}
	}
	return StateCounts{Queued: vals[0], AwaitingPayload: vals[1], Ready: vals[2], Running: vals[3], Done: vals[4]}, nil
}
