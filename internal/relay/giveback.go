package relay

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/byollm/relay-go/internal/store"
)

// A claim answered 503 because its store call outlived the store timeout
// (or because the daemon hung up) may still have granted jobs: the script
// ran, only its reply came too late. The daemon never saw those leases, so
// without help the jobs would wait out the whole lease (60 s by default)
// or, unsealed, turn sticky to that runner after the awaiting window. The
// relay hands them back instead (store.GiveBack), in the background, so
// the answer to the daemon is not held up: the jobs are claimable again as
// soon as the store takes the give-back, well within a second of it
// answering again.

// LeaseObserver counts claims whose answer was lost; telemetry.Metrics
// implements it. given is how many of the claim's leases went back to
// their queues; abandoned is true when the relay stopped trying (shutdown,
// the store unreachable until the leases would have lapsed anyway, too many
// waiting): those leases lapse by themselves.
type LeaseObserver interface {
	RecordUnansweredClaim(ctx context.Context, given int, abandoned bool)
}

const (
	// giveBackWorkers bounds the store calls give-backs make at once.
	giveBackWorkers = 4
	// giveBackQueue bounds the claims waiting for a worker; past it a
	// claim's leases are left to lapse (and logged), so a store that
	// times out every claim cannot make this queue grow without bound.
	giveBackQueue = 10_000
	// The pause between attempts grows from giveBackFirstPause to
	// giveBackMaxPause (with jitter), until the claim's leases would have
	// lapsed by themselves (the lease length after the claim).
	giveBackFirstPause = 50 * time.Millisecond
	giveBackMaxPause   = 2 * time.Second
)

type lostClaim struct {
	u     store.UnansweredClaim
	until time.Time // past this the leases have lapsed: stop trying
}

// leaseReturns runs the give-backs: a few workers, started when there is
// work and gone when there is none, so an idle relay runs no goroutine.
type leaseReturns struct {
	st       Store
	log      *slog.Logger
	obs      LeaseObserver
	retryFor time.Duration
	ctx      context.Context // ended by close: stops waits and store calls
	cancel   context.CancelFunc

	mu      sync.Mutex
	queue   []lostClaim
	workers int
	closed  bool
	wg      sync.WaitGroup
}

func newLeaseReturns(st Store, log *slog.Logger, obs LeaseObserver, leaseMs int64) *leaseReturns {
	ctx, cancel := context.WithCancel(context.Background())
	return &leaseReturns{st: st, log: log, obs: obs, retryFor: time.Duration(leaseMs) * time.Millisecond, ctx: ctx, cancel: cancel}
}

// add queues u's give-back; it never blocks.
func (l *leaseReturns) add(u *store.UnansweredClaim) {
	l.mu.Lock()
	if l.closed || len(l.queue) >= giveBackQueue {
		why := "too many claims are waiting to be given back"
		if l.closed {
			why = "the relay is shutting down"
		}
		l.mu.Unlock()
		l.abandon(u.RunnerID, len(u.Leases), why)
		return
	}
	l.queue = append(l.queue, lostClaim{u: *u, until: time.Now().Add(l.retryFor)})
	if l.workers < giveBackWorkers {
		l.workers++
		l.wg.Add(1)
		go l.work()
	}
	l.mu.Unlock()
}

func (l *leaseReturns) work() {
	defer l.wg.Done()
	for {
		l.mu.Lock()
		if len(l.queue) == 0 {
			l.workers--
			l.mu.Unlock()
			return
		}
		c := l.queue[0]
		l.queue[0] = lostClaim{}
		l.queue = l.queue[1:]
		l.mu.Unlock()
		l.giveBack(c)
	}
}

// giveBack tries until the store takes it, the leases would have lapsed, or
// the relay closes. Every attempt is safe to repeat (store.GiveBack is
// idempotent), including one whose own answer is lost.
func (l *leaseReturns) giveBack(c lostClaim) {
	pause := giveBackFirstPause
	for attempt := 1; ; attempt++ {
		given, err := l.st.GiveBack(l.ctx, c.u)
		if err == nil {
			if l.obs != nil {
				l.obs.RecordUnansweredClaim(l.ctx, len(given), false)
			}
			level := slog.LevelDebug
			if len(given) > 0 {
				level = slog.LevelInfo
			}
			l.log.Log(l.ctx, level, "claim: gave back the grants of a claim whose answer was lost; the jobs are claimable again",
				"runner", c.u.RunnerID, "leases", len(given), "attempts", attempt)
			return
		}
		if errors.Is(err, store.ErrInvalidInput) {
			l.abandon(c.u.RunnerID, len(c.u.Leases), err.Error()) // never happens: the store made the claim
			return
		}
		wait := pause/2 + rand.N(pause/2+1)
		if time.Now().Add(wait).After(c.until) {
			l.abandon(c.u.RunnerID, len(c.u.Leases), "the store did not take the give-back before the leases lapse: "+err.Error())
			return
		}
		select {
		case <-time.After(wait):
		case <-l.ctx.Done():
			l.abandon(c.u.RunnerID, len(c.u.Leases), "the relay is shutting down")
			return
		}
		pause = min(2*pause, giveBackMaxPause)
	}
}

func (l *leaseReturns) abandon(runner string, possible int, why string) {
	if l.obs != nil {
		l.obs.RecordUnansweredClaim(context.Background(), 0, true)
	}
	l.log.Warn("claim: the grants of a claim whose answer was lost were not given back; they return when their leases lapse",
		"runner", runner, "possibleLeases", possible, "retryFor", l.retryFor, "reason", why)
}

// close stops taking give-backs, lets those under way finish until ctx
// ends, then stops the rest; what was not given back is logged, one line a
// claim (its leases lapse by themselves within a lease).
func (l *leaseReturns) close(ctx context.Context) {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	done := make(chan struct{})
	go func() {
		l.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	l.cancel()
	<-done
}
