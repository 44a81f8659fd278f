package sweeper

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/test/relaytest"
)

// TestReplicasSweepingOneStore: several replicas' sweepers on one Valkey
// namespace settle every overdue job exactly once between them.
func TestReplicasSweepingOneStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := relaytest.Client(t)
	ns := relaytest.Namespace(t, c)
	const replicas, expiring, leased = 3, 240, 10
	stores := make([]*store.Store, replicas)
	for i := range stores {
		var err error
		if stores[i], err = store.New(ctx, c, store.Options{Namespace: ns, Logger: relaytest.Logger(t)}); err != nil {
			t.Fatal(err)
		}
	}

	now, err := stores[0].Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	enqueue := func(id string, deadline int64) {
		t.Helper()
		stub := protocol.JobStub{ID: id, Kind: "llm.generate", Owner: "alice", Site: "BYOLLM-TEST-SITE-KEY-ID",
			Audience: "private", SizeClass: "small", DeadlineAt: deadline}
		if _, err := stores[0].Enqueue(ctx, store.EnqueueInput{ID: id, SiteID: "site-1", Stub: stub}); err != nil {
			t.Fatal(err)
		}
	}
	// Jobs whose deadline passes, and long-lived jobs of which the claim
	// takes the first two (the unsealed cap) and never seals them.
	for i := range leased {
		enqueue(fmt.Sprintf("l%03d", i), now+3_600_000)
	}
	for i := range expiring {
		enqueue(fmt.Sprintf("x%03d", i), now+60_000) // far enough that a slow machine enqueues them all first
	}
	claimed, err := stores[0].Claim(ctx, store.ClaimInput{RunnerID: "runner-1", Owner: "alice",
		Device: protocol.PublicIdentity{Identity: "aWQ", Encryption: "ZW5j", EncryptionSig: "c2ln"},
		Routes: []store.Route{{SiteID: "site-1", Owner: "alice"}}, Kinds: []string{"llm.generate"},
		Max: expiring + leased, LeaseMs: 1_000})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("claimed %d", len(claimed))
	// Every replica's clock jumps past the deadlines and leases.
	for _, s := range stores {
		s.Testing().SetClockOffset(120_000)
	}

	sweepers := make([]*Sweeper, replicas)
	var wg sync.WaitGroup
	for i := range sweepers {
		sweepers[i] = New(stores[i], Options{Batch: 16, Budget: time.Second, Logger: relaytest.Logger(t)})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				if err := sweepers[i].Tick(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()

	var total Stats
	for _, sw := range sweepers {
		s := sw.Stats()
		total.Requeued += s.Requeued
		total.Removed += s.Removed
		t.Logf("replica: %+v", s)
	}
	jobs, err := stores[0].Jobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Each overdue job settled exactly once across the replicas: the
	// expired ones removed, the two unsealed claims requeued.
	if len(claimed) != 2 || total.Removed != expiring || total.Requeued != 2 || len(jobs) != leased {
		t.Fatalf("claimed %d; requeued %d, removed %d, %d jobs left; want 2; 2, %d, %d",
			len(claimed), total.Requeued, total.Removed, len(jobs), expiring, leased)
	}
	for _, j := range jobs {
		if j.State != store.StateQueued {
			t.Fatalf("job %s still %s after the sweep", j.ID, j.State)
		}
	}
	if _, more, err := stores[0].SweepBatch(ctx, 100); err != nil || more {
		t.Fatalf("something still due: more=%v err=%v", more, err)
	}
}

// TestSweepEndsDevices: a replica's sweep ends the devices silent past the
// retention and, at once, the ones the projection removed; devices that
// beat stay.
func TestSweepEndsDevices(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := relaytest.Client(t)
	ns := relaytest.Namespace(t, c)
	st, err := store.New(ctx, c, store.Options{Namespace: ns, Logger: relaytest.Logger(t), DeviceRetention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	seen := func(id string) {
		t.Helper()
		if _, err := st.Seen(ctx, store.Presence{RunnerID: id, Owner: "o"}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 40 {
		seen(fmt.Sprint("silent_", i))
	}
	seen("unpaired")
	seen("alive")
	removed := []string{"unpaired"}
	sw := New(st, Options{Logger: relaytest.Logger(t), Devices: st, DeviceBatch: 4,
		Removed: func() []string { r := removed; removed = nil; return r }})
	if err := sw.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if p, _ := st.Presence(ctx, "unpaired"); p != nil {
		t.Fatal("a device the projection removed is still present after a sweep")
	}
	if got := sw.Stats().Forgotten; got != 1 {
		t.Fatalf("forgotten after the first tick: %d, want 1", got)
	}
	// Past the retention; alive beats just before the sweep.
	st.Testing().AdvanceClock(2 * time.Hour.Milliseconds())
	seen("alive")
	// Another replica sweeps (its clock moved the same way).
	st2, err := store.New(ctx, c, store.Options{Namespace: ns, Logger: relaytest.Logger(t), DeviceRetention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	st2.Testing().SetClockOffset(2 * time.Hour.Milliseconds())
	sw2 := New(st2, Options{Logger: relaytest.Logger(t), Devices: st2, DeviceBatch: 4, Budget: 10 * time.Second})
	relaytest.WaitFor(t, 30*time.Second, "every silent device forgotten", func() bool {
		if err := sw2.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		all, err := st2.Everyone(ctx)
		return err == nil && len(all) == 1 && all[0].RunnerID == "alive"
	})
	if got := sw2.Stats().Forgotten; got != 40 {
		t.Fatalf("forgotten: %d, want 40", got)
	}
}
