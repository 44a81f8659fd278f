package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/valkeyconn"
)

// A remembered device's heartbeat goes in short form (presence_beat): the
// record is written only when it holds exactly that owner and device and
// these lists, and then only its lastSeenAt; anything else is sent again
// in full (presence_seen), which decides it exactly as before.
func TestHeartbeatShortForm(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		counter := &countingObserver{n: map[string]int{}}
		h := newFixture(t, b, Options{ObserveScript: counter.observe})
		beat := func(runner, owner string, dev protocol.PublicIdentity, caps string) (HeartbeatResult, error) {
			return h.s.Heartbeat(h.ctx, HeartbeatInput{Presence: Presence{RunnerID: runner, Owner: owner, Device: dev,
				Capabilities: json.RawMessage(caps)}, RequirePresence: true, Cancels: true})
		}
		// ld holds the heartbeat digest of what was last written, alone or
		// followed by ":" and nr.
		digestIs := func(runner, owner string, dev protocol.PublicIdentity, caps string) bool {
			t.Helper()
			devJSON, err := protocol.Marshal(dev)
			if err != nil {
				t.Fatal(err)
			}
			want := heartbeatDigest(owner, devJSON, []byte(caps), []byte(`[]`))
			ld, _ := h.presenceField(runner, "ld")
			return ld == want || strings.HasPrefix(ld, want+":")
		}
		cases := []struct {
			name, runner, owner string
			caps                string // the heartbeat's, after a record seen with []
			older               bool   // the record was written by a relay of the previous layout of ld
			wrongDevice, gone   bool
			wantScripts         map[string]int
			wantErr             error
		}{
			{name: "unchanged", runner: "r_same", owner: "alice", caps: `[]`,
				wantScripts: map[string]int{"presence_beat": 1}},
			{name: "odd unicode ids", runner: "r_\u00e9\u200d\U0001f600", owner: "\u0131\u0307 owner \U0001f600", caps: `[]`,
				wantScripts: map[string]int{"presence_beat": 1}},
			{name: "lists changed", runner: "r_lists", owner: "alice", caps: `[{"kind":"generate"}]`,
				wantScripts: map[string]int{"presence_beat": 1, "presence_seen": 1}},
			{name: "record of an older relay", runner: "r_old", owner: "alice", caps: `[]`, older: true,
				wantScripts: map[string]int{"presence_beat": 1, "presence_seen": 1}},
			{name: "another device", runner: "r_wrong", owner: "alice", caps: `[]`, wrongDevice: true,
				wantScripts: map[string]int{"presence_beat": 1, "presence_seen": 1}, wantErr: ErrPresenceChanged},
			{name: "record gone", runner: "r_gone", owner: "alice", caps: `[]`, gone: true,
				wantScripts: map[string]int{"presence_beat": 1, "presence_seen": 1}, wantErr: ErrPresenceChanged},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				dev := freshDevice()
				h.seen(c.runner, c.owner, dev, `[]`, `[]`)
				if !digestIs(c.runner, c.owner, dev, `[]`) {
					t.Fatal("a record written in full does not hold its heartbeat digest")
				}
				if c.older {
					// What the previous relay version wrote: the lists' digest
					// alone in ld (32 hex), od and nr beside it.
					if err := b.client.Do(h.ctx, b.client.B().Hset().Key(h.s.k.presence(c.runner)).FieldValue().
						FieldValue("ld", strings.Repeat("ab", 16)).FieldValue("od", strings.Repeat("cd", 16)).
						FieldValue("nr", "1").Build()).Error(); err != nil {
						t.Fatal(err)
					}
				}
				if c.gone {
					if err := h.s.DropPresence(h.ctx, c.runner); err != nil {
						t.Fatal(err)
					}
				}
				read := func() *Presence {
					t.Helper()
					p, err := h.s.Presence(h.ctx, c.runner)
					if err != nil {
						t.Fatal(err)
					}
					return p
				}
				before := read()
				sent := dev
				if c.wrongDevice {
					sent = freshDevice()
				}
				h.s.Testing().AdvanceClock(5)
				counter.take()
				got, err := beat(c.runner, c.owner, sent, c.caps)
				if scripts := counter.take(); !maps.Equal(scripts, c.wantScripts) {
					t.Fatalf("calls %v, want %v", scripts, c.wantScripts)
				}
				after := read()
				if c.wantErr != nil {
					if !errors.Is(err, c.wantErr) {
						t.Fatalf("err %v, want %v", err, c.wantErr)
					}
					if (before == nil) != (after == nil) || (after != nil && (after.LastSeenAt != before.LastSeenAt || after.Device != before.Device)) {
						t.Fatalf("a refused heartbeat changed the record: %+v -> %+v", before, after)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if after.LastSeenAt != got.Presence.LastSeenAt || after.LastSeenAt <= before.LastSeenAt {
					t.Fatalf("lastSeenAt %d -> %d, the heartbeat answered %d", before.LastSeenAt, after.LastSeenAt, got.Presence.LastSeenAt)
				}
				if after.Owner != c.owner || after.Device != dev || string(after.Capabilities) != c.caps || string(got.Presence.Capabilities) != c.caps {
					t.Fatalf("record %+v, answer %+v", after, got.Presence)
				}
				if got.Cancel == nil || len(got.Cancel) != 0 {
					t.Fatalf("cancel %v", got.Cancel)
				}
				// Whatever the first beat needed, the next is short only.
				if !digestIs(c.runner, c.owner, dev, c.caps) {
					t.Fatal("after the heartbeat the record does not hold its digest")
				}
				for _, f := range []string{"od", "nr"} {
					if v, ok := h.presenceField(c.runner, f); ok {
						t.Fatalf("the previous layout's %s stayed: %q", f, v)
					}
				}
				counter.take()
				if _, err := beat(c.runner, c.owner, dev, c.caps); err != nil {
					t.Fatal(err)
				}
				if scripts := counter.take(); !maps.Equal(scripts, map[string]int{"presence_beat": 1}) {
					t.Fatalf("second beat: calls %v", scripts)
				}
			})
		}
	})
}

