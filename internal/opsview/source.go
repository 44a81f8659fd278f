// Package opsview is the operations view on the admin listener (/ui/): the
// fleet, each site, each device and one job, as HTML for people and JSON for
// scripts, with read-only tokens scoped to one site. It reads what the store
// already keeps through Source, a small interface the binary implements over
// the store, the projection and Valkey (StoreSource); it writes only its own
// records (replica heartbeats, view tokens).
package opsview

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/opsstore"
	"github.com/byollm/relay-go/internal/projection"
	"github.com/byollm/relay-go/internal/store"
)

// Source is everything the view reads and writes.
type Source interface {
	Projection() *projection.Projection // nil until one is loaded
	SiteStates(ctx context.Context, siteID string) (opsstore.SiteStates, error)
	Churn(ctx context.Context, siteID string, owners []string) (map[string]int64, error)
	Job(ctx context.Context, siteID, jobID string) (*store.Job, error)
	Presence(ctx context.Context, runnerID string) (*store.Presence, error)
	PresenceMany(ctx context.Context, runnerIDs []string) (map[string]opsstore.PresenceSeen, error)
	DeviceLeases(ctx context.Context, runnerID string) (opsstore.DeviceLeases, error)
	Replicas(ctx context.Context) ([]Replica, error)
	Valkey(ctx context.Context) (ValkeyInfo, error)
	Now(ctx context.Context) (int64, error)

	// PutToken stores a site token bound to its site's generation
	// (opsstore.Store.PutViewToken).
	PutToken(ctx context.Context, digest, id string, record []byte, site string) error
	Token(ctx context.Context, digest string) (json.RawMessage, error)
	DropToken(ctx context.Context, id string) (bool, error)
	Tokens(ctx context.Context) ([]json.RawMessage, error)
}

// Bounds of one refresh.
const (
	sitePageSize = 128 // live jobs per ops_site script (about 0.3 ms of Valkey time)
	sitePages    = 16  // ... at most this many per site page: 2048 live jobs, beyond that counts say "at least"
	heldLimit    = 64  // held entries a device page examines
	replicaLimit = 64  // replica records the fleet page reads
	ListPage     = 50  // sites or devices per HTML/JSON page (one presence script per shard the page's devices are on)
)

// StoreSource implements Source over the routing store, the projection in
// force and the Valkey client.
type StoreSource struct {
	Store  *store.Store
	Client valkey.Client
	Proj   func() *projection.Projection
	// Version is the version of the projection Proj returns
	// (projectionsync.Sync.Version); a token is minted only while it is
	// the stored one, or the site's generation is recorded.
	Version func() int64
}

// ops is the view's data on the routing store.
func (s StoreSource) ops() *opsstore.Store { return opsstore.New(s.Store) }

func (s StoreSource) Projection() *projection.Projection { return s.Proj() }
func (s StoreSource) SiteStates(ctx context.Context, siteID string) (opsstore.SiteStates, error) {
	return s.ops().SiteStates(ctx, siteID, sitePageSize, sitePages)
}
func (s StoreSource) Churn(ctx context.Context, siteID string, owners []string) (map[string]int64, error) {
	return s.ops().Churn(ctx, siteID, owners)
}
func (s StoreSource) Job(ctx context.Context, siteID, jobID string) (*store.Job, error) {
	return s.Store.Job(ctx, siteID, jobID)
}
func (s StoreSource) Presence(ctx context.Context, runnerID string) (*store.Presence, error) {
	return s.Store.Presence(ctx, runnerID)
}
func (s StoreSource) PresenceMany(ctx context.Context, runnerIDs []string) (map[string]opsstore.PresenceSeen, error) {
	return s.ops().Presence(ctx, runnerIDs)
}
func (s StoreSource) DeviceLeases(ctx context.Context, runnerID string) (opsstore.DeviceLeases, error) {
	return s.ops().DeviceLeases(ctx, runnerID, heldLimit)
}
func (s StoreSource) Now(ctx context.Context) (int64, error) { return s.Store.Now(ctx) }
func (s StoreSource) Replicas(ctx context.Context) ([]Replica, error) {
	raws, err := s.ops().ReplicaRecords(ctx, replicaLimit)
	if err != nil {
		return nil, err
	}
	out := make([]Replica, 0, len(raws))
	for _, raw := range raws {
		var r Replica
		if json.Unmarshal(raw, &r) == nil {
			out = append(out, r)
		}
	}
	return out, nil
}
func (s StoreSource) PutToken(ctx context.Context, digest, id string, record []byte, site string) error {
	version := ""
	if s.Version != nil {
		version = strconv.FormatInt(s.Version(), 10)
	}
	return s.ops().PutViewToken(ctx, digest, id, record, site, version)
}
func (s StoreSource) Token(ctx context.Context, digest string) (json.RawMessage, error) {
	return s.ops().ViewToken(ctx, digest)
}
func (s StoreSource) DropToken(ctx context.Context, id string) (bool, error) {
	return s.ops().DropViewToken(ctx, id)
}
func (s StoreSource) Tokens(ctx context.Context) ([]json.RawMessage, error) {
	return s.ops().ViewTokens(ctx)
}

