package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/test/relaytest"
)

// These tests move one slot between a cluster's primaries by hand, as an
// operator resharding does: SETSLOT IMPORTING on the target, MIGRATING on
// the source, MIGRATE a few keys, then SETSLOT NODE. They run on a cluster
// of their own (TestSlotMigrations; relaytest.PrivateCluster), started
// when the cluster suite is on (RELAY_TEST_VALKEY_CLUSTER_URL set) and
// skipped otherwise: neither miniredis nor a single server has slots.

// migrationCluster is a cluster client plus one plain client per primary.
type migrationCluster struct {
	c     valkey.Client
	nodes []clusterPrimary
}

type clusterPrimary struct {
	id, addr string
	c        valkey.Client
	lo, hi   []int // the slot ranges it serves
}

func openMigrationCluster(t *testing.T) *migrationCluster {
	t.Helper()
	// The cluster suite is on (a shared cluster is configured), but moving a
	// slot there would refuse other tests' calls to any key of theirs that
	// hashes to it: each test moves slots on a cluster of its own.
	relaytest.RequireCluster(t)
	u, _, _ := relaytest.PrivateCluster(t, 0) // primaries only: no test here fails one over
	opt, err := valkey.ParseURL(u)
	if err != nil {
		t.Fatalf("cluster url: %v", err)
	}
	c, err := valkey.NewClient(opt)
	if err != nil {
		t.Fatalf("cluster client: %v", err)
	}
	t.Cleanup(c.Close)
	if c.Mode() != valkey.ClientModeCluster {
		t.Fatalf("%s is not a cluster", u)
	}
	mc := &migrationCluster{c: c}
	mc.refresh(t)
	return mc
}

// refresh reads CLUSTER NODES from the first primary it can reach.
func (mc *migrationCluster) refresh(t *testing.T) {
	t.Helper()
	var text string
	for _, addr := range mc.c.Nodes() {
		s, err := addr.Do(context.Background(), addr.B().ClusterNodes().Build()).ToString()
		if err == nil {
			text = strings.TrimPrefix(s, "txt:") // RESP3 sends it as a verbatim string
			break
		}
	}
	if text == "" {
		t.Fatal("CLUSTER NODES: no node answered")
	}
	old := map[string]valkey.Client{}
	for _, n := range mc.nodes {
		old[n.addr] = n.c
	}
	mc.nodes = nil
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.Contains(f[2], "master") || strings.Contains(f[2], "fail") {
			continue
		}
		n := clusterPrimary{id: f[0], addr: strings.Split(f[1], "@")[0]}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // an open migration, not a served range
			}
			var lo, hi int
			if _, err := fmt.Sscanf(r, "%d-%d", &lo, &hi); err != nil {
				fmt.Sscanf(r, "%d", &lo)
				hi = lo
			}
			n.lo, n.hi = append(n.lo, lo), append(n.hi, hi)
		}
		if c, ok := old[n.addr]; ok {
			n.c = c
		} else {
			c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{n.addr}, ForceSingleClient: true, DisableCache: true})
			if err != nil {
				t.Fatalf("node %s: %v", n.addr, err)
			}
			t.Cleanup(c.Close)
			n.c = c
		}
		mc.nodes = append(mc.nodes, n)
	}
}

// newFixture is a store on the cluster client, in a namespace of its own.
func (mc *migrationCluster) newFixture(t *testing.T) *storeFixture {
	t.Helper()
	ctx := context.Background()
	s, err := New(ctx, mc.c, Options{Namespace: relaytest.NewName(), Logger: relaytest.Discard()})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &storeFixture{t: t, b: backend{"cluster", mc.c}, s: s, ctx: ctx}
}

// owner is the primary serving slot, and another primary.
func (mc *migrationCluster) owner(t *testing.T, slot int) (owner, other clusterPrimary) {
	t.Helper()
	mc.refresh(t)
	oi := -1
	for i, n := range mc.nodes {
		for j := range n.lo {
			if slot >= n.lo[j] && slot <= n.hi[j] {
				oi = i
			}
		}
	}
	if oi < 0 || len(mc.nodes) < 2 {
		t.Fatalf("slot %d: no owner among %d primaries", slot, len(mc.nodes))
	}
	return mc.nodes[oi], mc.nodes[(oi+1)%len(mc.nodes)]
}

func must(t *testing.T, n clusterPrimary, args ...string) {
	t.Helper()
	if err := n.c.Do(context.Background(), n.c.B().Arbitrary(args...).Build()).Error(); err != nil {
		t.Fatalf("%s: %v: %v", n.addr, args, err)
	}
}

