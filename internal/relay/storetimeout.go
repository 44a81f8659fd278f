package relay

import (
	"context"
	"encoding/json"
	"time"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
)

// DefaultStoreTimeout bounds each store call a plane makes. A healthy store
// answers in well under a millisecond; one that has not answered within
// half a second is stuck (frozen, failing over, swapping), and the request
// is better answered with the retryable 503 at once than held until the
// connection is declared dead many seconds later.
const DefaultStoreTimeout = 500 * time.Millisecond

// timedStore gives every store call its own deadline. A deadline that
// passes surfaces as context.DeadlineExceeded, which the planes answer with
// the retryable 503 server-error, as they answer an unreachable store.
// valkey-go returns as soon as the context is done, and its retries of
// read-only commands (valkeyconn's quickRetries) stop there too.
type timedStore struct {
	s    Store
	d    time.Duration
	idle time.Duration // added for a heartbeat that says it is idle (Config.IdleBeatWait)
}

func (t timedStore) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, t.d)
}

func (t timedStore) Now(ctx context.Context) (int64, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.Now(ctx)
}

func (t timedStore) Enqueue(ctx context.Context, in store.EnqueueInput) (store.Job, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.Enqueue(ctx, in)
}

func (t timedStore) Jobs(ctx context.Context) ([]store.Job, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.Jobs(ctx)
}

func (t timedStore) PendingJobs(ctx context.Context, siteID string) ([]store.PendingJob, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.PendingJobs(ctx, siteID)
}

func (t timedStore) ResultJobs(ctx context.Context, siteID string) ([]*store.ResultJob, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.ResultJobs(ctx, siteID)
}

func (t timedStore) Claim(ctx context.Context, in store.ClaimInput) ([]store.ClaimedStub, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.Claim(ctx, in)
}

func (t timedStore) TakePayload(ctx context.Context, in store.HolderInput) (store.TakeResult, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.TakePayload(ctx, in)
}

func (t timedStore) Complete(ctx context.Context, in store.CompleteInput) (store.CompleteResult, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.Complete(ctx, in)
}

func (t timedStore) ReleaseLeases(ctx context.Context, in store.ReleaseInput) ([]string, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.ReleaseLeases(ctx, in)
}

func (t timedStore) GiveBack(ctx context.Context, u store.UnansweredClaim) ([]string, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.GiveBack(ctx, u)
}

func (t timedStore) Seal(ctx context.Context, siteID, jobID string, envelope json.RawMessage) (store.SealResult, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.Seal(ctx, siteID, jobID, envelope)
}

func (t timedStore) Cancel(ctx context.Context, siteID, jobID string) (bool, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.Cancel(ctx, siteID, jobID)
}

func (t timedStore) CancelRequests(ctx context.Context, runnerID string) ([]protocol.GrantRef, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.CancelRequests(ctx, runnerID)
}

func (t timedStore) RenewLeases(ctx context.Context, in store.RenewInput) (store.RenewResult, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.RenewLeases(ctx, in)
}

func (t timedStore) Seen(ctx context.Context, p store.Presence) (store.Presence, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.Seen(ctx, p)
}

func (t timedStore) Heartbeat(ctx context.Context, in store.HeartbeatInput) (store.HeartbeatResult, error) {
	d := t.d
	if in.Idle != nil {
		// The store may hold an idle write for its idle window before
		// sending it; only the time after that is the store's.
		d += t.idle
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return t.s.Heartbeat(ctx, in)
}

func (t timedStore) PresenceHead(ctx context.Context, runnerID string) (*store.Presence, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.PresenceHead(ctx, runnerID)
}

func (t timedStore) Everyone(ctx context.Context) ([]store.Presence, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.Everyone(ctx)
}

func (t timedStore) DropPresence(ctx context.Context, runnerID string) error {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.DropPresence(ctx, runnerID)
}

func (t timedStore) Sweep(ctx context.Context) ([]store.Job, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.Sweep(ctx)
}

func (t timedStore) PutPairing(ctx context.Context, p store.PendingPairing) (store.PairingOutcome, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.PutPairing(ctx, p)
}

func (t timedStore) PairingByDeviceCode(ctx context.Context, code string) (*store.PendingPairing, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.PairingByDeviceCode(ctx, code)
}

func (t timedStore) DropPairing(ctx context.Context, deviceCode string) error {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.DropPairing(ctx, deviceCode)
}
