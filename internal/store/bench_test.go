package store

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/test/relaytest"
)

// Benchmarks run against the real server (RELAY_TEST_VALKEY_URL) and the
// embedded one. Setup that is expensive (100k foreign jobs) is done once per
// benchmark and its namespace removed in TestMain.

var (
	benchMu     sync.Mutex
	benchStores = map[string]*benchEnv{}
)

type benchEnv struct {
	s     *Store
	b     backend
	round int
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, e := range benchStores {
		if _, err := relaytest.DeleteKeys(context.Background(), e.b.client, e.s.KeyPattern()); err != nil {
			fmt.Fprintln(os.Stderr, "benchmark cleanup:", err)
		}
	}
	os.Exit(code)
}

// env returns the benchmark's store, creating it (and its foreign jobs) once.
func env(tb testing.TB, name string, b backend, foreign int) *benchEnv {
	benchMu.Lock()
	defer benchMu.Unlock()
	key := name + "/" + b.name
	if e, ok := benchStores[key]; ok {
		e.round++
		return e
	}
	s, err := New(context.Background(), b.client, Options{Namespace: relaytest.NewName(), Logger: relaytest.Discard()})
	if err != nil {
		tb.Fatal(err)
	}
	e := &benchEnv{s: s, b: b}
	benchStores[key] = e
	if foreign > 0 {
		enqueueMany(tb, s, b.client, "site_theirs", foreignStubs(foreign, 1000))
	}
	return e
}

// targets queues n jobs, one per fresh pair, and returns their routes.
func (e *benchEnv) targets(tb testing.TB, n int) []Route {
	stubs := make([]protocol.JobStub, n)
	rs := make([]Route, n)
	for i := range n {
		owner := fmt.Sprintf("o%d_%d", e.round, i)
		stubs[i] = stub(fmt.Sprintf("j%d_%d", e.round, i), owner)
		stubs[i].Audience = protocol.AudienceTeam
		rs[i] = Route{SiteID: site, Owner: owner}
	}
	enqueueMany(tb, e.s, e.b.client, site, stubs)
	return rs
}

// claimAll grants every target job to runner_1 (64 per claim).
func (e *benchEnv) claimAll(tb testing.TB, rs []Route, seal bool) []ClaimedStub {
	var out []ClaimedStub
	for len(rs) > 0 {
		n := min(len(rs), 64)
		got, err := e.s.Claim(context.Background(), claimArgs(deviceOwner("dev"), maxJobs(64), func(in *ClaimInput) { in.Routes = rs[:n] }))
		if err != nil || len(got) != n {
			tb.Fatalf("claim %d: %d %v", n, len(got), err)
		}
		out = append(out, got...)
		rs = rs[n:]
	}
	if seal {
		for _, g := range out {
			if r, err := e.s.Seal(context.Background(), g.SiteID, stubID(g), envelope); err != nil || r.State != StateReady {
				tb.Fatalf("seal: %+v %v", r, err)
			}
		}
	}
	return out
}

func benchBackends(b *testing.B, f func(b *testing.B, be backend)) {
	for _, be := range allBackends(b) {
		b.Run(be.name, func(b *testing.B) { f(b, be) })
	}
}

func BenchmarkClaim(b *testing.B) {
	for _, foreign := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("foreign=%d", foreign), func(b *testing.B) {
			benchBackends(b, func(b *testing.B, be backend) {
				if be.name == "embedded" && foreign > 10_000 {
					b.Skip("100k setup on the embedded backend takes minutes")
				}
				e := env(b, b.Name(), be, foreign)
				rs := e.targets(b, b.N)
				ctx := context.Background()
				b.ResetTimer()
				for i := range b.N {
					got, err := e.s.Claim(ctx, claimArgs(deviceOwner("dev"), func(in *ClaimInput) { in.Routes = rs[i : i+1] }))
					if err != nil || len(got) != 1 {
						b.Fatalf("claim: %d %v", len(got), err)
					}
				}
			})
		})
	}
}