// slotKeys lists the keys of slot a primary holds.
func slotKeys(t *testing.T, n clusterPrimary, slot int) []string {
	t.Helper()
	keys, err := n.c.Do(context.Background(), n.c.B().ClusterGetkeysinslot().Slot(int64(slot)).Count(100000).Build()).AsStrSlice()
	if err != nil {
		t.Fatalf("%s: GETKEYSINSLOT: %v", n.addr, err)
	}
	slices.Sort(keys)
	return keys
}

// beginMigration opens slot's migration from src to dst.
func beginMigration(t *testing.T, slot int, src, dst clusterPrimary) {
	t.Helper()
	must(t, dst, "CLUSTER", "SETSLOT", fmt.Sprint(slot), "IMPORTING", src.id)
	must(t, src, "CLUSTER", "SETSLOT", fmt.Sprint(slot), "MIGRATING", dst.id)
}

// moveKeys MIGRATEs keys (of a migrating slot) from src to dst.
func moveKeys(t *testing.T, src, dst clusterPrimary, keys ...string) {
	t.Helper()
	if len(keys) == 0 {
		return
	}
	host, port, _ := strings.Cut(dst.addr, ":")
	must(t, src, append([]string{"MIGRATE", host, port, "", "0", "5000", "KEYS"}, keys...)...)
}

// finishMigration moves slot's remaining keys and gives the slot to dst on
// every primary.
func (mc *migrationCluster) finishMigration(t *testing.T, slot int, src, dst clusterPrimary) {
	t.Helper()
	moveKeys(t, src, dst, slotKeys(t, src, slot)...)
	must(t, dst, "CLUSTER", "SETSLOT", fmt.Sprint(slot), "NODE", dst.id)
	must(t, src, "CLUSTER", "SETSLOT", fmt.Sprint(slot), "NODE", dst.id)
	for _, n := range mc.nodes {
		if n.id != src.id && n.id != dst.id {
			must(t, n, "CLUSTER", "SETSLOT", fmt.Sprint(slot), "NODE", dst.id)
		}
	}
}

// slotDump is every key of slot on src and dst with its DUMP bytes (ASKING
// first: dst does not serve the slot yet). Equal dumps: nothing changed.
func slotDump(t *testing.T, slot int, nodes ...clusterPrimary) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range nodes {
		for _, k := range slotKeys(t, n, slot) {
			rs := n.c.DoMulti(context.Background(), n.c.B().Asking().Build(), n.c.B().Dump().Key(k).Build())
			v, err := rs[1].ToString()
			if err != nil {
				t.Fatalf("%s: DUMP %s: %v", n.addr, k, err)
			}
			out[n.addr+" "+k] = v
		}
	}
	return out
}

// TestSlotMigrations runs the tests that move a slot, one after another
// on one cluster of their own (starting a cluster takes seconds): each
// moves a slot of its own namespace, and the cluster's view (mc.nodes) is
// not shared between goroutines.
func TestSlotMigrations(t *testing.T) {
	t.Parallel()
	mc := openMigrationCluster(t)
	for _, c := range []struct {
		name string
		run  func(*testing.T, *migrationCluster)
	}{
		{"AbortsUndeclaredKeyScriptHalfWay", testMigrationAbortsUndeclaredKeyScriptHalfWay},
		{"StoreScriptsRefusedWhole", testStoreScriptsRefusedWholeDuringMigration},
		{"FinishedPageGenerationFollowsAMovedSlot", testFinishedPageGenerationFollowsAMovedSlot},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, mc) })
	}
}

