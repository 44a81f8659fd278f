package store

// Reads and records for the operations view (internal/opsview). They read
// the sharded layout (doc.go, mode S): a site's page reads its site's shard
// only (j:⟨S⟩:⟨J⟩, sl:⟨S⟩, aw:⟨S⟩, fin:⟨S⟩, churn:⟨S⟩:⟨O⟩), a device's
// page reads the runner's record of shards (rsh:⟨R⟩) and then hid:⟨R⟩ and
// cxl:⟨R⟩ on those shards only, and presence is read one script per shard
// of the runners asked for. Everything the view needs from the store is in
// this file and in lua/ops_*.lua, so a change of layout ports them in one
// place. Every read is bounded (pages of one set or index, never SCAN or
// KEYS), single-slot, and runs with EVALSHA_RO.
//
// The view's own keys are fleet-wide ("<ns>:{<ns>}:"): small and bounded
// (at most MaxReplicaRecords replicas, MaxViewTokens tokens).
//
//	ops:rs                 ZSET  replica id -> last heartbeat (ms)
//	ops:r:⟨id⟩             STR   the replica's heartbeat record (JSON), PX TTL
//	ops:tk                 HASH  SHA-256 of a scoped view token -> record JSON
//	ops:ti                 HASH  token id -> SHA-256
//	ops:tg                 HASH  SHA-256 -> "<site generation>|<id>|<site>" (projection:sites, kept by projectionsync)

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/valkey-io/valkey-go"
)

// SiteStates is a site's jobs by state. Live, AwaitingPayload and Done are
// exact (one SCARD/ZCARD each); Queued, Ready and Running come from reading
// the live set in pages and are exact unless Partial (the page budget ran
// out first; they are then lower bounds).
//
// The oldest queued job is the one with the smallest seq among the queued
// jobs read, so it is the site's oldest unless Partial. A job's seq is its
// first enqueue's instant in µs on its shard's server clock (next_seq in
// lua/lib/common.lua), so OldestQueuedAt is when it was enqueued, in ms.
type SiteStates struct {
	Live, Queued, AwaitingPayload, Ready, Running, Done int64
	Partial                                             bool
	OldestQueuedID                                      string // "" when none queued
	OldestQueuedSeq                                     int64
	OldestQueuedAt                                      int64 // ms: OldestQueuedSeq / 1000
	Scripts                                             int   // script calls the read took
}

// OpsSiteStates reads a site's jobs by state in at most maxPages pages of
// about pageSize live jobs each.
func (s *Store) OpsSiteStates(ctx context.Context, siteID string, pageSize, maxPages int) (SiteStates, error) {
	if err := s.checkID("site id", siteID); err != nil {
		return SiteStates{}, fmt.Errorf("ops site: %w", err)
	}
	k, err := s.siteKeys(ctx, siteID)
	if err != nil {
		return SiteStates{}, fmt.Errorf("ops site: %w", err)
	}
	eS := enc(siteID)
	keys := []string{k.siteLive(siteID), k.awaiting(siteID), k.finished(siteID)}
	var out SiteStates
	cursor := "0"
	for {
		msg, err := s.run(ctx, scOpsSite, keys, eS, cursor, strconv.Itoa(pageSize))
		if err != nil {
			return SiteStates{}, fmt.Errorf("ops site: %w", err)
		}
		out.Scripts++
		parts, err := elems(msg, 11)
		if err != nil {
			return SiteStates{}, fmt.Errorf("ops site: %w", err)
		}
		var v [11]string
		for i := range v {
			if v[i], err = parts[i].ToString(); err != nil {
				n, err2 := parts[i].AsInt64()
				if err2 != nil {
					return SiteStates{}, fmt.Errorf("ops site: item %d: %w", i, err)
				}
				v[i] = strconv.FormatInt(n, 10)
			}
		}
		n := func(i int) int64 { x, _ := strconv.ParseInt(v[i], 10, 64); return x }
		out.Live, out.AwaitingPayload, out.Done = n(1), n(2), n(3)
		out.Queued += n(5)
		out.Ready += n(6)
		out.Running += n(7)
		if v[9] != "" && (out.OldestQueuedID == "" || n(9) < out.OldestQueuedSeq) {
			id, err := dec("job id", v[10])
			if err != nil {
				return SiteStates{}, fmt.Errorf("ops site: %w", err)
			}
			out.OldestQueuedSeq, out.OldestQueuedID = n(9), id
		}
		out.OldestQueuedAt = out.OldestQueuedSeq / 1000
		cursor = v[0]
		if cursor == "0" {
			return out, nil
		}
		if out.Scripts >= maxPages {
			out.Partial = true
			return out, nil
		}
	}
}

