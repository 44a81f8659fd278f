package store

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/test/relaytest"
)

// blobOf is a JSON envelope of exactly n bytes.
func blobOf(n int) json.RawMessage {
	head, tail := `{"ciphertext":"`, `"}`
	return json.RawMessage(head + strings.Repeat("B", n-len(head)-len(tail)) + tail)
}

// Blobs of every size class come back byte for byte through every read
// (claim, take, Job, Finished, ResultJobs): whole (at most 64 bytes, or over
// 4 KiB), and sliced (65 bytes up to 4 KiB, a chunk boundary included). A
// record of a queued job with a sliced stub stays in Valkey's compact hash
// encoding.
func TestBlobsRoundTripEverySize(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		for i, n := range []int{40, 64, 65, 128, 129, 1349, 4096, 4097, 20000} {
			id := "blob-" + strings.Repeat("x", i)
			st := stub(id, "alice")
			h.enqueueStub(site, st)
			if b.name == "valkey" && n == 1349 {
				enc, err := b.client.Do(h.ctx, b.client.B().ObjectEncoding().Key(h.s.k.job(site, id)).Build()).ToString()
				if err != nil || enc != "listpack" {
					t.Fatalf("queued record encoding %q (%v), want listpack", enc, err)
				}
			}
			g := h.claim(maxJobs(1))
			if len(g) != 1 || stubID(g[0]) != id {
				t.Fatalf("size %d: claim %v", n, ids(g))
			}
			want, _ := protocol.Marshal(st)
			if string(g[0].Stub) != string(want) {
				t.Fatalf("size %d: stub %s, want %s", n, g[0].Stub, want)
			}
			payload, result := blobOf(n), blobOf(n+1)
			if r, err := h.s.Seal(h.ctx, site, id, payload); err != nil || r.State != StateReady {
				t.Fatalf("size %d: seal %+v %v", n, r, err)
			}
			if r := h.take(id, "runner_1", g[0].Lease.ID); string(r.Envelope) != string(payload) {
				t.Fatalf("size %d: take %d bytes, want %d", n, len(r.Envelope), len(payload))
			}
			if r, err := h.s.Complete(h.ctx, CompleteInput{JobID: id, RunnerID: "runner_1", LeaseID: g[0].Lease.ID, Envelope: result, Disposition: "ok"}); err != nil || !r.Accepted {
				t.Fatalf("size %d: complete %+v %v", n, r, err)
			}
			j := h.job(site, id)
			if string(j.Payload) != string(payload) || string(j.Result) != string(result) || string(j.Stub) != string(want) || j.ClaimedBy == nil {
				t.Fatalf("size %d: job read back wrong: %+v", n, j)
			}
			rs, err := h.s.ResultJobs(h.ctx, site)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, r := range rs {
				if r.JobID == id {
					found = string(r.Result) == string(result) && r.Claimed
				}
			}
			if !found {
				t.Fatalf("size %d: result not read back", n)
			}
		}
	})
}

