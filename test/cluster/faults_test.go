// Package cluster_test runs relay replicas on a private Valkey Cluster
// (three primaries, one replica each) under the load generator while the
// cluster changes under them: a primary holding some of the namespace's
// shards killed and its replica promoted, and one shard's slot (one holding
// jobs) migrated to another primary with SETSLOT MIGRATING/IMPORTING,
// MIGRATE and SETSLOT NODE. Every operation of
// the run is recorded (internal/loadgen's History) and checked afterwards
// with test/chaos/history: nothing lost, nothing granted under two live
// leases, no result accepted twice. While the cluster changes, requests may
// be refused, but only with the retryable 503 server-error and fast; never
// a 500 and never a hung request.
//
// The tests start their own cluster on free ports (.ci/cluster with
// CLUSTER_BASE_PORT), so the shared one at RELAY_TEST_VALKEY_CLUSTER_URL
// stays healthy. They need redis-server (or valkey-server) and redis-cli on
// PATH; .ci/run installs them.
package cluster_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/loadgen"
	"github.com/byollm/relay-go/internal/valkeyconn"
	"github.com/byollm/relay-go/test/chaos/history"

	"github.com/byollm/relay-go/test/relaytest"
)

func TestMain(m *testing.M) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		if _, err := exec.LookPath("valkey-cli"); err != nil {
			fmt.Fprintln(os.Stderr, "cluster: no redis-cli or valkey-cli on PATH (bash .ci/run installs redis-tools)")
			os.Exit(1)
		}
	}
	relaytest.Main(m)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

const (
	// leaseMs is short so a grant whose answer was refused comes back
	// within seconds (and under the relay's 10 s seal window, as in
	// test/chaos).
	leaseMs = 5000
	// failFast bounds how long a refusal may take: the relay's per-call
	// store timeout is 500 ms, and a request makes a few store calls.
	failFast = 1500 * time.Millisecond
	// loadFor is how long the load generator enqueues; the fault lands in
	// the middle.
	loadFor = 16 * time.Second
)

// pollBody is a device-code poll for a code that does not exist: one store
// script per request, answered 200 "expired" while the store works.
const pollBody = `{"protocolVersion":"2","action":"poll","deviceCode":"abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG"}`

// probe is one direct request to a replica while the cluster changes.
type probe struct {
	at      time.Time
	status  int
	code    string
	elapsed time.Duration
}

// faultRun is what a fault reports back to runUnderFault.
type faultRun struct {
	name    string
	outcome string // one line for the summary
}

