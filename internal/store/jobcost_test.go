package store

import (
	"context"
	"fmt"
	"testing"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/test/relaytest"
)

// BenchmarkJobCost is the store's share of one job: enqueue, claim, seal,
// take, complete and the site's results read, with a heartbeat-style sweep
// before the claim and the results read (as the planes do), one site and
// one device. valkey-us/op as in BenchmarkIdleTick (a private server):
//
//	RELAY_TEST_VALKEY_URL=redis://127.0.0.1:6397/0 go test ./internal/store -run '^$' -bench JobCost -benchtime 3000x
func BenchmarkJobCost(b *testing.B) {
	b.Run("direct", func(b *testing.B) { benchJobCost(b, false) })
	b.Run("view", func(b *testing.B) { benchJobCost(b, true) })
}

func benchJobCost(b *testing.B, view bool) {
	be := realBackend(b)
	s := newStore(b, be, Options{Logger: relaytest.Discard()})
	ctx := context.Background()
	if view {
		withView(b, s)
	}
	dev := freshDevice()
	in := ClaimInput{RunnerID: "r1", Owner: "alice", Device: dev, Kinds: []string{protocol.KindGenerate},
		Routes: []Route{{SiteID: site, Owner: "alice"}}, Max: 1, LeaseMs: 60000}
	one := func(i int) {
		id := fmt.Sprint("job-", i)
		if _, err := s.Enqueue(ctx, EnqueueInput{ID: id, SiteID: site, Stub: stub(id, "alice")}); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Sweep(ctx); err != nil {
			b.Fatal(err)
		}
		got, err := s.Claim(ctx, in)
		if err != nil || len(got) != 1 {
			b.Fatalf("claim: %d %v", len(got), err)
		}
		if r, err := s.Seal(ctx, site, id, envelope); err != nil || r.State != StateReady {
			b.Fatalf("seal: %+v %v", r, err)
		}
		h := HolderInput{JobID: id, RunnerID: "r1", LeaseID: got[0].Lease.ID}
		if r, err := s.TakePayload(ctx, h); err != nil || r.Envelope == nil {
			b.Fatalf("take: %+v %v", r, err)
		}
		if r, err := s.Complete(ctx, CompleteInput{JobID: id, RunnerID: "r1", LeaseID: h.LeaseID, Envelope: envelope, Disposition: "ok"}); err != nil || !r.Accepted {
			b.Fatalf("complete: %+v %v", r, err)
		}
		if _, err := s.Sweep(ctx); err != nil {
			b.Fatal(err)
		}
		if _, err := s.ResultJobs(ctx, site); err != nil {
			b.Fatal(err)
		}
	}
	cpu0, scripts0, cmds0 := serverCost(b, be.client)
	b.ResetTimer()
	for i := range b.N {
		one(i)
	}
	b.StopTimer()
	cpu1, scripts1, cmds1 := serverCost(b, be.client)
	b.ReportMetric((cpu1-cpu0)*1e6/float64(b.N), "valkey-us/op")
	b.ReportMetric(float64(scripts1-scripts0)/float64(b.N), "scripts/op")
	b.ReportMetric(float64(cmds1-cmds0)/float64(b.N), "cmds/op")
}