// The failure the guard exists for, on a script that does not declare one:
// while a slot migrates, a script that writes KEYS[1] and then touches an
// undeclared key of the same slot that has already moved is aborted at that
// touch, and its first write stays. Declaring a key that never exists
// (GuardKey) makes the server refuse the same script before it starts.
func testMigrationAbortsUndeclaredKeyScriptHalfWay(t *testing.T, mc *migrationCluster) {
	ctx := context.Background()
	ns := relaytest.NewName()
	p := ns + ":{" + ns + "/guard}:"
	a, moved := p+"a", p+"b"
	slot := int(keyHashSlot(a))
	src, dst := mc.owner(t, slot)

	for _, k := range []string{a, moved} {
		if err := mc.c.Do(ctx, mc.c.B().Set().Key(k).Value("0").Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	beginMigration(t, slot, src, dst)
	moveKeys(t, src, dst, moved)

	script := fmt.Sprintf("redis.call('INCR', KEYS[1]); redis.call('GET', %q); return 1", moved)
	eval := func(keys ...string) error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return mc.c.Do(ctx, mc.c.B().Eval().Script(script).Numkeys(int64(len(keys))).Key(keys...).Build()).Error()
	}
	get := func() string {
		v, err := mc.c.Do(ctx, mc.c.B().Get().Key(a).Build()).ToString()
		if err != nil {
			t.Fatalf("GET %s: %v", a, err)
		}
		return v
	}

	err := eval(a)
	if err == nil || !strings.Contains(err.Error(), "non local key") {
		t.Fatalf("the unguarded script: %v, want the server's non-local-key abort", err)
	}
	if v := get(); v != "1" {
		t.Fatalf("after the aborted unguarded script %s is %q; the partial write this test reproduces is %q", a, v, "1")
	}

	err = eval(a, GuardKey(p))
	if Classify(err) != ClassUnavailable || !strings.Contains(err.Error(), "TRYAGAIN") && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the guarded script: %v (class %v), want TRYAGAIN (unavailable) before it runs", err, Classify(err))
	}
	if v := get(); v != "1" {
		t.Fatalf("the guarded script was refused yet %s is %q, want %q (untouched)", a, v, "1")
	}

	// Once the slot has moved the same guarded script runs whole.
	mc.finishMigration(t, slot, src, dst)
	if err := eval(a, GuardKey(p)); err != nil {
		t.Fatalf("the guarded script after the migration: %v", err)
	}
	if v := get(); v != "2" {
		t.Fatalf("after the migration %s is %q, want %q", a, v, "2")
	}
}

// The store's own scripts while their shard's slot migrates with some of
// its keys moved (job hashes, which the scripts reach through KEYS[1]'s
// prefix, not through KEYS): every operation on that shard is refused as
// unavailable before it runs and the slot's keys on both nodes are exactly
// as before; after the migration the same operations succeed.
func testStoreScriptsRefusedWholeDuringMigration(t *testing.T, mc *migrationCluster) {
	h := mc.newFixture(t)
	s, ctx := h.s, h.ctx
	// A runner on the site's shard: every script below runs on one slot.
	rid := ""
	for i := 0; rid == ""; i++ {
		if id := fmt.Sprint("runner_m", i); s.k.runnerShard(id) == placedShard(s, site) {
			rid = id
		}
	}
	slot := int(keyHashSlot(s.k.sp(site)))
	src, dst := mc.owner(t, slot)

	for i := range 6 {
		h.enqueue(fmt.Sprint("m", i), "alice")
	}
	grants := h.claim(runner(rid)) // UnsealedPerPair of them
	if len(grants) != UnsealedPerPair {
		t.Fatalf("claimed %d, want %d", len(grants), UnsealedPerPair)
	}
	if g := grants[0].Lease.ID; s.k.shards[mustLeaseShard(t, s, g)] != s.k.sp(site) {
		t.Fatalf("lease %s is not on the site's shard", g)
	}

	beginMigration(t, slot, src, dst)
	var jobKeys []string
	for _, k := range slotKeys(t, src, slot) {
		if strings.Contains(k, "}:j:") {
			jobKeys = append(jobKeys, k)
		}
	}
	if len(jobKeys) != 6 {
		t.Fatalf("%d job hashes on slot %d, want 6", len(jobKeys), slot)
	}
	// Every other job hash moves: claimed and queued jobs are split
	// between the nodes, the shard's indexes stay on src.
	for i := 0; i < len(jobKeys); i += 2 {
		moveKeys(t, src, dst, jobKeys[i])
	}
	before := slotDump(t, slot, src, dst)

	ops := []struct {
		name string
		run  func(ctx context.Context) error
	}{
		{"enqueue", func(ctx context.Context) error {
			_, err := s.Enqueue(ctx, EnqueueInput{ID: "m6", SiteID: site, Stub: stub("m6", "alice")})
			return err
		}},
		{"claim", func(ctx context.Context) error { _, err := s.Claim(ctx, claimArgs(runner(rid))); return err }},
		{"complete", func(ctx context.Context) error {
			_, err := s.Complete(ctx, CompleteInput{JobID: stubID(grants[0]), RunnerID: rid, LeaseID: grants[0].Lease.ID, Envelope: envelope, Disposition: "ok"})
			return err
		}},
		{"renew", func(ctx context.Context) error {
			_, err := s.RenewLeases(ctx, RenewInput{RunnerID: rid, Leases: []protocol.GrantRef{grant(grants[0]), grant(grants[1])}, LeaseMs: 60000})
			return err
		}},
		{"release", func(ctx context.Context) error {
			_, err := s.ReleaseLeases(ctx, ReleaseInput{RunnerID: rid, Leases: []protocol.GrantRef{grant(grants[1])}, Reason: ReasonPause})
			return err
		}},
		{"cancel", func(ctx context.Context) error { _, err := s.Cancel(ctx, site, "m4"); return err }},
		{"seal", func(ctx context.Context) error { _, err := s.Seal(ctx, site, "m2", envelope); return err }},
		{"job", func(ctx context.Context) error { _, err := s.Job(ctx, site, "m3"); return err }},
	}
	for _, op := range ops {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		err := op.run(ctx)
		cancel()
		if Classify(err) != ClassUnavailable {
			t.Errorf("%s during the migration: %v (class %v), want refused as unavailable", op.name, err, Classify(err))
		}
	}
	if after := slotDump(t, slot, src, dst); !maps.Equal(before, after) {
		for k, v := range after {
			if before[k] != v {
				t.Errorf("changed during the migration: %s", k)
			}
		}
		for k := range before {
			if _, ok := after[k]; !ok {
				t.Errorf("gone during the migration: %s", k)
			}
		}
		t.Fatal("a refused operation wrote to the migrating slot")
	}

	mc.finishMigration(t, slot, src, dst)
	if r := h.complete(stubID(grants[0]), rid, grants[0].Lease.ID, "ok"); !r.Accepted {
		t.Fatalf("complete after the migration: %+v", r)
	}
	h.mustState(stubID(grants[0]), StateDone)
	// The completed grant frees one of the pair's unsealed places.
	if got := h.claim(runner(rid)); len(got) != 1 {
		t.Fatalf("claim after the migration granted %d, want 1", len(got))
	}
}

