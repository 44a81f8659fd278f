package sweeper

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/test/relaytest"
)

// scripted answers SweepBatch from a list of batches; each call may sleep.
type scripted struct {
	batches [][]store.Job
	delay   time.Duration
	err     error
	calls   atomic.Int64
	limits  []int
}

func (s *scripted) SweepBatch(ctx context.Context, limit int) ([]store.Job, bool, error) {
	n := int(s.calls.Add(1)) - 1
	s.limits = append(s.limits, limit)
	if s.delay > 0 {
		time.Sleep(s.delay)
	}
	if s.err != nil {
		return nil, false, s.err
	}
	if n >= len(s.batches) {
		return nil, false, nil
	}
	return s.batches[n], n < len(s.batches)-1, nil
}

func jobs(requeued, removed int) []store.Job {
	var out []store.Job
	for range requeued {
		out = append(out, store.Job{State: store.StateQueued})
	}
	for range removed {
		out = append(out, store.Job{SweptAway: true})
	}
	return out
}

func TestTick(t *testing.T) {
	tests := []struct {
		name                 string
		st                   *scripted
		budget               time.Duration
		wantCalls            int64
		wantReq, wantRemoved int
		wantErr              bool
	}{
		{"nothing due", &scripted{}, time.Second, 1, 0, 0, false},
		{"drains until not more", &scripted{batches: [][]store.Job{jobs(2, 1), jobs(0, 3), jobs(1, 0)}}, time.Second, 3, 3, 4, false},
		{"stops at the budget", &scripted{batches: [][]store.Job{jobs(1, 0), jobs(1, 0), jobs(1, 0), jobs(1, 0), jobs(1, 0)}, delay: 30 * time.Millisecond},
			50 * time.Millisecond, 2, 2, 0, false},
		{"error ends the tick", &scripted{err: errors.New("valkey down")}, time.Second, 1, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var gotReq, gotRem int
			sw := New(tt.st, Options{Batch: 7, Budget: tt.budget, Logger: relaytest.Logger(t), OnSweep: func(r, m int) { gotReq, gotRem = r, m }})
			err := sw.Tick(context.Background())
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if got := tt.st.calls.Load(); got != tt.wantCalls {
				t.Fatalf("SweepBatch called %d times, want %d", got, tt.wantCalls)
			}
			for _, l := range tt.st.limits {
				if l != 7 {
					t.Fatalf("limit %d, want the configured batch 7", l)
				}
			}
			if gotReq != tt.wantReq || gotRem != tt.wantRemoved {
				t.Fatalf("OnSweep(%d, %d), want (%d, %d)", gotReq, gotRem, tt.wantReq, tt.wantRemoved)
			}
			st := sw.Stats()
			if st.Requeued != int64(tt.wantReq) || st.Removed != int64(tt.wantRemoved) || (st.Errors > 0) != tt.wantErr {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

func TestRunTicksAndStops(t *testing.T) {
	st := &scripted{}
	sw := New(st, Options{Interval: 20 * time.Millisecond, Logger: relaytest.Logger(t)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	start := time.Now()
	go func() { sw.Run(ctx); close(done) }()
	relaytest.WaitFor(t, 10*time.Second, "4 ticks", func() bool { return sw.Stats().Ticks >= 4 })
	cancel()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("Run did not return after cancel")
	}
	// Never faster than the interval less its 20 % jitter (a slow machine
	// only ticks less often).
	n, took := sw.Stats().Ticks, time.Since(start)
	if most := int64(took/(16*time.Millisecond)) + 1; n > most {
		t.Fatalf("%d ticks in %v at a 20 ms interval, want at most %d", n, took, most)
	}
}

func TestJitterBounds(t *testing.T) {
	t.Parallel()
	sw := New(&scripted{}, Options{Interval: time.Second, Jitter: 0.2})
	lo, hi := time.Hour, time.Duration(0)
	for range 2000 {
		d := sw.next()
		lo, hi = min(lo, d), max(hi, d)
	}
	if lo < 800*time.Millisecond || hi > 1200*time.Millisecond {
		t.Fatalf("delays span [%v, %v], want within [800ms, 1.2s]", lo, hi)
	}
	if hi-lo < 200*time.Millisecond {
		t.Fatalf("delays span only [%v, %v]: no jitter", lo, hi)
	}
}

// sitesReaper answers ReapSites with pages of forgotten sites.
type sitesReaper struct {
	pages []int
	calls int
}

func (r *sitesReaper) ReapSites(ctx context.Context, limit int) (int, bool, error) {
	if r.calls >= len(r.pages) {
		return 0, false, nil
	}
	n := r.pages[r.calls]
	r.calls++
	return n, r.calls < len(r.pages), nil
}

// A tick with Sites forgets unused sites' placement until the store says
// nothing more is due, and counts them.
func TestTickReapsSites(t *testing.T) {
	r := &sitesReaper{pages: []int{128, 128, 3}}
	sw := New(&scripted{}, Options{Budget: time.Second, Logger: relaytest.Logger(t), Sites: r})
	if err := sw.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r.calls != 3 || sw.Stats().SitesForgotten != 259 {
		t.Fatalf("ReapSites called %d times, %d sites forgotten; want 3 and 259", r.calls, sw.Stats().SitesForgotten)
	}
}
