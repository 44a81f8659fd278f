package opsview

import (
	"context"
	"encoding/json"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/byollm/relay-go/internal/store"
)

var nowFunc = time.Now

// Per-site activity is counted in memory by each replica, in minute
// buckets, and published in the replica's heartbeat record; the view adds
// the replicas' buckets up. So the hot path (enqueue, result, refusals)
// costs no Valkey command at all, and the view reads one record per
// replica. A replica that stops takes its last minutes with it when its
// record expires.
const (
	activityMinutes = 10  // minutes kept per site
	activitySites   = 500 // sites counted per replica; more are dropped
	activityReasons = 16  // refusal reasons per site-minute; more count as "other"
	recentEvents    = 20  // sweeps and churn reports kept per replica
)

// Minute is one site's activity in one minute on one replica.
type Minute struct {
	At        int64            `json:"at"` // unix ms of the minute's start
	Enqueued  int64            `json:"enqueued"`
	Completed int64            `json:"completed"`
	Refusals  map[string]int64 `json:"refusals,omitempty"`
}

// Event is a sweep that moved jobs or a churn report.
type Event struct {
	At       int64  `json:"at"`
	Kind     string `json:"kind"` // "sweep" or "churn"
	Requeued int    `json:"requeued,omitempty"`
	Removed  int    `json:"removed,omitempty"`
	SiteID   string `json:"siteId,omitempty"`
	Owner    string `json:"owner,omitempty"`
	Expiries int    `json:"expiries,omitempty"`
}

// Activity counts what one replica sees. Known limits counting to the
// projection's sites, so a caller naming made-up sites cannot grow it.
type Activity struct {
	Known func(siteID string) bool

	mu     sync.Mutex
	sites  map[string][]Minute
	events []Event
}

// NewActivity counts activity for the sites known says exist.
func NewActivity(known func(string) bool) *Activity {
	return &Activity{Known: known, sites: map[string][]Minute{}}
}

func (a *Activity) bucket(siteID string) *Minute {
	if a == nil || siteID == "" || (a.Known != nil && !a.Known(siteID)) {
		return nil
	}
	at := nowFunc().Truncate(time.Minute).UnixMilli()
	ms, ok := a.sites[siteID]
	if !ok && len(a.sites) >= activitySites {
		return nil
	}
	if n := len(ms); n == 0 || ms[n-1].At != at {
		ms = append(ms, Minute{At: at})
		if len(ms) > activityMinutes {
			ms = ms[len(ms)-activityMinutes:]
		}
		a.sites[siteID] = ms
	}
	return &a.sites[siteID][len(a.sites[siteID])-1]
}

// Enqueued counts one accepted enqueue.
func (a *Activity) Enqueued(siteID string) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if m := a.bucket(siteID); m != nil {
		m.Enqueued++
	}
}

// Completed counts one accepted result.
func (a *Activity) Completed(siteID string) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if m := a.bucket(siteID); m != nil {
		m.Completed++
	}
}

// Refused counts one refusal of a site's request by its error code.
func (a *Activity) Refused(siteID, reason string) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	m := a.bucket(siteID)
	if m == nil {
		return
	}
	if m.Refusals == nil {
		m.Refusals = map[string]int64{}
	}
	if _, ok := m.Refusals[reason]; !ok && len(m.Refusals) >= activityReasons {
		reason = "other"
	}
	m.Refusals[reason]++
}

// Swept records a sweep that moved jobs (idle sweeps are not events).
func (a *Activity) Swept(requeued, removed int) {
	if a == nil || requeued+removed == 0 {
		return
	}
	a.event(Event{Kind: "sweep", Requeued: requeued, Removed: removed})
}

// Churned records a churn report.
func (a *Activity) Churned(r store.ChurnReport) {
	if a == nil {
		return
	}
	a.event(Event{Kind: "churn", SiteID: r.SiteID, Owner: r.Owner, Expiries: r.Expiries})
}

func (a *Activity) event(e Event) {
	e.At = nowFunc().UnixMilli()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events = append(a.events, e)
	if len(a.events) > recentEvents {
		a.events = a.events[len(a.events)-recentEvents:]
	}
}

