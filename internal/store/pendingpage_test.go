package store

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/test/relaytest"
)

// BenchmarkPendingPage is the server's cost of one pending page (plain
// commands: the index, then the records in one pipeline), for a site with
// no awaiting job, with 4 and with a full page (64). Devices are the size
// of a real daemon's identity (about 220 bytes of JSON: sliced, within the
// first read). It reports valkey-us/op:
//
//	go test ./internal/store -run '^$' -bench BenchmarkPendingPage -benchtime 3000x
func BenchmarkPendingPage(b *testing.B) {
	for _, entries := range []int{0, 4, 64} {
		b.Run(fmt.Sprintf("entries=%d", entries), func(b *testing.B) {
			be := realBackend(b)
			s := newStore(b, be, Options{Logger: relaytest.Discard()})
			ctx := context.Background()
			dev := protocol.PublicIdentity{Identity: strings.Repeat("i", 43), Encryption: strings.Repeat("e", 43), EncryptionSig: strings.Repeat("s", 86)}
			for i := range entries {
				owner := fmt.Sprint("o", i)
				if _, err := s.Enqueue(ctx, EnqueueInput{ID: fmt.Sprint("p", i), SiteID: site, Stub: stub(fmt.Sprint("p", i), owner)}); err != nil {
					b.Fatal(err)
				}
				got, err := s.Claim(ctx, claimArgs(deviceOwner(owner), routes([]string{site}, []string{owner}), func(in *ClaimInput) { in.Device = dev }))
				if err != nil || len(got) != 1 {
					b.Fatalf("claim: %d %v", len(got), err)
				}
			}
			k, err := s.siteKeys(ctx, site)
			if err != nil {
				b.Fatal(err)
			}
			read := func() int {
				_, rows, err := s.pendingPage(ctx, k, site, "-inf", s.limits.leanEntries)
				if err != nil {
					b.Fatal(err)
				}
				return len(rows)
			}
			if n := read(); n != entries {
				b.Fatalf("a page of %d rows, want %d", n, entries)
			}
			benchServerCost(b, be.client, func() { read() })
		})
	}
}
