package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/byollm/relay-go/internal/grant"
	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
)

// GrantAuthority is the grant seam as the planes consume it (wire.md §14.1,
// §14.2): authorGrant for each claimed job, satisfiable at enqueue. The
// built-in engine, the engine with a remote signer and a remote control
// plane all implement it. An error is never a decision: the planes count it
// as a transient decline (claim) or the retryable 503 (enqueue).
type GrantAuthority interface {
	AuthorGrant(ctx context.Context, req grant.Request) (grant.Decision, error)
	Satisfiable(ctx context.Context, req grant.SatisfiableRequest) (grant.Verdict, error)
}

// GrantObserver counts authority calls by outcome; telemetry.Metrics
// implements it. op is "author" or "satisfiable"; outcome is one of
// "granted", "declined-permanent", "declined-transient", "failed",
// "skipped" (author) or the verdict / "failed" (satisfiable).
type GrantObserver interface {
	RecordGrantCall(ctx context.Context, op, outcome string, elapsed time.Duration)
}

// Defaults bounding the authority. A control plane answers from one policy
// read and one signature, in well under a millisecond on a LAN; one that
// has not answered in two seconds is down, and a claim must still answer
// the daemon well inside its own HTTP timeout.
const (
	DefaultGrantTimeout = 2 * time.Second
	// DefaultGrantBudget bounds all authority calls of one claim together:
	// a claim of 64 jobs against an authority that times out every call
	// would otherwise hold the daemon for 64 timeouts.
	DefaultGrantBudget = 5 * time.Second
	// DefaultFetchWait is RELAY_FETCH_WAIT's default: twice the daemon's
	// longest pause between fetches, well inside its 30 s request timeout.
	DefaultFetchWait = 2 * time.Second
	// DefaultGrantRetryAfter is the reference's RETRY_AFTER_MS: a
	// transient decline keeps the job away from its runner this long.
	DefaultGrantRetryAfter = 30 * time.Second
)

// claimedFields are the stub fields the grant loop reads.
type claimedFields struct {
	ID      string  `json:"id"`
	Site    string  `json:"site"`
	Purpose *string `json:"purpose"`
}

// authorGrants is wire.md §8.2 steps 4-7, after the store's claim and
// outside any script: each granted job, in order, goes to the authority;
// granted jobs go out with "grant" appended, permanent declines are released
// as refused, every other decline (an unknown site, an authority error or
// timeout, a spent budget) is released with a retry-after. Only the jobs
// that go out are returned.
func (r *Relay) authorGrants(req *request, dev device, caps json.RawMessage, granted []store.ClaimedStub) [][]byte {
	out := make([][]byte, 0, len(granted))
	var refused, returned []protocol.GrantRef
	deadline := time.Now().Add(r.grantBudget)
	for _, g := range granted {
		var f claimedFields
		if err := json.Unmarshal(g.Stub, &f); err != nil {
			// The store only grants stubs that parse.
			panic("relay: claimed stub does not decode: " + err.Error())
		}
		job := claimedStubJSON(g)
		ref := protocol.GrantRef{JobID: f.ID, LeaseID: g.Lease.ID}
		decision, ok := r.authorOne(req, dev, caps, f, job, deadline)
		switch {
		case ok && decision.Granted != nil:
			out = append(out, withGrant(job, decision.Granted))
		case ok && decision.Permanent:
			refused = append(refused, ref)
		default:
			returned = append(returned, ref)
		}
	}
	// The releases must happen even when the daemon has hung up: a job left
	// leased to a runner that never saw it waits out the whole lease.
	ctx := context.WithoutCancel(req.ctx)
	if len(refused) > 0 {
		if _, err := r.store.ReleaseLeases(ctx, store.ReleaseInput{
			RunnerID: dev.runnerID, Leases: refused, Reason: "refused",
		}); err != nil {
			r.log.Warn("claim: releasing permanently declined jobs failed; they return when their lease lapses",
				"runner", dev.runnerID, "jobs", len(refused), "err", err)
		}
	}
	if len(returned) > 0 {
		retryAfter := r.now() + r.grantRetryAfter.Milliseconds()
		if _, err := r.store.ReleaseLeases(ctx, store.ReleaseInput{
			RunnerID: dev.runnerID, Leases: returned, RetryAfter: &retryAfter,
		}); err != nil {
			r.log.Warn("claim: releasing declined jobs failed; they return when their lease lapses",
				"runner", dev.runnerID, "jobs", len(returned), "err", err)
		}
	}
	return out
}

