package replica

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/opsstore"
	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/test/relaytest"
)

// TestQueueAgeReadsOldestQueuedAndDropsLeftSites runs queueAge passes over a
// real store: a site with queued jobs gets its oldest job's enqueue instant,
// a site with none gets zero, a failed read keeps the last value, and a
// site that left the projection is dropped.
func TestQueueAgeReadsOldestQueuedAndDropsLeftSites(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opt, err := valkey.ParseURL(relaytest.ValkeyURL())
	if err != nil {
		t.Fatal(err)
	}
	vc, err := valkey.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer vc.Close()
	st, err := store.New(ctx, vc, store.Options{Namespace: relaytest.Namespace(t, relaytest.Open(t, relaytest.ValkeyURL()))})
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	for i := range 3 {
		id := fmt.Sprintf("qa-job-%d", i)
		if _, err := st.Enqueue(ctx, store.EnqueueInput{SiteID: "site-a", ID: id, Stub: protocol.JobStub{ID: id,
			Kind: protocol.KindGenerate, Owner: "owner-1", Site: "site-a", Audience: protocol.AudiencePrivate,
			SizeClass: "small", DeadlineAt: time.Now().Add(10 * time.Minute).UnixMilli()}}); err != nil {
			t.Fatal(err)
		}
	}
	after := time.Now()

	sites := []string{"site-a", "site-b"}
	failB := false
	q := &queueAge{log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		read: func(ctx context.Context, id string) (opsstore.SiteStates, error) {
			if failB && id == "site-b" {
				return opsstore.SiteStates{}, fmt.Errorf("injected read failure")
			}
			return opsstore.New(st).SiteStates(ctx, id, queueAgePageSize, queueAgePages)
		},
		sites: func() []string { return sites }}

	got := q.pass(ctx)
	a, ok := got["site-a"]
	// The seq is the server's clock in µs; allow a second of skew.
	if !ok || a.Before(before.Add(-time.Second)) || a.After(after.Add(time.Second)) {
		t.Fatalf("site-a oldest queued at %v, want within [%v, %v]", a, before, after)
	}
	if b, ok := got["site-b"]; !ok || !b.IsZero() {
		t.Fatalf("site-b = %v (present %v), want zero: nothing queued", b, ok)
	}

	// A failed read keeps the last value; a site gone from the projection is dropped.
	failB = true
	sites = []string{"site-b"}
	got = q.pass(ctx)
	if _, ok := got["site-a"]; ok {
		t.Fatalf("site-a still kept after leaving the projection: %v", got)
	}
	if b, ok := got["site-b"]; !ok || !b.IsZero() {
		t.Fatalf("site-b lost on a failed read: %v", got)
	}
}
