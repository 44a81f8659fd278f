package replica

import (
	"context"

	"github.com/byollm/relay-go/internal/opsview"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/internal/telemetry"
)

// workMetrics is the planes' relay.WorkObserver: it counts what their
// store calls meant, as opposed to what they cost (the store's runner
// observes that for every caller alike): claims and their grants,
// site-limit refusals, read-path sweeps, and per-site enqueues and
// completions for the operations view.
type workMetrics struct {
	m *telemetry.Metrics
	// act counts per-site enqueues and completions in memory for the
	// operations view (nil: not counted); siteOfKey maps a result's
	// recipient key id to its site.
	act       *opsview.Activity
	siteOfKey func(keyID string) (string, bool)
}

func (w *workMetrics) Enqueued(_ context.Context, siteID string) {
	if w.act != nil {
		w.act.Enqueued(siteID)
	}
}

func (w *workMetrics) Completed(_ context.Context, recipientKeyID string) {
	if w.act == nil || w.siteOfKey == nil {
		return
	}
	if site, ok := w.siteOfKey(recipientKeyID); ok {
		w.act.Completed(site)
	}
}

func (w *workMetrics) Claimed(ctx context.Context, granted int) { w.m.RecordClaim(ctx, granted) }

func (w *workMetrics) SiteLimited(ctx context.Context, siteID, limit string) {
	w.m.RecordSiteLimit(ctx, siteID, limit)
}

// Swept counts a sweep that moved jobs (requeued, or removed when
// SweptAway), matching what the background sweeper reports.
func (w *workMetrics) Swept(ctx context.Context, jobs []store.Job) {
	var requeued, removed int
	for _, j := range jobs {
		if j.SweptAway {
			removed++
		} else {
			requeued++
		}
	}
	if requeued+removed > 0 {
		w.m.RecordSweep(ctx, requeued, removed)
	}
}
