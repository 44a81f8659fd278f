package opsstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/opsstore"
	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/test/relaytest"
)

// fixture is a routing store in a fresh namespace and its operations data.
type fixture struct {
	t   *testing.T
	ctx context.Context
	st  *store.Store
	ops *opsstore.Store
}

// eachBackend runs f on the test server, the embedded store and, when one
// is configured, the test cluster.
func eachBackend(t *testing.T, f func(t *testing.T, h fixture)) {
	backends := map[string]func(testing.TB) valkey.Client{"valkey": relaytest.Client, "embedded": relaytest.Embedded}
	if relaytest.ClusterURL() != "" {
		backends["cluster"] = relaytest.Cluster
	}
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := open(t)
			st, err := store.New(context.Background(), c, store.Options{Namespace: relaytest.Namespace(t, c), Logger: relaytest.Discard()})
			if err != nil {
				t.Fatal(err)
			}
			f(t, fixture{t: t, ctx: context.Background(), st: st, ops: opsstore.New(st)})
		})
	}
}

func (h fixture) enqueue(site, id, owner string) {
	h.t.Helper()
	_, err := h.st.Enqueue(h.ctx, store.EnqueueInput{SiteID: site, ID: id, Stub: protocol.JobStub{ID: id, Kind: protocol.KindGenerate,
		Owner: owner, Site: "k", Audience: protocol.AudiencePrivate, SizeClass: "small", DeadlineAt: 4_000_000_000_000}})
	if err != nil {
		h.t.Fatal(err)
	}
}

var device = protocol.PublicIdentity{Identity: "ZGV2", Encryption: "ZW5j", EncryptionSig: "c2ln"}

func (h fixture) claim(runner, owner string, max int, sites ...string) []store.ClaimedStub {
	h.t.Helper()
	in := store.ClaimInput{RunnerID: runner, Owner: owner, Device: device, Kinds: []string{protocol.KindGenerate}, Max: max, LeaseMs: 60_000}
	for _, s := range sites {
		in.Routes = append(in.Routes, store.Route{SiteID: s, Owner: owner})
	}
	got, err := h.st.Claim(h.ctx, in)
	if err != nil {
		h.t.Fatal(err)
	}
	return got
}

func stubID(c store.ClaimedStub) string {
	var s protocol.JobStub
	_ = json.Unmarshal(c.Stub, &s)
	return s.ID
}

// siteOnAnotherShard enqueues a job for new sites until one is placed on a
// shard other than site's, and returns it.
func (h fixture) siteOnAnotherShard(site, owner string) string {
	h.t.Helper()
	sh, _, err := h.st.SiteShard(h.ctx, site)
	if err != nil {
		h.t.Fatal(err)
	}
	for i := range 64 {
		other := fmt.Sprint("site_c", i)
		h.enqueue(other, "c1", owner)
		if o, ok, err := h.st.SiteShard(h.ctx, other); err == nil && ok && o != sh {
			return other
		}
		if _, err := h.st.Cancel(h.ctx, other, "c1"); err != nil {
			h.t.Fatal(err)
		}
	}
	h.t.Fatalf("no site placed off shard %d in 64 tries", sh)
	return ""
}

