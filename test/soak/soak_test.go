// Package soak is the churn soak: generations of devices, owners and
// sites come and go under load through three stores (replicas) of one
// namespace on a private server, each with its background sweeper, the
// device retention shortened to a second (a store Option; the relay's
// setting has a floor of a day). After each generation its devices stop
// (half of them also unpaired: the projection change the sweeper is told
// of), its jobs pass their deadlines, and the test waits until every key
// of the generation is gone, its sites' placements too (the placement's
// refresh age shortened with the retention), then records the server's keys and
// used_memory and the process heap. The state left must be the fleet's
// fixed keys only, and memory must come back near the baseline however
// many generations ran: nothing grows with history.
//
// go test ./test/soak runs the short soak (CI, 4 generations, well under a
// minute); RELAY_SOAK_GENERATIONS=50 RELAY_SOAK_LOAD=10s runs the long one
// (test/bench/soak.sh), which logs a line per generation.
package soak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/internal/sweeper"
	"github.com/byollm/relay-go/test/relaytest"
)

const (
	replicas        = 3
	devicesPerGen   = 24
	ownersPerGen    = 3
	sitesPerGen     = 4
	retention       = time.Second
	jobDeadline     = 1500 * time.Millisecond
	capabilityBytes = 3700 // a real daemon's capability matrix
)

// fixedFamilies are the keys a namespace keeps whatever its traffic: the
// layout and placement records (fleet-wide) and per-shard counters (at
// most one of each per shard).
var fixedFamilies = []string{"layout", "place", "placen", "placet", "placetfill", "seq", "epoch", "stc", "pseq", "lsfill"}

type sample struct {
	keys       int64
	keyBytes   int64 // MEMORY USAGE of every key, summed
	endingB    int64 // of keyBytes: runners' records of shards that carry a TTL
	usedMemory int64
	luaVM      int64 // of used_memory: the Lua VMs (functions, eval), garbage included
	heap       uint64
}