func BenchmarkEnqueue(b *testing.B) {
	benchBackends(b, func(b *testing.B, be backend) {
		e := env(b, b.Name(), be, 0)
		ctx := context.Background()
		b.ResetTimer()
		for i := range b.N {
			st := stub(fmt.Sprintf("e%d_%d", e.round, i), "alice")
			if _, err := e.s.Enqueue(ctx, EnqueueInput{ID: st.ID, SiteID: site, Stub: st}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkSeal(b *testing.B) {
	benchBackends(b, func(b *testing.B, be backend) {
		e := env(b, b.Name(), be, 0)
		grants := e.claimAll(b, e.targets(b, b.N), false)
		ctx := context.Background()
		b.ResetTimer()
		for _, g := range grants {
			if r, err := e.s.Seal(ctx, g.SiteID, stubID(g), envelope); err != nil || r.State != StateReady {
				b.Fatalf("seal %+v %v", r, err)
			}
		}
	})
}

func BenchmarkTakePayload(b *testing.B) {
	benchBackends(b, func(b *testing.B, be backend) {
		e := env(b, b.Name(), be, 0)
		grants := e.claimAll(b, e.targets(b, b.N), true)
		ctx := context.Background()
		b.ResetTimer()
		for _, g := range grants {
			if r, err := e.s.TakePayload(ctx, HolderInput{JobID: stubID(g), RunnerID: "runner_1", LeaseID: g.Lease.ID}); err != nil || r.Envelope == nil {
				b.Fatalf("take %+v %v", r, err)
			}
		}
	})
}

func BenchmarkComplete(b *testing.B) {
	benchBackends(b, func(b *testing.B, be backend) {
		e := env(b, b.Name(), be, 0)
		grants := e.claimAll(b, e.targets(b, b.N), true)
		ctx := context.Background()
		b.ResetTimer()
		for _, g := range grants {
			r, err := e.s.Complete(ctx, CompleteInput{JobID: stubID(g), RunnerID: "runner_1", LeaseID: g.Lease.ID, Envelope: envelope, Disposition: "ok"})
			if err != nil || !r.Accepted {
				b.Fatalf("complete %+v %v", r, err)
			}
		}
	})
}

func BenchmarkRenewLeases(b *testing.B) {
	benchBackends(b, func(b *testing.B, be backend) {
		e := env(b, b.Name(), be, 0)
		grants := e.claimAll(b, e.targets(b, min(b.N, 256)), true)
		ctx := context.Background()
		b.ResetTimer()
		for i := range b.N {
			g := grants[i%len(grants)]
			r, err := e.s.RenewLeases(ctx, RenewInput{RunnerID: "runner_1", Leases: []protocol.GrantRef{grant(g)}, LeaseMs: 60000})
			if err != nil || len(r.Renewed) != 1 {
				b.Fatalf("renew %+v %v", r, err)
			}
		}
	})
}

// Sweep over 10k live jobs of which 1% (100) are due each iteration.
func BenchmarkSweep1PercentDue(b *testing.B) {
	benchBackends(b, func(b *testing.B, be backend) {
		e := env(b, b.Name(), be, 0)
		if e.round == 0 {
			enqueueMany(b, e.s, be.client, "site_live", foreignStubs(9_900, 100))
		}
		ctx := context.Background()
		now, err := e.s.Now(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := range b.N {
			b.StopTimer()
			stubs := foreignStubs(100, 10)
			for j := range stubs {
				stubs[j].ID = fmt.Sprintf("due%d_%d_%d", e.round, i, j)
				stubs[j].DeadlineAt = now - 1
			}
			enqueueMany(b, e.s, be.client, site, stubs)
			b.StartTimer()
			got, err := e.s.Sweep(ctx)
			if err != nil || len(got) != 100 {
				b.Fatalf("sweep: %d %v", len(got), err)
			}
		}
	})
}

func BenchmarkSweepIdle(b *testing.B) {
	benchBackends(b, func(b *testing.B, be backend) {
		e := env(b, b.Name(), be, 10_000)
		ctx := context.Background()
		b.ResetTimer()
		for range b.N {
			if _, err := e.s.Sweep(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}
