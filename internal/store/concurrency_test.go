package store

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/test/relaytest"
)

// CLAIM_ATOMIC and exactly-once due transitions (store.md §8) under real
// concurrency: a real server, two Store instances (replicas) on separate
// multiplexed clients, 32 connections, dozens of goroutines.

// raceServer is a real server the race tests run against: the one at
// RELAY_TEST_VALKEY_URL and, when RELAY_TEST_VALKEY_CLUSTER_URL is set,
// the cluster (where the namespace's keys live on one primary's slot).
type raceServer struct{ name, url string }

func raceServers() []raceServer {
	out := []raceServer{{"valkey", relaytest.ValkeyURL()}}
	if u := relaytest.ClusterURL(); u != "" {
		out = append(out, raceServer{"cluster", u})
	}
	return out
}

// eachRaceServer runs f as a subtest per real server.
func eachRaceServer(t *testing.T, f func(t *testing.T, url string)) {
	for _, s := range raceServers() {
		t.Run(s.name, func(t *testing.T) { f(t, s.url) })
	}
}

// replicaClients opens n clients of 2^mux connections each (per node, on a
// cluster), named so the test can count its connections on the server.
func replicaClients(t *testing.T, url string, n, mux int, name string) []valkey.Client {
	t.Helper()
	opt, err := valkey.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opt.ClusterOption.MaxMovedRedirections = 4
	opt.PipelineMultiplex = mux
	opt.ClientName = name
	var out []valkey.Client
	for range n {
		c, err := valkey.NewClient(opt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		out = append(out, c)
	}
	return out
}

// countConnections counts name's connections on the node that has the
// most of them (on a cluster, every primary gets its own set).
func countConnections(t *testing.T, c valkey.Client, name string) int {
	t.Helper()
	most := 0
	for _, n := range c.Nodes() {
		list, err := n.Do(context.Background(), n.B().ClientList().Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		most = max(most, strings.Count(list, " name="+name+" "))
	}
	return most
}

func TestClaimAtomicUnderConcurrency(t *testing.T) { eachRaceServer(t, claimAtomicRace) }

func claimAtomicRace(t *testing.T, url string) {
	const (
		sites, owners, perPair = 10, 5, 60 // 50 pairs, 3000 jobs
		workers                = 64
	)
	ns := relaytest.NewName()
	clients := replicaClients(t, url, 2, 4, "claimrace-"+ns) // 2 x 16 connections
	stores := []*Store{
		newStore(t, backend{"a", clients[0]}, Options{Namespace: ns}),
		newStore(t, backend{"b", clients[1]}, Options{Namespace: ns}),
	}
	ctx := context.Background()

	var routesAll []Route
	for si := range sites {
		site := fmt.Sprintf("site_%d", si)
		for oi := range owners {
			owner := fmt.Sprintf("owner_%d", oi)
			routesAll = append(routesAll, Route{SiteID: site, Owner: owner})
			var stubs []protocol.JobStub
			for j := range perPair {
				st := stub(fmt.Sprintf("job_%d_%s", j, owner), owner) // same ids on every site: keyed per site
				st.Audience = protocol.AudienceTeam
				stubs = append(stubs, st)
			}
			enqueueMany(t, stores[0], clients[0], site, stubs)
		}
	}
	total := sites * owners * perPair

	type key struct{ site, id string }
	var (
		mu       sync.Mutex
		granted  = map[key]int{}
		leases   = map[key]string{}
		done     atomic.Int64
		failures = make(chan error, workers)
	)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[w%2]
			runnerID := fmt.Sprintf("runner_%d", w)
			for done.Load() < int64(total) {
				if time.Since(start) > 2*time.Minute {
					failures <- fmt.Errorf("%s: timed out with %d done", runnerID, done.Load())
					return
				}
				got, err := s.Claim(ctx, ClaimInput{RunnerID: runnerID, Owner: "device_owner", Device: freshDevice(),
					Routes: routesAll, Kinds: []string{protocol.KindGenerate}, Max: 8, LeaseMs: 60000})
				if err != nil {
					failures <- err
					return
				}
				if len(got) == 0 {
					time.Sleep(time.Millisecond)
					continue
				}
				for _, g := range got {
					k := key{g.SiteID, stubID(g)}
					mu.Lock()
					granted[k]++
					leases[k] = g.Lease.ID
					mu.Unlock()
					// The other replica plays the site, so every hop crosses stores.
					other := stores[(w+1)%2]
					if r, err := other.Seal(ctx, k.site, k.id, envelope); err != nil || r.State != StateReady {
						failures <- fmt.Errorf("seal %v: %+v %v", k, r, err)
						return
					}
					if r, err := s.TakePayload(ctx, HolderInput{JobID: k.id, RunnerID: runnerID, LeaseID: g.Lease.ID}); err != nil || r.Envelope == nil {
						failures <- fmt.Errorf("take %v: %+v %v", k, r, err)
						return
					}
					if r, err := other.Complete(ctx, CompleteInput{JobID: k.id, RunnerID: runnerID, LeaseID: g.Lease.ID, Envelope: envelope, Disposition: "ok"}); err != nil || !r.Accepted {
						failures <- fmt.Errorf("complete %v: %+v %v", k, r, err)
						return
					}
					done.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(failures)
	for err := range failures {
		t.Fatal(err)
	}
	conns := countConnections(t, clients[0], "claimrace-"+ns)
	if conns < 32 {
		t.Fatalf("only %d connections raced", conns)
	}

	duplicates, lost := 0, 0
	for k, n := range granted {
		if n > 1 {
			duplicates++
			t.Errorf("job %v granted %d times", k, n)
		}
	}
	jobs, err := stores[1].Jobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		k := key{j.SiteID, j.ID}
		if j.State != StateDone || j.ClaimedBy == nil || j.ClaimedBy.LeaseID != leases[k] || granted[k] != 1 {
			lost++
			t.Errorf("job %v ended %s (grants %d)", k, j.State, granted[k])
		}
	}
	if len(jobs) != total || len(granted) != total {
		t.Fatalf("jobs %d, granted %d, want %d", len(jobs), len(granted), total)
	}
	t.Logf("claim race: %d jobs, %d workers on 2 replicas, %d connections, %v, duplicates=%d lost=%d",
		total, workers, conns, elapsed.Round(time.Millisecond), duplicates, lost)
}

// The unsealed cap cannot be overrun by concurrent claims for one pair.
func TestUnsealedCapUnderConcurrency(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		other := newStore(t, b, Options{Namespace: h.s.Namespace()})
		var stubs []protocol.JobStub
		for i := range 100 {
			st := stub(fmt.Sprintf("j%d", i), "alice")
			st.Audience = protocol.AudienceTeam
			stubs = append(stubs, st)
		}
		enqueueMany(t, h.s, b.client, site, stubs)
		var granted atomic.Int64
		var wg sync.WaitGroup
		for w := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := []*Store{h.s, other}[w%2]
				got, err := s.Claim(h.ctx, claimArgs(runner(fmt.Sprint("r", w)), deviceOwner(fmt.Sprint("o", w))))
				if err != nil {
					t.Error(err)
				}
				granted.Add(int64(len(got)))
			}()
		}
		wg.Wait()
		if n := granted.Load(); n != UnsealedPerPair {
			t.Fatalf("%d grants for one pair, want %d", n, UnsealedPerPair)
		}
	})
}

