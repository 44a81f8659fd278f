package replica

import (
	"context"
	"log/slog"
	"time"

	"github.com/byollm/relay-go/internal/opsstore"
)

// The oldest-queued read is the operations view's per-site read (ops_site):
// one script call per page of queueAgePageSize live jobs, at most
// queueAgePages per site. It is too costly to run on every scrape for
// every site, so queueAge runs it in the background, for at most
// queueAgeSitesPerPass sites per pass, and the gauge reports the last value.
const (
	queueAgePageSize     = 128
	queueAgePages        = 4
	queueAgeSitesPerPass = 256
)

// queueAge keeps, per projection site, when its oldest queued job was
// enqueued (zero: none queued). Sites beyond one pass's budget are read on
// the next passes in turn; a site that left the projection is dropped.
type queueAge struct {
	read  func(ctx context.Context, siteID string) (opsstore.SiteStates, error)
	sites func() []string // the projection's sites, in a stable order
	log   *slog.Logger

	since map[string]time.Time
	next  int // rotation offset into sites() when they exceed one pass
}

// pass reads up to queueAgeSitesPerPass sites and returns the whole
// current map (a copy is taken by the gauge). A failed read keeps the
// site's last value.
func (q *queueAge) pass(ctx context.Context) map[string]time.Time {
	ids := q.sites()
	keep := make(map[string]time.Time, len(ids))
	for _, id := range ids {
		if at, ok := q.since[id]; ok {
			keep[id] = at
		}
	}
	q.since = keep
	n := min(len(ids), queueAgeSitesPerPass)
	if q.next >= len(ids) {
		q.next = 0
	}
	for i := 0; i < n; i++ {
		id := ids[(q.next+i)%len(ids)]
		st, err := q.read(ctx, id)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			q.log.Debug("queue age read failed", slog.String("site", id), slog.Any("err", err))
			continue
		}
		var at time.Time
		if st.OldestQueuedID != "" {
			at = time.UnixMicro(st.OldestQueuedSeq)
		}
		q.since[id] = at
	}
	if len(ids) > 0 {
		q.next = (q.next + n) % len(ids)
	}
	return q.since
}

// run does a pass every interval until ctx ends, handing each result to set.
func (q *queueAge) run(ctx context.Context, interval time.Duration, set func(map[string]time.Time)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		set(q.pass(ctx))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
