// Package sweeper runs the background sweep every replica carries.
//
// The planes already sweep where it matters (claim, heartbeat, pending), so
// routing never depends on this loop; it exists for timeliness: prompt
// eviction of overdue grants, removal of expired ciphertext, churn reports.
// Many replicas may sweep at once: the store settles each due job inside one
// script that re-checks its condition, so a second sweeper finds nothing to
// do. Each tick is bounded: batches of Batch jobs until the store says there
// is no more, or the tick's budget is spent, so a large backlog is worked off
// over several ticks instead of one long burst.
package sweeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/byollm/relay-go/internal/store"
)

// Store is the part of *store.Store the sweeper uses.
type Store interface {
	SweepBatch(ctx context.Context, limit int) (jobs []store.Job, more bool, err error)
}

// Devices is the part of *store.Store that ends devices' state: silent
// ones past the retention (ReapDevices, bounded per call), ones the
// projection dropped (ForgetDevices), and the one-time indexing of records
// older relays wrote (BackfillRetention).
type Devices interface {
	ReapDevices(ctx context.Context, limit int) (forgotten int, more bool, err error)
	ForgetDevices(ctx context.Context, runnerIDs []string) (int, error)
	BackfillRetention(ctx context.Context, limit int) (done bool, err error)
}

// Sites is the part of *store.Store that ends the placement of sites no
// replica has used for longer than the retention (ReapSites, bounded per
// call).
type Sites interface {
	ReapSites(ctx context.Context, limit int) (forgotten int, more bool, err error)
}

// Defaults.
const (
	DefaultInterval = time.Second
	// DefaultBatch is the store's own batch, which keeps one sweep script
	// near 1 ms.
	DefaultBatch = store.DefaultSweepBatch
	// DefaultBudget bounds one tick's wall time.
	DefaultBudget = 250 * time.Millisecond
	// DefaultJitter spreads replicas' ticks over ±20% of the interval so
	// they do not sweep in lockstep.
	DefaultJitter = 0.2
)

// Options configures Run. Zero values take the defaults.
type Options struct {
	Interval time.Duration
	Batch    int
	Budget   time.Duration
	Jitter   float64 // fraction of Interval, 0..1
	Logger   *slog.Logger
	// OnSweep, when set, is told the outcome of every tick that settled
	// something (for metrics).
	OnSweep func(requeued, removed int)
	// Devices, when set, has each tick also end devices' state: the
	// runners Removed names, then devices past the retention, in batches
	// of DeviceBatch within the same budget.
	Devices Devices
	// Sites, when set, has each tick also forget unused sites' placement
	// (after the devices, within the same budget).
	Sites Sites
	// Removed, when set, names the runners the projection dropped or
	// revoked since its last call (the sweeper forgets them at once).
	// Runners it could not forget are asked for again on the next tick.
	Removed func() []string
	// DeviceBatch is the most retention-index entries one reap call
	// examines per shard; default DefaultDeviceBatch.
	DeviceBatch int
}

// DefaultDeviceBatch keeps one reap script short: each forgotten device
// is a handful of commands on its own shard.
const DefaultDeviceBatch = 128

// Stats are cumulative counts since Run started.
type Stats struct {
	Ticks, Batches, Requeued, Removed, Errors int64
	// Forgotten counts device records ended (retention or projection).
	Forgotten int64
	// SitesForgotten counts sites whose placement ended.
	SitesForgotten int64
}

// Sweeper is one replica's background sweep loop.
type Sweeper struct {
	st   Store
	opts Options
	log  *slog.Logger

	ticks, batches, requeued, removed, errors, forgotten, sites atomic.Int64
	// pending: runners Removed named that a failed forget left for the
	// next tick (only the Run goroutine touches it).
	pending []string
}

// New builds a Sweeper; Run starts it.
func New(st Store, opts Options) *Sweeper {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Batch <= 0 {
		opts.Batch = DefaultBatch
	}
	if opts.Budget <= 0 {
		opts.Budget = DefaultBudget
	}
	if opts.Jitter < 0 || opts.Jitter > 1 {
		opts.Jitter = DefaultJitter
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.DeviceBatch <= 0 {
		opts.DeviceBatch = DefaultDeviceBatch
	}
	return &Sweeper{st: st, opts: opts, log: opts.Logger.With(slog.String("component", "sweeper"))}
}

// Stats returns the cumulative counts.
func (s *Sweeper) Stats() Stats {
	return Stats{Ticks: s.ticks.Load(), Batches: s.batches.Load(), Requeued: s.requeued.Load(),
		Removed: s.removed.Load(), Errors: s.errors.Load(), Forgotten: s.forgotten.Load(),
		SitesForgotten: s.sites.Load()}
}

// Run sweeps until ctx ends.
func (s *Sweeper) Run(ctx context.Context) {
	timer := time.NewTimer(s.next())
	defer timer.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		err := s.Tick(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !failing:
			// Logged once per outage; the store's own errors say more.
			s.log.Warn("background sweep failing; the planes still sweep on claim, heartbeat and pending", slog.Any("err", err))
			failing = true
		case err == nil && failing:
			s.log.Info("background sweep working again")
			failing = false
		}
		timer.Reset(s.next())
	}
}

