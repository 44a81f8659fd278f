package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/scriptrun"
	"github.com/byollm/relay-go/test/relaytest"
)

// Heartbeats arriving within Options.HeartbeatBatch share one round trip,
// yet each is its own script with its own answer: the runners' records
// are all written, and past beatBatchMax a batch is sent without waiting
// for its window. Remembered devices with unchanged lists go in short form
// (presence_beat); a heartbeat that form does not decide (a wrong device,
// changed lists) is sent again in full in a later batch, where a refused
// one (wrong device) is refused alone and changes nothing.
func TestHeartbeatBatch(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		const window = 300 * time.Millisecond
		h := newFixture(t, b, Options{HeartbeatBatch: window})
		const n = beatBatchMax + 20 // two batches: one full, one of the rest
		devs := make([]protocol.PublicIdentity, n)
		for i := range n {
			devs[i] = freshDevice()
			h.seen(fmt.Sprint("runner_", i), "alice", devs[i], `[]`, `[]`)
		}
		before := h.presence("runner_0")
		beatAll := func(caps string, wrong int) ([]HeartbeatResult, []error) {
			var wg sync.WaitGroup
			results := make([]HeartbeatResult, n)
			errs := make([]error, n)
			for i := range n {
				dev := devs[i]
				if i == wrong {
					dev = freshDevice()
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					results[i], errs[i] = h.s.Heartbeat(h.ctx, HeartbeatInput{Presence: Presence{RunnerID: fmt.Sprint("runner_", i),
						Owner: "alice", Device: dev, Capabilities: json.RawMessage(caps)}, RequirePresence: true, Cancels: true})
				}()
			}
			wg.Wait()
			return results, errs
		}
		check := func(results []HeartbeatResult, errs []error, caps string, wrong int) {
			t.Helper()
			for i := range n {
				if i == wrong {
					if !errors.Is(errs[i], ErrPresenceChanged) {
						t.Fatalf("wrong device: %v", errs[i])
					}
					if p := h.presence(fmt.Sprint("runner_", i)); string(p.Capabilities) != `[]` {
						t.Fatalf("a refused heartbeat in a batch wrote %s", p.Capabilities)
					}
					continue
				}
				if errs[i] != nil {
					t.Fatalf("heartbeat %d: %v", i, errs[i])
				}
				r := results[i]
				if r.Presence.RunnerID != fmt.Sprint("runner_", i) || r.Presence.Device != devs[i] || r.Cancel == nil || len(r.Cancel) != 0 {
					t.Fatalf("heartbeat %d answered %+v", i, r)
				}
				if p := h.presence(fmt.Sprint("runner_", i)); p.LastSeenAt != r.Presence.LastSeenAt || string(p.Capabilities) != caps {
					t.Fatalf("record %d is %+v, the heartbeat answered %+v", i, p, r.Presence)
				}
			}
		}

		// Unchanged lists, every device the remembered one: short form only.
		results, errs := beatAll(`[]`, -1)
		if got := h.s.beats.sent.Load(); got != 2 {
			t.Fatalf("%d heartbeats went out in %d batches, want 2", n, got)
		}
		// Each batch is one script call per shard (DefaultShards), so far
		// fewer calls than heartbeats.
		if got := h.s.beats.calls.Load(); got > 2*DefaultShards+2 {
			t.Fatalf("%d heartbeats went out as %d script calls, want at most one per shard per batch", n, got)
		}
		check(results, errs, `[]`, -1)

		// Changed lists and one wrong device: the short form decides none,
		// the full form every one.
		sent, calls := h.s.beats.sent.Load(), h.s.beats.calls.Load()
		results, errs = beatAll(`[{"kind":"generate"}]`, 7)
		if got := h.s.beats.sent.Load() - sent; got < 3 || got > 4 {
			t.Fatalf("%d heartbeats in short form then in full went out in %d batches, want 3 or 4 (the full form of the first batch may join the second)", n, got)
		}
		if got := h.s.beats.calls.Load() - calls; got > 4*DefaultShards+4 {
			t.Fatalf("%d heartbeats went out as %d script calls, want at most two per shard per batch", n, got)
		}
		check(results, errs, `[{"kind":"generate"}]`, 7)
		if after := h.presence("runner_0"); after.LastSeenAt < before.LastSeenAt {
			t.Fatalf("lastSeenAt went back: %d -> %d", before.LastSeenAt, after.LastSeenAt)
		}
	})
}

