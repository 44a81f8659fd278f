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
			for i := range c.jobs {
				id := fmt.Sprint("r", i)
				if _, err := s.Enqueue(ctx, EnqueueInput{ID: id, SiteID: site, Stub: stub(id, "alice")}); err != nil {
					b.Fatal(err)
				}
				got, err := s.Claim(ctx, claimArgs(func(in *ClaimInput) { in.Device = dev }))
				if err != nil || len(got) != 1 {
					b.Fatalf("claim: %d %v", len(got), err)
				}
				if _, err := s.Seal(ctx, site, id, envelope); err != nil {
					b.Fatal(err)
				}
				if r, err := s.Complete(ctx, CompleteInput{JobID: id, RunnerID: "runner_1", LeaseID: got[0].Lease.ID, Envelope: result, Disposition: "ok"}); err != nil || !r.Accepted {
					b.Fatalf("complete: %+v %v", r, err)
				}
			}
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