// OpsChurn is, for each owner, how many awaiting-payload timeouts the
// (site, owner) pair has on record in its churn window: the site's unsealed
// lapses. One O(1) read per owner, in one script.
func (s *Store) OpsChurn(ctx context.Context, siteID string, owners []string) (map[string]int64, error) {
	out := map[string]int64{}
	if len(owners) == 0 {
		return out, nil
	}
	if err := s.checkID("site id", siteID); err != nil {
		return nil, fmt.Errorf("ops churn: %w", err)
	}
	k, err := s.siteKeys(ctx, siteID)
	if err != nil {
		return nil, fmt.Errorf("ops churn: %w", err)
	}
	// Churn notes live on the site's shard, beside its jobs.
	keys := make([]string, len(owners))
	for i, o := range owners {
		keys[i] = k.sp(siteID) + "churn:" + enc(siteID) + ":" + enc(o)
	}
	msg, err := s.run(ctx, scOpsChurn, keys)
	if err != nil {
		return nil, fmt.Errorf("ops churn: %w", err)
	}
	vals, err := msg.AsIntSlice()
	if err != nil || len(vals) != len(owners) {
		return nil, fmt.Errorf("ops churn: unexpected reply %v: %v", msg, err)
	}
	for i, o := range owners {
		out[o] = vals[i]
	}
	return out, nil
}

// PresenceSeen is what a device list shows of a runner's presence.
type PresenceSeen struct {
	Owner        string
	LastSeenAt   int64
	Capabilities json.RawMessage
}

// OpsPresence reads several runners' presence, one script per shard the
// runners' records are on (a presence record lives on shard(runner));
// runners without a record are absent from the map.
func (s *Store) OpsPresence(ctx context.Context, runnerIDs []string) (map[string]PresenceSeen, error) {
	out := map[string]PresenceSeen{}
	byShard := map[int][]string{}
	var order []int
	for _, r := range runnerIDs {
		if err := s.checkID("runner id", r); err != nil {
			return nil, fmt.Errorf("ops presence: %w", err)
		}
		sh := s.k.runnerShard(r)
		if _, ok := byShard[sh]; !ok {
			order = append(order, sh)
		}
		byShard[sh] = append(byShard[sh], r)
	}
	for _, sh := range order {
		ids := byShard[sh]
		keys := make([]string, len(ids))
		for i, r := range ids {
			keys[i] = s.k.presence(r)
		}
		msg, err := s.run(ctx, scOpsPresence, keys)
		if err != nil {
			return nil, fmt.Errorf("ops presence: %w", err)
		}
		parts, err := elems(msg, 3*len(ids))
		if err != nil {
			return nil, fmt.Errorf("ops presence: %w", err)
		}
		for i, r := range ids {
			var f [3]string
			for j := range f {
				if f[j], err = str(parts[3*i+j]); err != nil {
					return nil, fmt.Errorf("ops presence: %w", err)
				}
			}
			if f[0] == "" {
				continue
			}
			seen, _ := strconv.ParseInt(f[1], 10, 64)
			p := PresenceSeen{Owner: f[0], LastSeenAt: seen}
			if f[2] != "" {
				p.Capabilities = json.RawMessage(f[2])
			}
			out[r] = p
		}
	}
	return out, nil
}

// HeldJob is a job a runner holds that is not done.
type HeldJob struct {
	SiteID         string `json:"siteId"`
	JobID          string `json:"jobId"`
	State          string `json:"state"`
	LeaseExpiresAt int64  `json:"leaseExpiresAt"`
}