// Concurrent sweepers on two replicas settle each timeout exactly once: one
// requeue, one seal attempt and one churn note per timeout, one eviction per
// job, one churn report per pair across the fleet.
func TestConcurrentSweepersSettleOnce(t *testing.T) { eachRaceServer(t, sweepersRace) }

func sweepersRace(t *testing.T, url string) {
	const pairs, perPair, sweepers = 200, 2, 8
	ns := relaytest.NewName()
	clients := replicaClients(t, url, 2, 3, "sweeprace-"+ns)
	var repMu sync.Mutex
	reports := map[string]int{}
	onChurn := func(r ChurnReport) {
		repMu.Lock()
		defer repMu.Unlock()
		reports[r.SiteID+"/"+r.Owner]++
	}
	stores := []*Store{
		newStore(t, backend{"a", clients[0]}, Options{Namespace: ns, OnChurn: onChurn}),
		newStore(t, backend{"b", clients[1]}, Options{Namespace: ns, OnChurn: onChurn, SweepBatch: 37}),
	}
	ctx := context.Background()
	var routesAll []Route
	for p := range pairs {
		owner := fmt.Sprintf("owner_%d", p)
		routesAll = append(routesAll, Route{SiteID: site, Owner: owner})
		var stubs []protocol.JobStub
		for j := range perPair {
			st := stub(fmt.Sprintf("%s_job_%d", owner, j), owner)
			st.Audience = protocol.AudienceTeam
			stubs = append(stubs, st)
		}
		enqueueMany(t, stores[0], clients[0], site, stubs)
	}
	total := pairs * perPair

	claimAll := func(round int) {
		t.Helper()
		n := 0
		for n < total {
			got, err := stores[round%2].Claim(ctx, ClaimInput{RunnerID: "runner_1", Owner: "dev", Device: freshDevice(),
				Routes: routesAll, Kinds: []string{protocol.KindGenerate}, Max: 64, LeaseMs: 60000})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 {
				t.Fatalf("round %d: stuck at %d grants", round, n)
			}
			n += len(got)
		}
	}
	sweepRace := func() (requeued, removed map[string]int) {
		requeued, removed = map[string]int{}, map[string]int{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for w := range sweepers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 3 {
					got, err := stores[w%2].Sweep(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					for _, j := range got {
						if j.SweptAway {
							removed[j.ID]++
						} else {
							requeued[j.ID]++
						}
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return requeued, removed
	}
	advance := func(ms int64) {
		for _, s := range stores {
			s.Testing().AdvanceClock(ms)
		}
	}

	for round := 1; round <= 3; round++ {
		claimAll(round)
		advance(AwaitingPayloadMs + 1)
		requeued, removed := sweepRace()
		wantRequeued, wantRemoved := total, 0
		if round == 3 {
			wantRequeued, wantRemoved = 0, total
		}
		if len(requeued) != wantRequeued || len(removed) != wantRemoved {
			t.Fatalf("round %d: %d requeued, %d removed", round, len(requeued), len(removed))
		}
		for id, n := range requeued {
			if n != 1 {
				t.Fatalf("round %d: %s requeued %d times", round, id, n)
			}
		}
		for id, n := range removed {
			if n != 1 {
				t.Fatalf("round %d: %s removed %d times", round, id, n)
			}
		}
		if round < 3 {
			jobs, err := stores[0].Jobs(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range jobs {
				if j.SealAttempts != round || j.State != StateQueued || j.ReofferTo != "runner_1" {
					t.Fatalf("round %d: job %+v", round, j)
				}
			}
		}
		for p := range pairs {
			key := stores[0].k.sp(site) + "churn:" + enc(site) + ":" + enc(fmt.Sprintf("owner_%d", p))
			n, err := clients[0].Do(ctx, clients[0].B().Zcard().Key(key).Build()).AsInt64()
			if err != nil || n != int64(round*perPair) {
				t.Fatalf("round %d pair %d: %d churn notes (%v), want %d", round, p, n, err, round*perPair)
			}
		}
	}
	for _, s := range stores {
		s.churnWG.Wait()
	}
	if len(reports) != pairs {
		t.Fatalf("%d pairs reported, want %d", len(reports), pairs)
	}
	for pair, n := range reports {
		if n != 1 {
			t.Fatalf("%s reported %d times", pair, n)
		}
	}
}