// A namespace written by layout v2 keeps working: a job whose record holds
// its blobs whole and its encoded ids, counted in the v2 state sets, goes
// through claim, seal, release (requeue), claim, take and complete, and
// every read, the site's stored bytes and the state counts stay exact.
func TestLayoutV2RecordsStillRead(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	h := newFixture(t, b, Options{})
	ctx, c := context.Background(), b.client
	st := stub("old-job", "alice")
	h.enqueueStub(site, st)
	raw, _ := protocol.Marshal(st)
	k, m, sh := h.s.k.job(site, st.ID), member(site, st.ID), h.s.k.siteShard(site)
	do := func(cmd ...string) {
		t.Helper()
		if err := c.Do(ctx, c.B().Arbitrary(cmd[0]).Args(cmd[1:]...).Build()).Error(); err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
	}
	// Rewrite it as v2 wrote it.
	fields, err := c.Do(ctx, c.B().Hkeys().Key(k).Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fields {
		if blobField(f, "stub") {
			do("HDEL", k, f)
		}
	}
	do("HSET", k, "stub", string(raw), "eS", enc(site), "eJ", enc(st.ID))
	do("HINCRBY", h.s.k.stateCounts(sh), StateQueued, "-1")
	do("SADD", h.s.k.state(sh, StateQueued), m)
	do("HSET", h.s.k.layout(), "v2", "1") // as relay migrate leaves it
	s2, err := New(ctx, c, Options{Namespace: h.s.opts.Namespace, Logger: relaytest.Discard()})
	if err != nil || !s2.v2States {
		t.Fatalf("New on a namespace moved from v2: %v (v2 states %v)", err, s2 != nil && s2.v2States)
	}
	h.s = s2

	counts := func(step string, want StateCounts) {
		t.Helper()
		got, err := h.s.Counts(ctx)
		if err != nil || got != want {
			t.Fatalf("%s: counts %+v (%v), want %+v", step, got, err, want)
		}
	}
	counts("v2 record", StateCounts{Queued: 1})
	g := h.claim(maxJobs(1))
	if len(g) != 1 || string(g[0].Stub) != string(raw) {
		t.Fatalf("claim of a v2 record: %+v", g)
	}
	counts("claimed", StateCounts{AwaitingPayload: 1})
	if n, _ := c.Do(ctx, c.B().Scard().Key(h.s.k.state(sh, StateQueued)).Build()).AsInt64(); n != 0 {
		t.Fatalf("v2 state set still holds %d", n)
	}
	h.seal(st.ID)
	// Payload and device whole, as v2 wrote them, then a requeue drops them.
	fields, _ = c.Do(ctx, c.B().Hkeys().Key(k).Build()).AsStrSlice()
	for _, f := range fields {
		if blobField(f, "pl") || blobField(f, "cd") {
			do("HDEL", k, f)
		}
	}
	dev, _ := json.Marshal(freshDevice())
	do("HSET", k, "pl", string(envelope), "cd", string(dev))
	h.release("runner_1", []protocol.GrantRef{{JobID: st.ID, LeaseID: g[0].Lease.ID}}, ReasonShutdown, nil)
	counts("released", StateCounts{Queued: 1})
	left, _ := c.Do(ctx, c.B().Hkeys().Key(k).Build()).AsStrSlice()
	for _, f := range left {
		if blobField(f, "pl") || blobField(f, "cd") {
			t.Fatalf("requeue left field %s: %v", f, left)
		}
	}
	g = h.claim(maxJobs(1))
	if len(g) != 1 {
		t.Fatal("second claim granted nothing")
	}
	h.seal(st.ID)
	if r := h.take(st.ID, "runner_1", g[0].Lease.ID); string(r.Envelope) != string(envelope) {
		t.Fatalf("take: %s", r.Envelope)
	}
	h.complete(st.ID, "runner_1", g[0].Lease.ID, "ok")
	counts("done", StateCounts{Done: 1})
	j := h.job(site, st.ID)
	if string(j.Stub) != string(raw) || string(j.Result) != string(envelope) {
		t.Fatalf("job read back wrong: %+v", j)
	}
	used, _ := c.Do(ctx, c.B().Get().Key(h.s.k.siteBytes(site)).Build()).AsInt64()
	if want := int64(len(raw) + 2*len(envelope)); used != want {
		t.Fatalf("site bytes %d, want %d", used, want)
	}
	h.s.AdvanceClock(st.DeadlineAt - h.now() + 1)
	h.sweep()
	counts("forgotten", StateCounts{})
}

// A namespace whose record says layout v2 is refused by New with the way
// to move it; Migrate rewrites only the version, after which New starts
// and the jobs written before are still there.
func TestMigrateV2OnlyRewritesTheVersion(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	ctx, c := context.Background(), b.client
	h := newFixture(t, b, Options{})
	h.enqueue("kept", "alice")
	ns := h.s.opts.Namespace
	if err := c.Do(ctx, c.B().Hset().Key(h.s.k.layout()).FieldValue().FieldValue("version", "2").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	_, err := New(ctx, c, Options{Namespace: ns, Logger: relaytest.Discard()})
	if !errors.Is(err, ErrOlderLayout) || !strings.Contains(err.Error(), "relay migrate") {
		t.Fatalf("New on a v2 namespace: %v", err)
	}
	rep, err := Migrate(ctx, c, ns, false)
	if err != nil || !rep.Upgraded || rep.Deleted != 0 {
		t.Fatalf("migrate v2: %+v %v", rep, err)
	}
	s, err := New(ctx, c, Options{Namespace: ns, Logger: relaytest.Discard()})
	if err != nil || !s.v2States {
		t.Fatalf("New after migrate: %v (v2 states %v)", err, s != nil && s.v2States)
	}
	if h.s.v2States {
		t.Fatal("a namespace created in v3 has v2 state sets")
	}
	if j, err := s.Job(ctx, site, "kept"); err != nil || j == nil || j.State != StateQueued {
		t.Fatalf("job after migrate: %+v %v", j, err)
	}
	if rep, err := Migrate(ctx, c, ns, false); err != nil || rep.Upgraded || rep.Written {
		t.Fatalf("second migrate: %+v %v", rep, err)
	}
}

// blobField: field f of a job record holds part of blob name, in any form
// a layout wrote (whole; v3's name#, name.N; v4's numbered fields).
func blobField(f, name string) bool {
	base := map[string]int{"stub": 100, "cd": 200, "pl": 300, "rs": 400}[name]
	if n, err := strconv.Atoi(f); err == nil {
		return n >= base && n < base+100
	}
	return f == name || f == name+"#" || strings.HasPrefix(f, name+".")
}