// DeviceLeases is what a runner holds: Held counts its grants, done jobs
// included (as hid:⟨R⟩ keeps them), Cancelled the cancelled ones, Active
// lists the not-done jobs among the first `limit` it holds (in job id
// order: hid is kept for the bare-id probe, by id).
type DeviceLeases struct {
	Held, Cancelled int64
	Active          []HeldJob
}

// OpsDeviceLeases reads a runner's leases. A runner's hid and cxl sets
// exist once per shard where it was granted a job, so this reads the
// runner's record of those shards (rsh:⟨R⟩, one ZRANGE) and runs one
// script on each of them only; Active examines at most limit held entries
// over all of them, in shard order.
func (s *Store) OpsDeviceLeases(ctx context.Context, runnerID string, limit int) (DeviceLeases, error) {
	if err := s.checkID("runner id", runnerID); err != nil {
		return DeviceLeases{}, fmt.Errorf("ops device: %w", err)
	}
	shards, err := s.runnerShardList(ctx, runnerID)
	if err != nil {
		return DeviceLeases{}, fmt.Errorf("ops device: runner shards: %w", err)
	}
	sort.Ints(shards)
	out := DeviceLeases{Active: []HeldJob{}}
	left := limit
	for _, sh := range shards {
		msg, err := s.run(ctx, scOpsDevice, []string{s.k.heldIDs(sh, runnerID), s.k.cancelled(sh, runnerID)}, strconv.Itoa(left))
		if err != nil {
			return DeviceLeases{}, fmt.Errorf("ops device: %w", err)
		}
		parts, err := elems(msg, 3)
		if err != nil || (len(parts)-3)%4 != 0 {
			return DeviceLeases{}, fmt.Errorf("ops device: reply of %d items: %v", len(parts), err)
		}
		var held, cxl, examined int64
		if held, err = num(parts[0]); err != nil {
			return out, fmt.Errorf("ops device: %w", err)
		}
		if cxl, err = num(parts[1]); err != nil {
			return out, fmt.Errorf("ops device: %w", err)
		}
		if examined, err = num(parts[2]); err != nil {
			return out, fmt.Errorf("ops device: %w", err)
		}
		out.Held += held
		out.Cancelled += cxl
		left -= int(examined)
		for i := 3; i < len(parts); i += 4 {
			var f [4]string
			for j := range f {
				if f[j], err = str(parts[i+j]); err != nil {
					return out, fmt.Errorf("ops device: %w", err)
				}
			}
			ce, _ := strconv.ParseInt(f[3], 10, 64)
			site, err1 := dec("site", f[0])
			id, err2 := dec("job id", f[1])
			if err := errors.Join(err1, err2); err != nil {
				return out, fmt.Errorf("ops device: %w", err)
			}
			out.Active = append(out.Active, HeldJob{SiteID: site, JobID: id, State: f[2], LeaseExpiresAt: ce})
		}
	}
	return out, nil
}

// MaxReplicaRecords bounds the replica index.
const MaxReplicaRecords = 256

// PutReplicaRecord writes a replica's heartbeat record (JSON), which expires
// after ttlMs unless written again, and returns Valkey's clock.
func (s *Store) PutReplicaRecord(ctx context.Context, replicaID string, record []byte, ttlMs int64) (int64, error) {
	if err := s.checkID("replica id", replicaID); err != nil {
		return 0, fmt.Errorf("replica record: %w", err)
	}
	if !json.Valid(record) || len(record) > 1<<20 {
		return 0, fmt.Errorf("replica record: %w: not JSON or over 1 MiB", ErrInvalidInput)
	}
	e := enc(replicaID)
	msg, err := s.run(ctx, scOpsReplicaPut, []string{s.k.p + "ops:rs", s.k.p + "ops:r:" + e},
		e, string(record), strconv.FormatInt(ttlMs, 10), strconv.Itoa(MaxReplicaRecords))
	if err != nil {
		return 0, fmt.Errorf("replica record: %w", err)
	}
	v, err := str(msg)
	if err != nil {
		return 0, fmt.Errorf("replica record: %w", err)
	}
	return strconv.ParseInt(v, 10, 64)
}