// A caller that gives up before its batch is sent is answered with its
// context's error and its heartbeat is not written; the others of the
// batch are.
func TestHeartbeatBatchCallerGivesUp(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	h := newFixture(t, b, Options{HeartbeatBatch: 200 * time.Millisecond})
	dev, dev2 := freshDevice(), freshDevice()
	h.seen("runner_1", "alice", dev, `[]`, `[]`)
	h.seen("runner_2", "alice", dev2, `[]`, `[]`)
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := h.s.Heartbeat(h.ctx, HeartbeatInput{Presence: Presence{RunnerID: "runner_2", Owner: "alice", Device: dev2,
			Capabilities: json.RawMessage(`["kept"]`)}, RequirePresence: true})
		done <- err
	}()
	_, err := h.s.Heartbeat(short, HeartbeatInput{Presence: Presence{RunnerID: "runner_1", Owner: "alice", Device: dev,
		Capabilities: json.RawMessage(`["late"]`)}, RequirePresence: true})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("caller past its deadline: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the other heartbeat of the batch: %v", err)
	}
	if p := h.presence("runner_1"); string(p.Capabilities) != `[]` {
		t.Fatalf("a heartbeat whose caller gave up was written: %s", p.Capabilities)
	}
	if p := h.presence("runner_2"); string(p.Capabilities) != `["kept"]` {
		t.Fatalf("the batch's other heartbeat: %s", p.Capabilities)
	}
}