// runUnderFault starts a private cluster and two relay replicas on it,
// runs the load generator through both, calls fault in the middle of the
// load while probing each replica directly every 50 ms, and checks the
// run.
func runUnderFault(t *testing.T, fault func(t *testing.T, c *privateCluster, ns string) faultRun) {
	cl := newPrivateCluster(t)
	ns := "cl-" + randomHex(6)
	token := "cluster-" + randomHex(12)
	env := []string{
		"RELAY_VALKEY_URL=" + cl.url,
		"RELAY_NAMESPACE=" + ns,
		"RELAY_ADMIN_TOKEN=" + token,
		fmt.Sprintf("RELAY_LEASE_MS=%d", leaseMs),
		"RELAY_SHUTDOWN_TIMEOUT=5s",
		"RELAY_LOG_LEVEL=warn",
	}
	relays := []*relaytest.Relay{
		relaytest.NewRelay(t, relaytest.RelayConfig{Name: "relay-1", Env: env}),
		relaytest.NewRelay(t, relaytest.RelayConfig{Name: "relay-2", Env: env}),
	}
	urls := make([]string, len(relays))
	for i, r := range relays {
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		urls[i] = r.URL()
	}
	log := &history.Log{}
	cfg := loadgen.Config{
		Replicas:    urls,
		AdminURLs:   []string{relays[0].AdminURL()},
		StatusURLs:  relaytest.AdminURLs(relays...),
		AdminToken:  token,
		Sites:       3,
		Daemons:     6,
		Rate:        15,
		Duration:    loadFor,
		Drain:       60 * time.Second,
		TTL:         loadFor + 5*time.Minute, // nothing expires: every job ends done, cancelled or in the store
		LeaseMs:     leaseMs,
		Heartbeat:   time.Second,
		ClaimPoll:   100 * time.Millisecond,
		PendingPoll: 50 * time.Millisecond,
		ResultsPoll: 200 * time.Millisecond,
		Timeout:     10 * time.Second,
		// Clients retry what a fault refuses (503), as the real ones do.
		RetryFor:    30 * time.Second,
		CancelEvery: 10,
		History:     log,
	}
	ctx, cancel := context.WithTimeout(context.Background(), loadFor+3*time.Minute)
	defer cancel()
	load := loadgen.Start(ctx, cfg)
	// The load generator's set-up and pairing are done, so every fault meets load.
	relaytest.WaitFor(t, 60*time.Second, "10 enqueues accepted", func() bool { return log.Enqueued() >= 10 })
	loadStart := time.Now()
	time.Sleep(loadFor / 4)

	// Probe both replicas directly while the fault runs, and a little after.
	var (
		mu     sync.Mutex
		probes []probe
	)
	stopProbes := make(chan struct{})
	var wg sync.WaitGroup
	hc := &http.Client{Timeout: 10 * time.Second}
	for _, r := range relays {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stopProbes:
					return
				case <-time.After(50 * time.Millisecond):
				}
				t0 := time.Now()
				st, body := relaytest.Post(ctx, hc, r.URL()+"/byollm/pair", pollBody)
				p := probe{at: t0, status: st, code: relaytest.ErrorCode(body), elapsed: time.Since(t0)}
				mu.Lock()
				probes = append(probes, p)
				mu.Unlock()
			}
		}()
	}
	faultAt := time.Since(loadStart)
	fr := fault(t, cl, ns)
	faultEnd := time.Now()
	time.Sleep(2 * time.Second)
	close(stopProbes)
	wg.Wait()

	rep, err := load.Wait(ctx)
	if err != nil {
		t.Fatalf("load generator: %v", err)
	}
	end := time.Now()
	t.Logf("load generator report:\n%s", rep.Text())

	ops := append(log.Ops(), finalStates(t, cl.url, ns, log.Ops())...)
	sum := history.Check(ops, history.Options{End: end})

	// What the clients saw: any 5xx but the retryable 503 is a failure.
	var bad5xx []string
	refused503 := 0
	for name, e := range rep.Endpoints {
		for st, n := range e.Statuses {
			switch {
			case st == http.StatusServiceUnavailable:
				refused503 += n
			case st >= 500 || st == 0:
				bad5xx = append(bad5xx, fmt.Sprintf("%s %d x%d", name, st, n))
			}
		}
	}
	statuses := map[string]int{}
	var slowest, lastRefusal time.Duration
	for _, p := range probes {
		if p.status != http.StatusOK {
			lastRefusal = max(lastRefusal, p.at.Sub(faultEnd))
		}
	}
	var slow, notRetryable int
	for _, p := range probes {
		statuses[fmt.Sprintf("%d %s", p.status, p.code)]++
		slowest = max(slowest, p.elapsed)
		if p.elapsed > failFast {
			slow++
		}
		if p.status != http.StatusOK && (p.status != http.StatusServiceUnavailable || p.code != "server-error") {
			notRetryable++
		}
	}
	j := rep.Jobs
	t.Logf("store errors the replicas answered with 503, by kind: %v", storeErrors(t, relays))
	t.Logf("SUMMARY %s: fault at %.1fs of load: %s | probes %d %v, slowest %.0f ms, last refusal %.0f ms after the fault ended | load: jobs enqueued %d collected %d cancelled %d lost %d run-twice %d, 503s answered %d | history: %d ops, %d enqueued, %d done, %d cancelled, %d in the store, %d grants (%d jobs granted again), %d results accepted, violations %d",
		fr.name, faultAt.Seconds(), fr.outcome, len(probes), statuses, float64(slowest.Microseconds())/1000, float64(lastRefusal.Milliseconds()),
		j.Enqueued, j.Collected, j.Cancelled, j.Lost, j.RunTwice, refused503,
		sum.Ops, sum.Enqueued, sum.Done, sum.Cancelled, sum.InStore, sum.Grants, sum.Regranted, sum.Accepted, len(sum.Violations))

	for i, v := range sum.Violations {
		if i == 10 {
			t.Errorf("... and %d more violations", len(sum.Violations)-i)
			break
		}
		t.Errorf("violation: %v", v)
	}
	if j.Lost != 0 || j.RunTwice != 0 || j.Integrity != 0 || j.Foreign != 0 {
		t.Errorf("jobs did not balance: %+v\nproblems: %v", j, rep.Problems)
	}
	if sum.Enqueued < 10 || sum.Done == 0 {
		t.Errorf("too little work to judge: %d enqueued, %d done", sum.Enqueued, sum.Done)
	}
	if int64(sum.Enqueued) != j.Enqueued {
		t.Errorf("history has %d enqueued jobs, the load generator counted %d", sum.Enqueued, j.Enqueued)
	}
	if len(bad5xx) > 0 {
		t.Errorf("answers other than the retryable 503: %v", bad5xx)
	}
	if notRetryable > 0 || slow > 0 {
		t.Errorf("direct probes: %d answers not 200 or 503 server-error, %d slower than %v (slowest %v): %v",
			notRetryable, slow, failFast, slowest, statuses)
	}
}