// ReplicaRecords reads the live replicas' records, newest first, at most limit.
func (s *Store) ReplicaRecords(ctx context.Context, limit int) ([]json.RawMessage, error) {
	msg, err := s.run(ctx, scOpsReplicas, []string{s.k.p + "ops:rs"}, strconv.Itoa(limit))
	if err != nil {
		return nil, fmt.Errorf("replica records: %w", err)
	}
	return rawList(msg, "replica records")
}

func rawList(msg valkey.ValkeyMessage, what string) ([]json.RawMessage, error) {
	parts, err := elems(msg, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	out := make([]json.RawMessage, 0, len(parts))
	for _, p := range parts {
		v, err := str(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, json.RawMessage(v))
	}
	return out, nil
}

// MaxViewTokens bounds how many scoped view tokens exist at once.
const MaxViewTokens = 1000

// ErrTokenRefused is PutViewToken's answer when the cap is reached or the
// id or digest exists already.
var ErrTokenRefused = errors.New("view token refused: too many tokens, or the id exists")

// ErrTokenSiteGone is PutViewToken's answer when the stored projection has
// no such site, and ErrTokenProjectionMoved when the projection changed
// since the caller saw the site in it (read it again and retry).
var (
	ErrTokenSiteGone        = errors.New("view token refused: the stored projection has no such site")
	ErrTokenProjectionMoved = errors.New("view token refused: the projection changed since it was read; try again")
)

// tokenKeys: the records, ids and generations of view tokens, and the
// projection's per-site generations and document (projectionsync.SitesKey
// and Keys: the same "<ns>:{<ns>}:" prefix, so one slot).
func (s *Store) tokenKeys() []string {
	return []string{s.k.p + "ops:tk", s.k.p + "ops:ti", s.k.p + "ops:tg", s.k.p + "projection:sites", s.k.p + "projection"}
}

// PutViewToken stores a view token's record under the token's digest (the
// caller hashes; the token itself is never stored), bound to the current
// generation of its site: the token reads nothing once the site leaves the
// projection, even if a site of that id comes back. version is the
// projection version in which the caller saw the site ("" skips the check,
// which only matters before the projection records site generations).
func (s *Store) PutViewToken(ctx context.Context, digest, id string, record []byte, site, version string) error {
	k := s.tokenKeys()
	n, err := s.runInt(ctx, scOpsTokenPut, k, digest, id, string(record), strconv.Itoa(MaxViewTokens), site, version)
	if err != nil {
		return fmt.Errorf("put view token: %w", err)
	}
	switch n {
	case 1:
		return nil
	case -1:
		return ErrTokenProjectionMoved
	case -2:
		return ErrTokenSiteGone
	}
	return ErrTokenRefused
}

// ViewToken reads a token's record by digest; nil, nil when there is none,
// or its site's generation has passed.
func (s *Store) ViewToken(ctx context.Context, digest string) (json.RawMessage, error) {
	k := s.tokenKeys()
	msg, err := s.run(ctx, scOpsTokenGet, []string{k[0], k[2], k[3]}, digest)
	if err != nil {
		return nil, fmt.Errorf("view token: %w", err)
	}
	if msg.IsNil() {
		return nil, nil
	}
	v, err := str(msg)
	if err != nil {
		return nil, fmt.Errorf("view token: %w", err)
	}
	return json.RawMessage(v), nil
}

// DropViewToken revokes a token by id; false when there was none.
func (s *Store) DropViewToken(ctx context.Context, id string) (bool, error) {
	n, err := s.runInt(ctx, scOpsTokenDrop, s.tokenKeys()[:3], id)
	if err != nil {
		return false, fmt.Errorf("drop view token: %w", err)
	}
	return n == 1, nil
}

// ViewTokens lists every token's record.
func (s *Store) ViewTokens(ctx context.Context) ([]json.RawMessage, error) {
	msg, err := s.run(ctx, scOpsTokenList, s.tokenKeys()[:1])
	if err != nil {
		return nil, fmt.Errorf("view tokens: %w", err)
	}
	return rawList(msg, "view tokens")
}