// A site's jobs by state read in pages agree with the store's own list,
// and the oldest queued job is the first enqueued still queued.
func TestSiteStates(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, h fixture) {
		for _, id := range []string{"q1", "q2", "q3", "q4"} {
			h.enqueue("site-a", id, "alice")
		}
		h.enqueue("site-b", "other", "alice")
		if got := h.claim("runner_1", "alice", 1, "site-a"); len(got) != 1 || stubID(got[0]) != "q1" {
			t.Fatalf("claim: %+v", got)
		}
		for _, pages := range []struct{ size, most int }{{128, 16}, {1, 100}} {
			s, err := h.ops.SiteStates(h.ctx, "site-a", pages.size, pages.most)
			if err != nil {
				t.Fatal(err)
			}
			if s.Partial || s.Live != 4 || s.Queued != 3 || s.AwaitingPayload != 1 || s.Ready != 0 || s.Done != 0 || s.OldestQueuedID != "q2" || s.OldestQueuedAt <= 0 {
				t.Errorf("pages of %d: %+v; want 4 live, 3 queued (oldest q2), 1 awaiting", pages.size, s)
			}
		}
		if s, err := h.ops.SiteStates(h.ctx, "site-never", 128, 16); err != nil || s.Live != 0 || s.OldestQueuedID != "" {
			t.Errorf("a site with no jobs: %+v %v", s, err)
		}
		if _, err := h.ops.SiteStates(h.ctx, "bad\x00site", 128, 16); !errors.Is(err, store.ErrInvalidInput) {
			t.Errorf("a site id with U+0000: %v; want ErrInvalidInput", err)
		}
	})
}

// Reads that show ids give back the raw ones, odd Unicode and key-syntax
// characters included (keys and replies hold them encoded).
func TestReadsAnswerRawIDs(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, h fixture) {
		siteX, owner := "sïte:{東京}/x", "ålice:{o}"
		ids := []string{"jöb:{1} ✓", "j2", "ǆ\u0301-3"}
		for _, id := range ids {
			h.enqueue(siteX, id, owner)
		}
		s, err := h.ops.SiteStates(h.ctx, siteX, 10, 2)
		if err != nil || s.OldestQueuedID != ids[0] || s.Queued != 3 {
			t.Fatalf("site states: %+v %v", s, err)
		}
		if g := h.claim("runner:{1}", owner, 2, siteX); len(g) != 2 {
			t.Fatalf("claimed %d", len(g))
		}
		d, err := h.ops.DeviceLeases(h.ctx, "runner:{1}", 10)
		if err != nil || len(d.Active) != 2 || d.Active[0].SiteID != siteX || !slices.ContainsFunc(d.Active, func(j opsstore.HeldJob) bool { return j.JobID == ids[0] }) {
			t.Fatalf("device leases: %+v %v", d, err)
		}
		if c, err := h.ops.Churn(h.ctx, siteX, []string{owner}); err != nil || c[owner] != 0 {
			t.Fatalf("churn: %v %v", c, err)
		}
	})
}

// A runner's held and cancelled sets are per shard: the device read visits
// every shard of the runner's record (here two, jobs of sites on different
// shards), sums the counts and bounds the jobs it lists over all of them.
func TestDeviceLeasesSpanTheRunnersShards(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, h fixture) {
		a := "site-a"
		h.enqueue(a, "a1", "alice")
		c := h.siteOnAnotherShard(a, "alice")
		got := h.claim("runner_1", "alice", 10, a, c)
		if len(got) != 2 {
			t.Fatalf("claimed %d", len(got))
		}
		d, err := h.ops.DeviceLeases(h.ctx, "runner_1", 64)
		if err != nil {
			t.Fatal(err)
		}
		var active []string
		for _, j := range d.Active {
			active = append(active, j.SiteID+"/"+j.JobID+"/"+j.State)
		}
		sort.Strings(active)
		want := []string{a + "/a1/" + store.StateAwaitingPayload, c + "/c1/" + store.StateAwaitingPayload}
		sort.Strings(want)
		if d.Held != 2 || d.Cancelled != 0 || fmt.Sprint(active) != fmt.Sprint(want) {
			t.Errorf("device leases: held %d, cancelled %d, active %v; want 2, 0, %v", d.Held, d.Cancelled, active, want)
		}
		if _, err := h.st.Cancel(h.ctx, c, "c1"); err != nil {
			t.Fatal(err)
		}
		one, err := h.ops.DeviceLeases(h.ctx, "runner_1", 1)
		if err != nil || one.Held != 2 || one.Cancelled != 1 || len(one.Active) != 1 {
			t.Errorf("limit 1 after a cancel: %+v %v; want held 2, cancelled 1, one listed", one, err)
		}
		if none, err := h.ops.DeviceLeases(h.ctx, "runner_never", 64); err != nil || none.Held != 0 || len(none.Active) != 0 {
			t.Errorf("a runner with no record: %+v %v", none, err)
		}
	})
}

