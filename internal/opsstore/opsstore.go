// Package opsstore is the operations view's data: bounded reads of the
// routing state (a site's jobs by state, its churn, devices' presence, a
// device's leases) and the view's own fleet-wide records (replica
// heartbeats, scoped view tokens). The routing store names every key and
// runs every script (Routing); this package chooses what to read and
// decodes the replies.
//
// Every read is bounded (pages of one set or index, never SCAN or KEYS),
// single-slot, and read-only (lua/ops_*.lua). A site's page reads its
// site's shard only; a device's page reads the runner's record of shards
// and then its grant indexes on those shards only; presence is read one
// script per shard of the runners asked for.
package opsstore

import (
	"context"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/store"
)

// Routing is what the reads need of the routing store (*store.Store is
// one).
type Routing interface {
	RunOpsScript(ctx context.Context, name string, keys []string, args ...string) (valkey.ValkeyMessage, error)
	CheckID(field, v string) error
	SiteReadKeys(ctx context.Context, siteID string) (store.SiteReadKeys, error)
	PresenceGroups(runnerIDs []string) ([]store.PresenceGroup, error)
	RunnerShardKeys(ctx context.Context, runnerID string) ([]store.RunnerShardKeys, error)
	OpsKeys() store.OpsKeys
}

// Store reads and writes the operations view's data through a routing
// store.
type Store struct {
	r Routing
}

// New is the operations view's data on r.
func New(r Routing) *Store { return &Store{r: r} }

func (s *Store) runInt(ctx context.Context, name string, keys []string, args ...string) (int64, error) {
	msg, err := s.r.RunOpsScript(ctx, name, keys, args...)
	if err != nil {
		return 0, err
	}
	return msg.AsInt64()
}
