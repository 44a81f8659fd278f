package store

import (
	"cmp"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/valkeyconn"
	"github.com/byollm/relay-go/lua"
	"github.com/byollm/relay-go/test/relaytest"
)

// keyHashSlot is a key's cluster slot: CRC16 of its hash tag (the first
// non-empty {...}), or of the whole key.
func keyHashSlot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return keySlot(key[i+1 : i+1+j])
		}
	}
	return keySlot(key)
}

// keySlot is CRC16/XMODEM mod 16384, as a cluster computes it (vectors from
// the Redis cluster specification and its documentation).
func TestKeySlotMatchesTheClusterSpec(t *testing.T) {
	t.Parallel()
	if got := keySlot("123456789"); got != 0x31C3%16384 {
		t.Fatalf("crc16(123456789) slot %d, want %d", got, 0x31C3%16384)
	}
	for key, want := range map[string]uint16{"foo": 12182, "bar": 5061, "hello": 866, "{user1000}.following": 3443} {
		if got := keyHashSlot(key); got != want {
			t.Errorf("slot(%q) = %d, want %d", key, got, want)
		}
	}
}

// Shards spread over the slot space in equal ranges, so a cluster's
// contiguous slot ranges give each primary its share of the shards.
func TestShardsTileTheSlotSpace(t *testing.T) {
	t.Parallel()
	h := newFixture(t, realBackend(t), Options{})
	n := len(h.s.k.shards)
	if n != DefaultShards {
		t.Fatalf("%d shards, want %d", n, DefaultShards)
	}
	for i, p := range h.s.k.shards {
		slot := int(keyHashSlot(p + "x"))
		if lo, hi := i*16384/n, (i+1)*16384/n; slot < lo || slot >= hi {
			t.Errorf("shard %d (%q) is on slot %d, outside [%d, %d)", i, p, slot, lo, hi)
		}
	}
}

// A site id or runner id cannot choose its slot: ids that would all carry
// the same hash tag if tags were taken from ids ("{x}..."), or that are
// otherwise alike, spread over the shards like any others, and every key a
// site's jobs create is on that site's shard.
func TestCraftedIDsDoNotPickTheirSlot(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	h := newFixture(t, b, Options{})
	slots := map[uint16]int{}
	for i := range 64 {
		id := fmt.Sprintf("{same}%d", i)
		placedShard(h.s, id)
		slots[keyHashSlot(h.s.k.job(id, "j"))]++
		slots[keyHashSlot(h.s.k.presence(id))]++
	}
	// 128 keys over 16 shards: all on one shard would be a crafted win;
	// a uniform spread leaves no shard with more than a quarter.
	if len(slots) < DefaultShards/2 {
		t.Fatalf("64 crafted sites and runners landed on %d slots: %v", len(slots), slots)
	}
	for slot, n := range slots {
		if n > 32 {
			t.Errorf("slot %d holds %d of 128 crafted keys", slot, n)
		}
	}

	// Every key two sites' jobs create, through a whole life: each site's
	// keys on its own shard's slot (the runner's held sets per shard, on the
	// job's shard), nothing on a third slot but the runner's record and
	// presence.
	a, c := "{same}a", otherShardSite(h.s, "{same}a")
	for _, s := range []string{a, c} {
		st := stub("j-"+s, "alice")
		h.enqueueStub(s, st)
	}
	got := h.claim(routes([]string{a, c}, []string{"alice"}), runner("{same}r"))
	if len(got) != 2 {
		t.Fatalf("claimed %d, want 2", len(got))
	}
	for _, g := range got {
		if r, err := h.s.Seal(h.ctx, g.SiteID, stubID(g), envelope); err != nil || r.State != StateReady {
			t.Fatalf("seal: %+v %v", r, err)
		}
	}
	h.seen("{same}r", "alice", freshDevice(), "[]", "[]")
	slotA, slotC := keyHashSlot(h.s.k.job(a, "x")), keyHashSlot(h.s.k.job(c, "x"))
	if slotA == slotC {
		t.Fatal("the two sites share a slot")
	}
	own := map[uint16]bool{slotA: true, slotC: true, keyHashSlot(h.s.k.presence("{same}r")): true, keyHashSlot(h.s.k.layout()): true}
	for _, k := range scanKeys(t, b.client, h.s.KeyPattern()) {
		if !own[keyHashSlot(k)] {
			t.Errorf("key %q is on slot %d, none of the sites', the runner's or the fleet's", k, keyHashSlot(k))
		}
		if strings.Contains(k, ":"+enc(a)) && keyHashSlot(k) != slotA {
			t.Errorf("site a's key %q is off its shard", k)
		}
		if strings.Contains(k, ":"+enc(c)) && keyHashSlot(k) != slotC {
			t.Errorf("site c's key %q is off its shard", k)
		}
	}
}