func (s sample) String() string {
	return fmt.Sprintf("keys %d (%d B, %d B of them records of shards ending by TTL), used_memory %d B (Lua %d B), heap %d B", s.keys, s.keyBytes, s.endingB, s.usedMemory, s.luaVM, s.heap)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func TestChurnSoak(t *testing.T) {
	gens := envInt("RELAY_SOAK_GENERATIONS", 4)
	load := envDuration("RELAY_SOAK_LOAD", 1500*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	srv := relaytest.StartServer(t)
	c, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const ns = "soak"
	stores := make([]*store.Store, replicas)
	removed := make([]chan []string, replicas) // each replica's view of projection changes
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for i := range stores {
		// Discarded logs: t.Log keeps every line in memory, which would
		// show as heap growth per generation.
		// The replica's caches get small bounds, so that a short soak
		// reaches them and the heap's plateau shows (their defaults are
		// sized for a large fleet and reached only by one).
		if stores[i], err = store.New(ctx, c, store.Options{Namespace: ns, Logger: relaytest.Discard(), DeviceRetention: retention,
			PlacementRefresh: retention / 4, PlacementCacheSites: 8, WorkViewQueues: 32, ResultCacheBytes: 64 << 10}); err != nil {
			t.Fatal(err)
		}
		removed[i] = make(chan []string, gens+1)
		ch := removed[i]
		sw := sweeper.New(stores[i], sweeper.Options{Interval: 100 * time.Millisecond, Logger: relaytest.Discard(), Devices: stores[i], Sites: stores[i],
			Removed: func() []string {
				select {
				case r := <-ch:
					return r
				default:
					return nil
				}
			}})
		wg.Add(1)
		go func() { defer wg.Done(); sw.Run(ctx) }()
		go stores[i].RunWorkView(ctx)
	}

	// endingRecord: is key k a runner's record of shards that carries its
	// TTL, which ends it?
	endingRecord := func(k string) bool {
		if !strings.HasPrefix(k[strings.Index(k, "}:")+2:], "rsh:") {
			return false
		}
		ttl, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
		return err == nil && ttl > 0
	}
	measure := func() sample {
		t.Helper()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		n, err := c.Do(ctx, c.B().Dbsize().Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Do(ctx, c.B().Info().Section("memory").Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		var used, lua int64
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
				used, _ = strconv.ParseInt(v, 10, 64)
			}
			for _, f := range []string{"used_memory_vm_functions:", "used_memory_vm_eval:"} {
				if v, ok := strings.CutPrefix(line, f); ok {
					n, _ := strconv.ParseInt(v, 10, 64)
					lua += n
				}
			}
		}
		var keyBytes, endingB int64
		var cursor uint64
		for {
			e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Count(1000).Build()).AsScanEntry()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range e.Elements {
				u, err := c.Do(ctx, c.B().MemoryUsage().Key(k).Samples(0).Build()).AsInt64()
				if err != nil {
					continue
				}
				keyBytes += u
				if endingRecord(k) {
					endingB += u
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
		return sample{keys: n, keyBytes: keyBytes, endingB: endingB, usedMemory: used, luaVM: lua, heap: ms.HeapAlloc}
	}
	// leftover is every key outside the fixed families, but a runner's
	// record of shards that carries its TTL, which ends it: one whose
	// runner was forgotten while it still named a shard (its deadlines are
	// rounded up to 30 s, so it outlives the jobs' by up to that), or one
	// the claim of a device reaped mid-load (a slow loop on a loaded
	// machine outlasts the second of retention) wrote after the reap.
	var ending atomic.Int64
	leftover := func() []string {
		t.Helper()
		var out []string
		var cursor uint64
		for {
			e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Count(1000).Build()).AsScanEntry()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range e.Elements {
				tail := k[strings.Index(k, "}:")+2:]
				if slices.Contains(fixedFamilies, tail) {
					continue
				}
				if endingRecord(k) {
					ending.Add(1)
					continue
				}
				out = append(out, k)
			}
			if cursor = e.Cursor; cursor == 0 {
				return out
			}
		}
	}

	baseline := measure()
	t.Logf("baseline: %v", baseline)
	var peak sample
	after := make([]sample, gens)
	var jobsDone atomic.Int64
	for g := range gens {
		runGeneration(ctx, t, stores, g, load, &jobsDone)
		m := measure() // the generation's state at its height, as its load stops
		peak.keys, peak.keyBytes = max(peak.keys, m.keys), max(peak.keyBytes, m.keyBytes)
		peak.usedMemory, peak.luaVM, peak.heap = max(peak.usedMemory, m.usedMemory), max(peak.luaVM, m.luaVM), max(peak.heap, m.heap)
		// The generation's devices stop; half are unpaired (every replica
		// sees the projection change).
		var unpaired []string
		for d := 0; d < devicesPerGen; d += 2 {
			unpaired = append(unpaired, deviceID(g, d))
		}
		for _, ch := range removed {
			ch <- unpaired
		}
		var left []string
		defer func() {
			if t.Failed() && len(left) > 0 {
				t.Logf("keys left: %d, e.g. %q", len(left), left[:min(len(left), 20)])
			}
		}()
		relaytest.WaitFor(t, 30*time.Second, fmt.Sprintf("generation %d's keys and placements gone", g), func() bool {
			ending.Store(0)
			left = leftover()
			placed, err := c.Do(ctx, c.B().Hlen().Key(ns+":{"+ns+"}:place").Build()).AsInt64()
			return len(left) == 0 && err == nil && placed == 0
		})
		if n := ending.Load(); n > 0 {
			t.Logf("generation %d: %d records of shards left to their TTL", g, n)
		}
		after[g] = measure()
		t.Logf("generation %d: peak %v; after %v", g, m, after[g])
	}
	cancel()
	wg.Wait()
	if jobsDone.Load() == 0 {
		t.Fatal("no job completed: the soak ran no load")
	}
	last := after[gens-1]
	// What used_memory holds besides the keys (the log of slow commands,
	// client buffers), for reading a drift that the keys do not show.
	if info, err := c.Do(context.Background(), c.B().Info().Section("memory").Build()).ToString(); err == nil {
		var parts []string
		for _, line := range strings.Split(info, "\r\n") {
			for _, f := range []string{"used_memory_dataset:", "used_memory_overhead:", "mem_clients_normal:", "used_memory_scripts:", "used_memory_vm_functions:"} {
				if strings.HasPrefix(line, f) {
					parts = append(parts, line)
				}
			}
		}
		slow, _ := c.Do(context.Background(), c.B().SlowlogLen().Build()).AsInt64()
		t.Logf("server memory after the last generation: %s, slowlog entries %d", strings.Join(parts, " "), slow)
	}
	t.Logf("jobs completed %d; baseline %v; peak %v; after the last generation %v", jobsDone.Load(), baseline, peak, last)
	// Keys: the fixed families only, at most one of each per shard.
	if limit := baseline.keys + int64(len(fixedFamilies)*store.DefaultShards) + ending.Load(); last.keys > limit {
		t.Errorf("after the last generation %d keys, more than the fixed families allow (%d)", last.keys, limit)
	}
	// Memory: what the first generation left (counters) plus a small
	// bound, not a share per generation: each generation's sites leave the
	// placement record once unused past the retention (ReapSites).
	first := after[0]
	// A runner's record of shards that carries its TTL ends by itself (at
	// most 30 s past its latest grant's deadline once its runner is
	// forgotten: store runnerShardsGrain), so it is not growth.
	if grow := (last.keyBytes - last.endingB) - (first.keyBytes - first.endingB); grow > 8<<10 {
		t.Errorf("the keys grew %d B from the first generation to the last (%d generations)", grow, gens)
	}
	if grow := last.usedMemory - first.usedMemory; grow > 256<<10 {
		t.Errorf("used_memory grew %d B from the first generation to the last (%d generations)", grow, gens)
	}
	if last.heap > baseline.heap+16<<20 {
		t.Errorf("heap %d B after the last generation, baseline %d B", last.heap, baseline.heap)
	}
}

func deviceID(g, d int) string { return fmt.Sprintf("g%d-dev-%d", g, d) }

// runGeneration puts one generation's fleet under load for d: its devices
// heartbeat and claim through the replicas in turn, its sites enqueue,
// seal and read results, jobs complete, some are left to lapse. It
// returns when the load stops (the generation's devices go silent).
func runGeneration(ctx context.Context, t *testing.T, stores []*store.Store, g int, d time.Duration, done *atomic.Int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	owners := make([]string, ownersPerGen)
	for i := range owners {
		owners[i] = fmt.Sprintf("g%d-owner-%d", g, i)
	}
	sites := make([]string, sitesPerGen)
	for i := range sites {
		sites[i] = fmt.Sprintf("g%d-site-%d", g, i)
	}
	caps, _ := json.Marshal([]string{strings.Repeat("c", capabilityBytes)})
	var wg sync.WaitGroup
	var fail atomic.Value
	report := func(err error) {
		if err != nil && ctx.Err() == nil {
			fail.CompareAndSwap(nil, err)
		}
	}
	var seq atomic.Int64
	for i := range sitesPerGen {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := stores[i%len(stores)]
			for ctx.Err() == nil {
				now, err := st.Now(ctx)
				if err != nil {
					report(err)
					return
				}
				id := fmt.Sprintf("job-%d", seq.Add(1))
				owner := owners[int(seq.Load())%len(owners)]
				stub := protocol.JobStub{ID: id, Kind: protocol.KindGenerate, Owner: owner, Site: "BYOLLM-TEST-SITE-KEY-ID",
					Audience: protocol.AudiencePrivate, SizeClass: "small", DeadlineAt: now + jobDeadline.Milliseconds()}
				if _, err := st.Enqueue(ctx, store.EnqueueInput{ID: id, SiteID: sites[i], Stub: stub}); err != nil {
					report(fmt.Errorf("enqueue: %w", err))
					return
				}
				for _, j := range mustAwaiting(ctx, st, sites[i], report) {
					_, err := st.Seal(ctx, sites[i], j, json.RawMessage(`{"sealed":"payload"}`))
					report(err)
				}
				_, err = st.Finished(ctx, sites[i])
				report(err)
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	for dv := range devicesPerGen {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, owner := deviceID(g, dv), owners[dv%len(owners)]
			dev := protocol.PublicIdentity{Identity: "id-" + id, Encryption: "enc-" + id, EncryptionSig: "sig-" + id}
			var routes []store.Route
			for _, s := range sites {
				routes = append(routes, store.Route{SiteID: s, Owner: owner})
			}
			for n := 0; ctx.Err() == nil; n++ {
				st := stores[(dv+n)%len(stores)]
				_, err := st.Heartbeat(ctx, store.HeartbeatInput{Presence: store.Presence{RunnerID: id, Owner: owner, Device: dev,
					Capabilities: caps, Withheld: json.RawMessage(`[]`)}, RequirePresence: n > 0, Cancels: true})
				if err != nil && !strings.Contains(err.Error(), "presence") {
					report(fmt.Errorf("heartbeat: %w", err))
				}
				// As the relay claims: only for a device whose presence
				// record holds it (a reaped one beats in full first).
				got, err := st.Claim(ctx, store.ClaimInput{RunnerID: id, Owner: owner, Device: dev, Routes: routes,
					Kinds: []string{protocol.KindGenerate}, Max: 2, LeaseMs: 800, RequirePresence: true})
				if errors.Is(err, store.ErrPresenceChanged) {
					n = -1
					continue
				}
				report(err)
				for k, cl := range got {
					if k == 1 && n%3 == 0 {
						continue // left to lapse: requeued, then past its deadline
					}
					var s protocol.JobStub
					_ = json.Unmarshal(cl.Stub, &s)
					tk, err := st.TakePayload(ctx, store.HolderInput{JobID: s.ID, RunnerID: id, LeaseID: cl.Lease.ID})
					if err != nil || tk.Refused != "" {
						report(err)
						continue
					}
					r, err := st.Complete(ctx, store.CompleteInput{JobID: s.ID, RunnerID: id, LeaseID: cl.Lease.ID,
						Envelope: json.RawMessage(`{"sealed":"result"}`), Disposition: "ok"})
					report(err)
					if err == nil && r.Accepted {
						done.Add(1)
					}
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	if err, _ := fail.Load().(error); err != nil {
		t.Fatalf("generation %d: %v", g, err)
	}
}

func mustAwaiting(ctx context.Context, st *store.Store, site string, report func(error)) []string {
	js, err := st.Awaiting(ctx, site)
	if err != nil {
		report(err)
		return nil
	}
	out := make([]string, 0, len(js))
	for _, j := range js {
		out = append(out, j.ID)
	}
	return out
}