func mustLeaseShard(t *testing.T, s *Store, lease string) int {
	t.Helper()
	i, ok := s.k.leaseShard(lease)
	if !ok {
		t.Fatalf("lease %q names no shard", lease)
	}
	return i
}

// A finished page moved with its slot: the client still sends the page's
// reads to the old owner, which redirects them. The page must come whole
// from the new owner, its generation naming the new owner's replication
// id: a generation read from the old owner beside entries read from the
// new one would file them under a generation the results cache already
// trusts.
func testFinishedPageGenerationFollowsAMovedSlot(t *testing.T, mc *migrationCluster) {
	h := mc.newFixture(t)
	s, ctx := h.s, h.ctx
	completeJobs(t, s, "moved-", 3, freshDevice(), envelope)
	k, err := s.siteKeys(ctx, site)
	if err != nil {
		t.Fatal(err)
	}
	slot := int(keyHashSlot(k.finished(site)))
	src, dst := mc.owner(t, slot)
	replID := func(n clusterPrimary) string {
		t.Helper()
		info, err := n.c.Do(ctx, n.c.B().Info().Section("replication").Build()).ToString()
		if err != nil || replicationID(info) == "" {
			t.Fatalf("INFO replication on %s: %v", n.addr, err)
		}
		return replicationID(info)
	}
	if replID(src) == replID(dst) {
		t.Fatalf("%s and %s share a replication id", src.addr, dst.addr)
	}

	before, err := s.finishedPage(ctx, k, site, "-inf", 10)
	if err != nil {
		t.Fatal(err)
	}
	epoch, from, ok := strings.Cut(before[0], "/")
	if !ok || from != replID(src) || len(before) != 1+2*3 {
		t.Fatalf("before the move: %q, want 3 entries under %s's id %s", before, src.addr, replID(src))
	}

	// Mid-migration, the index on dst and the epoch still on src: the
	// page is answered whole from one server or refused as unavailable
	// (TRYAGAIN here: the transaction's keys are split), never as a bug.
	beginMigration(t, slot, src, dst)
	moveKeys(t, src, dst, k.finished(site))
	mctx, cancel := context.WithTimeout(ctx, time.Second)
	mid, err := s.finishedPage(mctx, k, site, "-inf", 10)
	cancel()
	if err != nil && Classify(err) != ClassUnavailable {
		t.Fatalf("page mid-migration: %v (class %v), want it answered or refused as unavailable", err, Classify(err))
	}
	if err == nil && (!slices.Equal(mid[1:], before[1:]) || (mid[0] != before[0] && mid[0] != epoch+"/"+replID(dst))) {
		t.Fatalf("page mid-migration %q, want %q under one server's generation", mid, before)
	}
	t.Logf("mid-migration: %q %v", mid, err)

	mc.finishMigration(t, slot, src, dst)
	after, err := s.finishedPage(ctx, k, site, "-inf", 10)
	if err != nil {
		t.Fatalf("page after the move: %v", err)
	}
	if want := epoch + "/" + replID(dst); after[0] != want {
		t.Fatalf("generation after the move %q, want %q (%s's)", after[0], want, dst.addr)
	}
	if !slices.Equal(after[1:], before[1:]) {
		t.Fatalf("entries after the move %q, want %q", after[1:], before[1:])
	}
}