// A heartbeat remembers that the runner's record of shards held no live
// grant (nr) and reads it again only after Options.ShardRecheckMs; a grant
// (runner_shards_add) clears that at once, so its cancel request reaches
// the next heartbeat; a grant written without clearing it (a relay older
// than nr) is seen once the read lapses.
func TestHeartbeatShardRecheck(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		const recheck = 5_000
		h := newFixture(t, b, Options{ShardRecheckMs: recheck})
		dev := freshDevice()
		h.seen("runner_1", "alice", dev, `[]`, `[]`)
		beat := func() []protocol.GrantRef {
			t.Helper()
			r, err := h.s.Heartbeat(h.ctx, HeartbeatInput{Presence: Presence{RunnerID: "runner_1", Owner: "alice", Device: dev},
				RequirePresence: true, Cancels: true})
			if err != nil {
				t.Fatal(err)
			}
			return r.Cancel
		}
		ld := func() string { return h.mustPresenceField("runner_1", "ld") }
		digest, _, _ := strings.Cut(ld(), ":")
		nr := func() bool { return strings.HasPrefix(ld(), digest+":") }
		if got := beat(); len(got) != 0 || !nr() {
			t.Fatalf("no grants: cancel %v, nr %v", got, nr())
		}

		// A grant clears nr in the claim; its cancel is on the next beat.
		st := stub("j1", "alice")
		st.DeadlineAt = h.now() + 600_000
		h.enqueueStub(site, st)
		got := h.claim(runner("runner_1"), func(in *ClaimInput) { in.Device = dev })
		if len(got) != 1 || nr() {
			t.Fatalf("claimed %d, nr %v after a grant", len(got), nr())
		}
		if ok, err := h.s.Cancel(h.ctx, site, "j1"); err != nil || !ok {
			t.Fatalf("cancel: %v %v", ok, err)
		}
		if c := beat(); len(c) != 1 || c[0].JobID != "j1" {
			t.Fatalf("cancel after a grant: %v", c)
		}
		if nr() {
			t.Fatal("nr set while rsh holds a live grant")
		}

		// A read that lapsed and finds the live grant forgets nr.
		setNR := func(v int64) {
			t.Helper()
			if err := b.client.Do(h.ctx, b.client.B().Hset().Key(h.s.k.presence("runner_1")).FieldValue().
				FieldValue("ld", digest+":"+strconv.FormatInt(v, 10)).Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
		setNR(0)
		if c := beat(); len(c) != 1 || nr() {
			t.Fatalf("a lapsed nr with a live grant: cancel %v, nr %v", c, nr())
		}
		// A grant written without clearing nr (by a relay older than it,
		// just after a heartbeat found nothing) is seen once nr lapses.
		setNR(h.now())
		if c := beat(); len(c) != 0 {
			t.Fatalf("within the recheck: cancel %v, want none (rsh not read)", c)
		}
		h.s.Testing().AdvanceClock(recheck)
		if c := beat(); len(c) != 1 {
			t.Fatalf("after the recheck: cancel %v", c)
		}

		// Past the latest grant deadline as rsh records it (rounded up to
		// runnerShardsGrain) it holds nothing live: nr again.
		h.s.Testing().AdvanceClock(600_000 + runnerShardsGrain)
		h.sweep()
		if c := beat(); len(c) != 0 || !nr() {
			t.Fatalf("past every deadline: cancel %v, nr %v", c, nr())
		}
	})
}

