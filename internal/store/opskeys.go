package store

// What internal/opsstore (the operations view's data) needs of the routing
// store: the names of the keys it reads, built here with every other key,
// and a way to run its scripts (lua/ops_*.lua) as the store runs its own
// (common ARGV, migration guard, observed, bounded, classified). The reads
// themselves and their replies are opsstore's.
//
// The view's own keys are fleet-wide ("<ns>:{<ns>}:"): small and bounded
// (opsstore.MaxReplicaRecords replicas, opsstore.MaxViewTokens tokens).
//
//	ops:rs                 ZSET  replica id -> last heartbeat (ms)
//	ops:r:⟨id⟩             STR   the replica's heartbeat record (JSON), PX TTL
//	ops:tk                 HASH  SHA-256 of a scoped view token -> record JSON
//	ops:ti                 HASH  token id -> SHA-256
//	ops:tg                 HASH  SHA-256 -> "<site generation>|<id>|<site>" (projection:sites, kept by projectionsync)

import (
	"context"
	"fmt"
	"sort"

	"github.com/valkey-io/valkey-go"
)

// opsScripts are the store's scripts internal/opsstore runs.
var opsScripts = map[string]Script{scOpsChurn.Name: scOpsChurn, scOpsDevice.Name: scOpsDevice, scOpsPresence.Name: scOpsPresence,
	scOpsReplicaPut.Name: scOpsReplicaPut, scOpsReplicas.Name: scOpsReplicas, scOpsSite.Name: scOpsSite,
	scOpsTokenDrop.Name: scOpsTokenDrop, scOpsTokenGet.Name: scOpsTokenGet, scOpsTokenList.Name: scOpsTokenList,
	scOpsTokenPut.Name: scOpsTokenPut}

// RunOpsScript runs one of lua/ops_*.lua (by name, without ".lua") on keys
// and args; it refuses any other script.
func (s *Store) RunOpsScript(ctx context.Context, name string, keys []string, args ...string) (valkey.ValkeyMessage, error) {
	sc, ok := opsScripts[name]
	if !ok {
		return valkey.ValkeyMessage{}, fmt.Errorf("no operations-view script %q", name)
	}
	return s.run(ctx, sc, keys, args...)
}

// CheckID refuses an identifier the store would refuse (too long, U+0000,
// not UTF-8), wrapping ErrInvalidInput.
func (s *Store) CheckID(field, v string) error { return s.checkID(field, v) }

// EncodeKeyPart is how an id, owner or site appears in key names, script
// arguments and replies (base64url without padding); DecodeKeyPart undoes
// it, naming what in its error.
func EncodeKeyPart(v string) string { return enc(v) }

// DecodeKeyPart: see EncodeKeyPart.
func DecodeKeyPart(what, e string) (string, error) { return dec(what, e) }

// DecodeJobID is how a script's reply names a job by its id's key part,
// which is compact for a UUID (encJob), undone.
func DecodeJobID(e string) (string, error) { return decJob(e) }

// SiteReadKeys are the keys of one site a read of its jobs uses, all on
// the site's shard.
type SiteReadKeys struct {
	Live, Awaiting, Finished string // sl:⟨S⟩, aw:⟨S⟩, fin:⟨S⟩
	churn                    string
}

// Churn is the (site, owner) pair's churn record, churn:⟨S⟩:⟨O⟩.
func (k SiteReadKeys) Churn(owner string) string { return k.churn + enc(owner) }

// SiteReadKeys names a site's keys on its shard. A site the placement
// record does not name is read on its hash shard (where it would hold
// nothing) and is not placed by the read.
func (s *Store) SiteReadKeys(ctx context.Context, siteID string) (SiteReadKeys, error) {
	if err := s.checkID("site id", siteID); err != nil {
		return SiteReadKeys{}, err
	}
	k, err := s.siteKeys(ctx, siteID)
	if err != nil {
		return SiteReadKeys{}, err
	}
	return SiteReadKeys{Live: k.siteLive(siteID), Awaiting: k.awaiting(siteID), Finished: k.finished(siteID),
		churn: k.sp(siteID) + "churn:" + enc(siteID) + ":"}, nil
}

// PresenceGroup is runners whose presence records (p:⟨R⟩) share a shard,
// and those records' keys, in the same order.
type PresenceGroup struct {
	RunnerIDs, Keys []string
}

// PresenceGroups groups runners by the shard of their presence records, in
// the order each shard is first met.
func (s *Store) PresenceGroups(runnerIDs []string) ([]PresenceGroup, error) {
	var out []PresenceGroup
	at := map[int]int{}
	for _, r := range runnerIDs {
		if err := s.checkID("runner id", r); err != nil {
			return nil, err
		}
		sh := s.k.runnerShard(r)
		i, ok := at[sh]
		if !ok {
			i = len(out)
			at[sh] = i
			out = append(out, PresenceGroup{})
		}
		out[i].RunnerIDs = append(out[i].RunnerIDs, r)
		out[i].Keys = append(out[i].Keys, s.k.presence(r))
	}
	return out, nil
}

// RunnerShardKeys are a runner's grant indexes on one shard: hid:⟨R⟩ (its
// grants, done ones included) and cxl:⟨R⟩ (the cancelled ones).
type RunnerShardKeys struct {
	Held, Cancelled string
}

// RunnerShardKeys names a runner's grant indexes on every shard where it
// was granted a job (its record of shards, rsh:⟨R⟩: one ZRANGE), in shard
// order.
func (s *Store) RunnerShardKeys(ctx context.Context, runnerID string) ([]RunnerShardKeys, error) {
	if err := s.checkID("runner id", runnerID); err != nil {
		return nil, err
	}
	shards, err := s.runnerShardList(ctx, runnerID)
	if err != nil {
		return nil, fmt.Errorf("runner shards: %w", err)
	}
	sort.Ints(shards)
	out := make([]RunnerShardKeys, len(shards))
	for i, sh := range shards {
		out[i] = RunnerShardKeys{Held: s.k.heldIDs(sh, runnerID), Cancelled: s.k.cancelled(sh, runnerID)}
	}
	return out, nil
}

// OpsKeys are the operations view's fleet-wide keys (above), and the
// projection's that a view token is bound to (projectionsync's document
// and per-site generations; the same prefix, so one slot).
type OpsKeys struct {
	Replicas                    string // ops:rs
	Tokens, TokenIDs, TokenGens string // ops:tk, ops:ti, ops:tg
	ProjectionSites, Projection string // projection:sites, projection
	records                     string
}

// ReplicaRecord is a replica's heartbeat record, ops:r:⟨id⟩.
func (k OpsKeys) ReplicaRecord(replicaID string) string { return k.records + enc(replicaID) }

// OpsKeys names the operations view's fleet-wide keys.
func (s *Store) OpsKeys() OpsKeys {
	p := s.k.p
	return OpsKeys{Replicas: p + "ops:rs", records: p + "ops:r:", Tokens: p + "ops:tk", TokenIDs: p + "ops:ti", TokenGens: p + "ops:tg",
		ProjectionSites: p + "projection:sites", Projection: p + "projection"}
}