// Tick runs one bounded sweep: batches until the store reports no more due
// jobs or the budget is spent.
func (s *Sweeper) Tick(ctx context.Context) error {
	s.ticks.Add(1)
	deadline := time.Now().Add(s.opts.Budget)
	ctx, cancel := context.WithDeadline(ctx, deadline.Add(s.opts.Budget)) // a stuck call cannot hold the loop forever
	defer cancel()
	var requeued, removed, batches int
	var err error
	for {
		var jobs []store.Job
		var more bool
		jobs, more, err = s.st.SweepBatch(ctx, s.opts.Batch)
		if err != nil {
			s.errors.Add(1)
			break
		}
		batches++
		for _, j := range jobs {
			if j.SweptAway {
				removed++
			} else {
				requeued++
			}
		}
		if !more || time.Now().After(deadline) {
			break
		}
	}
	s.batches.Add(int64(batches))
	s.requeued.Add(int64(requeued))
	s.removed.Add(int64(removed))
	if requeued+removed > 0 {
		s.log.Debug("swept", slog.Int("requeued", requeued), slog.Int("removed", removed), slog.Int("batches", batches))
		if s.opts.OnSweep != nil {
			s.opts.OnSweep(requeued, removed)
		}
	}
	if s.opts.Devices != nil && ctx.Err() == nil {
		if derr := s.devices(ctx, deadline); derr != nil {
			s.errors.Add(1)
			err = errors.Join(err, derr)
		}
	}
	if s.opts.Sites != nil && ctx.Err() == nil {
		if serr := s.reapSites(ctx, deadline); serr != nil {
			s.errors.Add(1)
			err = errors.Join(err, serr)
		}
	}
	return err
}

// reapSites is a tick's part for placement: forget sites unused past the
// retention, a bounded call at a time within the tick's budget.
func (s *Sweeper) reapSites(ctx context.Context, deadline time.Time) error {
	for {
		n, more, err := s.opts.Sites.ReapSites(ctx, s.opts.DeviceBatch)
		s.sites.Add(int64(n))
		if err != nil {
			return fmt.Errorf("reap unused sites: %w", err)
		}
		if n > 0 {
			s.log.Debug("forgot unused sites", slog.Int("sites", n))
		}
		if !more || time.Now().After(deadline) {
			return nil
		}
	}
}

// devices is a tick's part for device state: forget the runners the
// projection dropped, index what older relays wrote (until done), reap
// the silent, all within the tick's budget.
func (s *Sweeper) devices(ctx context.Context, deadline time.Time) error {
	d := s.opts.Devices
	if s.opts.Removed != nil {
		s.pending = append(s.pending, s.opts.Removed()...)
	}
	if len(s.pending) > 0 {
		n, err := d.ForgetDevices(ctx, s.pending)
		if err != nil {
			return fmt.Errorf("forget removed devices: %w", err)
		}
		s.forgotten.Add(int64(n))
		if n > 0 {
			s.log.Info("forgot devices the projection no longer holds", slog.Int("records", n), slog.Int("runners", len(s.pending)))
		}
		s.pending = nil
	}
	if _, err := d.BackfillRetention(ctx, s.opts.DeviceBatch); err != nil {
		return fmt.Errorf("retention backfill: %w", err)
	}
	for {
		n, more, err := d.ReapDevices(ctx, s.opts.DeviceBatch)
		s.forgotten.Add(int64(n))
		if err != nil {
			return fmt.Errorf("reap silent devices: %w", err)
		}
		if n > 0 {
			s.log.Debug("forgot silent devices", slog.Int("records", n))
		}
		if !more || time.Now().After(deadline) {
			return nil
		}
	}
}

// next is the jittered delay to the next tick.
func (s *Sweeper) next() time.Duration {
	j := s.opts.Jitter * float64(s.opts.Interval)
	return s.opts.Interval + time.Duration((rand.Float64()*2-1)*j)
}