// The heartbeat digest names its four inputs exactly: no other split of
// the same bytes, no other input, gives the same name; and it never has
// the form of the previous layout's digests (32 hex), so a record an
// older relay wrote never matches it.
func TestHeartbeatDigest(t *testing.T) {
	t.Parallel()
	inputs := [][4]string{
		{"", "", "", ""}, {"a", "", "", ""}, {"", "a", "", ""}, {"", "", "a", ""}, {"", "", "", "a"},
		{"ab", "c", "", ""}, {"a", "bc", "", ""}, {"", "ab", "c", ""}, {"", "a", "bc", ""}, {"", "", "ab", "c"}, {"", "", "a", "bc"},
		{"alice", `{"identity":"x"}`, "[]", "[]"}, {"alice", `{"identity":"y"}`, "[]", "[]"},
		{"\u00e9", "\u0065\u0301", "[]", "[]"}, {"\u0065\u0301", "\u00e9", "[]", "[]"}, {"\x00", "", "", ""}, {"", "\x00", "", ""},
		{"alice", "d", strings.Repeat("x", 64<<10), "[]"},
	}
	seen := map[string][4]string{}
	for _, in := range inputs {
		d := heartbeatDigest(in[0], []byte(in[1]), []byte(in[2]), []byte(in[3]))
		if len(d) != 22 || strings.ContainsAny(d, ":+/=") {
			t.Fatalf("%q: %q is not 22 base64url characters", in, d)
		}
		if other, dup := seen[d]; dup {
			t.Fatalf("%q and %q share the digest %s", in, other, d)
		}
		seen[d] = in
	}
}