// The device page counts a runner's grants from hid:⟨R⟩, done ones
// included, and lists only the jobs not done.
func TestDeviceLeasesFromTheBareIDIndex(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, h fixture) {
		for i := range 3 {
			h.enqueue("site-a", fmt.Sprint("d", i), "alice")
		}
		g := h.claim("runner_1", "alice", 2, "site-a")
		if len(g) != 2 {
			t.Fatalf("claimed %d", len(g))
		}
		if _, err := h.st.Seal(h.ctx, "site-a", stubID(g[1]), json.RawMessage(`{"ciphertext":"x"}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := h.st.TakePayload(h.ctx, store.HolderInput{JobID: stubID(g[1]), RunnerID: "runner_1", LeaseID: g[1].Lease.ID}); err != nil {
			t.Fatal(err)
		}
		if r, err := h.st.Complete(h.ctx, store.CompleteInput{JobID: stubID(g[1]), RunnerID: "runner_1", LeaseID: g[1].Lease.ID,
			Envelope: json.RawMessage(`{"ciphertext":"y"}`), Disposition: "ok"}); err != nil || !r.Accepted {
			t.Fatalf("complete: %+v %v", r, err)
		}
		d, err := h.ops.DeviceLeases(h.ctx, "runner_1", 64)
		if err != nil || d.Held != 2 || len(d.Active) != 1 || d.Active[0].JobID != stubID(g[0]) ||
			d.Active[0].State != store.StateAwaitingPayload || d.Active[0].SiteID != "site-a" || d.Active[0].LeaseExpiresAt != g[0].Lease.ExpiresAt {
			t.Fatalf("device leases %+v %v; want 2 held, %s awaiting", d, err, stubID(g[0]))
		}
		if d, err := h.ops.DeviceLeases(h.ctx, "runner_1", 0); err != nil || d.Held != 2 || len(d.Active) != 0 {
			t.Fatalf("limit 0: %+v %v", d, err)
		}
		r, err := h.st.ReleaseLeases(h.ctx, store.ReleaseInput{RunnerID: "runner_1", Leases: []protocol.GrantRef{{JobID: stubID(g[0]), LeaseID: g[0].Lease.ID}}})
		if err != nil || len(r) != 1 || r[0] != stubID(g[0]) {
			t.Fatalf("release: %v %v", r, err)
		}
		if d, err := h.ops.DeviceLeases(h.ctx, "runner_1", 64); err != nil || d.Held != 1 || len(d.Active) != 0 {
			t.Fatalf("after the release: %+v %v; want the done job only", d, err)
		}
	})
}

// Presence records live on their runners' shards; one read of runners on
// several shards finds each of them, and leaves out runners without one.
func TestPresenceSpansShards(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, h fixture) {
		var rs []string
		for i := 0; len(rs) < 3 && i < 1000; i++ {
			r := fmt.Sprint("runner_p", i)
			g, err := h.st.PresenceGroups(append(slices.Clone(rs), r))
			if err != nil {
				t.Fatal(err)
			}
			if len(g) == len(rs)+1 { // r is on a shard none of rs is on
				rs = append(rs, r)
				if _, err := h.st.Seen(h.ctx, store.Presence{RunnerID: r, Owner: fmt.Sprint("owner_", len(rs)), Device: device,
					Capabilities: json.RawMessage(`["llm.generate"]`), Withheld: json.RawMessage(`[]`)}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if len(rs) < 3 {
			t.Fatalf("found runners on %d shards", len(rs))
		}
		got, err := h.ops.Presence(h.ctx, append(rs, "runner_absent"))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 {
			t.Fatalf("read %d records, want 3: %v", len(got), got)
		}
		for i, r := range rs {
			if p := got[r]; p.Owner != fmt.Sprint("owner_", i+1) || p.LastSeenAt == 0 || string(p.Capabilities) != `["llm.generate"]` {
				t.Errorf("%s: %+v", r, p)
			}
		}
		if none, err := h.ops.Presence(h.ctx, nil); err != nil || len(none) != 0 {
			t.Errorf("no runners: %v %v", none, err)
		}
	})
}

// Replica records: written with a TTL, listed newest first up to the
// limit; a record that is not JSON or an id the store refuses is refused
// and writes nothing.
func TestReplicaRecords(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, h fixture) {
		for _, id := range []string{"rep1", "rep2"} {
			if now, err := h.ops.PutReplicaRecord(h.ctx, id, []byte(`{"id":"`+id+`"}`), 60_000); err != nil || now <= 0 {
				t.Fatalf("put %s: %d %v", id, now, err)
			}
		}
		for _, bad := range []struct {
			id, record string
		}{{"rep3", `{"id":`}, {"rep\x003", `{}`}} {
			if _, err := h.ops.PutReplicaRecord(h.ctx, bad.id, []byte(bad.record), 60_000); !errors.Is(err, store.ErrInvalidInput) {
				t.Errorf("put %q %q: %v; want ErrInvalidInput", bad.id, bad.record, err)
			}
		}
		recs, err := h.ops.ReplicaRecords(h.ctx, 10)
		if err != nil || len(recs) != 2 {
			t.Fatalf("records: %s %v", recs, err)
		}
		if one, err := h.ops.ReplicaRecords(h.ctx, 1); err != nil || len(one) != 1 {
			t.Fatalf("limit 1: %s %v", one, err)
		}
	})
}

// View tokens: stored by digest, bound to the projection's version and the
// site's generation, read, listed and revoked by id; a repeated id, an
// unseen version and a site without a generation are refused.
func TestViewTokens(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, h fixture) {
		rec := []byte(`{"id":"t1","site":"site-a"}`)
		// No projection is stored: its version reads "0", and a caller that
		// names no version cannot have seen the site in it.
		if err := h.ops.PutViewToken(h.ctx, "d0", "t0", rec, "site-a", ""); !errors.Is(err, opsstore.ErrTokenProjectionMoved) {
			t.Errorf("no version named: %v; want ErrTokenProjectionMoved", err)
		}
		if err := h.ops.PutViewToken(h.ctx, "d1", "t1", rec, "site-a", "0"); err != nil {
			t.Fatal(err)
		}
		if err := h.ops.PutViewToken(h.ctx, "d2", "t1", rec, "site-a", "0"); !errors.Is(err, opsstore.ErrTokenRefused) {
			t.Errorf("a repeated id: %v; want ErrTokenRefused", err)
		}
		if err := h.ops.PutViewToken(h.ctx, "d3", "t3", rec, "site-z", "0"); !errors.Is(err, opsstore.ErrTokenSiteGone) {
			t.Errorf("a site with no generation once generations are kept: %v; want ErrTokenSiteGone", err)
		}
		if got, err := h.ops.ViewToken(h.ctx, "d1"); err != nil || string(got) != string(rec) {
			t.Errorf("read: %s %v", got, err)
		}
		if got, err := h.ops.ViewToken(h.ctx, "d-none"); err != nil || got != nil {
			t.Errorf("an unknown digest: %s %v", got, err)
		}
		if all, err := h.ops.ViewTokens(h.ctx); err != nil || len(all) != 1 {
			t.Errorf("list: %s %v", all, err)
		}
		if ok, err := h.ops.DropViewToken(h.ctx, "t1"); err != nil || !ok {
			t.Errorf("drop: %v %v", ok, err)
		}
		if ok, err := h.ops.DropViewToken(h.ctx, "t1"); err != nil || ok {
			t.Errorf("drop again: %v %v", ok, err)
		}
		if got, err := h.ops.ViewToken(h.ctx, "d1"); err != nil || got != nil {
			t.Errorf("read after the drop: %s %v", got, err)
		}
	})
}