// ValkeyInfo is what the fleet page shows of the server: one INFO call, and
// CLUSTER SHARDS only when the server says it is clustered.
type ValkeyInfo struct {
	Version          string  `json:"version"`
	UsedMemory       int64   `json:"usedMemory"`
	MaxMemory        int64   `json:"maxMemory"` // 0: no limit
	OpsPerSec        int64   `json:"opsPerSec"`
	Clients          int64   `json:"connectedClients"`
	Keys             int64   `json:"keys"`      // all databases' keys on the node answering
	LatencyMicros    int64   `json:"latencyUs"` // one PING round trip from this replica
	Clustered        bool    `json:"clustered"`
	Topology         string  `json:"topology"` // "single node" or "cluster: N primaries"
	Primaries        []Shard `json:"primaries,omitempty"`
	InstantaneousKBs float64 `json:"inputKbps"`
}

// Shard is one cluster primary and its share of the namespace's keys. The
// store lays a namespace out over shards whose hash tags sit in equal slot
// ranges (internal/store/doc.go, mode S), so the primaries share them as
// they share the slot ranges.
type Shard struct {
	ID    string `json:"id"`
	Slots string `json:"slots"`
}

// Valkey reads INFO (one call) and times a PING.
func (s StoreSource) Valkey(ctx context.Context) (ValkeyInfo, error) {
	var out ValkeyInfo
	t0 := nowFunc()
	if err := s.Client.Do(ctx, s.Client.B().Ping().Build()).Error(); err != nil {
		return out, fmt.Errorf("valkey ping: %w", err)
	}
	out.LatencyMicros = nowFunc().Sub(t0).Microseconds()
	txt, err := s.Client.Do(ctx, s.Client.B().Info().Build()).ToString()
	if err != nil {
		return out, fmt.Errorf("valkey info: %w", err)
	}
	kv := parseInfo(txt)
	i := func(k string) int64 { n, _ := strconv.ParseInt(kv[k], 10, 64); return n }
	switch {
	case kv["valkey_version"] != "":
		out.Version = "valkey " + kv["valkey_version"]
	case kv["redis_version"] != "":
		out.Version = "redis " + kv["redis_version"]
	default:
		out.Version = "unknown (embedded store)"
	}
	out.UsedMemory, out.MaxMemory = i("used_memory"), i("maxmemory")
	out.OpsPerSec, out.Clients = i("instantaneous_ops_per_sec"), i("connected_clients")
	out.InstantaneousKBs, _ = strconv.ParseFloat(kv["instantaneous_input_kbps"], 64)
	for k, v := range kv {
		if strings.HasPrefix(k, "db") {
			if n, ok := strings.CutPrefix(v, "keys="); ok {
				n, _, _ = strings.Cut(n, ",")
				x, _ := strconv.ParseInt(n, 10, 64)
				out.Keys += x
			}
		}
	}
	out.Topology = "single node"
	if kv["cluster_enabled"] == "1" {
		out.Clustered = true
		out.Topology = "cluster"
		if sh, err := s.Client.Do(ctx, s.Client.B().ClusterShards().Build()).ToArray(); err == nil {
			out.Topology = fmt.Sprintf("cluster: %d shards; the namespace's store shards spread over them by slot range", len(sh))
		}
	}
	return out, nil
}

func parseInfo(txt string) map[string]string {
	kv := map[string]string{}
	for _, line := range strings.Split(txt, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			kv[k] = v
		}
	}
	return kv
}
