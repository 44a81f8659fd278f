package store

import (
	"context"
	"fmt"
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

// Counts reads the per-state job counts in O(1) (one read-only script), for
// the relay_jobs and relay_leases_active gauges.
func (s *Store) Counts(ctx context.Context) (StateCounts, error) {
	keys := make([]string, 0, 5)
	for _, st := range []string{StateQueued, StateAwaitingPayload, StateReady, StateRunning, StateDone} {
		keys = append(keys, s.k.p+"st:"+st)
	}
	msg, err := s.run(ctx, "counts", keys)
	if err != nil {
		return StateCounts{}, fmt.Errorf("counts: %w", err)
	}
	vals, err := msg.AsIntSlice()
	if err != nil || len(vals) != 5 {
		return StateCounts{}, fmt.Errorf("counts: unexpected reply %v: %v", msg, err)
	}
	return StateCounts{Queued: vals[0], AwaitingPayload: vals[1], Ready: vals[2], Running: vals[3], Done: vals[4]}, nil
}