// Every script call, and every command a script runs inside, stays on one
// slot: MONITOR shows both (script-issued commands as "[0 lua]"), and the
// workload below runs every Script the store has, once as the functions
// library (FCALL) and once as scripts (EVALSHA). One exception, on a server
// that is not a cluster only: a batch of short-form heartbeats
// (presence_beat) carries records of several shards, each record's two
// keys on its runner's slot (groupByShard); on a cluster it is one call
// per shard like the rest (TestShortBeatsOfEveryShardShareOneCallOnOneServer).
// Its renewals there name each grant's lease index in KEYS and touch only
// keys of those indexes' slots (TestHeartbeatRenewsInItsPresenceWrite).
func TestEveryScriptStaysOnOneSlot(t *testing.T) {
	t.Parallel()
	for _, evalScripts := range []bool{false, true} {
		t.Run(map[bool]string{false: "functions", true: "scripts"}[evalScripts], func(t *testing.T) {
			everyScriptStaysOnOneSlot(t, evalScripts)
		})
	}
}

func everyScriptStaysOnOneSlot(t *testing.T, evalScripts bool) {
	b := realBackend(t)
	m := startMonitor(t)
	h := newFixture(t, b, Options{OnChurn: func(ChurnReport) {}, evalScripts: evalScripts})
	if h.s.RunsFunctions() == evalScripts {
		t.Fatalf("RunsFunctions() = %v with evalScripts %v", h.s.RunsFunctions(), evalScripts)
	}
	ctx := context.Background()
	byFunction := map[string]string{}
	if lib, ok := h.s.runner.Library(); ok {
		for op, fn := range lib.Fn {
			byFunction[fn] = op
		}
	}

	byHash := map[string]string{}
	sources, err := loadScripts(lua.FS)
	if err != nil {
		t.Fatal(err)
	}
	for name, src := range sources {
		sum := sha1.Sum([]byte(src))
		byHash[hex.EncodeToString(sum[:])] = name
	}

	// The workload: every operation, jobs on two shards.
	a, c := site, otherShardSite(h.s, site)
	for i, s := range []string{a, c, a, c} {
		h.enqueueStub(s, stub(fmt.Sprint("w", i), "alice"))
	}
	got := h.claim(routes([]string{a, c}, []string{"alice"}))
	if len(got) != 4 {
		t.Fatalf("claimed %d", len(got))
	}
	_, _ = h.s.Job(ctx, a, "w0")
	_, _ = h.s.Jobs(ctx)
	_, _ = h.s.Awaiting(ctx, a)
	_, _ = h.s.PendingJobs(ctx, a)
	h.s.Seal(ctx, got[0].SiteID, stubID(got[0]), envelope)
	h.s.Seal(ctx, got[1].SiteID, stubID(got[1]), envelope)
	h.take(stubID(got[0]), "runner_1", got[0].Lease.ID)
	h.take(stubID(got[1]), "runner_1", got[0].Lease.ID) // another job's lease: the bare-id probe
	h.take("nope", "runner_1", "zz-not-ours")
	h.complete(stubID(got[0]), "runner_1", got[0].Lease.ID, "ok")
	_, _ = h.s.Finished(ctx, got[0].SiteID)
	_, _ = h.s.ResultJobs(ctx, got[0].SiteID)
	h.s.Cancel(ctx, got[1].SiteID, stubID(got[1]))
	_, _ = h.s.CancelRequests(ctx, "runner_1")
	_, _ = h.s.RenewLeases(ctx, RenewInput{RunnerID: "runner_1", LeaseMs: 1000, Leases: []protocol.GrantRef{grant(got[1])}})
	h.release("runner_1", []protocol.GrantRef{grant(got[2])}, ReasonRefused, nil)
	if given := h.giveBack(UnansweredClaim{RunnerID: "runner_1", Token: "workload", Leases: []string{got[3].Lease.ID}}); len(given) != 1 {
		t.Fatalf("give back: %v", given)
	}
	// relay migrate's move of a job to another key part (compactJobIDs).
	moved := "0f0e0d0c-0b0a-4908-8706-050403020100"
	if _, err := h.s.run(ctx, scJobRekey, []string{h.s.k.job(got[3].SiteID, stubID(got[3])), h.s.k.job(got[3].SiteID, moved)},
		member(got[3].SiteID, stubID(got[3])), encJob(moved)); err != nil {
		t.Fatalf("job_rekey: %v", err)
	}
	_ = h.writeRawStub(got[2].SiteID, stubID(got[2]), `{"bad":1}`)
	h.claim(routes([]string{a, c}, []string{"alice"}))
	h.s.Testing().AdvanceClock(3_600_000)
	h.sweep()
	d1 := freshDevice()
	h.seen("runner_1", "alice", d1, "[]", "[]")
	if _, err := h.s.Heartbeat(ctx, HeartbeatInput{Presence: Presence{RunnerID: "runner_1", Owner: "alice", Device: d1},
		RequirePresence: true, Cancels: true}); err != nil {
		t.Fatal(err)
	}
	// Renewals on two shards (the jobs are settled by now, so lost): on
	// one server they ride in the presence write.
	if _, err := h.s.Heartbeat(ctx, HeartbeatInput{Presence: Presence{RunnerID: "runner_1", Owner: "alice", Device: d1},
		RequirePresence: true, Renew: &RenewInput{RunnerID: "runner_1", LeaseMs: 1000, Leases: []protocol.GrantRef{grant(got[0]), grant(got[1])}}}); err != nil {
		t.Fatal(err)
	}
	together, _ := sameShardRunners(h.s, "together_", 2)
	bb := newBeatBatch(h.s, time.Hour, time.Hour)
	bb.send([]*batchedCall{beatCall(t, h.s, Presence{RunnerID: together[0], Owner: "alice", Device: freshDevice()}, false, true),
		beatCall(t, h.s, Presence{RunnerID: together[1], Owner: "alice", Device: freshDevice()}, false, false),
		shortBeatCall(t, h.s, Presence{RunnerID: together[0], Owner: "alice", Device: freshDevice()}, true),
		shortBeatCall(t, h.s, Presence{RunnerID: together[1], Owner: "alice", Device: freshDevice()}, false)})
	apart := "apart_0" // a short batch over two shards: a runner off together[0]'s shard
	for i := 1; h.s.k.runnerShard(apart) == h.s.k.runnerShard(together[0]); i++ {
		apart = fmt.Sprint("apart_", i)
	}
	bb.send([]*batchedCall{shortBeatCall(t, h.s, Presence{RunnerID: together[0], Owner: "alice", Device: freshDevice()}, false),
		shortBeatCall(t, h.s, Presence{RunnerID: apart, Owner: "alice", Device: freshDevice()}, true)})
	_, _ = h.s.Presence(ctx, "runner_1")
	_, _ = h.s.PresenceHead(ctx, "runner_1")
	_, _ = h.s.Everyone(ctx)
	_, _ = h.s.Advertised(ctx, "alice")
	_ = h.s.DropPresence(ctx, "runner_1")
	// Retention (retention.go): the backfill, a reap with everything past
	// the cut, and a forget.
	if _, err := h.s.BackfillRetention(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := h.s.ForgetDevices(ctx, []string{together[1]}); err != nil {
		t.Fatal(err)
	}
	h.s.opts.DeviceRetention = time.Millisecond
	h.s.Testing().AdvanceClock(10)
	if n, _, err := h.s.ReapDevices(ctx, 10); err != nil || n == 0 {
		t.Fatalf("reap: %d %v", n, err)
	}
	h.s.opts.DeviceRetention = 0
	p := PendingPairing{DeviceCode: "dc1", UserCode: "ABCD-EFGH", Device: freshDevice(), Label: "l", Platform: "linux",
		Capabilities: []byte("[]"), ExpiresAt: h.now() + 600_000, Source: "10.0.0.1"}
	_, _ = h.s.PutPairing(ctx, p)
	_, _ = h.s.PairingByDeviceCode(ctx, "dc1")
	_, _ = h.s.PairingByUserCode(ctx, "ABCD-EFGH")
	_, _ = h.s.ShowPairing(ctx, "ABCD-EFGH")
	target := ProjectionTarget{Document: h.s.k.p + "projection", Approved: h.s.k.p + "projection:approved", Channel: h.s.k.p + "projection:changed"}
	_, _, _ = h.s.ApprovePairing(ctx, target, Approval{UserCode: "ABCD-EFGH", DeviceCode: "dc1", RunnerID: "r9", Record: []byte(`{"owner":"o","runnerId":"r9"}`)})
	p.DeviceCode, p.UserCode = "dc2", "WXYZ-WXYZ"
	_, _ = h.s.PutPairing(ctx, p)
	_ = h.s.DenyPairing(ctx, "WXYZ-WXYZ")
	_ = h.s.DropPairing(ctx, "dc1")
	if _, err := New(ctx, b.client, Options{Namespace: h.s.Namespace(), Logger: relaytest.Discard(), evalScripts: evalScripts}); err != nil {
		t.Fatal(err) // the layout script, on a namespace that has its record
	}
	if v, err := h.s.run(ctx, scLayoutMove, []string{h.s.k.layout()}, "3", "4"); err != nil || v.String() == "" {
		t.Fatalf("layout_move: %v %v", v, err) // relay migrate's step from v3 (here a no-op: the record says 4)
	}
	// Placement's end (ReapSites): the backfill of its index and a reap.
	if _, err := h.s.run(ctx, scPlaceBackfill, []string{h.s.k.p + "place", h.s.k.p + "placet", h.s.k.p + "placetfill"}, "10"); err != nil {
		t.Fatalf("place_backfill: %v", err)
	}
	if _, err := h.s.run(ctx, scPlaceReap, []string{h.s.k.p + "place", h.s.k.p + "placen", h.s.k.p + "placet"}, "1", "10", "0"); err != nil {
		t.Fatalf("place_reap: %v", err)
	}
	// The operations view's scripts (internal/opsstore runs them), on the
	// keys the store names for them.
	sk, err := h.s.SiteReadKeys(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = h.s.RunOpsScript(ctx, "ops_site", []string{sk.Live, sk.Awaiting, sk.Finished}, enc(a), "0", "10")
	_, _ = h.s.RunOpsScript(ctx, "ops_churn", []string{sk.Churn("alice"), sk.Churn("bob")})
	groups, err := h.s.PresenceGroups([]string{"runner_1", "runner_2", "runner_3"})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		_, _ = h.s.RunOpsScript(ctx, "ops_presence", g.Keys)
	}
	rk, err := h.s.RunnerShardKeys(ctx, "runner_1")
	if err != nil || len(rk) == 0 {
		t.Fatalf("runner shard keys: %v %v", rk, err) // runner_1 holds a grant
	}
	for _, k := range rk {
		_, _ = h.s.RunOpsScript(ctx, "ops_device", []string{k.Held, k.Cancelled}, "10")
	}
	ok := h.s.OpsKeys()
	_, _ = h.s.RunOpsScript(ctx, "ops_replica_put", []string{ok.Replicas, ok.ReplicaRecord("rep1")}, enc("rep1"), `{"id":"rep1"}`, "60000", "10")
	_, _ = h.s.RunOpsScript(ctx, "ops_replicas", []string{ok.Replicas}, "10")
	_, _ = h.s.RunOpsScript(ctx, "ops_token_put", []string{ok.Tokens, ok.TokenIDs, ok.TokenGens, ok.ProjectionSites, ok.Projection},
		"d1", "t1", `{"id":"t1","site":"site-a"}`, "10", "site-a", "0")
	_, _ = h.s.RunOpsScript(ctx, "ops_token_get", []string{ok.Tokens, ok.TokenGens, ok.ProjectionSites}, "d1")
	_, _ = h.s.RunOpsScript(ctx, "ops_token_list", []string{ok.Tokens})
	_, _ = h.s.RunOpsScript(ctx, "ops_token_drop", []string{ok.Tokens, ok.TokenIDs, ok.TokenGens}, "t1")
	if _, err := h.s.RunOpsScript(ctx, "enqueue", []string{ok.Tokens}); err == nil {
		t.Error("RunOpsScript ran a script that is not the operations view's")
	}

	marker := h.s.k.p + "workload-done"
	if err := b.client.Do(ctx, b.client.B().Echo().Message(marker).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var current string // the script whose inner commands follow
	crossSlotBeats, crossSlotRenewals, crossSlotClaims := false, false, false
	var declared map[string]bool  // a cross-shard call's KEYS: its inner commands use these
	var spanSlots map[uint16]bool // and keys on the slots of its sections (a claim's shards, presence_beat's lease indexes)
	var slot uint16
	ns := h.s.Namespace() + ":"
	for {
		line, err := m.rd.ReadString('\n')
		if err != nil {
			t.Fatalf("monitor: %v", err)
		}
		toks := monitorTokens(line)
		if len(toks) == 0 {
			continue
		}
		cmd := strings.ToLower(toks[0])
		if cmd == "echo" && len(toks) == 2 && toks[1] == marker {
			break
		}
		if strings.Contains(line, " lua] ") {
			if current == "" {
				continue
			}
			var keys []string
			switch cmd {
			case "time", "publish", "info": // no key
			case "del", "exists", "unlink":
				keys = toks[1:]
			default:
				if len(toks) > 1 {
					keys = toks[1:2]
				}
			}
			for _, k := range keys {
				if declared != nil && !declared[k] && !spanSlots[keyHashSlot(k)] {
					t.Errorf("%s: %s %q, which the call did not declare", current, cmd, k)
				} else if declared == nil && keyHashSlot(k) != slot {
					t.Errorf("%s: %s %q is on slot %d, KEYS[1] on %d", current, cmd, k, keyHashSlot(k), slot)
				}
			}
			continue
		}
		current, declared, spanSlots = "", nil, nil
		if cmd != "evalsha" && cmd != "evalsha_ro" && cmd != "eval" && cmd != "eval_ro" && cmd != "fcall" && cmd != "fcall_ro" {
			continue
		}
		if len(toks) < 4 || !strings.HasPrefix(toks[3], ns) {
			continue
		}
		name := byHash[toks[1]]
		switch cmd {
		case "eval", "eval_ro":
			sum := sha1.Sum([]byte(toks[1]))
			name = byHash[hex.EncodeToString(sum[:])]
		case "fcall", "fcall_ro":
			name = byFunction[toks[1]]
			if ro := Scripts[slices.IndexFunc(Scripts, func(sc Script) bool { return sc.Name == name })].ReadOnly; ro != (cmd == "fcall_ro") {
				t.Errorf("%s: called with %s, read-only %v", name, cmd, ro)
			}
		}
		// The store's own operations run as it says; RunJobScript's (test
		// hooks from outside lua/) are always scripts.
		if fcall := strings.HasPrefix(cmd, "fcall"); fcall == evalScripts && name != "" {
			t.Fatalf("%s ran with %s in a store whose RunsFunctions() is %v", name, cmd, h.s.RunsFunctions())
		}
		var n int
		fmt.Sscan(toks[2], &n)
		current, slot = name, keyHashSlot(toks[3])
		seen[name] = true
		var records int // presence_beat's ARGV[6]
		if name == scPresenceBeat.Name && len(toks) > 3+n+5 {
			fmt.Sscan(toks[3+n+5], &records)
		}
		var sectionAt map[int]bool // claim: the KEYS index each section starts at
		sectionKeys := n - 1       // claim: where the runner's keys start (runner_mode), else the guard
		if name == scClaim.Name {
			starts, keys, err := claimSectionStarts(toks[3+n:])
			sectionKeys = keys
			if err != nil {
				t.Errorf("claim: %v", err)
			}
			sectionAt = map[int]bool{}
			for _, i := range starts {
				sectionAt[i] = true
			}
			if len(starts) > 1 && valkeyconn.IsCluster(b.client) {
				t.Errorf("claim: %d sections in one call on a cluster", len(starts))
			}
		}
		sectionSlot := slot
		for i, k := range toks[3 : 3+n] {
			want := slot
			if name == scClaim.Name && i >= sectionKeys && i < n-1 {
				// The runner's records, on the runner's shard: only a
				// server that is not a cluster takes them in a claim.
				if valkeyconn.IsCluster(b.client) {
					t.Errorf("claim: the runner's keys in a claim on a cluster")
				}
				want = keyHashSlot(k)
				if declared == nil {
					declared = map[string]bool{}
				}
			} else if name == scClaim.Name && i < n-1 {
				if sectionAt[i] {
					sectionSlot = keyHashSlot(k) // each section on its own shard's slot
					if spanSlots == nil {
						spanSlots = map[uint16]bool{}
					}
					spanSlots[sectionSlot] = true
					if len(spanSlots) > 1 {
						crossSlotClaims, declared = true, map[string]bool{}
					}
				}
				want = sectionSlot
			}
			if name == scPresenceBeat.Name && !valkeyconn.IsCluster(b.client) && i < n-1 {
				if i < 3*records {
					want = keyHashSlot(toks[3+i-i%3]) // the record's p key: its triple's slot
				} else {
					want = keyHashSlot(k) // a renewal's lease index, on its grant's shard
					if spanSlots == nil {
						spanSlots = map[uint16]bool{}
					}
					spanSlots[want] = true
				}
				if want != slot {
					crossSlotBeats, declared = true, map[string]bool{}
					crossSlotRenewals = crossSlotRenewals || i >= 3*records
				}
			}
			if keyHashSlot(k) != want {
				t.Errorf("%s: KEYS %q on slot %d, want %d", name, k, keyHashSlot(k), want)
			}
		}
		for _, k := range toks[3 : 3+n] {
			if declared != nil {
				declared[k] = true
			}
		}
		// The last key is the migration guard (GuardKey), so a cluster
		// refuses the call up front while the slot migrates.
		if g := GuardKey(prefixOf(toks[3])); n < 2 || toks[3+n-1] != g {
			t.Errorf("%s: the last of KEYS %q is not the migration guard %q", name, toks[3:3+n], g)
		}
	}
	for _, sc := range Scripts {
		if !seen[sc.Name] {
			t.Errorf("the workload never ran %s", sc.Name)
		}
	}
	if !crossSlotBeats {
		t.Error("the workload never sent short heartbeats of two shards in one call")
	}
	if !valkeyconn.IsCluster(b.client) && !crossSlotRenewals {
		t.Error("the workload never renewed grants of another shard in a presence write")
	}
	if !valkeyconn.IsCluster(b.client) && !crossSlotClaims {
		t.Error("the workload never claimed on two shards in one call")
	}
}

// claimSectionStarts reads a claim call's ARGV (lua/claim.lua's header)
// for where in KEYS each of its sections starts, and how many keys the
// sections take (the runner's keys, under runner_mode, follow).
func claimSectionStarts(argv []string) ([]int, int, error) {
	at := 16 // ARGV[17], rest
	var bad error
	next := func() int { // the next count; a bad one ends the walk
		if bad != nil || at >= len(argv) {
			bad = cmp.Or(bad, fmt.Errorf("ARGV ends at %d", at))
			return 0
		}
		v, err := strconv.Atoi(argv[at])
		at++
		bad = err
		return v
	}
	at += next() // the kinds
	ns := next()
	var starts []int
	k := 0
	for range ns {
		if bad != nil {
			break
		}
		starts = append(starts, k)
		k += next() // the section's keys
		nr, queues := next(), 0
		for range nr {
			at += 2 // eS, eO
			queues += next()
		}
		at += queues // the cursors
		at += next() // the lease ids
	}
	return starts, k, bad
}

// A claim over sites on several shards: every eligible job is granted once
// and the answer is in first-enqueue order across shards; with a Max that
// cannot take them all, the oldest job over all the routes is granted.
func TestClaimAcrossShardsOrder(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		a, c := site, otherShardSite(h.s, site)
		team := func(id string) protocol.JobStub {
			st := stub(id, "bob")
			st.Audience = protocol.AudienceTeam
			return st
		}
		// c's first job is the oldest of all.
		h.enqueueStub(c, team("c1"))
		h.enqueueStub(a, team("a1"))
		h.enqueueStub(c, team("c2"))
		h.enqueueStub(a, team("a2"))
		both := routes([]string{a, c}, []string{"bob"})
		first := h.claim(both, maxJobs(1))
		equalStrings(t, "Max 1", ids(first), []string{"c1"})
		rest := h.claim(both, maxJobs(10), runner("runner_2"))
		equalStrings(t, "the rest", ids(rest), []string{"a1", "c2", "a2"})
	})
}

