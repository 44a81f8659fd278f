package store

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/byollm/relay-go/test/relaytest"
	"github.com/google/uuid"
	"github.com/valkey-io/valkey-go"
)

// BenchmarkFinishedPage is the server's cost of one page of a site's
// finished index (finishedPage: one transaction of plain commands), for an
// index of 50 and of 500 entries (a site finishing 25 jobs a second with
// a 20 s deadline holds about 500). Run it against a private server; the
// figure is valkey-us/op:
//
//	go test ./internal/store -run '^$' -bench BenchmarkFinishedPage -benchtime 3000x
func BenchmarkFinishedPage(b *testing.B) {
	for _, entries := range []int{50, 500} {
		b.Run(fmt.Sprintf("entries=%d", entries), func(b *testing.B) {
			be := realBackend(b)
			s := newStore(b, be, Options{Logger: relaytest.Discard()})
			ctx := context.Background()
			k, err := s.siteKeys(ctx, site)
			if err != nil {
				b.Fatal(err)
			}
			fin, epoch := k.finished(site), k.epoch(k.siteShard(site))
			c := be.client
			cmds := c.B().Zadd().Key(fin).ScoreMember()
			for i := range entries {
				cmds = cmds.ScoreMember(float64(1000+i), enc(uuid.NewString()))
			}
			if err := c.Do(ctx, cmds.Build()).Error(); err != nil {
				b.Fatal(err)
			}
			if err := c.Do(ctx, c.B().Set().Key(epoch).Value("bench-epoch").Build()).Error(); err != nil {
				b.Fatal(err)
			}
			read := func() int {
				flat, err := s.finishedPage(ctx, k, site, "-inf", s.limits.resultsEntries)
				if err != nil {
					b.Fatal(err)
				}
				return len(flat)
			}
			if n := read(); n != 1+2*entries {
				b.Fatalf("a page of %d items, want %d", n, 1+2*entries)
			}
			benchServerCost(b, be.client, func() { read() })
		})
	}
}

// A page's entries read the same from the pairs RESP3 answers and the flat
// list RESP2 answers (an older server, the embedded store), scores that are
// not plain digits included.
func TestZEntriesOnBothProtocols(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	key := "{zentries-" + uuid.NewString() + "}:fin"
	read := func(resp2 bool) []string {
		t.Helper()
		opt, err := valkey.ParseURL(relaytest.ValkeyURL())
		if err != nil {
			t.Fatal(err)
		}
		opt.DisableCache, opt.AlwaysRESP2 = true, resp2
		c, err := valkey.NewClient(opt)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		page, err := c.Do(ctx, c.B().Zrangebyscore().Key(key).Min("-inf").Max("+inf").Withscores().Build()).ToArray()
		if err != nil {
			t.Fatal(err)
		}
		flat, err := appendZEntries([]string{"epoch"}, page)
		if err != nil {
			t.Fatal(err)
		}
		return flat
	}
	c := realBackend(t).client
	t.Cleanup(func() { c.Do(context.Background(), c.B().Del().Key(key).Build()) })
	if err := c.Do(ctx, c.B().Zadd().Key(key).ScoreMember().ScoreMember(7, "a").ScoreMember(1796634408341045, "b").ScoreMember(1e17, "c").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	want := []string{"epoch", "a", "7", "b", "1796634408341045", "c", "100000000000000000"}
	for _, resp2 := range []bool{false, true} {
		if got := read(resp2); !slices.Equal(got, want) {
			t.Fatalf("RESP2 %v: %q, want %q", resp2, got, want)
		}
	}
}
