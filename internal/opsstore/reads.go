package opsstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/byollm/relay-go/internal/scriptrun"
	"github.com/byollm/relay-go/internal/store"
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

// SiteStates reads a site's jobs by state in at most maxPages pages of
// about pageSize live jobs each.
func (s *Store) SiteStates(ctx context.Context, siteID string, pageSize, maxPages int) (SiteStates, error) {
	k, err := s.r.SiteReadKeys(ctx, siteID)
	if err != nil {
		return SiteStates{}, fmt.Errorf("ops site: %w", err)
	}
	eS := store.EncodeKeyPart(siteID)
	keys := []string{k.Live, k.Awaiting, k.Finished}
	var out SiteStates
	cursor := "0"
	for {
		msg, err := s.r.RunOpsScript(ctx, "ops_site", keys, eS, cursor, strconv.Itoa(pageSize))
		if err != nil {
			return SiteStates{}, fmt.Errorf("ops site: %w", err)
		}
		out.Scripts++
		parts, err := scriptrun.Elems(msg, 11)
		if err != nil {
			return SiteStates{}, fmt.Errorf("ops site: %w", err)
		}
		var v [11]string
		for i := range v {
			if v[i], err = scriptrun.Text(parts[i]); err != nil {
				return SiteStates{}, fmt.Errorf("ops site: item %d: %w", i, err)
			}
		}
		n := func(i int) int64 { x, _ := strconv.ParseInt(v[i], 10, 64); return x }
		out.Live, out.AwaitingPayload, out.Done = n(1), n(2), n(3)
		out.Queued += n(5)
		out.Ready += n(6)
		out.Running += n(7)
		if v[9] != "" && (out.OldestQueuedID == "" || n(9) < out.OldestQueuedSeq) {
			id, err := store.DecodeJobID(v[10])
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

// Churn is, for each owner, how many awaiting-payload timeouts the (site,
// owner) pair has on record in its churn window: the site's unsealed
// lapses. One O(1) read per owner, in one script on the site's shard.
func (s *Store) Churn(ctx context.Context, siteID string, owners []string) (map[string]int64, error) {
	out := map[string]int64{}
	if len(owners) == 0 {
		return out, nil
	}
	k, err := s.r.SiteReadKeys(ctx, siteID)
	if err != nil {
		return nil, fmt.Errorf("ops churn: %w", err)
	}
	keys := make([]string, len(owners))
	for i, o := range owners {
		keys[i] = k.Churn(o)
	}
	msg, err := s.r.RunOpsScript(ctx, "ops_churn", keys)
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

// Presence reads several runners' presence, one script per shard their
// records are on; runners without a record are absent from the map.
func (s *Store) Presence(ctx context.Context, runnerIDs []string) (map[string]PresenceSeen, error) {
	out := map[string]PresenceSeen{}
	groups, err := s.r.PresenceGroups(runnerIDs)
	if err != nil {
		return nil, fmt.Errorf("ops presence: %w", err)
	}
	for _, g := range groups {
		msg, err := s.r.RunOpsScript(ctx, "ops_presence", g.Keys)
		if err != nil {
			return nil, fmt.Errorf("ops presence: %w", err)
		}
		parts, err := scriptrun.Elems(msg, 3*len(g.RunnerIDs))
		if err != nil {
			return nil, fmt.Errorf("ops presence: %w", err)
		}
		for i, r := range g.RunnerIDs {
			var f [3]string
			for j := range f {
				if f[j], err = scriptrun.Text(parts[3*i+j]); err != nil {
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

// DeviceLeases reads a runner's leases: one script on each shard where it
// was granted a job; Active examines at most limit held entries over all of
// them, in shard order.
func (s *Store) DeviceLeases(ctx context.Context, runnerID string, limit int) (DeviceLeases, error) {
	shards, err := s.r.RunnerShardKeys(ctx, runnerID)
	if err != nil {
		return DeviceLeases{}, fmt.Errorf("ops device: %w", err)
	}
	out := DeviceLeases{Active: []HeldJob{}}
	left := limit
	for _, k := range shards {
		msg, err := s.r.RunOpsScript(ctx, "ops_device", []string{k.Held, k.Cancelled}, strconv.Itoa(left))
		if err != nil {
			return DeviceLeases{}, fmt.Errorf("ops device: %w", err)
		}
		parts, err := scriptrun.Elems(msg, 3)
		if err != nil || (len(parts)-3)%4 != 0 {
			return DeviceLeases{}, fmt.Errorf("ops device: reply of %d items: %v", len(parts), err)
		}
		var held, cxl, examined int64
		if held, err = parts[0].AsInt64(); err != nil {
			return out, fmt.Errorf("ops device: %w", err)
		}
		if cxl, err = parts[1].AsInt64(); err != nil {
			return out, fmt.Errorf("ops device: %w", err)
		}
		if examined, err = parts[2].AsInt64(); err != nil {
			return out, fmt.Errorf("ops device: %w", err)
		}
		out.Held += held
		out.Cancelled += cxl
		left -= int(examined)
		for i := 3; i < len(parts); i += 4 {
			var f [4]string
			for j := range f {
				if f[j], err = scriptrun.Text(parts[i+j]); err != nil {
					return out, fmt.Errorf("ops device: %w", err)
				}
			}
			ce, _ := strconv.ParseInt(f[3], 10, 64)
			site, err1 := store.DecodeKeyPart("site", f[0])
			id, err2 := store.DecodeJobID(f[1])
			if err := errors.Join(err1, err2); err != nil {
				return out, fmt.Errorf("ops device: %w", err)
			}
			out.Active = append(out.Active, HeldJob{SiteID: site, JobID: id, State: f[2], LeaseExpiresAt: ce})
		}
	}
	return out, nil
}
