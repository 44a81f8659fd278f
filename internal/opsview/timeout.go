package opsview

import (
	"context"
	"encoding/json"
	"time"

	"github.com/byollm/relay-go/internal/opsstore"
	"github.com/byollm/relay-go/internal/projection"
	"github.com/byollm/relay-go/internal/store"
)

// timedSource bounds each of the view's store reads and writes by
// Options.StoreTimeout (config RELAY_STORE_TIMEOUT, as the planes): with
// Valkey frozen a page answers its 503 "unavailable" within about the
// timeout.
type timedSource struct {
	s Source
	d time.Duration
}

func (t timedSource) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, t.d)
}

func (t timedSource) Projection() *projection.Projection { return t.s.Projection() }

func (t timedSource) SiteStates(ctx context.Context, siteID string) (opsstore.SiteStates, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.SiteStates(ctx, siteID)
}

func (t timedSource) Churn(ctx context.Context, siteID string, owners []string) (map[string]int64, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.Churn(ctx, siteID, owners)
}

func (t timedSource) Job(ctx context.Context, siteID, jobID string) (*store.Job, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.Job(ctx, siteID, jobID)
}

func (t timedSource) Presence(ctx context.Context, runnerID string) (*store.Presence, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.Presence(ctx, runnerID)
}

func (t timedSource) PresenceMany(ctx context.Context, runnerIDs []string) (map[string]opsstore.PresenceSeen, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.PresenceMany(ctx, runnerIDs)
}

func (t timedSource) DeviceLeases(ctx context.Context, runnerID string) (opsstore.DeviceLeases, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.DeviceLeases(ctx, runnerID)
}

func (t timedSource) Replicas(ctx context.Context) ([]Replica, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.Replicas(ctx)
}

func (t timedSource) Valkey(ctx context.Context) (ValkeyInfo, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.Valkey(ctx)
}

func (t timedSource) Now(ctx context.Context) (int64, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.Now(ctx)
}

func (t timedSource) PutToken(ctx context.Context, digest, id string, record []byte, site string) error {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.PutToken(ctx, digest, id, record, site)
}

func (t timedSource) Token(ctx context.Context, digest string) (json.RawMessage, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.Token(ctx, digest)
}

func (t timedSource) DropToken(ctx context.Context, id string) (bool, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.DropToken(ctx, id)
}

func (t timedSource) Tokens(ctx context.Context) ([]json.RawMessage, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.Tokens(ctx)
}