// On a server that is not a cluster a claim's first call covers every
// shard it reads (one section each); where a section stops the call (more
// due there than the settle budget, the scan budget spent, the token
// revoked on that shard), the claim goes on from that shard alone. Either
// way it grants, scans and calls exactly what one call a shard would: the
// cluster and the embedded store take that path, and every case here
// expects the same answer on each backend.
func TestClaimAcrossShardsStopsWhereOneCallAShardWould(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		t.Run("both shards in one call", func(t *testing.T) {
			counter := &countingObserver{n: map[string]int{}}
			h := newFixture(t, b, Options{ObserveScript: counter.observe})
			a, c := site, otherShardSite(h.s, site)
			h.enqueueStub(c, stub("c1", "alice"))
			h.enqueueStub(a, stub("a1", "alice"))
			counter.take()
			got, stats, err := h.s.claim(h.ctx, claimArgs(routes([]string{a, c}, []string{"alice"})))
			if err != nil {
				t.Fatal(err)
			}
			equalStrings(t, "grants", ids(got), []string{"c1", "a1"})
			want := 1
			if valkeyconn.IsCluster(b.client) {
				want = 2
			}
			if n := counter.take()["claim"]; n != want || stats.Attempts != want {
				t.Fatalf("%d claim calls (attempts %d), want %d", n, stats.Attempts, want)
			}
			for _, g := range got {
				if sh, ok := h.s.k.leaseShard(g.Lease.ID); !ok || sh != placedShard(h.s, g.SiteID) {
					t.Fatalf("%s's lease %s names shard %d, its site is on %d", stubID(g), g.Lease.ID, sh, placedShard(h.s, g.SiteID))
				}
			}
		})
		t.Run("more due than the settle budget on the second shard", func(t *testing.T) {
			h := newFixture(t, b, Options{ClaimSettleBudget: 2, SweepBatch: 7})
			a, c := site, otherShardSite(h.s, site)
			h.enqueueStub(a, stub("a1", "alice"))
			for i := range 3 {
				st := stub(fmt.Sprint("old", i), fmt.Sprint("o", i))
				st.DeadlineAt = h.now() + 1000
				h.enqueueStub(c, st)
			}
			h.enqueueStub(c, stub("c4", "alice"))
			h.s.Testing().AdvanceClock(2000)
			got, stats, err := h.s.claim(h.ctx, claimArgs(routes([]string{a, c}, []string{"alice"})))
			if err != nil {
				t.Fatal(err)
			}
			equalStrings(t, "grants", ids(got), []string{"a1", "c4"})
			// The first call (a1, then c's backlog), c's refused call, the
			// sweep, c's call again; or one call on a, then c's two.
			if stats.Attempts != 3 {
				t.Fatalf("attempts %d", stats.Attempts)
			}
			if jobs, _ := h.s.Jobs(h.ctx); len(jobs) != 2 {
				t.Fatalf("%d jobs left, want the two granted", len(jobs))
			}
		})
		t.Run("scan budget spent on the first shard", func(t *testing.T) {
			h := newFixture(t, b, Options{})
			h.s.limits.claimScan = 1
			a, c := site, otherShardSite(h.s, site)
			h.enqueueStub(a, stub("a1", "alice"))
			h.enqueueStub(c, stub("c1", "alice"))
			h.enqueueStub(a, stub("a2", "alice"))
			got, stats, err := h.s.claim(h.ctx, claimArgs(routes([]string{a, c}, []string{"alice"})))
			if err != nil {
				t.Fatal(err)
			}
			equalStrings(t, "grants", ids(got), []string{"a1", "c1", "a2"})
			if stats.Attempts != 3 || stats.Scanned != 3 || stats.Truncated {
				t.Fatalf("stats %+v", stats)
			}
		})
		t.Run("token revoked on the second shard", func(t *testing.T) {
			h := newFixture(t, b, Options{})
			a, c := site, otherShardSite(h.s, site)
			h.enqueueStub(a, stub("a1", "alice"))
			h.enqueueStub(c, stub("c1", "alice"))
			token, err := newClaimToken()
			if err != nil {
				t.Fatal(err)
			}
			id, err := mintLease(placedShard(h.s, c))
			if err != nil {
				t.Fatal(err)
			}
			h.giveBack(UnansweredClaim{RunnerID: "runner_1", Token: token, Leases: []string{id}})
			u := &UnansweredClaim{RunnerID: "runner_1", Token: token}
			_, _, err = h.s.claimWith(h.ctx, claimArgs(routes([]string{a, c}, []string{"alice"})), u)
			if !errors.Is(err, errClaimRevoked) {
				t.Fatalf("%v, want errClaimRevoked", err)
			}
			// a1 was granted before c's section found the token revoked,
			// as a call on a alone would have; the caller gives it back.
			h.mustState("a1", StateAwaitingPayload)
			if j := h.job(c, "c1"); j.State != StateQueued {
				t.Fatalf("c1 is %s", j.State)
			}
			if given := h.giveBack(*u); len(given) != 1 {
				t.Fatalf("gave back %v, want a1's grant", given)
			}
			h.mustState("a1", StateQueued)
		})
	})
}