// TestPrimaryFailoverUnderLoad kills (SIGKILL), in the middle of the load,
// the primary serving the most of the namespace's job keys (the sharded
// layout spreads the namespace's 16 shards over every primary, so it holds
// some of the shards, not all); its replica is promoted by the cluster's
// own failure detection. Writes are paused on the primary
// and the replica caught up first, so the kill cuts cleanly: Valkey
// replicates asynchronously, and a write acknowledged in the last
// milliseconds before a crash can be lost with the primary, which no
// client of it can prevent (the relay does not WAIT for replicas).
func TestPrimaryFailoverUnderLoad(t *testing.T) {
	t.Parallel() // a private cluster, namespace and replicas of its own
	runUnderFault(t, func(t *testing.T, cl *privateCluster, ns string) faultRun {
		ctx := context.Background()
		via := fmt.Sprintf("127.0.0.1:%d", cl.base)
		jobSlots := cl.jobSlots(t, ns)
		byPrimary := map[string][]int{}
		keysOn := map[string]int{}
		var slot int
		for s, n := range jobSlots {
			p, _ := cl.owner(t, via, s)
			byPrimary[p.id] = append(byPrimary[p.id], s)
			keysOn[p.id] += n
		}
		if len(byPrimary) < 2 {
			t.Fatalf("the namespace's jobs are on %d primary(ies), want them spread: %v", len(byPrimary), jobSlots)
		}
		best := ""
		for id, n := range keysOn {
			if best == "" || n > keysOn[best] {
				best = id
			}
		}
		slot = byPrimary[best][0]
		primary, replica := cl.owner(t, via, slot)
		heldSlots := byPrimary[best]
		sort.Ints(heldSlots)
		if replica.id == "" {
			t.Fatalf("primary %s has no replica: %+v", primary.addr, cl.nodes(t, primary.addr))
		}
		p := node(t, primary.addr)
		if err := p.Do(ctx, p.B().ClientPause().Timeout(5000).Write().Build()).Error(); err != nil {
			t.Fatalf("CLIENT PAUSE: %v", err)
		}
		caughtUp := waitReplicaOffset(t, p, node(t, replica.addr), 5*time.Second)
		if err := syscall.Kill(cl.pid(t, primary.addr), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		// The replica takes over once the others mark the primary failed
		// (cluster-node-timeout 2 s) and vote. An election can fail and
		// wait to be tried again (twice the node timeout each time) when
		// the nodes answer slowly, as on a loaded two-core machine running
		// three clusters; past electionWait the replica is promoted the
		// way an operator would (CLUSTER FAILOVER TAKEOVER), which the
		// relay meets the same way: its primary gone, the slot's owner
		// changed.
		const electionWait = 12 * time.Second
		deadline := killed.Add(30 * time.Second)
		how := "by the cluster's election"
		for {
			now, _, ok := cl.findOwner(t, replica.addr, slot)
			if ok && now.id == replica.id {
				break
			}
			if how != "by CLUSTER FAILOVER TAKEOVER" && time.Since(killed) > electionWait {
				r := node(t, replica.addr)
				if err := r.Do(ctx, r.B().ClusterFailover().Takeover().Build()).Error(); err != nil {
					t.Fatalf("CLUSTER FAILOVER TAKEOVER on %s: %v", replica.addr, err)
				}
				how = "by CLUSTER FAILOVER TAKEOVER"
				t.Logf("replica %s not promoted by the election %v after the kill: taken over", replica.addr, electionWait)
			}
			if time.Now().After(deadline) {
				_, port, _ := strings.Cut(replica.addr, ":")
				t.Fatalf("replica %s not promoted after 30s; its log:\n%s", replica.addr, relaytest.TailFile(filepath.Join(cl.dir, port, "server.log"), 30))
			}
			time.Sleep(50 * time.Millisecond)
		}
		promoted := time.Since(killed)
		return faultRun{name: "failover", outcome: fmt.Sprintf("primary %s held %d of the %d shard slots with jobs (%v; %d of %d job keys): SIGKILLed (replica caught up in %v), replica %s promoted %s %.2fs later",
			primary.addr, len(heldSlots), len(jobSlots), heldSlots, keysOn[best], sumValues(jobSlots), caughtUp.Round(time.Millisecond), replica.addr, how, promoted.Seconds())}
	})
}

// TestClusterDownUnderLoad takes the whole cluster down for three seconds
// (cluster_state:fail: every node answers every command with CLUSTERDOWN)
// and brings it back: one empty slot, none of the namespace's, is dropped
// from every node's map (CLUSTER DELSLOTS; with cluster-require-full-coverage
// a cluster missing a slot refuses everything) and then given back to its
// owner (CLUSTER ADDSLOTS).
func TestClusterDownUnderLoad(t *testing.T) {
	t.Parallel() // a private cluster, namespace and replicas of its own
	runUnderFault(t, func(t *testing.T, cl *privateCluster, ns string) faultRun {
		ctx := context.Background()
		// An empty slot: the namespace's shards each take one slot of a
		// 1024-slot range, so most slots hold nothing.
		var (
			other int
			owner clusterNode
			o     valkey.Client
		)
		for cand := 8191; ; cand++ {
			if cand == 8191+512 {
				t.Fatal("no empty slot in 8191..8702")
			}
			owner, _ = cl.owner(t, fmt.Sprintf("127.0.0.1:%d", cl.base), cand)
			o = node(t, owner.addr)
			n, err := o.Do(ctx, o.B().ClusterCountkeysinslot().Slot(int64(cand)).Build()).AsInt64()
			if err != nil {
				t.Fatalf("COUNTKEYSINSLOT %d: %v", cand, err)
			}
			if n == 0 {
				other = cand
				break
			}
		}
		all := cl.nodes(t, owner.addr)
		// The owner forgets the slot first: a node that still claims it
		// would teach it back, through gossip, to nodes that dropped it.
		sort.SliceStable(all, func(i, j int) bool { return all[i].addr == owner.addr && all[j].addr != owner.addr })
		for _, n := range all {
			c := node(t, n.addr)
			if err := c.Do(ctx, c.B().ClusterDelslots().Slot(int64(other)).Build()).Error(); err != nil {
				t.Fatalf("DELSLOTS %d on %s: %v", other, n.addr, err)
			}
		}
		down := time.Now()
		waitState(t, all, "fail", 10*time.Second)
		failedIn := time.Since(down)
		time.Sleep(3 * time.Second)
		if err := o.Do(ctx, o.B().ClusterAddslots().Slot(int64(other)).Build()).Error(); err != nil {
			t.Fatalf("ADDSLOTS %d on %s: %v", other, owner.addr, err)
		}
		back := time.Now()
		waitState(t, all, "ok", 30*time.Second)
		return faultRun{name: "clusterdown", outcome: fmt.Sprintf("slot %d dropped on all %d nodes: cluster_state:fail after %v, held 3s; given back to %s, ok again after %v",
			other, len(all), failedIn.Round(time.Millisecond), owner.addr, time.Since(back).Round(time.Millisecond))}
	})
}

// waitState waits until every node reports cluster_state:want.
func waitState(t *testing.T, nodes []clusterNode, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	clients := make([]valkey.Client, len(nodes))
	for i, n := range nodes {
		clients[i] = node(t, n.addr)
	}
	for {
		all := true
		for _, c := range clients {
			info, err := c.Do(context.Background(), c.B().ClusterInfo().Build()).ToString()
			if err != nil || !strings.Contains(info, "cluster_state:"+want) {
				all = false
				break
			}
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster_state not %s on every node after %v", want, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitReplicaOffset waits until the replica has applied everything the
// primary wrote, and says how long that took.
func waitReplicaOffset(t *testing.T, primary, replica valkey.Client, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		po := replOffset(t, primary, "master_repl_offset")
		ro := replOffset(t, replica, "slave_repl_offset")
		if po > 0 && ro >= po {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("replica at offset %d, primary at %d after %v", ro, po, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func replOffset(t *testing.T, c valkey.Client, field string) int64 {
	t.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("replication").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// TestSlotMigrationUnderLoad moves one shard's slot (the one holding the
// most job keys when the fault starts: jobs, queues and leases in use) to
// another primary the way valkey-cli --cluster reshard does, in small
// batches so the migration spans many requests: SETSLOT IMPORTING on the
// target, MIGRATING on the source, MIGRATE ... KEYS a few at a time
// (clients meet ASK and TRYAGAIN meanwhile, and every script of that shard
// is refused up front by its migration guard key), then SETSLOT NODE on
// every primary (clients meet MOVED).
func TestSlotMigrationUnderLoad(t *testing.T) {
	t.Parallel() // a private cluster, namespace and replicas of its own
	runUnderFault(t, func(t *testing.T, cl *privateCluster, ns string) faultRun {
		ctx := context.Background()
		jobSlots := cl.jobSlots(t, ns)
		slot, most := -1, 0
		for s, n := range jobSlots {
			if n > most {
				slot, most = s, n
			}
		}
		if slot < 0 {
			t.Fatal("no shard holds a job")
		}
		src, _ := cl.owner(t, fmt.Sprintf("127.0.0.1:%d", cl.base), slot)
		var dst clusterNode
		for _, n := range cl.nodes(t, src.addr) {
			if n.primary && n.id != src.id {
				dst = n
				break
			}
		}
		s, d := node(t, src.addr), node(t, dst.addr)
		slotS := strconv.Itoa(slot)
		must := func(c valkey.Client, args ...string) {
			t.Helper()
			if err := c.Do(ctx, c.B().Arbitrary(args[0]).Args(args[1:]...).Build()).Error(); err != nil {
				t.Fatalf("%v: %v", args, err)
			}
		}
		start := time.Now()
		must(d, "CLUSTER", "SETSLOT", slotS, "IMPORTING", src.id)
		must(s, "CLUSTER", "SETSLOT", slotS, "MIGRATING", dst.id)
		host, port, _ := strings.Cut(dst.addr, ":")
		moved, batches := 0, 0
		for {
			keys, err := s.Do(ctx, s.B().ClusterGetkeysinslot().Slot(int64(slot)).Count(5).Build()).AsStrSlice()
			if err != nil {
				t.Fatalf("GETKEYSINSLOT: %v", err)
			}
			if len(keys) == 0 {
				break
			}
			args := append([]string{"MIGRATE", host, port, "", "0", "5000", "KEYS"}, keys...)
			must(s, args...)
			moved += len(keys)
			batches++
			time.Sleep(20 * time.Millisecond)
		}
		// The new owner first, then the old one, then the rest (what
		// valkey-cli does).
		must(d, "CLUSTER", "SETSLOT", slotS, "NODE", dst.id)
		must(s, "CLUSTER", "SETSLOT", slotS, "NODE", dst.id)
		for _, n := range cl.nodes(t, dst.addr) {
			if n.primary && n.id != src.id && n.id != dst.id {
				must(node(t, n.addr), "CLUSTER", "SETSLOT", slotS, "NODE", dst.id)
			}
		}
		took := time.Since(start)
		if now, _ := cl.owner(t, src.addr, slot); now.id != dst.id {
			t.Fatalf("slot %d still on %s after the migration", slot, now.addr)
		}
		return faultRun{name: "migration", outcome: fmt.Sprintf("shard slot %d (%d job keys when chosen; %d of the namespace's %d slots with jobs) moved %s -> %s: %d keys in %d MIGRATE batches over %.2fs",
			slot, most, 1, len(jobSlots), src.addr, dst.addr, moved, batches, took.Seconds())}
	})
}

// storeErrors counts the store errors the replicas logged (each answered
// with the retryable 503), by the cluster's error kind.
func storeErrors(t *testing.T, relays []*relaytest.Relay) map[string]int {
	t.Helper()
	kinds := []string{"CLUSTERDOWN", "TRYAGAIN", "MOVED", "ASK", "non local key", "connection refused", "context deadline exceeded", "EOF"}
	out := map[string]int{}
	for _, r := range relays {
		for _, f := range r.LogFiles() {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(string(b), "\n") {
				var e struct {
					Msg string `json:"msg"`
					Err string `json:"err"`
				}
				if json.Unmarshal([]byte(line), &e) != nil {
					continue
				}
				if strings.HasPrefix(e.Msg, "relay: request failed on a bug") {
					t.Logf("%s answered 500: %s", r.Name, e.Err)
					continue
				}
				if e.Msg != "relay: store unavailable" {
					continue
				}
				kind := "other"
				for _, k := range kinds {
					if strings.Contains(e.Err, k) {
						kind = k
						break
					}
				}
				out[kind]++
				if kind == "other" && out[kind] <= 3 {
					t.Logf("store error of another kind: %s", e.Err)
				}
			}
		}
	}
	return out
}

// finalStates reads every enqueued job's state out of the cluster after
// the run, as one final op each ("absent" when the store no longer has it).
func finalStates(t *testing.T, url, ns string, ops []loadgen.Op) []loadgen.Op {
	t.Helper()
	ctx := context.Background()
	c, closeFn, _, err := valkeyconn.Open(ctx, url, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	out, err := history.StoredFinalOps(ctx, c, ns, ops)
	if err != nil {
		t.Fatal(err)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].JobID < out[j].JobID })
	return out
}
