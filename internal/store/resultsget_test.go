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

// BenchmarkResultsGet is the server's cost of reading results the
// store's cache does not hold (plain commands, two pipelined reads): 4
// results of 600 bytes (a poll after a few completions) and 128 of 2,500
// bytes (a batch the 128 KiB budget cuts at 53). Devices are the size of a
// real daemon's identity. It reports valkey-us/op:
//
//	go test ./internal/store -run '^$' -bench BenchmarkResultsGet -benchtime 2000x
func BenchmarkResultsGet(b *testing.B) {
	for _, c := range []struct{ jobs, size int }{{4, 600}, {128, 2500}} {
		b.Run(fmt.Sprintf("jobs=%d,bytes=%d", c.jobs, c.size), func(b *testing.B) {
			be := realBackend(b)
			s := newStore(b, be, Options{Logger: relaytest.Discard()})
			ctx := context.Background()
			dev := protocol.PublicIdentity{Identity: strings.Repeat("i", 43), Encryption: strings.Repeat("e", 43), EncryptionSig: strings.Repeat("s", 86)}
			result := json.RawMessage(`{"r":"` + strings.Repeat("x", c.size-8) + `"}`)
			completeJobs(b, s, "r", c.jobs, dev, result)
			k, err := s.siteKeys(ctx, site)
			if err != nil {
				b.Fatal(err)
			}
			list, _, err := s.finishedIndex(ctx, k, site)
			if err != nil || len(list) != c.jobs {
				b.Fatalf("finished index: %d %v", len(list), err)
			}
			read := func() int {
				_, rows, err := s.resultsGet(ctx, k, site, list, s.limits.getBytes)
				if err != nil {
					b.Fatal(err)
				}
				return len(rows)
			}
			want := min(c.jobs, (s.limits.getBytes+c.size-1)/c.size)
			if n := read(); n != want {
				b.Fatalf("%d rows, want %d", n, want)
			}
			benchServerCost(b, be.client, func() { read() })
		})
	}
}

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
	completeJobs(b, s, "bench-", n, freshDevice(), result)
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

// completeJobs enqueues n jobs of alice's on site (ids prefix0, prefix1,
// ...), grants them to runner_1 on device dev, and seals and completes
// each with result: n done jobs in the site's finished index.
func completeJobs(b testing.TB, s *Store, prefix string, n int, dev protocol.PublicIdentity, result json.RawMessage) {
	b.Helper()
	ctx := context.Background()
	for i := range n {
		id := fmt.Sprint(prefix, i)
		if _, err := s.Enqueue(ctx, EnqueueInput{ID: id, SiteID: site, Stub: stub(id, "alice")}); err != nil {
			b.Fatal(err)
		}
	}
	for done := 0; done < n; {
		got, err := s.Claim(ctx, claimArgs(leaseMs(600_000), func(in *ClaimInput) { in.Device = dev }))
		if err != nil || len(got) == 0 {
			b.Fatalf("claim after %d done: %d granted, %v", done, len(got), err)
		}
		for _, g := range got {
			id := stubID(g)
			if _, err := s.Seal(ctx, site, id, envelope); err != nil {
				b.Fatal(err)
			}
			r, err := s.Complete(ctx, CompleteInput{JobID: id, RunnerID: "runner_1", LeaseID: g.Lease.ID, Envelope: result, Disposition: "ok"})
			if err != nil || !r.Accepted {
				b.Fatalf("complete %s: %+v %v", id, r, err)
			}
			done++
		}
	}
}
