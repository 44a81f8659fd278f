package relay

import (
	"context"

	"github.com/byollm/relay-go/internal/store"
)

// WorkObserver is told what the planes' store calls meant, where the
// planes learn it: jobs enqueued and completed, claims and their grants,
// site-limit refusals, sweeps that moved jobs. What the calls cost (spans,
// latency, error classes) is the store's runner's to observe.
type WorkObserver interface {
	// Enqueued: a job of siteID was enqueued.
	Enqueued(ctx context.Context, siteID string)
	// Completed: a result was accepted (not a duplicate); recipientKeyID
	// is its envelope's recipientKeyId (a result is sealed to its site, so
	// it names the site without another store read).
	Completed(ctx context.Context, recipientKeyID string)
	// Claimed: a claim call handed out granted jobs (0 or more).
	Claimed(ctx context.Context, granted int)
	// SiteLimited: a request of siteID was refused at limit.
	SiteLimited(ctx context.Context, siteID, limit string)
	// Swept: a sweep settled jobs (requeued, or removed when SweptAway).
	Swept(ctx context.Context, jobs []store.Job)
}

// noWork is the WorkObserver of a relay configured without one.
type noWork struct{}

func (noWork) Enqueued(context.Context, string)            {}
func (noWork) Completed(context.Context, string)           {}
func (noWork) Claimed(context.Context, int)                {}
func (noWork) SiteLimited(context.Context, string, string) {}
func (noWork) Swept(context.Context, []store.Job)          {}

// sweep runs the read path's sweep and tells the observer what it moved.
func (r *Relay) sweep(ctx context.Context) error {
	jobs, err := r.store.Sweep(ctx)
	if err == nil && len(jobs) > 0 {
		r.work.Swept(ctx, jobs)
	}
	return err
}
