package store

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/byollm/relay-go/internal/protocol"
)

// Behaviour the contract does not check (store.md §7.3) and the traps of
// §10, on both backends. Time moves with AdvanceClock.

// timeout moves the clock past every awaiting-payload window granted so far.
func (h *storeFixture) timeout() { h.s.Testing().AdvanceClock(AwaitingPayloadMs + 1) }

// turn is one round of a site that claims and never seals: two fresh jobs,
// one claim (the cap makes it two grants), the window passes, a sweep.
func (h *storeFixture) turn(n int) {
	h.enqueue(fmt.Sprintf("t%d-a", n), "alice")
	h.enqueue(fmt.Sprintf("t%d-b", n), "alice")
	if got := h.claim(); len(got) != 2 {
		h.t.Fatalf("turn %d: %d grants", n, len(got))
	}
	h.timeout()
	h.sweep()
}

var semanticCases = []struct {
	name string
	opts func(*churnLog) Options
	run  func(h *storeFixture, churn *churnLog)
}{
	{name: "lease expiry requeues ready and running jobs and drops the payload", run: func(h *storeFixture, _ *churnLog) {
		h.enqueue("a", "alice")
		h.enqueue("b", "alice")
		got := h.claim(leaseMs(1000))
		h.seal("a")
		h.seal("b")
		h.take("b", "runner_1", got[1].Lease.ID)
		h.mustState("b", StateRunning)
		h.s.Testing().AdvanceClock(1001)
		swept := h.sweep()
		equalStrings(h.t, "requeued", jobIDs(swept), []string{"a", "b"})
		for _, id := range []string{"a", "b"} {
			j := h.job(site, id)
			if j.State != StateQueued || j.ClaimedBy != nil || j.Payload != nil || j.AwaitingUntil != 0 {
				h.t.Fatalf("%s after requeue: %+v", id, j)
			}
		}
		if r := h.take("a", "runner_1", got[0].Lease.ID); r.Refused != RefusedNotFound {
			h.t.Fatalf("take after requeue = %+v", r)
		}
	}},
	{name: "a renewal keeps one lease for the life of the job while its expiry moves", run: func(h *storeFixture, _ *churnLog) {
		h.enqueue("a", "alice")
		g := h.claim(leaseMs(1000))[0]
		h.seal("a")
		h.take("a", "runner_1", g.Lease.ID)
		for i := range 3 {
			r, err := h.s.RenewLeases(h.ctx, RenewInput{RunnerID: "runner_1", Leases: []protocol.GrantRef{grant(g)}, LeaseMs: 1000})
			if err != nil || len(r.Renewed) != 1 {
				h.t.Fatalf("renew %d = %+v %v", i, r, err)
			}
			h.s.Testing().AdvanceClock(800)
			if swept := h.sweep(); len(swept) != 0 {
				h.t.Fatalf("sweep %d requeued %q", i, jobIDs(swept))
			}
		}
		j := h.job(site, "a")
		if j.State != StateRunning || j.ClaimedBy.LeaseID != g.Lease.ID {
			h.t.Fatalf("job %+v", j)
		}
		if r := h.take("a", "runner_1", g.Lease.ID); string(r.Envelope) != string(envelope) {
			h.t.Fatalf("repeated fetch = %+v", r)
		}
	}},
	{name: "a lease expiry never requeues an awaiting-payload job (trap 7)", run: func(h *storeFixture, _ *churnLog) {
		h.enqueue("a", "alice")
		h.claim(leaseMs(1000))
		h.s.Testing().AdvanceClock(5000)
		if swept := h.sweep(); len(swept) != 0 {
			h.t.Fatalf("swept %q", jobIDs(swept))
		}
		h.mustState("a", StateAwaitingPayload)
	}},
	{name: "three consecutive timeouts evict the job and the sweep reports it", run: func(h *storeFixture, _ *churnLog) {
		h.enqueue("a", "alice")
		for attempt := 1; attempt <= 3; attempt++ {
			if got := h.claim(); len(got) != 1 {
				h.t.Fatalf("attempt %d: %d grants", attempt, len(got))
			}
			h.timeout()
			swept := h.sweep()
			if len(swept) != 1 || swept[0].ID != "a" {
				h.t.Fatalf("attempt %d swept %+v", attempt, swept)
			}
			j := swept[0]
			if attempt < 3 {
				if j.State != StateQueued || j.SealAttempts != attempt || j.ReofferTo != "runner_1" || j.SweptAway {
					h.t.Fatalf("attempt %d snapshot %+v", attempt, j)
				}
				continue
			}
			if !j.SweptAway || j.State != StateAwaitingPayload || j.SealAttempts != 2 || j.ReofferTo != "runner_1" || j.ClaimedBy == nil {
				h.t.Fatalf("eviction snapshot %+v", j)
			}
		}
		if j := h.job(site, "a"); j != nil {
			h.t.Fatalf("evicted job still there: %+v", j)
		}
	}},
	{name: "a seal resets the count: two more rounds after it do not evict", run: func(h *storeFixture, _ *churnLog) {
		h.enqueue("a", "alice")
		h.claim()
		h.timeout()
		h.sweep()
		h.claim()
		h.timeout()
		h.sweep()
		if j := h.job(site, "a"); j.SealAttempts != 2 {
			h.t.Fatalf("sealAttempts %d", j.SealAttempts)
		}
		h.claim(leaseMs(1000))
		h.seal("a")
		j := h.job(site, "a")
		if j.SealAttempts != 0 || j.AwaitingUntil != 0 || j.ReofferTo != "runner_1" {
			h.t.Fatalf("after seal %+v", j)
		}
		h.s.Testing().AdvanceClock(1001) // lease expiry round
		h.sweep()
		h.mustState("a", StateQueued)
		for round := range 2 {
			if got := h.claim(); len(got) != 1 {
				h.t.Fatalf("round %d: no grant", round)
			}
			h.timeout()
			h.sweep()
		}
		if j := h.job(site, "a"); j == nil || j.SealAttempts != 2 {
			h.t.Fatalf("job after two rounds %+v", j)
		}
	}},
	{name: "just before the window ends the job is still awaiting, at its end it is due", run: func(h *storeFixture, _ *churnLog) {
		h.enqueue("a", "alice")
		h.claim()
		au := h.job(site, "a").AwaitingUntil
		// Aim the clock 50 ms before the window ends (TIME keeps moving).
		h.s.Testing().AdvanceClock(au - 50 - h.now())
		if swept := h.sweep(); len(swept) != 0 {
			h.t.Fatalf("swept early: %+v", swept)
		}
		h.mustState("a", StateAwaitingPayload)
		h.s.Testing().AdvanceClock(au - h.now())
		if swept := h.sweep(); len(swept) != 1 {
			h.t.Fatalf("not due at awaitingUntil: %+v", swept)
		}
	}},
	{name: "six expiries inside the window produce one report", opts: withChurn, run: func(h *storeFixture, churn *churnLog) {
		for n := range 3 {
			h.turn(n)
		}
		reports := churn.all(h.s)
		if len(reports) != 1 {
			h.t.Fatalf("reports %+v", reports)
		}
		r := reports[0]
		if r.SiteID != site || r.Owner != "alice" || r.Expiries < ChurnExpiries || r.WindowMs != ChurnWindowMs {
			h.t.Fatalf("report %+v", r)
		}
	}},
	{name: "18 turns produce exactly one report", opts: withChurn, run: func(h *storeFixture, churn *churnLog) {
		for n := range 18 {
			h.turn(n)
		}
		if reports := churn.all(h.s); len(reports) != 1 {
			h.t.Fatalf("reports %+v", reports)
		}
	}},
	{name: "turns spaced more than the window apart produce none", opts: withChurn, run: func(h *storeFixture, churn *churnLog) {
		for n := range 6 {
			h.turn(n)
			h.s.Testing().AdvanceClock(ChurnWindowMs + 1)
		}
		if reports := churn.all(h.s); len(reports) != 0 {
			h.t.Fatalf("reports %+v", reports)
		}
	}},
	{name: "a site that seals produces none", opts: withChurn, run: func(h *storeFixture, churn *churnLog) {
		for n := range 10 {
			h.enqueue(fmt.Sprintf("s%d-a", n), "alice")
			h.enqueue(fmt.Sprintf("s%d-b", n), "alice")
			for _, g := range h.claim() {
				h.seal(stubID(g))
				h.take(stubID(g), "runner_1", g.Lease.ID)
				h.complete(stubID(g), "runner_1", g.Lease.ID, "ok")
			}
			h.timeout()
			h.sweep()
		}
		if reports := churn.all(h.s); len(reports) != 0 {
			h.t.Fatalf("reports %+v", reports)
		}
	}},
	{name: "a callback that panics does not break the sweep", opts: func(c *churnLog) Options {
		return Options{OnChurn: func(r ChurnReport) { c.add(r); panic("callback bug") }}
	}, run: func(h *storeFixture, churn *churnLog) {
		for n := range 3 {
			h.turn(n)
		}
		if reports := churn.all(h.s); len(reports) != 1 {
			h.t.Fatalf("reports %+v", reports)
		}
		if len(h.claim(runner("runner_2"))) != 2 {
			h.t.Fatal("store stopped working after a panicking callback")
		}
	}},
	{name: "without a callback no churn is recorded", run: func(h *storeFixture, _ *churnLog) {
		for n := range 3 {
			h.turn(n)
		}
		if keys := scanKeys(h.t, h.b.client, h.s.k.p+"churn*"); len(keys) != 0 {
			h.t.Fatalf("churn keys %q", keys)
		}
	}},
	{name: "max bounds the grants, oldest first across pairs", run: func(h *storeFixture, _ *churnLog) {
		for i := range 3 {
			for _, owner := range []string{"alice", "bob", "carol"} {
				st := stub(fmt.Sprintf("%s%d", owner, i), owner)
				st.Audience = protocol.AudienceTeam
				h.enqueueStub(site, st)
			}
		}
		got := h.claim(maxJobs(4), routes([]string{site}, []string{"carol", "bob", "alice"}))
		equalStrings(h.t, "ids", ids(got), []string{"alice0", "bob0", "carol0", "alice1"})
		got = h.claim(runner("runner_2"), maxJobs(64), routes([]string{site}, []string{"carol", "bob", "alice"}))
		equalStrings(h.t, "ids", ids(got), []string{"bob1", "carol1"})
	}},
	{name: "a requeued job keeps its first-enqueue position", run: func(h *storeFixture, _ *churnLog) {
		h.enqueue("a", "alice")
		h.enqueue("b", "alice")
		g := h.claim(maxJobs(1))[0]
		h.release("runner_1", []protocol.GrantRef{grant(g)}, ReasonShutdown, nil)
		equalStrings(h.t, "ids", ids(h.claim(maxJobs(1))), []string{"a"})
	}},
	{name: "max 0 grants nothing but still sweeps (trap 19)", run: func(h *storeFixture, _ *churnLog) {
		st := stub("late", "alice")
		st.DeadlineAt = hostNow() - 1000
		h.enqueueStub(site, st)
		h.enqueue("a", "alice")
		if got := h.claim(maxJobs(0)); len(got) != 0 {
			h.t.Fatalf("got %q", ids(got))
		}
		if h.job(site, "late") != nil {
			h.t.Fatal("claim with max 0 did not sweep")
		}
		h.mustState("a", StateQueued)
	}},
	{name: "two sites with the same id and owner are two jobs for one runner", run: func(h *storeFixture, _ *churnLog) {
		h.enqueueStub(site, stub("x", "alice"))
		h.enqueueStub("site_two", stub("x", "alice"))
		got := h.claim(routes([]string{site, "site_two"}, []string{"alice"}))
		if len(got) != 2 || got[0].SiteID != site || got[1].SiteID != "site_two" {
			h.t.Fatalf("grants %+v", got)
		}
	}},
	{name: "take after a complete straight from awaiting answers not-ready (trap 1)", run: func(h *storeFixture, _ *churnLog) {
		h.enqueue("a", "alice")
		g := h.claim()[0]
		if r := h.complete("a", "runner_1", g.Lease.ID, "ok"); !r.Accepted {
			h.t.Fatalf("complete = %+v", r)
		}
		if r := h.take("a", "runner_1", g.Lease.ID); r.Refused != RefusedNotReady {
			h.t.Fatalf("take = %+v", r)
		}
	}},
	{name: "take guards: not-holder for a stranger's valid lease, not-ready before the seal", run: func(h *storeFixture, _ *churnLog) {
		h.enqueue("a", "alice")
		g := h.claim()[0]
		if r := h.take("a", "runner_2", g.Lease.ID); r.Refused != RefusedNotHolder {
			h.t.Fatalf("stranger = %+v", r)
		}
		if r := h.take("a", "runner_1", g.Lease.ID); r.Refused != RefusedNotReady {
			h.t.Fatalf("unsealed = %+v", r)
		}
		h.mustState("a", StateAwaitingPayload)
	}},
	{name: "the bare-id fallback counts only jobs the caller holds now (traps 3, 4)", run: func(h *storeFixture, _ *churnLog) {
		h.enqueueStub("site_other", stub("x", "alice"))
		h.enqueue("x", "bob")
		h.enqueue("y", "alice")
		got := h.claim(routes([]string{site, "site_other"}, []string{"alice"}))
		equalStrings(h.t, "ids", ids(got), []string{"x", "y"}) // x of site_other
		lease := map[string]string{stubID(got[0]): got[0].Lease.ID, stubID(got[1]): got[1].Lease.ID}
		// runner_1 holds an "x" (at site_other): stale-lease, whichever site was meant.
		if r := h.take("x", "runner_1", lease["y"]); r.Refused != RefusedStaleLease {
			h.t.Fatalf("held bare id = %+v", r)
		}
		// runner_2 holds nothing: not-found, even with a valid lease in hand.
		if r := h.take("y", "runner_2", "nonsense"); r.Refused != RefusedNotFound {
			h.t.Fatalf("stranger = %+v", r)
		}
		// After a release the runner no longer holds "x": not-found.
		h.release("runner_1", []protocol.GrantRef{{JobID: "x", LeaseID: lease["x"]}}, ReasonShutdown, nil)
		if r := h.take("x", "runner_1", lease["y"]); r.Refused != RefusedNotFound {
			h.t.Fatalf("formerly held = %+v", r)
		}
	}},
	{name: "done keeps its grant (trap 5)", run: func(h *storeFixture, _ *churnLog) {
		h.enqueue("a", "alice")
		g := h.claim()[0]
		h.seal("a")
		h.take("a", "runner_1", g.Lease.ID)
		h.complete("a", "runner_1", g.Lease.ID, "ok")
		r, err := h.s.RenewLeases(h.ctx, RenewInput{RunnerID: "runner_1", Leases: []protocol.GrantRef{grant(g)}, LeaseMs: 5000})
		if err != nil || len(r.Renewed) != 1 || len(r.Lost) != 0 {
			h.t.Fatalf("renew done = %+v %v", r, err)
		}
		if ok, _ := h.s.Cancel(h.ctx, site, "a"); !ok {
			h.t.Fatal("cancel done job")
		}
		reqs, _ := h.s.CancelRequests(h.ctx, "runner_1")
		if !reflect.DeepEqual(reqs, []protocol.GrantRef{grant(g)}) {
			h.t.Fatalf("cancel requests %+v", reqs)
		}
		if got := h.release("runner_1", []protocol.GrantRef{grant(g)}, "", nil); len(got) != 0 {
			h.t.Fatalf("released %q", got)
		}
		if r := h.seal("a"); r.Refused != RefusedTooLate || r.Was != StateDone {
			h.t.Fatalf("seal done = %+v", r)
		}
		h.s.Testing().AdvanceClock(10_000) // past the renewed lease: done is never requeued
		h.sweep()
		j := h.job(site, "a")
		if j.State != StateDone || j.ClaimedBy == nil || j.Payload == nil || j.AwaitingUntil != 0 {
			h.t.Fatalf("done job %+v", j)
		}
		fin, _ := h.s.Finished(h.ctx, site)
		equalStrings(h.t, "finished", jobIDs(fin), []string{"a"})
	}},
	{name: "complete from awaiting frees the pair's unsealed slot (trap 6)", run: func(h *storeFixture, _ *churnLog) {
		for _, id := range []string{"a", "b", "c"} {
			h.enqueue(id, "alice")
		}
		got := h.claim()
		if len(got) != 2 || len(h.claim()) != 0 {
			h.t.Fatal("cap not at 2")
		}
		h.complete(stubID(got[0]), "runner_1", got[0].Lease.ID, "canceled")
		equalStrings(h.t, "after complete", ids(h.claim()), []string{"c"})
		aw, _ := h.s.Awaiting(h.ctx, site)
		equalStrings(h.t, "awaiting", jobIDs(aw), []string{"b", "c"})
	}},
	{name: "a renewal replaces the expiry even with an earlier one (trap 8)", run: func(h *storeFixture, _ *churnLog) {
		h.enqueue("a", "alice")
		g := h.claim()[0]
		h.seal("a")
		r, _ := h.s.RenewLeases(h.ctx, RenewInput{RunnerID: "runner_1", Leases: []protocol.GrantRef{grant(g)}, LeaseMs: 10})
		if len(r.Renewed) != 1 || r.Renewed[0].ExpiresAt >= g.Lease.ExpiresAt {
			h.t.Fatalf("renew = %+v (claim expiry %d)", r, g.Lease.ExpiresAt)
		}
		if j := h.job(site, "a"); j.ClaimedBy.LeaseExpiresAt != r.Renewed[0].ExpiresAt || j.AwaitingUntil != 0 {
			h.t.Fatalf("job %+v", j)
		}
		h.s.Testing().AdvanceClock(11)
		equalStrings(h.t, "swept", jobIDs(h.sweep()), []string{"a"})
	}},
	{name: "a sticky job refused by its runner is stranded (trap 12)", run: func(h *storeFixture, _ *churnLog) {
		h.enqueue("a", "alice")
		h.claim()
		h.timeout()
		h.sweep()
		g := h.claim()[0]
		h.release("runner_1", []protocol.GrantRef{grant(g)}, ReasonRefused, nil)
		if len(h.claim()) != 0 || len(h.claim(runner("runner_2"))) != 0 {
			h.t.Fatal("stranded job was offered")
		}
		j := h.job(site, "a")
		if j.State != StateQueued || !slices.Equal(j.RefusedBy, []string{"runner_1"}) || j.SealAttempts != 1 {
			h.t.Fatalf("job %+v", j)
		}
	}},
	{name: "refusedBy keeps refusal order and retryAfter is overwritten (traps 10, 11)", run: func(h *storeFixture, _ *churnLog) {
		h.enqueue("a", "alice")
		for _, r := range []string{"runner_z", "runner_a", "runner_m"} {
			g := h.claim(runner(r))[0]
			h.release(r, []protocol.GrantRef{grant(g)}, ReasonRefused, nil)
		}
		g := h.claim(runner("runner_b"))[0]
		late, early := hostNow()+600000, hostNow()-5
		h.release("runner_b", []protocol.GrantRef{grant(g)}, ReasonBackendDown, &late)
		g = h.claim(runner("runner_c"))[0]
		h.release("runner_c", []protocol.GrantRef{grant(g)}, "", &late)
		if len(h.claim(runner("runner_c"))) != 0 {
			h.t.Fatal("retryAfter ignored")
		}
		g = h.claim(runner("runner_d"))[0]
		h.release("runner_d", []protocol.GrantRef{grant(g)}, "", &early)
		j := h.job(site, "a")
		equalStrings(h.t, "refusedBy", j.RefusedBy, []string{"runner_z", "runner_a", "runner_m"})
		if !reflect.DeepEqual(j.RetryAfter, map[string]int64{"runner_b": late, "runner_c": late, "runner_d": early}) {
			h.t.Fatalf("retryAfter %+v", j.RetryAfter)
		}
	}},
	{name: "releasing one grant twice in a call releases it once", run: func(h *storeFixture, _ *churnLog) {
		h.enqueue("a", "alice")
		g := h.claim()[0]
		got := h.release("runner_1", []protocol.GrantRef{grant(g), grant(g), {JobID: "zz", LeaseID: "nope"}}, "", nil)
		equalStrings(h.t, "released", got, []string{"a"})
	}},
	{name: "a cancelled job is never granted but can still be finished (trap 24)", run: func(h *storeFixture, _ *churnLog) {
		h.enqueue("q", "alice")
		h.enqueue("held", "alice")
		g := h.claim(maxJobs(1))
		equalStrings(h.t, "first", ids(g), []string{"q"})
		h.s.Cancel(h.ctx, site, "held")
		h.s.Cancel(h.ctx, site, "q")
		if got := h.claim(runner("runner_2")); len(got) != 0 {
			h.t.Fatalf("cancelled queued job granted: %q", ids(got))
		}
		h.mustState("held", StateQueued)
		if r := h.seal("q"); r.State != StateReady {
			h.t.Fatalf("seal cancelled = %+v", r)
		}
		if r := h.take("q", "runner_1", g[0].Lease.ID); r.Envelope == nil {
			h.t.Fatalf("take cancelled = %+v", r)
		}
		if r := h.complete("q", "runner_1", g[0].Lease.ID, "canceled"); !r.Accepted {
			h.t.Fatalf("complete cancelled = %+v", r)
		}
		h.release("runner_1", nil, "", nil)
		if ok, _ := h.s.Cancel(h.ctx, site, "q"); !ok {
			h.t.Fatal("cancel is not idempotent")
		}
	}},
	{name: "a cancelled job released from a grant is not requeued into a queue", run: func(h *storeFixture, _ *churnLog) {
		h.enqueue("a", "alice")
		g := h.claim()[0]
		h.s.Cancel(h.ctx, site, "a")
		h.release("runner_1", []protocol.GrantRef{grant(g)}, "", nil)
		h.mustState("a", StateQueued)
		if len(h.claim()) != 0 {
			h.t.Fatal("granted a cancelled job")
		}
		if reqs, _ := h.s.CancelRequests(h.ctx, "runner_1"); len(reqs) != 0 {
			h.t.Fatalf("cancel requests after release %+v", reqs)
		}
	}},
	{name: "the deadline removes running and done jobs; renew then reports lost", run: func(h *storeFixture, _ *churnLog) {
		for _, id := range []string{"run", "fin"} {
			st := stub(id, "alice")
			st.DeadlineAt = h.now() + 60_000
			h.enqueueStub(site, st)
		}
		got := h.claim()
		for _, g := range got {
			h.seal(stubID(g))
			h.take(stubID(g), "runner_1", g.Lease.ID)
		}
		h.complete("fin", "runner_1", got[1].Lease.ID, "ok")
		h.s.Testing().AdvanceClock(60_001)
		r, err := h.s.RenewLeases(h.ctx, RenewInput{RunnerID: "runner_1", Leases: []protocol.GrantRef{grant(got[0]), grant(got[1])}, LeaseMs: 60000})
		if err != nil || len(r.Renewed) != 0 || len(r.Lost) != 2 {
			h.t.Fatalf("renew = %+v %v", r, err)
		}
		if h.job(site, "run") != nil || h.job(site, "fin") != nil {
			h.t.Fatal("expired jobs still there")
		}
		if fin, _ := h.s.Finished(h.ctx, site); len(fin) != 0 {
			h.t.Fatalf("finished %q", jobIDs(fin))
		}
	}},
	{name: "settle on touch: a late seal is too-late once the window has passed", run: func(h *storeFixture, _ *churnLog) {
		h.enqueue("a", "alice")
		h.claim()
		h.timeout()
		if r := h.seal("a"); r.Refused != RefusedTooLate || r.Was != StateQueued {
			h.t.Fatalf("late seal = %+v", r)
		}
		if j := h.job(site, "a"); j.SealAttempts != 1 || j.ReofferTo != "runner_1" {
			h.t.Fatalf("job %+v", j)
		}
	}},
	{name: "sweep returns the requeued jobs first, then the removed ones", run: func(h *storeFixture, _ *churnLog) {
		st := stub("gone", "alice")
		st.DeadlineAt = h.now() + 5_000
		h.enqueueStub(site, st)
		h.enqueue("back", "alice")
		h.claim()
		h.timeout()
		swept := h.sweep()
		if len(swept) != 2 || swept[0].ID != "back" || swept[0].SweptAway || swept[1].ID != "gone" || !swept[1].SweptAway {
			h.t.Fatalf("sweep %+v", swept)
		}
	}},
	{name: "enqueue of a known id returns the stored job unchanged (trap 20)", run: func(h *storeFixture, _ *churnLog) {
		first := h.enqueue("a", "alice")
		other := stub("a", "mallory")
		other.Kind = protocol.KindChat
		again := h.enqueueStub(site, other)
		if !reflect.DeepEqual(first, again) {
			h.t.Fatalf("%+v != %+v", first, again)
		}
		if !slices.Equal(first.RefusedBy, []string{}) || first.RefusedBy == nil {
			h.t.Fatalf("refusedBy %#v", first.RefusedBy)
		}
	}},
	{name: "seen keeps the first owner and device (trap 28)", run: func(h *storeFixture, _ *churnLog) {
		dev := freshDevice()
		h.seen("runner_1", "alice", dev, "[]", "[]")
		p := h.seen("runner_1", "mallory", freshDevice(), caps("x"), "[]")
		if p.Owner != "alice" || p.Device != dev || string(p.Capabilities) != caps("x") {
			h.t.Fatalf("presence %+v", p)
		}
	}},
	{name: "everyone skips lost records and lists a returning runner last", run: func(h *storeFixture, _ *churnLog) {
		for _, r := range []string{"r1", "r2", "r3"} {
			h.seen(r, "alice", freshDevice(), "[]", "[]")
		}
		if err := h.s.DropPresence(h.ctx, "r1"); err != nil {
			h.t.Fatal(err)
		}
		// A record lost without its index entry (as a TTL would lose it).
		if err := h.b.client.Do(h.ctx, h.b.client.B().Del().Key(h.s.k.presence("r2")).Build()).Error(); err != nil {
			h.t.Fatal(err)
		}
		all, _ := h.s.Everyone(h.ctx)
		if len(all) != 1 || all[0].RunnerID != "r3" {
			h.t.Fatalf("everyone %+v", all)
		}
		h.seen("r1", "alice", freshDevice(), "[]", "[]")
		all, _ = h.s.Everyone(h.ctx)
		if len(all) != 2 || all[0].RunnerID != "r3" || all[1].RunnerID != "r1" {
			h.t.Fatalf("everyone %+v", all)
		}
		if p, _ := h.s.Presence(h.ctx, "r2"); p != nil {
			h.t.Fatalf("lost record %+v", p)
		}
	}},
	{name: "everyone reads in pages, in first-seen order", run: func(h *storeFixture, _ *churnLog) {
		h.s.limits.presenceEntries = 2
		var want []string
		for i := range 7 {
			r := fmt.Sprint("r", i)
			h.seen(r, "alice", freshDevice(), "[]", "[]")
			if i != 2 && i != 3 {
				want = append(want, r)
			}
		}
		for _, r := range []string{"r2", "r3"} { // one page's records both lost
			if err := h.b.client.Do(h.ctx, h.b.client.B().Del().Key(h.s.k.presence(r)).Build()).Error(); err != nil {
				h.t.Fatal(err)
			}
		}
		for range 2 {
			all, err := h.s.Everyone(h.ctx)
			if err != nil {
				h.t.Fatal(err)
			}
			var got []string
			for _, p := range all {
				got = append(got, p.RunnerID)
			}
			equalStrings(h.t, "everyone", got, want)
		}
	}},
	{name: "cancel requests read in pages, in insertion order", run: func(h *storeFixture, _ *churnLog) {
		h.s.limits.cancelEntries = 2
		var held []protocol.GrantRef
		for i := range 5 {
			h.enqueue(fmt.Sprint("c", i), "alice")
		}
		for len(held) < 5 {
			got := h.claim(maxJobs(2))
			if len(got) == 0 {
				h.t.Fatalf("claimed only %d", len(held))
			}
			for _, g := range got {
				held = append(held, grant(g))
				h.seal(stubID(g))
			}
		}
		// Cancelled out of order; c2 never, c3 released after its cancel.
		for _, id := range []string{"c4", "c0", "c3", "c1"} {
			if ok, err := h.s.Cancel(h.ctx, site, id); !ok || err != nil {
				h.t.Fatalf("cancel %s: %v %v", id, ok, err)
			}
		}
		for _, g := range held {
			if g.JobID == "c3" {
				h.release("runner_1", []protocol.GrantRef{g}, ReasonShutdown, nil)
			}
		}
		reqs, err := h.s.CancelRequests(h.ctx, "runner_1")
		if err != nil {
			h.t.Fatal(err)
		}
		want := []protocol.GrantRef{held[0], held[1], held[4]}
		if held[0].JobID != "c0" || held[1].JobID != "c1" || held[4].JobID != "c4" || !reflect.DeepEqual(reqs, want) {
			h.t.Fatalf("cancel requests %+v, want %+v", reqs, want)
		}
	}},
}

func withChurn(c *churnLog) Options { return Options{OnChurn: c.add} }

func TestStoreSemantics(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		for _, c := range semanticCases {
			t.Run(c.name, func(t *testing.T) {
				churn := &churnLog{}
				opts := Options{}
				if c.opts != nil {
					opts = c.opts(churn)
				}
				c.run(newFixture(t, b, opts), churn)
			})
		}
	})
}
