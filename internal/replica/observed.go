package replica

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/byollm/relay-go/internal/opsview"
	"github.com/byollm/relay-go/internal/relay"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/internal/telemetry"
)

// metricsStore counts what the planes' store calls mean, as opposed to what
// they cost: claims and their grants, site-limit refusals, read-path sweeps.
// Spans, latency and error classes of every script come from the store's
// own runner (store.Options.ObserveScript), for every caller alike.
type metricsStore struct {
	relay.Store
	m *telemetry.Metrics
	// act counts per-site enqueues and completions in memory for the
	// operations view (nil: not counted); siteOfKey maps a result's
	// recipient key id to its site.
	act       *opsview.Activity
	siteOfKey func(keyID string) (string, bool)
}

func (o *metricsStore) Enqueue(ctx context.Context, in store.EnqueueInput) (store.Job, error) {
	job, err := o.Store.Enqueue(ctx, in)
	var limited *store.SiteLimitError
	if errors.As(err, &limited) {
		o.m.RecordSiteLimit(ctx, in.SiteID, limited.Limit)
		return job, fmt.Errorf("enqueue: %w", limited)
	}
	if err == nil && o.act != nil {
		o.act.Enqueued(in.SiteID)
	}
	return job, err
}

func (o *metricsStore) Complete(ctx context.Context, in store.CompleteInput) (store.CompleteResult, error) {
	r, err := o.Store.Complete(ctx, in)
	if err == nil && r.Accepted && !r.Duplicate && o.act != nil && o.siteOfKey != nil {
		if site, ok := o.siteOfKey(opsview.RecipientKeyID(in.Envelope)); ok {
			o.act.Completed(site)
		}
	}
	return r, err
}

func (o *metricsStore) Claim(ctx context.Context, in store.ClaimInput) ([]store.ClaimedStub, error) {
	stubs, err := o.Store.Claim(ctx, in)
	if err == nil {
		o.m.RecordClaim(ctx, len(stubs))
	}
	return stubs, err
}

func (o *metricsStore) Seal(ctx context.Context, siteID, jobID string, envelope json.RawMessage) (store.SealResult, error) {
	r, err := o.Store.Seal(ctx, siteID, jobID, envelope)
	if err == nil && r.Refused == store.RefusedSiteLimit {
		o.m.RecordSiteLimit(ctx, siteID, r.Limit)
	}
	return r, err
}

func (o *metricsStore) Sweep(ctx context.Context) ([]store.Job, error) {
	jobs, err := o.Store.Sweep(ctx)
	if err == nil {
		recordSweep(ctx, o.m, jobs)
	}
	return jobs, err
}

// recordSweep counts a sweep that moved jobs (requeued, or removed when
// SweptAway), matching what the background sweeper reports.
func recordSweep(ctx context.Context, m *telemetry.Metrics, jobs []store.Job) {
	var requeued, removed int
	for _, j := range jobs {
		if j.SweptAway {
			removed++
		} else {
			requeued++
		}
	}
	if requeued+removed > 0 {
		m.RecordSweep(ctx, requeued, removed)
	}
}