// On a server that is not a cluster, the short-form heartbeats of one
// batch share one script call whatever their shards, and each record is
// still decided on its own (a matching one written, one with another
// device left alone and answered 0); on a cluster they go out one call per
// shard, each on its slot (the cluster itself refuses anything else), as
// they do on the embedded store, which valkey-go treats as a one-node
// cluster.
func TestShortBeatsOfEveryShardShareOneCallOnOneServer(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		var runners []string
		shards := map[int]bool{}
		for i := 0; len(runners) < 5; i++ {
			id := "across_" + strconv.Itoa(i)
			if sh := h.s.k.runnerShard(id); !shards[sh] {
				shards[sh] = true
				runners = append(runners, id)
			}
		}
		devs := make([]protocol.PublicIdentity, len(runners))
		var calls []*batchedCall
		for i, r := range runners {
			devs[i] = freshDevice()
			h.seen(r, "alice", devs[i], `[]`, `[]`)
			dev := devs[i]
			if i == 3 {
				dev = freshDevice() // not the device the record holds
			}
			calls = append(calls, shortBeatCall(t, h.s, Presence{RunnerID: r, Owner: "alice", Device: dev}, false))
		}
		before := make([]*Presence, len(runners))
		for i, r := range runners {
			before[i] = h.presence(r)
		}
		h.s.Testing().AdvanceClock(5)
		bb := newBeatBatch(h.s, time.Hour, time.Hour)
		bb.send(append([]*batchedCall(nil), calls...))
		want := int64(1)
		if valkeyconn.IsCluster(b.client) { // the cluster, and the embedded store (valkey-go sees a one-node cluster)
			want = int64(len(runners))
		}
		if got := bb.calls.Load(); got != want {
			t.Fatalf("%d short heartbeats on %d shards went out as %d script calls, want %d", len(calls), len(shards), got, want)
		}
		for i, c := range calls {
			<-c.done
			if c.err != nil {
				t.Fatalf("beat %d: %v", i, c.err)
			}
			after := h.presence(runners[i])
			if i == 3 {
				if n, err := c.msg.AsInt64(); err != nil || n != 0 || after.LastSeenAt != before[i].LastSeenAt || after.Device != devs[i] {
					t.Fatalf("the beat with another device: answer %v (%v), record %+v", n, err, after)
				}
				continue
			}
			if strconv.FormatInt(after.LastSeenAt, 10) != c.now || after.LastSeenAt <= before[i].LastSeenAt || after.Device != devs[i] {
				t.Fatalf("beat %d: lastSeenAt %d (answered %s, before %d)", i, after.LastSeenAt, c.now, before[i].LastSeenAt)
			}
		}
	})
}

// A full heartbeat of another device on a record replaces its lists but
// not its owner and device, so the record's digest then names no
// heartbeat: neither device's next short beat is taken, and the record's
// own device's full heartbeat gives it its digest back.
func TestAnotherDevicesHeartbeatLeavesNoDigest(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		counter := &countingObserver{n: map[string]int{}}
		h := newFixture(t, b, Options{ObserveScript: counter.observe})
		ld := func() string { return h.mustPresenceField("runner_1", "ld") }
		mine, other := freshDevice(), freshDevice()
		h.seen("runner_1", "alice", mine, `[]`, `[]`)
		h.seen("runner_1", "alice", other, `[{"kind":"generate"}]`, `[]`)
		if got := ld(); got != "-" {
			t.Fatalf("ld %q after another device's heartbeat, want -", got)
		}
		if p := h.presence("runner_1"); p.Device != mine || string(p.Capabilities) != `[{"kind":"generate"}]` {
			t.Fatalf("record %+v", p)
		}
		counter.take()
		if _, err := h.s.Heartbeat(h.ctx, HeartbeatInput{Presence: Presence{RunnerID: "runner_1", Owner: "alice", Device: mine,
			Capabilities: json.RawMessage(`[]`)}, RequirePresence: true}); err != nil {
			t.Fatal(err)
		}
		if got := counter.take(); !maps.Equal(got, map[string]int{"presence_beat": 1, "presence_seen": 1}) {
			t.Fatalf("calls %v: the short form took a record whose digest names no heartbeat", got)
		}
		devJSON, _ := protocol.Marshal(mine)
		if want := heartbeatDigest("alice", devJSON, []byte(`[]`), []byte(`[]`)); ld() != want {
			t.Fatalf("ld %q, want %q", ld(), want)
		}
		if p := h.presence("runner_1"); p.Device != mine || string(p.Capabilities) != `[]` {
			t.Fatalf("record %+v", p)
		}
	})
}

