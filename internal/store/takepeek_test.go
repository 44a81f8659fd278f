package store

import (
	"testing"
)

// A fetch while the job still awaits its payload is answered not-ready from
// plain reads, without take.lua; every other case is the script's, with the
// script's answers: another runner (not-holder), another job id under the
// lease (not-found), after the seal (the envelope), and after the awaiting
// window has passed (the script settles: the job is queued again).
func TestFetchBeforeSealSkipsTheScript(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		counter := &countingObserver{n: map[string]int{}}
		h := newFixture(t, b, Options{ObserveScript: counter.observe})
		h.enqueueStub(site, stub("p1", "alice"))
		h.enqueueStub(site, stub("p2", "alice"))
		g := h.claim(maxJobs(2))
		if len(g) != 2 {
			t.Fatalf("claimed %d", len(g))
		}
		lease := g[0].Lease.ID
		id := stubID(g[0])
		counter.take()

		if r := h.take(id, "runner_1", lease); r.Refused != RefusedNotReady {
			t.Fatalf("fetch before the seal: %+v", r)
		}
		if calls := counter.take(); calls["take"] != 0 || calls["take_peek"] == 0 {
			t.Fatalf("fetch before the seal ran %v; want plain reads only", calls)
		}

		if r := h.take(id, "runner_other", lease); r.Refused != RefusedNotHolder {
			t.Errorf("another runner: %+v", r)
		}
		if r := h.take(stubID(g[1]), "runner_1", lease); r.Refused != RefusedNotFound && r.Refused != RefusedStaleLease {
			t.Errorf("another job id under this lease: %+v", r)
		}
		if r := h.take(id, "runner_1", "00-no-such-lease"); r.Refused != RefusedStaleLease {
			t.Errorf("a lease that is not the grant's: %+v", r)
		}
		if calls := counter.take(); calls["take"] != 3 {
			t.Errorf("the three refusals ran take.lua %d times; want each to", calls["take"])
		}

		h.seal(id)
		if r := h.take(id, "runner_1", lease); r.Refused != "" || string(r.Envelope) != string(envelope) {
			t.Fatalf("fetch after the seal: %+v", r)
		}
		if j := h.job(site, id); j.State != StateRunning {
			t.Fatalf("after the fetch: %s", j.State)
		}

		// p2 is still awaiting its payload; past its window the fetch is
		// the script's, which requeues it as a sweep would.
		h.s.Testing().AdvanceClock(AwaitingPayloadMs + 1)
		counter.take()
		if r := h.take(stubID(g[1]), "runner_1", g[1].Lease.ID); r.Refused == RefusedNotReady || r.Refused == "" {
			t.Errorf("fetch past the awaiting window: %+v", r)
		}
		if calls := counter.take(); calls["take"] != 1 {
			t.Errorf("fetch past the awaiting window ran take.lua %d times; want 1", calls["take"])
		}
		if j := h.job(site, stubID(g[1])); j.State != StateQueued {
			t.Errorf("past the awaiting window the fetch left the job %s; want it requeued", j.State)
		}
	})
}
