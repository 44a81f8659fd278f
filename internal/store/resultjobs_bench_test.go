package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/test/relaytest"
)

// BenchmarkResultJobsCached is one results read of a site whose results
// the store's cache holds already: what every poll after a result's first
// costs the replica. The site holds 500 results of about 600 B (a site
// finishing 25 jobs a second with a 20 s deadline). go-cpu-us/op is this
// process's CPU (getrusage) a read, which is the replica's side of it;
// valkey-us/op the server's.
//
//	go test ./internal/store -run '^$' -bench BenchmarkResultJobsCached -benchtime 2000x
func BenchmarkResultJobsCached(b *testing.B) {
	be := realBackend(b)
	s := newStore(b, be, Options{Logger: relaytest.Discard()})
	ctx := context.Background()
	const n = 500
	result := json.RawMessage(`{"ciphertext":"` + strings.Repeat("A", 520) + `","recipientKeyId":"site-key","senderKeyId":"device-key","direction":"result","deadlineAt":1800003600000}`)
	for i := range n {
		if _, err := s.Enqueue(ctx, EnqueueInput{ID: fmt.Sprint("bench-", i), SiteID: site, Stub: stub(fmt.Sprint("bench-", i), "alice")}); err != nil {
			b.Fatal(err)
		}
	}
	in := ClaimInput{RunnerID: "runner_1", Owner: "alice", Device: freshDevice(),
		Routes: []Route{{SiteID: site, Owner: "alice"}}, Kinds: []string{protocol.KindGenerate}, Max: 10, LeaseMs: 600_000}
	for done := 0; done < n; {
		got, err := s.Claim(ctx, in)
		if err != nil || len(got) == 0 {
			b.Fatalf("claim after %d done: %d granted, %v", done, len(got), err)
		}
		for _, g := range got {
			var st protocol.JobStub
			if err := json.Unmarshal(g.Stub, &st); err != nil {
				b.Fatal(err)
			}
			if _, err := s.Seal(ctx, site, st.ID, envelope); err != nil {
				b.Fatal(err)
			}
			r, err := s.Complete(ctx, CompleteInput{JobID: st.ID, RunnerID: "runner_1", LeaseID: g.Lease.ID, Envelope: result, Disposition: "ok"})
			if err != nil || !r.Accepted {
				b.Fatalf("complete %s: %+v %v", st.ID, r, err)
			}
			done++
		}
	}
	read := func() {
		res, err := s.ResultJobs(ctx, site)
		if err != nil || len(res) != n {
			b.Fatalf("%d results, %v", len(res), err)
		}
	}
	read() // fills the cache
	before := serverCost(b, be.client)
	cpu0 := relaytest.ProcessCPU(b)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		read()
	}
	b.StopTimer()
	b.ReportMetric(float64((relaytest.ProcessCPU(b)-cpu0).Microseconds())/float64(b.N), "go-cpu-us/op")
	serverCost(b, be.client).report(b, before)
}