// A claim writes the runner's record of shards (runner_shards_add) only
// when that record, as the claim read it, does not already cover the
// grants: a later grant on the same shard whose deadline falls within the
// recorded (rounded-up) deadline writes nothing, one past it writes again,
// and so does any grant while a heartbeat's nr stands or the runner has
// no presence record. Whatever was skipped, the cancel request of every
// grant reaches the next heartbeat.
func TestClaimWritesRunnerShardsOnlyWhenNotCovered(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		// A write of rsh (runner_shards_add, or a claim that keeps it
		// itself) always sets its expiry: a marker expiry set before each
		// claim tells whether the claim wrote it.
		const marker = int64(1e12)
		rshKey := h.s.k.runnerShards("runner_1")
		wrote := func() int {
			t.Helper()
			ttl, err := b.client.Do(h.ctx, b.client.B().Pttl().Key(rshKey).Build()).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			if err := b.client.Do(h.ctx, b.client.B().Pexpire().Key(rshKey).Milliseconds(marker).Build()).Error(); err != nil {
				t.Fatal(err)
			}
			if ttl > 0 && ttl < marker-600_000 {
				return 1
			}
			return 0
		}
		dev := freshDevice()
		h.seen("runner_1", "alice", dev, `[]`, `[]`)
		rsh := func() float64 {
			t.Helper()
			z, err := b.client.Do(h.ctx, b.client.B().Zrange().Key(h.s.k.runnerShards("runner_1")).Min("0").Max("-1").Withscores().Build()).AsZScores()
			if err != nil || len(z) != 1 {
				t.Fatalf("rsh %v %v", z, err)
			}
			return z[0].Score
		}
		base := recordedDeadline(h.now() + 600_000)
		grant := func(id string, deadline int64, want int) {
			t.Helper()
			st := stub(id, "alice")
			st.DeadlineAt = deadline
			h.enqueueStub(site, st)
			if got := h.claim(runner("runner_1"), func(in *ClaimInput) { in.Device = dev }); len(got) != 1 {
				t.Fatalf("claim %s: %q", id, ids(got))
			}
			if n := wrote(); n != want {
				t.Fatalf("claim %s wrote rsh %d times, want %d", id, n, want)
			}
			if r := rsh(); r < float64(deadline) {
				t.Fatalf("after %s rsh holds %v, before its deadline %d", id, r, deadline)
			}
			h.seal(id) // the pair's unsealed cap
		}
		grant("j1", base+1000, 1)
		if r := rsh(); r != float64(recordedDeadline(base+1000)) {
			t.Fatalf("rsh %v, want %d", r, recordedDeadline(base+1000))
		}
		grant("j2", base+2000, 0)
		grant("j3", base+runnerShardsGrain+1000, 1)
		grant("j4", base+runnerShardsGrain+500, 0)

		// nr stands: the grant writes, and clears it.
		ld := h.mustPresenceField("runner_1", "ld")
		if err := b.client.Do(h.ctx, b.client.B().Hset().Key(h.s.k.presence("runner_1")).FieldValue().
			FieldValue("ld", ld+":1").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		grant("j5", base+1500, 1)
		if got := h.mustPresenceField("runner_1", "ld"); got != ld {
			t.Fatalf("ld %q after a grant, want %q", got, ld)
		}

		for _, id := range []string{"j1", "j2", "j3", "j4", "j5"} {
			if ok, err := h.s.Cancel(h.ctx, site, id); err != nil || !ok {
				t.Fatalf("cancel %s: %v %v", id, ok, err)
			}
		}
		r, err := h.s.Heartbeat(h.ctx, HeartbeatInput{Presence: Presence{RunnerID: "runner_1", Owner: "alice", Device: dev},
			RequirePresence: true, Cancels: true})
		if err != nil || len(r.Cancel) != 5 {
			t.Fatalf("cancel requests on the next beat: %v %v", r.Cancel, err)
		}

		// No presence record: every grant writes.
		if err := b.client.Do(h.ctx, b.client.B().Del().Key(h.s.k.presence("runner_1")).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		grant("j6", base+1200, 1)
		grant("j7", base+1300, 1)
	})
}

