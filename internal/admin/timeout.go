package admin

import (
	"context"
	"time"

	"github.com/byollm/relay-go/internal/pairings"
	"github.com/byollm/relay-go/internal/policy"
	"github.com/byollm/relay-go/internal/store"
)

// The admin routes' store calls are bounded by Options.StoreTimeout (config
// RELAY_STORE_TIMEOUT), as the planes' are: a frozen or failing-over Valkey
// makes a route answer the retryable 503 {"error":"unavailable"} within
// about the timeout (store.Classify counts a passed deadline as
// unavailable) instead of when valkey-go finally gives up on the
// connection. The projection's calls are bounded inside projectionsync
// (its Options.StoreTimeout), which the relay sets to the same value; these
// wrap the other stores. A wrapped call is one logical operation: an
// approval's few reads and its one write share the bound.

func bounded(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

type timedPairings struct {
	p Pairings
	d time.Duration
}

func (t timedPairings) Show(ctx context.Context, userCode string) (pairings.Pairing, error) {
	ctx, cancel := bounded(ctx, t.d)
	defer cancel()
	return t.p.Show(ctx, userCode)
}

func (t timedPairings) Approve(ctx context.Context, userCode string, a pairings.Approval) (pairings.Approved, error) {
	ctx, cancel := bounded(ctx, t.d)
	defer cancel()
	return t.p.Approve(ctx, userCode, a)
}

func (t timedPairings) Deny(ctx context.Context, userCode string) error {
	ctx, cancel := bounded(ctx, t.d)
	defer cancel()
	return t.p.Deny(ctx, userCode)
}

type timedPolicies struct {
	p Policies
	d time.Duration
}

func (t timedPolicies) Get(ctx context.Context) (policy.Document, int64, error) {
	ctx, cancel := bounded(ctx, t.d)
	defer cancel()
	return t.p.Get(ctx)
}

func (t timedPolicies) Put(ctx context.Context, d policy.Document) (int64, error) {
	ctx, cancel := bounded(ctx, t.d)
	defer cancel()
	return t.p.Put(ctx, d)
}

func (t timedPolicies) MergeChanged(ctx context.Context, d policy.Document) (int64, bool, error) {
	ctx, cancel := bounded(ctx, t.d)
	defer cancel()
	return t.p.MergeChanged(ctx, d)
}

type timedPlacement struct {
	p Placement
	d time.Duration
}

func (t timedPlacement) Placement(ctx context.Context, withSites bool) (store.PlacementReport, error) {
	ctx, cancel := bounded(ctx, t.d)
	defer cancel()
	return t.p.Placement(ctx, withSites)
}