// A batch sent to a server that has forgotten the script (a restart, a
// new node) loads it and answers every heartbeat. A private server: SCRIPT
// FLUSH on the shared one would reach the tests running beside this one.
func TestHeartbeatBatchAfterScriptFlush(t *testing.T) {
	t.Parallel()
	b := backend{"private", relaytest.Open(t, relaytest.StartServer(t).URL())}
	h := newFixture(t, b, Options{HeartbeatBatch: 20 * time.Millisecond})
	dev := freshDevice()
	h.seen("runner_1", "alice", dev, `[]`, `[]`)
	if err := b.client.Do(h.ctx, b.client.B().ScriptFlush().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.s.Heartbeat(h.ctx, HeartbeatInput{Presence: Presence{RunnerID: "runner_1", Owner: "alice", Device: dev,
		Capabilities: json.RawMessage(`["after"]`)}, RequirePresence: true}); err != nil {
		t.Fatalf("heartbeat after SCRIPT FLUSH: %v", err)
	}
	if p := h.presence("runner_1"); string(p.Capabilities) != `["after"]` {
		t.Fatalf("record: %s", p.Capabilities)
	}
}

// With the work view live, a claim that can grant nothing reads nothing,
// not even the presence record it would check: a lost record does not
// fail it. Once work is announced on its routes the claim reads again,
// presence included, and a record that no longer holds the device is
// refused before any grant.
func TestEmptyClaimSkipsThePresenceRead(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	counter := &countingObserver{n: map[string]int{}}
	a := newStore(t, b, Options{ObserveScript: counter.observe})
	if !a.announce {
		t.Fatal("the test server has no sharded pub/sub")
	}
	other, err := New(context.Background(), b.client, Options{Namespace: a.Namespace(), Logger: relaytest.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	withView(t, a)
	ha := &storeFixture{t: t, b: b, s: a, ctx: context.Background()}
	dev := freshDevice()
	ha.seen("runner_1", "alice", dev, `[]`, `[]`)
	in := claimArgs(func(in *ClaimInput) {
		in.RunnerID, in.Owner, in.Device, in.RequirePresence = "runner_1", "alice", dev, true
	})
	for range 2 { // the first claim reads and fences; the second may still read once
		if got, err := a.Claim(ha.ctx, in); err != nil || len(got) != 0 {
			t.Fatalf("empty claim: %v %v", got, err)
		}
	}
	relaytest.WaitFor(t, 5*time.Second, "an empty claim asks Valkey nothing", func() bool {
		counter.take()
		got, verified, err := a.ClaimVerified(ha.ctx, in)
		if err != nil || len(got) != 0 {
			t.Fatalf("empty claim: %v %v", got, err)
		}
		asked := len(counter.take()) != 0
		if verified && !asked {
			t.Fatal("a claim that read nothing says it verified the presence record")
		}
		return !asked
	})
	if err := a.DropPresence(ha.ctx, "runner_1"); err != nil {
		t.Fatal(err)
	}
	counter.take()
	if got, err := a.Claim(ha.ctx, in); err != nil || len(got) != 0 {
		t.Fatalf("empty claim without a presence record: %v %v", got, err)
	}
	if calls := counter.take(); len(calls) != 0 {
		t.Fatalf("an empty claim asked Valkey: %v", calls)
	}

	// Work announced on the claim's routes: the claim reads, finds the
	// record gone and grants nothing.
	ho := &storeFixture{t: t, b: b, s: other, ctx: context.Background()}
	ho.enqueueStub(site, stub("queued-1", "alice"))
	relaytest.WaitFor(t, 5*time.Second, "the claim sees the announced job", func() bool {
		_, err := a.Claim(ha.ctx, in)
		if err != nil && !errors.Is(err, ErrPresenceChanged) {
			t.Fatalf("claim: %v", err)
		}
		return errors.Is(err, ErrPresenceChanged)
	})
	if j := ha.job(site, "queued-1"); j.State != "queued" {
		t.Fatalf("a claim refused for its presence granted: %+v", j)
	}
	ha.seen("runner_1", "alice", dev, `[]`, `[]`)
	if got, verified, err := a.ClaimVerified(ha.ctx, in); err != nil || len(got) != 1 || !verified {
		t.Fatalf("claim after the record is back: %v, verified %v, %v", got, verified, err)
	}
	// Without RequirePresence nothing is verified, whatever was read.
	ho.enqueueStub(site, stub("queued-2", "alice"))
	in.RequirePresence = false
	relaytest.WaitFor(t, 5*time.Second, "the claim sees the second job", func() bool {
		got, verified, err := a.ClaimVerified(ha.ctx, in)
		if err != nil || verified {
			t.Fatalf("claim without RequirePresence: %v, verified %v, %v", got, verified, err)
		}
		return len(got) == 1
	})
}

// sameShardRunners is n runner ids whose presence lives on one shard, and
// one more on another shard.
func sameShardRunners(s *Store, prefix string, n int) (same []string, other string) {
	want := -1
	for i := 0; len(same) < n || other == ""; i++ {
		id := fmt.Sprint(prefix, i)
		sh := s.k.runnerShard(id)
		switch {
		case want == -1:
			want = sh
			same = append(same, id)
		case sh == want && len(same) < n:
			same = append(same, id)
		case sh != want && other == "":
			other = id
		}
	}
	return same, other
}

// beatCall is one heartbeat as Heartbeat would queue it.
func beatCall(t testing.TB, s *Store, p Presence, require, shards bool) *batchedCall {
	t.Helper()
	device, err := protocol.Marshal(p.Device)
	if err != nil {
		t.Fatal(err)
	}
	keys, args := s.seenCall(p, device, orEmptyArray(p.Capabilities), orEmptyArray(p.Withheld), require, shards)
	return &batchedCall{ctx: context.Background(), done: make(chan struct{}), keys: keys, args: args}
}

// shortBeatCall is p's heartbeat in short form (presence_beat) as the
// batch queues it.
func shortBeatCall(t testing.TB, s *Store, p Presence, shards bool) *batchedCall {
	t.Helper()
	device, err := protocol.Marshal(p.Device)
	if err != nil {
		t.Fatal(err)
	}
	keys, args := s.beatCall(p, device, orEmptyArray(p.Capabilities), orEmptyArray(p.Withheld), shards)
	return &batchedCall{ctx: context.Background(), beat: true, done: make(chan struct{}), keys: keys, args: args}
}

// The heartbeats of one batch that share a shard share one script call
// (presence_seen_batch), a lone one on its shard runs presence_seen, and
// each is still decided on its own: a known device is written, a wrong
// device is refused and changes nothing, a new record is created and
// listed, and a record's shard list comes back only when asked for.
func TestHeartbeatBatchGroupsByShard(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		same, other := sameShardRunners(h.s, "grp_", 3)
		known, wrong, fresh := same[0], same[1], same[2]
		devKnown, devWrong, devOther := freshDevice(), freshDevice(), freshDevice()
		h.seen(known, "alice", devKnown, `[]`, `[]`)
		h.seen(wrong, "alice", devWrong, `["before"]`, `[]`)
		h.seen(other, "bob", devOther, `[]`, `[]`)
		devFresh := freshDevice()
		calls := []*batchedCall{
			beatCall(t, h.s, Presence{RunnerID: known, Owner: "alice", Device: devKnown, Capabilities: json.RawMessage(`["new"]`)}, true, true),
			beatCall(t, h.s, Presence{RunnerID: wrong, Owner: "alice", Device: freshDevice(), Capabilities: json.RawMessage(`["evil"]`)}, true, false),
			beatCall(t, h.s, Presence{RunnerID: other, Owner: "bob", Device: devOther, Capabilities: json.RawMessage(`["o"]`)}, true, true),
			beatCall(t, h.s, Presence{RunnerID: fresh, Owner: "carol", Device: devFresh, Capabilities: json.RawMessage(`[{"kind":"generate"}]`), Withheld: json.RawMessage(`["w"]`)}, false, false),
		}
		bb := newBeatBatch(h.s, time.Hour, time.Hour)
		bb.send(append([]*batchedCall(nil), calls...))
		if got := bb.calls.Load(); got != 2 {
			t.Fatalf("4 heartbeats on 2 shards went out as %d script calls, want 2", got)
		}
		for i, c := range calls {
			<-c.done
			if c.err != nil {
				t.Fatalf("call %d: %v", i, c.err)
			}
		}
		reply := func(i int) map[string]string {
			m, err := flatMap(calls[i].msg)
			if err != nil {
				t.Fatalf("reply %d: %v", i, err)
			}
			return m
		}
		// Under the condition a record answers only lastSeenAt (and rsh when
		// asked): the caller sent the rest.
		if r := reply(0); len(r) != 2 || r["lastSeenAt"] == "" {
			t.Fatalf("known device answered %v", r)
		} else if _, ok := r["rsh"]; !ok {
			t.Fatalf("asked for its shards, known device's reply has none: %v", r)
		}
		if p := h.presence(known); string(p.Capabilities) != `["new"]` {
			t.Fatalf("known device's record: %s", p.Capabilities)
		}
		if r := reply(1); len(r) != 0 {
			t.Fatalf("wrong device answered %v, want the empty reply", r)
		}
		if p := h.presence(wrong); string(p.Capabilities) != `["before"]` || p.Device != devWrong {
			t.Fatalf("a refused heartbeat in a group wrote %+v", p)
		}
		if r := reply(2); r["lastSeenAt"] == "" || h.presence(other).LastSeenAt == 0 {
			t.Fatalf("the lone heartbeat answered %v", r)
		}
		r := reply(3)
		if _, ok := r["rsh"]; ok || r["owner"] != "carol" {
			t.Fatalf("new record answered %v (no shards asked for)", r)
		}
		if p := h.presence(fresh); p == nil || string(p.Withheld) != `["w"]` || p.Device != devFresh {
			t.Fatalf("new record: %+v", p)
		}
		owned, err := h.s.Advertised(h.ctx, "carol")
		if err != nil || len(owned) != 1 {
			t.Fatalf("the new record is not listed under its owner: %v %v", owned, err)
		}
	})
}

// A shard's group holds at most beatGroupMax heartbeats and, past its
// first, beatGroupBytes of arguments; groups keep arrival order.
func TestHeartbeatGroupBounds(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	s := newStore(t, b, Options{Logger: relaytest.Discard()})
	same, other := sameShardRunners(s, "bnd_", beatGroupMax+6)
	var calls []*batchedCall
	for _, id := range same {
		calls = append(calls, beatCall(t, s, Presence{RunnerID: id, Owner: "o", Device: freshDevice()}, false, false))
	}
	calls = append(calls, beatCall(t, s, Presence{RunnerID: other, Owner: "o", Device: freshDevice()}, false, false))
	groups := groupByShard(calls, false)
	if len(groups) != 3 || len(groups[0]) != beatGroupMax || len(groups[1]) != 6 || len(groups[2]) != 1 {
		t.Fatalf("groups of %d, %d+6 and 1 heartbeats: got %d groups", beatGroupMax, beatGroupMax, len(groups))
	}
	if groups[0][0] != calls[0] || groups[1][5] != calls[beatGroupMax+5] || groups[2][0] != calls[len(calls)-1] {
		t.Fatal("groups out of arrival order")
	}
	big := strings.Repeat("x", beatGroupBytes/2-4096) // two fit in a group, three do not
	var large []*batchedCall
	for _, id := range same[:5] {
		c := beatCall(t, s, Presence{RunnerID: id, Owner: "o", Device: freshDevice()}, false, false)
		c.args[4] = big
		large = append(large, c)
	}
	if groups := groupByShard(large, false); len(groups) != 3 || len(groups[0]) != 2 || len(groups[1]) != 2 || len(groups[2]) != 1 {
		t.Fatalf("five half-megabyte heartbeats: %d groups", len(groups))
	}
	large[0].args[4] = strings.Repeat("x", 2*beatGroupBytes)
	if groups := groupByShard(large[:2], false); len(groups) != 2 || len(groups[0]) != 1 {
		t.Fatal("a heartbeat larger than a group's budget goes out alone")
	}
}

// spread gives each call of a group its own entry of the group's reply,
// after the entries they share, and fails the whole group on a reply of
// the wrong shape (real replies of a real server, built by EVAL).
func TestSpread(t *testing.T) {
	t.Parallel()
	c := realBackend(t).client
	ctx := context.Background()
	reply := func(lua string) valkey.ValkeyMessage {
		t.Helper()
		m, err := c.Do(ctx, c.B().Eval().Script(lua).Numkeys(0).Build()).ToMessage()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	calls := func(n int) []*batchedCall {
		g := make([]*batchedCall, n)
		for i := range g {
			g[i] = &batchedCall{}
		}
		return g
	}
	failed := errors.New("the call failed")
	cases := []struct {
		name    string
		sc      Script
		lua     string
		err     error
		n, lead int
		wantErr error
		want    []string // each call's entry, as a string ("0" for an integer 0)
		now     string
	}{
		{name: "beat", sc: scPresenceBeat, lua: `return {'1700000000000', 0, '3 7', ''}`, n: 3, lead: 1,
			want: []string{"0", "3 7", ""}, now: "1700000000000"},
		{name: "one beat", sc: scPresenceBeat, lua: `return {'5', ''}`, n: 1, lead: 1, want: []string{""}, now: "5"},
		{name: "batch", sc: scPresenceSeenBatch, lua: `return {'a', 'b'}`, n: 2, want: []string{"a", "b"}},
		{name: "one entry short", sc: scPresenceBeat, lua: `return {'5', 0}`, n: 2, lead: 1, wantErr: ErrUnexpectedReply},
		{name: "one entry over", sc: scPresenceSeenBatch, lua: `return {'a', 'b', 'c'}`, n: 2, wantErr: ErrUnexpectedReply},
		{name: "not an array", sc: scPresenceBeat, lua: `return 'x'`, n: 1, lead: 1, wantErr: ErrUnexpectedReply},
		{name: "lastSeenAt not a string", sc: scPresenceBeat, lua: `return {{}, 0}`, n: 1, lead: 1, wantErr: ErrUnexpectedReply},
		{name: "the call failed", sc: scPresenceBeat, lua: `return {'5', 0}`, err: failed, n: 1, lead: 1, wantErr: failed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := calls(tc.n)
			spread(g, tc.sc, reply(tc.lua), tc.err, tc.lead)
			for i, bc := range g {
				if tc.wantErr != nil {
					if !errors.Is(bc.err, tc.wantErr) {
						t.Fatalf("call %d: err %v, want %v", i, bc.err, tc.wantErr)
					}
					continue
				}
				if bc.err != nil || bc.now != tc.now {
					t.Fatalf("call %d: err %v, now %q", i, bc.err, bc.now)
				}
				got, err := bc.msg.ToString()
				if err != nil {
					n, ierr := bc.msg.AsInt64()
					if ierr != nil {
						t.Fatalf("call %d: entry %v", i, bc.msg)
					}
					got = fmt.Sprint(n)
				}
				if got != tc.want[i] {
					t.Fatalf("call %d: entry %q, want %q", i, got, tc.want[i])
				}
			}
		})
	}
}

// An idle heartbeat (HeartbeatInput.Idle) whose claim the work view knows
// would find nothing waits for the idle window, and the next batch of the
// short window takes it along. One the view cannot rule out (a job queued
// on its routes, a site never placed, a view not live) goes in the short
// window, as does every heartbeat without Idle.
func TestIdleHeartbeatWaitsForTheIdleWindow(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	h := newFixture(t, b, Options{HeartbeatBatch: 20 * time.Millisecond, HeartbeatIdleBatch: time.Hour})
	if !h.s.announce {
		t.Fatal("the test server has no sharded pub/sub, so no work view")
	}
	withView(t, h.s)
	devIdle, devBusy := freshDevice(), freshDevice()
	h.seen("runner_idle", "alice", devIdle, `[]`, `[]`)
	h.seen("runner_busy", "alice", devBusy, `[]`, `[]`)
	idle := &IdleClaim{Routes: []Route{{SiteID: site, Owner: "alice"}}, Kinds: []string{protocol.KindGenerate}}
	beat := func(runner string, dev protocol.PublicIdentity, idle *IdleClaim) chan error {
		done := make(chan error, 1)
		go func() {
			_, err := h.s.Heartbeat(h.ctx, HeartbeatInput{Presence: Presence{RunnerID: runner, Owner: "alice", Device: dev},
				RequirePresence: true, Cancels: true, Idle: idle})
			done <- err
		}()
		return done
	}
	wait := func(what string, done chan error) {
		t.Helper()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no answer within 10 s", what)
		}
	}

	// An empty claim teaches the view the routes' queues and due heads.
	if got := h.claim(runner("runner_idle")); len(got) != 0 {
		t.Fatalf("claimed %d from an empty store", len(got))
	}
	if !h.s.claimLooksEmpty("runner_idle", "alice", idle) {
		t.Fatal("the view does not rule out a claim it has just seen empty")
	}
	before := h.presence("runner_idle")
	h.s.Testing().AdvanceClock(5)
	sent := h.s.beats.sent.Load()
	idleDone := beat("runner_idle", devIdle, idle)
	select {
	case err := <-idleDone:
		t.Fatalf("an idle heartbeat was answered within 15 short windows (%v): it did not wait for the idle one", err)
	case <-time.After(300 * time.Millisecond):
	}
	if got := h.s.beats.sent.Load() - sent; got != 0 {
		t.Fatalf("%d batches went out with only an idle heartbeat waiting", got)
	}
	wait("a heartbeat in the short window", beat("runner_busy", devBusy, nil))
	wait("the idle heartbeat, taken along", idleDone)
	if got := h.s.beats.sent.Load() - sent; got != 1 {
		t.Fatalf("the two heartbeats went out in %d batches, want 1", got)
	}
	if after := h.presence("runner_idle"); after.LastSeenAt <= before.LastSeenAt {
		t.Fatalf("the idle heartbeat did not write lastSeenAt: %d -> %d", before.LastSeenAt, after.LastSeenAt)
	}

	// What the view cannot rule out goes in the short window on its own.
	for _, c := range []struct {
		name string
		in   *IdleClaim
	}{
		{"a site never placed", &IdleClaim{Routes: []Route{{SiteID: "never-placed", Owner: "alice"}}, Kinds: idle.Kinds}},
		{"a kind never claimed", &IdleClaim{Routes: idle.Routes, Kinds: []string{protocol.KindChat}}},
	} {
		if h.s.claimLooksEmpty("runner_idle", "alice", c.in) {
			t.Fatalf("%s: the view rules out a claim it has not seen", c.name)
		}
		wait(c.name, beat("runner_idle", devIdle, c.in))
	}
	// No route or no kind: such a claim grants nothing without a read.
	for _, in := range []*IdleClaim{{Kinds: idle.Kinds}, {Routes: idle.Routes}} {
		if !h.s.claimLooksEmpty("runner_idle", "alice", in) {
			t.Fatalf("a claim of %d routes and %d kinds is not ruled out", len(in.Routes), len(in.Kinds))
		}
	}
	h.enqueueStub(site, stub("queued", "alice"))
	if h.s.claimLooksEmpty("runner_idle", "alice", idle) {
		t.Fatal("a queue of the routes holds a job, and the view rules out the claim")
	}
	wait("an idle heartbeat with a job queued on its routes", beat("runner_idle", devIdle, idle))
	if got := h.claim(runner("runner_idle")); len(got) != 1 {
		t.Fatalf("claimed %d, want the queued job", len(got))
	}

	// A Store whose view is not running rules out nothing.
	other, err := New(context.Background(), b.client, Options{Namespace: h.s.Namespace(), Logger: relaytest.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	if other.claimLooksEmpty("runner_idle", "alice", idle) {
		t.Fatal("a store without a live view ruled out a claim")
	}
}

// An idle heartbeat whose short form does not decide it (its lists
// changed) waits for the idle window once: the full form goes in the
// short window, so both fit in the store timeout plus one idle window,
// which is all the relay gives such a call.
func TestIdleHeartbeatWaitsOnce(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	const idleWindow = 400 * time.Millisecond
	h := newFixture(t, b, Options{HeartbeatBatch: 20 * time.Millisecond, HeartbeatIdleBatch: idleWindow})
	withView(t, h.s)
	dev := freshDevice()
	h.seen("runner_idle", "alice", dev, `[]`, `[]`)
	if got := h.claim(runner("runner_idle")); len(got) != 0 {
		t.Fatalf("claimed %d from an empty store", len(got))
	}
	idle := &IdleClaim{Routes: []Route{{SiteID: site, Owner: "alice"}}, Kinds: []string{protocol.KindGenerate}}
	if !h.s.claimLooksEmpty("runner_idle", "alice", idle) {
		t.Fatal("the view does not rule out a claim it has just seen empty")
	}
	// Two idle windows would pass this deadline; one and a short one do not.
	ctx, cancel := context.WithTimeout(h.ctx, 2*idleWindow)
	defer cancel()
	if _, err := h.s.Heartbeat(ctx, HeartbeatInput{Presence: Presence{RunnerID: "runner_idle", Owner: "alice", Device: dev,
		Capabilities: json.RawMessage(`["changed"]`)}, RequirePresence: true, Cancels: true, Idle: idle}); err != nil {
		t.Fatalf("an idle heartbeat with changed lists: %v", err)
	}
	if p := h.presence("runner_idle"); string(p.Capabilities) != `["changed"]` {
		t.Fatalf("record holds %s, want the changed lists", p.Capabilities)
	}
}

// Heartbeats do not wait for their window while Valkey is unreachable:
// one already waiting when a call fails in transport is sent at once (and
// refused at once), one arriving then is sent on its own, and once a call
// is answered again heartbeats wait for their window as before.
func TestHeartbeatsSkipTheWindowWhileValkeyIsAway(t *testing.T) {
	t.Parallel()
	srv := relaytest.StartServer(t)
	b := backend{"private", relaytest.Open(t, srv.URL())}
	// Windows no test outlives: a heartbeat answered at all was not held
	// for its window.
	h := newFixture(t, b, Options{HeartbeatBatch: time.Hour, HeartbeatIdleBatch: time.Hour, CallTimeout: 2 * time.Second})
	dev := freshDevice()
	h.seen("runner_away", "alice", dev, `[]`, `[]`)
	beat := func(ctx context.Context) chan error {
		done := make(chan error, 1)
		go func() {
			_, err := h.s.Heartbeat(ctx, HeartbeatInput{Presence: Presence{RunnerID: "runner_away", Owner: "alice", Device: dev}})
			done <- err
		}()
		return done
	}
	answer := func(what string, done chan error) error {
		t.Helper()
		select {
		case err := <-done:
			return err
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no answer within 5 s", what)
			return nil
		}
	}
	held := func(what string, done chan error) {
		t.Helper()
		select {
		case err := <-done:
			t.Fatalf("%s was answered (%v): it did not wait for its window", what, err)
		case <-time.After(300 * time.Millisecond):
		}
	}

	waiting := beat(h.ctx)
	held("a heartbeat while Valkey answers", waiting)
	if _, err := srv.Stop(syscall.SIGKILL, 10*time.Second); err != nil && !strings.Contains(err.Error(), "killed") {
		t.Fatalf("stop: %v", err)
	}
	// Any call failing in transport sends the waiting heartbeat.
	if _, err := h.s.Seen(h.ctx, Presence{RunnerID: "runner_other", Owner: "alice", Device: freshDevice()}); !scriptrun.Unavailable(err) {
		t.Fatalf("a call to a stopped server: %v, want an unavailable store", err)
	}
	if err := answer("the heartbeat waiting when Valkey went away", waiting); !scriptrun.Unavailable(err) {
		t.Fatalf("the waiting heartbeat: %v, want an unavailable store", err)
	}
	if err := answer("a heartbeat while Valkey is away", beat(h.ctx)); !scriptrun.Unavailable(err) {
		t.Fatalf("a heartbeat while Valkey is away: %v, want an unavailable store", err)
	}

	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	// The first answered heartbeat goes alone (a restarted server holds
	// no record: without RequirePresence it writes one).
	relaytest.WaitFor(t, 10*time.Second, "no heartbeat answered after the restart", func() bool {
		return answer("a heartbeat after the restart", beat(h.ctx)) == nil
	})
	ctx, cancel := context.WithCancel(h.ctx)
	defer cancel()
	again := beat(ctx)
	held("a heartbeat once Valkey answers again", again)
	cancel()
	if err := answer("the held heartbeat, its caller gone", again); !errors.Is(err, context.Canceled) {
		t.Fatalf("the held heartbeat: %v, want its caller's cancellation", err)
	}
}

// spreadBeats reads presence_beat's second lead entry as the churn reports
// of its renewals (handed to OnChurn) and fails the whole group when it
// is not a list of reports; each call still gets its own entry.
func TestSpreadBeats(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	reports := make(chan ChurnReport, 4)
	s := newStore(t, b, Options{OnChurn: func(r ChurnReport) { reports <- r }})
	ctx := context.Background()
	reply := func(lua string) valkey.ValkeyMessage {
		t.Helper()
		m, err := b.client.Do(ctx, b.client.B().Eval().Script(lua).Numkeys(0).Build()).ToMessage()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	g := []*batchedCall{{}, {}}
	s.spreadBeats(g, reply(`return {'7', {{'c2l0ZQ', 'YWxpY2U', 3}}, '1 2', {'', {'9', ''}}}`), nil)
	if g[0].err != nil || g[1].err != nil || g[0].now != "7" {
		t.Fatalf("errs %v %v, now %q", g[0].err, g[1].err, g[0].now)
	}
	if e, _ := g[0].msg.ToString(); e != "1 2" {
		t.Fatalf("first entry %q", e)
	}
	if parts, err := g[1].msg.ToArray(); err != nil || len(parts) != 2 {
		t.Fatalf("second entry %v %v", g[1].msg, err)
	}
	select {
	case r := <-reports:
		if r.SiteID != "site" || r.Owner != "alice" || r.Expiries != 3 {
			t.Fatalf("report %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the renewals' churn report never reached OnChurn")
	}
	g = []*batchedCall{{}, {}}
	s.spreadBeats(g, reply(`return {'7', 'not reports', '', ''}`), nil)
	for i, c := range g {
		if !errors.Is(c.err, ErrUnexpectedReply) {
			t.Fatalf("call %d: %v, want ErrUnexpectedReply", i, c.err)
		}
	}
}
