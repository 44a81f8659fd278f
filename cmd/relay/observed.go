package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/byollm/relay-go/internal/opsview"
	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/relay"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/internal/telemetry"
)

// observedStore gives every store call the planes make a child span and a
// latency/error sample (labelled by operation), and counts claims and
// read-path sweeps. It sits between the planes and the store until the
// store reports per script itself.
type observedStore struct {
	relay.Store
	obs telemetry.ScriptObserver
	m   *telemetry.Metrics
	// act counts per-site enqueues and completions in memory for the
	// operations view (nil: not counted); siteOfKey maps a result's
	// recipient key id to its site.
	act       *opsview.Activity
	siteOfKey func(keyID string) (string, bool)
}

func observe[T any](o *observedStore, ctx context.Context, op string, f func(context.Context) (T, error)) (T, error) {
	ctx, end := o.obs(ctx, op)
	v, err := f(ctx)
	end(err)
	return v, err
}

func (o *observedStore) Now(ctx context.Context) (int64, error) {
	return observe(o, ctx, "now", o.Store.Now)
}

func (o *observedStore) Enqueue(ctx context.Context, in store.EnqueueInput) (store.Job, error) {
	// A site-limit refusal is a reply of the script, not a failure of it:
	// it is counted as a refusal and kept out of the script errors.
	var limited *store.SiteLimitError
	job, err := observe(o, ctx, "enqueue", func(ctx context.Context) (store.Job, error) {
		job, err := o.Store.Enqueue(ctx, in)
		if errors.As(err, &limited) {
			return job, nil
		}
		return job, err
	})
	if limited != nil {
		o.m.RecordSiteLimit(ctx, in.SiteID, limited.Limit)
		return job, fmt.Errorf("enqueue: %w", limited)
	}
	if err == nil {
		o.act.Enqueued(in.SiteID)
	}
	return job, err
}

func (o *observedStore) Jobs(ctx context.Context) ([]store.Job, error) {
	return observe(o, ctx, "jobs", o.Store.Jobs)
}

func (o *observedStore) PendingJobs(ctx context.Context, siteID string) ([]store.PendingJob, error) {
	return observe(o, ctx, "pending_jobs", func(ctx context.Context) ([]store.PendingJob, error) { return o.Store.PendingJobs(ctx, siteID) })
}

func (o *observedStore) ResultJobs(ctx context.Context, siteID string) ([]*store.ResultJob, error) {
	return observe(o, ctx, "result_jobs", func(ctx context.Context) ([]*store.ResultJob, error) { return o.Store.ResultJobs(ctx, siteID) })
}

func (o *observedStore) Claim(ctx context.Context, in store.ClaimInput) ([]store.ClaimedStub, error) {
	stubs, err := observe(o, ctx, "claim", func(ctx context.Context) ([]store.ClaimedStub, error) { return o.Store.Claim(ctx, in) })
	if err == nil {
		o.m.RecordClaim(ctx, len(stubs))
	}
	return stubs, err
}

func (o *observedStore) TakePayload(ctx context.Context, in store.HolderInput) (store.TakeResult, error) {
	return observe(o, ctx, "take", func(ctx context.Context) (store.TakeResult, error) { return o.Store.TakePayload(ctx, in) })
}

func (o *observedStore) Complete(ctx context.Context, in store.CompleteInput) (store.CompleteResult, error) {
	r, err := observe(o, ctx, "complete", func(ctx context.Context) (store.CompleteResult, error) { return o.Store.Complete(ctx, in) })
	if err == nil && r.Accepted && !r.Duplicate && o.act != nil && o.siteOfKey != nil {
		if site, ok := o.siteOfKey(opsview.RecipientKeyID(in.Envelope)); ok {
			o.act.Completed(site)
		}
	}
	return r, err
}

func (o *observedStore) ReleaseLeases(ctx context.Context, in store.ReleaseInput) ([]string, error) {
	return observe(o, ctx, "release", func(ctx context.Context) ([]string, error) { return o.Store.ReleaseLeases(ctx, in) })
}

func (o *observedStore) Seal(ctx context.Context, siteID, jobID string, envelope json.RawMessage) (store.SealResult, error) {
	r, err := observe(o, ctx, "seal", func(ctx context.Context) (store.SealResult, error) {
		return o.Store.Seal(ctx, siteID, jobID, envelope)
	})
	if err == nil && r.Refused == store.RefusedSiteLimit {
		o.m.RecordSiteLimit(ctx, siteID, r.Limit)
	}
	return r, err
}

func (o *observedStore) Cancel(ctx context.Context, siteID, jobID string) (bool, error) {
	return observe(o, ctx, "cancel", func(ctx context.Context) (bool, error) { return o.Store.Cancel(ctx, siteID, jobID) })
}

func (o *observedStore) CancelRequests(ctx context.Context, runnerID string) ([]protocol.GrantRef, error) {
	return observe(o, ctx, "cancel_requests", func(ctx context.Context) ([]protocol.GrantRef, error) {
		return o.Store.CancelRequests(ctx, runnerID)
	})
}

func (o *observedStore) RenewLeases(ctx context.Context, in store.RenewInput) (store.RenewResult, error) {
	return observe(o, ctx, "renew", func(ctx context.Context) (store.RenewResult, error) { return o.Store.RenewLeases(ctx, in) })
}

func (o *observedStore) Seen(ctx context.Context, p store.Presence) (store.Presence, error) {
	return observe(o, ctx, "presence_seen", func(ctx context.Context) (store.Presence, error) { return o.Store.Seen(ctx, p) })
}

func (o *observedStore) PresenceHead(ctx context.Context, runnerID string) (*store.Presence, error) {
	return observe(o, ctx, "presence_head", func(ctx context.Context) (*store.Presence, error) {
		return o.Store.PresenceHead(ctx, runnerID)
	})
}

func (o *observedStore) Everyone(ctx context.Context) ([]store.Presence, error) {
	return observe(o, ctx, "presence_all", o.Store.Everyone)
}

func (o *observedStore) DropPresence(ctx context.Context, runnerID string) error {
	_, err := observe(o, ctx, "presence_drop", func(ctx context.Context) (struct{}, error) {
		return struct{}{}, o.Store.DropPresence(ctx, runnerID)
	})
	return err
}

func (o *observedStore) Sweep(ctx context.Context) ([]store.Job, error) {
	jobs, err := observe(o, ctx, "sweep", o.Store.Sweep)
	if err == nil {
		recordSweep(ctx, o.m, jobs)
	}
	return jobs, err
}

func (o *observedStore) PutPairing(ctx context.Context, p store.PendingPairing) (store.PairingOutcome, error) {
	return observe(o, ctx, "pairing_put", func(ctx context.Context) (store.PairingOutcome, error) { return o.Store.PutPairing(ctx, p) })
}

func (o *observedStore) PairingByDeviceCode(ctx context.Context, code string) (*store.PendingPairing, error) {
	return observe(o, ctx, "pairing_get", func(ctx context.Context) (*store.PendingPairing, error) {
		return o.Store.PairingByDeviceCode(ctx, code)
	})
}

func (o *observedStore) DropPairing(ctx context.Context, deviceCode string) error {
	_, err := observe(o, ctx, "pairing_drop", func(ctx context.Context) (struct{}, error) {
		return struct{}{}, o.Store.DropPairing(ctx, deviceCode)
	})
	return err
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