// A busy device's heartbeat renews the grants it reports in its presence
// write on a server that is not a cluster (one script call, renewals on
// two shards included), and after it, with renew, on a cluster and the
// embedded store; the answer is the same either way: each held grant's
// expiry is the heartbeat's clock plus the lease, and a grant the runner
// does not hold (another lease of its job, a lease naming no shard, a
// job it never held) comes back lost, exactly as sent, in order. A
// heartbeat whose record changed renews nothing, and a refused renewal
// writes nothing at all.
func TestHeartbeatRenewsInItsPresenceWrite(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		counter := &countingObserver{n: map[string]int{}}
		h := newFixture(t, b, Options{ObserveScript: counter.observe})
		a, c := site, otherShardSite(h.s, site)
		for i, s := range []string{a, c, a, c} {
			h.enqueueStub(s, stub(fmt.Sprint("rn", i), "alice"))
		}
		dev := freshDevice()
		h.seen("runner_1", "alice", dev, `[]`, `[]`)
		got := h.claim(routes([]string{a, c}, []string{"alice"}), func(in *ClaimInput) { in.Device = dev })
		if len(got) != 4 {
			t.Fatalf("claimed %d", len(got))
		}
		elsewhere, err := mintLease(placedShard(h.s, a))
		if err != nil {
			t.Fatal(err)
		}
		leases := []protocol.GrantRef{
			grant(got[0]),
			{JobID: stubID(got[1]), LeaseID: "not-a-lease-of-this-store"},
			grant(got[1]),
			{JobID: stubID(got[0]), LeaseID: got[2].Lease.ID}, // another job's lease
			grant(got[3]),
			{JobID: "never-held", LeaseID: elsewhere},
		}
		held := map[int]ClaimedStub{0: got[0], 2: got[1], 4: got[3]}
		beat := func(d protocol.PublicIdentity, in RenewInput) (HeartbeatResult, error) {
			return h.s.Heartbeat(h.ctx, HeartbeatInput{Presence: Presence{RunnerID: "runner_1", Owner: "alice", Device: d},
				RequirePresence: true, Cancels: true, Renew: &in})
		}
		h.s.Testing().AdvanceClock(1000)
		counter.take()
		res, err := beat(dev, RenewInput{RunnerID: "runner_1", Leases: leases, LeaseMs: 90_000})
		if err != nil {
			t.Fatal(err)
		}
		calls := counter.take()
		oneNode := !valkeyconn.IsCluster(b.client)
		if oneNode && (calls["presence_beat"] != 1 || calls["renew"] != 0 || calls["presence_seen"] != 0) {
			t.Fatalf("on one server: calls %v, want one presence_beat and no renew", calls)
		}
		if !oneNode && (calls["presence_beat"] != 1 || calls["renew"] != 2) {
			t.Fatalf("on a cluster: calls %v, want one presence_beat and a renew on each of the two shards", calls)
		}
		var wantLost []protocol.GrantRef
		for i, g := range leases {
			if _, ok := held[i]; !ok {
				wantLost = append(wantLost, g)
			}
		}
		if !slices.Equal(res.Renew.Lost, wantLost) {
			t.Fatalf("lost %v, want %v", res.Renew.Lost, wantLost)
		}
		if len(res.Renew.Renewed) != len(held) {
			t.Fatalf("renewed %v", res.Renew.Renewed)
		}
		for k, i := range []int{0, 2, 4} {
			r, g := res.Renew.Renewed[k], held[i]
			if r.JobID != stubID(g) {
				t.Fatalf("renewed %d is %s, want %s (input order)", k, r.JobID, stubID(g))
			}
			// One clock reading decides the write and the renewals when
			// they share a call; a later renew reads a later clock.
			if (oneNode && r.ExpiresAt != res.Presence.LastSeenAt+90_000) || r.ExpiresAt < res.Presence.LastSeenAt+90_000 {
				t.Fatalf("%s expires at %d; the heartbeat's clock is %d", r.JobID, r.ExpiresAt, res.Presence.LastSeenAt)
			}
			if j := h.job(g.SiteID, stubID(g)); j.ClaimedBy == nil || j.ClaimedBy.LeaseExpiresAt != r.ExpiresAt {
				t.Fatalf("%s: record %+v, renewed to %d", r.JobID, j.ClaimedBy, r.ExpiresAt)
			}
		}
		// Nothing held: nothing renewed, nothing read beyond the write.
		if res, err := beat(dev, RenewInput{RunnerID: "runner_1", Leases: []protocol.GrantRef{}, LeaseMs: 90_000}); err != nil ||
			len(res.Renew.Lost) != 0 || len(res.Renew.Renewed) != 0 {
			t.Fatalf("no leases: %+v %v", res.Renew, err)
		}
		if calls := counter.take(); calls["renew"] != 0 {
			t.Fatalf("no leases: calls %v", calls)
		}

		before := dump(t, b, h.s)
		h.s.Testing().AdvanceClock(1000)
		// Another device on the record: nothing written, nothing renewed.
		if _, err := beat(freshDevice(), RenewInput{RunnerID: "runner_1", Leases: leases, LeaseMs: 5_000}); !errors.Is(err, ErrPresenceChanged) {
			t.Fatalf("another device: %v", err)
		}
		// Refused before anything is written.
		bad := []RenewInput{
			{RunnerID: "runner_1", Leases: leases, LeaseMs: -1},
			{RunnerID: "runner_1", Leases: append(slices.Clone(leases), protocol.GrantRef{JobID: "a\x00b", LeaseID: "x"}), LeaseMs: 5_000},
			{RunnerID: "runner_1", Leases: []protocol.GrantRef{{JobID: "j", LeaseID: strings.Repeat("l", DefaultMaxIDBytes+1)}}, LeaseMs: 5_000},
			{RunnerID: "runner_2", Leases: leases, LeaseMs: 5_000},
		}
		for _, in := range bad {
			if _, err := beat(dev, in); !errors.Is(err, ErrInvalidInput) {
				t.Fatalf("runner %s, lease %d ms, %d grants: %v, want ErrInvalidInput", in.RunnerID, in.LeaseMs, len(in.Leases), err)
			}
		}
		if after := dump(t, b, h.s); !maps.Equal(before, after) {
			t.Fatal("a heartbeat that was refused, or whose record changed, changed the store")
		}

		// More grants than one call walks: renewed after the write, by renew.
		many := slices.Clone(leases)
		for len(many) <= GrantChunk {
			many = append(many, protocol.GrantRef{JobID: "never-held", LeaseID: elsewhere})
		}
		counter.take()
		res, err = beat(dev, RenewInput{RunnerID: "runner_1", Leases: many, LeaseMs: 90_000})
		if err != nil {
			t.Fatal(err)
		}
		if calls := counter.take(); calls["renew"] == 0 {
			t.Fatalf("%d grants: calls %v, want renew after the write", len(many), calls)
		}
		if len(res.Renew.Renewed) != 3 || len(res.Renew.Lost) != len(many)-3 {
			t.Fatalf("%d grants: renewed %d, lost %d", len(many), len(res.Renew.Renewed), len(res.Renew.Lost))
		}
	})
}