// snapshot copies the minutes still in the window and the events.
func (a *Activity) snapshot() (map[string][]Minute, []Event) {
	if a == nil {
		return nil, nil
	}
	cut := nowFunc().Add(-activityMinutes * time.Minute).UnixMilli()
	a.mu.Lock()
	defer a.mu.Unlock()
	sites := map[string][]Minute{}
	for id, ms := range a.sites {
		var keep []Minute
		for _, m := range ms {
			if m.At > cut {
				c := m
				if m.Refusals != nil {
					c.Refusals = make(map[string]int64, len(m.Refusals))
					for k, v := range m.Refusals {
						c.Refusals[k] = v
					}
				}
				keep = append(keep, c)
			}
		}
		if len(keep) == 0 {
			delete(a.sites, id)
			continue
		}
		sites[id] = keep
	}
	return sites, append([]Event(nil), a.events...)
}

// Replica is one replica's heartbeat record as stored in Valkey.
type Replica struct {
	ID      string `json:"id"`
	Version string `json:"version"`
	// Layout is the newest key layout the replica reads and writes
	// (store.LayoutVersion); records of relays before layout v4 lack it.
	// `relay migrate` refuses to move a namespace past a live replica's.
	Layout            int                 `json:"layout,omitempty"`
	StartedAt         int64               `json:"startedAt"`
	SeenAt            int64               `json:"seenAt"` // this replica's clock when written
	Ready             bool                `json:"ready"`
	Draining          bool                `json:"draining"`
	NotReady          []string            `json:"notReady,omitempty"`
	ProjectionVersion int64               `json:"projectionVersion"`
	ProjectionAgeSec  float64             `json:"projectionAgeSec"`
	Listen            string              `json:"listen,omitempty"`
	Events            []Event             `json:"events,omitempty"`
	Sites             map[string][]Minute `json:"sites,omitempty"`
}

// ReplicaRecords is where Heartbeat writes (*opsstore.Store is one).
type ReplicaRecords interface {
	PutReplicaRecord(ctx context.Context, replicaID string, record []byte, ttlMs int64) (int64, error)
}

// HeartbeatOptions configure Heartbeat.
type HeartbeatOptions struct {
	Store    ReplicaRecords
	Interval time.Duration // default 3 s
	TTL      time.Duration // default 5 × Interval
	Activity *Activity
	// Fill sets the record's identity and state fields; Heartbeat adds
	// the activity and the time.
	Fill   func(ctx context.Context, r *Replica)
	Logger *slog.Logger
}

// Heartbeat writes the replica's record every Interval until ctx ends: one
// script call (SET PX + ZADD + two trims) per interval.
func Heartbeat(ctx context.Context, o HeartbeatOptions) {
	if o.Interval <= 0 {
		o.Interval = 3 * time.Second
	}
	if o.TTL <= 0 {
		o.TTL = 5 * o.Interval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	t := time.NewTicker(o.Interval)
	defer t.Stop()
	failing := false
	for {
		var r Replica
		o.Fill(ctx, &r)
		r.SeenAt = nowFunc().UnixMilli()
		r.Sites, r.Events = o.Activity.snapshot()
		b, err := json.Marshal(r)
		if err == nil {
			_, err = o.Store.PutReplicaRecord(ctx, r.ID, b, o.TTL.Milliseconds())
		}
		if err != nil && ctx.Err() == nil && !failing {
			o.Logger.Warn("ops view: replica heartbeat failed", slog.Any("err", err))
		}
		failing = err != nil
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// siteActivity adds up the replicas' minutes for one site: per-minute
// totals, newest first, and refusals by reason over the window.
func siteActivity(reps []Replica, siteID string, now int64) ([]Minute, map[string]int64) {
	cut := now - activityMinutes*60_000
	by := map[int64]*Minute{}
	reasons := map[string]int64{}
	for _, r := range reps {
		for _, m := range r.Sites[siteID] {
			if m.At <= cut {
				continue
			}
			t := by[m.At]
			if t == nil {
				t = &Minute{At: m.At}
				by[m.At] = t
			}
			t.Enqueued += m.Enqueued
			t.Completed += m.Completed
			for k, v := range m.Refusals {
				reasons[k] += v
			}
		}
	}
	out := make([]Minute, 0, len(by))
	for _, m := range by {
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].At > out[j].At })
	return out, reasons
}