// authorOne asks the authority about one job. ok is false for a decline the
// relay made itself (unknown site, spent budget, authority failure), which
// is always transient.
func (r *Relay) authorOne(req *request, dev device, caps json.RawMessage, f claimedFields, job []byte, deadline time.Time) (grant.Decision, bool) {
	siteID, known := req.proj.SiteIDForKey(f.Site)
	if !known {
		// The projection cannot place the stub's site: it is behind, not
		// the job (the reference's "unknown-site"); the authority is not
		// asked.
		r.observeGrant(req.ctx, "author", "skipped", 0)
		return grant.Decision{}, false
	}
	timeout := min(r.grantTimeout, time.Until(deadline))
	if timeout <= 0 {
		r.observeGrant(req.ctx, "author", "skipped", 0)
		return grant.Decision{}, false
	}
	in := grant.Request{
		Job: job, SiteID: siteID, SiteKey: f.Site,
		Owner: dev.owner, RunnerID: dev.runnerID, Capabilities: caps,
	}
	if f.Purpose != nil {
		in.Purpose, in.HasPurpose = *f.Purpose, true
	}
	ctx, cancel := context.WithTimeout(req.ctx, timeout)
	defer cancel()
	start := time.Now()
	d, err := bounded(ctx, func(ctx context.Context) (grant.Decision, error) { return r.grants.AuthorGrant(ctx, in) })
	elapsed := time.Since(start)
	if err == nil && d.Granted != nil && !json.Valid(d.Granted) {
		err = errors.New("the grant is not valid JSON")
	}
	if err == nil && ctx.Err() != nil {
		// An answer that arrived after the deadline is not trusted to be
		// fresh enough to ship; the bound is the bound.
		err = fmt.Errorf("answered after the %v timeout", timeout)
	}
	if err != nil {
		r.observeGrant(req.ctx, "author", "failed", elapsed)
		r.log.Warn("grant authority failed; the job goes back to its queue and is retried after 30 s",
			slog.String("job", f.ID), slog.String("runner", dev.runnerID),
			slog.Duration("elapsed", elapsed), slog.Any("err", err))
		return grant.Decision{}, false
	}
	switch {
	case d.Granted != nil:
		r.observeGrant(req.ctx, "author", "granted", elapsed)
	case d.Permanent:
		r.observeGrant(req.ctx, "author", "declined-permanent", elapsed)
	default:
		r.observeGrant(req.ctx, "author", "declined-transient", elapsed)
	}
	if d.Granted == nil {
		r.log.Debug("grant declined", slog.String("job", f.ID), slog.String("runner", dev.runnerID),
			slog.Bool("permanent", d.Permanent), slog.String("reason", d.Reason))
	}
	return d, true
}

// bounded runs f and returns its answer, or ctx's error as soon as ctx is
// done, whether or not f has returned: an authority that ignores its
// context (a wedged client, a lock held elsewhere) still cannot hold a claim
// or an enqueue past the bound. f keeps running to its own end; its late
// answer is dropped.
func bounded[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	type answer struct {
		v   T
		err error
	}
	done := make(chan answer, 1)
	go func() {
		defer func() {
			// A panicking authority is a failed call, not a dead replica.
			if p := recover(); p != nil {
				done <- answer{err: fmt.Errorf("grant authority panicked: %v", p)}
			}
		}()
		v, err := f(ctx)
		done <- answer{v, err}
	}()
	select {
	case a := <-done:
		return a.v, a.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("no answer: %w", context.Cause(ctx))
	}
}

// withGrant is the claimed stub with "grant" appended after "lease"
// (wire.md §8.2: stub fields, lease, grant), the grant carried verbatim.
func withGrant(job, signed []byte) []byte {
	out := make([]byte, 0, len(job)+len(signed)+10)
	out = append(out, job[:len(job)-1]...)
	out = append(out, `,"grant":`...)
	out = append(out, signed...)
	return append(out, '}')
}

// satisfiable is wire.md §9.1 step 2: nil when the enqueue may continue,
// otherwise the refusal (rows 28-31). It is consulted for every enqueue,
// an existing job id included, as the reference does.
func (r *Relay) satisfiable(ctx context.Context, siteID string, stub protocol.JobStub) *reply {
	// The schema refuses an empty purpose, so "" is an absent one.
	hasPurpose := stub.Purpose != ""
	in := grant.SatisfiableRequest{SiteID: siteID, Owner: stub.Owner, Kind: stub.Kind}
	if hasPurpose {
		in.Purpose, in.HasPurpose = stub.Purpose, true
	}
	cctx, cancel := context.WithTimeout(ctx, r.grantTimeout)
	defer cancel()
	start := time.Now()
	v, err := bounded(cctx, func(ctx context.Context) (grant.Verdict, error) { return r.grants.Satisfiable(ctx, in) })
	elapsed := time.Since(start)
	if err == nil && cctx.Err() != nil {
		err = fmt.Errorf("answered after the %v timeout", r.grantTimeout)
	}
	if err != nil {
		r.observeGrant(ctx, "satisfiable", "failed", elapsed)
		r.log.Warn("satisfiable failed; the enqueue is answered with the retryable 503",
			slog.String("site", siteID), slog.Duration("elapsed", elapsed), slog.Any("err", err))
		rep := satisfiableFailed
		return &rep
	}
	r.observeGrant(ctx, "satisfiable", string(v), elapsed)
	var rep reply
	switch v {
	case grant.VerdictNotDeclared:
		rep = refused(protocol.PurposeNotDeclared(stub.Purpose))
	case grant.VerdictUnmapped:
		rep = slotUnsatisfiable
	case grant.VerdictWaiting:
		rep = slotWaiting
	default:
		// "ok", or anything else: the reference continues.
		return nil
	}
	return &rep
}

var (
	satisfiableFailed = refused(protocol.SatisfiableFailed())
	slotUnsatisfiable = refused(protocol.SlotUnsatisfiable())
	slotWaiting       = refused(protocol.SlotWaiting())
)

func (r *Relay) observeGrant(ctx context.Context, op, outcome string, elapsed time.Duration) {
	if r.grantObs != nil {
		r.grantObs.RecordGrantCall(ctx, op, outcome, elapsed)
	}
}
