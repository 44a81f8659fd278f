package store

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/byollm/relay-go/internal/protocol"
)

// checkSiteUse compares SiteUse with what the jobs themselves say: live =
// exists, not done, not cancelled; bytes = stub + payload + result of every
// job of the site. This is the exactness the limits rely on.
func (h *storeFixture) checkSiteUse(sites ...string) {
	h.t.Helper()
	jobs, err := h.s.Jobs(h.ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	want := map[string]SiteUse{}
	for _, id := range sites {
		want[id] = SiteUse{}
	}
	for _, j := range jobs {
		u := want[j.SiteID]
		if j.State != StateDone && !j.Cancelled {
			u.LiveJobs++
		}
		u.StoredBytes += int64(len(j.Stub) + len(j.Payload) + len(j.Result))
		want[j.SiteID] = u
	}
	got, err := h.s.SiteUse(h.ctx, sites)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, id := range sites {
		if got[id] != want[id] {
			h.t.Fatalf("site %s use %+v, the jobs say %+v", id, got[id], want[id])
		}
	}
}

// refusedEnqueue enqueues and wants the named limit refused, with the store
// left exactly as it was.
func (h *storeFixture) refusedEnqueue(siteID string, st protocol.JobStub, limit string) {
	h.t.Helper()
	before := dump(h.t, h.b, h.s)
	_, err := h.s.Enqueue(h.ctx, EnqueueInput{ID: st.ID, SiteID: siteID, Stub: st})
	var le *SiteLimitError
	if !errors.Is(err, ErrSiteLimit) || !errors.As(err, &le) || le.Limit != limit || le.SiteID != siteID {
		h.t.Fatalf("enqueue %s at %s: %v, want the %s limit", st.ID, siteID, err, limit)
	}
	if after := dump(h.t, h.b, h.s); !maps.Equal(before, after) {
		h.t.Fatalf("a refused enqueue changed the store")
	}
}

const siteB = "site_other"

// One site at its live-jobs limit is refused while another is served, and
// every way a job stops being live (complete, cancel, deadline, eviction)
// frees its slot.
func TestSiteJobsLimit(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{SiteLimits: SiteLimits{Default: SiteLimit{Jobs: 100}, Sites: map[string]SiteLimit{site: {Jobs: 3}}}})
		for i := range 3 {
			h.enqueue(fmt.Sprint("a", i), "alice")
		}
		h.refusedEnqueue(site, stub("a3", "alice"), LimitJobs)
		if j := h.enqueue("a0", "alice"); j.ID != "a0" { // a repeat is answered, not refused
			t.Fatalf("repeat: %+v", j)
		}
		for i := range 10 { // the other site is served
			h.enqueueStub(siteB, stub(fmt.Sprint("b", i), "bob"))
		}
		h.checkSiteUse(site, siteB)

		// complete frees a slot
		g := h.claim(maxJobs(1))
		h.seal(stubID(g[0]))
		h.complete(stubID(g[0]), "runner_1", g[0].Lease.ID, "ok")
		h.checkSiteUse(site, siteB)
		h.enqueue("a3", "alice")
		h.refusedEnqueue(site, stub("a4", "alice"), LimitJobs)
		// cancel frees a slot
		if ok, err := h.s.Cancel(h.ctx, site, "a1"); !ok || err != nil {
			t.Fatal(ok, err)
		}
		h.checkSiteUse(site, siteB)
		h.enqueue("a4", "alice")
		h.refusedEnqueue(site, stub("a5", "alice"), LimitJobs)
		// eviction (three unsealed lapses) frees a slot
		for range SealAttemptsBeforeEviction {
			if g := h.claim(maxJobs(1), runner("runner_evict")); len(g) != 1 {
				t.Fatalf("claim: %d", len(g))
			}
			h.s.Testing().AdvanceClock(AwaitingPayloadMs + 1)
			h.sweep()
			h.checkSiteUse(site, siteB)
		}
		h.enqueue("a5", "alice")
		// the deadline frees everything
		h.s.Testing().AdvanceClock(farDeadline)
		h.sweep()
		h.checkSiteUse(site, siteB)
		h.s.Testing().SetClockOffset(0)
		for i := range 3 {
			h.enqueue(fmt.Sprint("c", i), "alice")
		}
		h.checkSiteUse(site, siteB)
	})
}

// Stored bytes: enqueue and seal are refused past the limit (the job stays
// awaiting its payload), results count but are never refused, and bytes
// come back when the payload goes (requeue) and when the job goes.
func TestSiteBytesLimit(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		one := int64(len(protocol.MustMarshal(stub("a0", "alice"))))
		limit := 2*one + int64(len(envelope)) + 10 // two stubs and one payload
		h := newFixture(t, b, Options{SiteLimits: SiteLimits{Sites: map[string]SiteLimit{site: {Bytes: limit}}}})
		h.enqueue("a0", "alice")
		h.enqueue("a1", "bob")
		h.checkSiteUse(site, siteB)
		h.refusedEnqueue(site, stub("a2", "alice"), LimitBytes)
		h.enqueueStub(siteB, stub("b0", "bob"))

		g := h.claim(maxJobs(1))
		if r := h.seal("a0"); r.State != StateReady {
			t.Fatalf("first seal: %+v", r)
		}
		h.checkSiteUse(site, siteB)
		h.claim(maxJobs(1), deviceOwner("bob"), runner("runner_bob"), func(in *ClaimInput) { in.Routes = []Route{{SiteID: site, Owner: "bob"}} })
		before := dump(t, b, h.s)
		if r := h.seal("a1"); r.Refused != RefusedSiteLimit || r.Limit != LimitBytes {
			t.Fatalf("seal past the limit: %+v", r)
		}
		if after := dump(t, b, h.s); !maps.Equal(before, after) {
			t.Fatal("a refused seal changed the store")
		}
		h.mustState("a1", StateAwaitingPayload)
		// A result is never refused, even past the limit.
		if r := h.complete("a0", "runner_1", g[0].Lease.ID, "ok"); !r.Accepted {
			t.Fatalf("complete: %+v", r)
		}
		h.checkSiteUse(site, siteB)
		// a1's window lapses and it is requeued; then every deadline passes
		// and all bytes come back.
		h.s.Testing().AdvanceClock(AwaitingPayloadMs + 1)
		h.sweep()
		h.mustState("a1", StateQueued)
		h.checkSiteUse(site, siteB)
		h.s.Testing().AdvanceClock(farDeadline)
		h.sweep()
		h.checkSiteUse(site, siteB)
		if u, _ := h.s.SiteUse(h.ctx, []string{site}); u[site] != (SiteUse{}) {
			t.Fatalf("after every deadline: %+v", u[site])
		}
	})
}

// The enqueue rate is a token bucket on the store's clock.
func TestSiteEnqueueRate(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		// One token per 100 s: the bucket also refills in real time, and
		// at this rate the seconds a slow machine takes between steps are a
		// hundredth of a token, never a whole one.
		h := newFixture(t, b, Options{SiteLimits: SiteLimits{Sites: map[string]SiteLimit{site: {Rate: 0.01, Burst: 3}}}})
		h.s.Testing().SetClockOffset(0)
		// Placed first: a site's first enqueue also places it (one script more).
		placedShard(h.s, site)
		placedShard(h.s, siteB)
		for i := range 3 {
			h.enqueue(fmt.Sprint("a", i), "alice")
		}
		h.refusedEnqueue(site, stub("a3", "alice"), LimitRate)
		for i := range 20 {
			h.enqueueStub(siteB, stub(fmt.Sprint("b", i), "bob")) // no limit there
		}
		h.s.Testing().AdvanceClock(100_000) // one token back at 0.01/s
		h.enqueue("a3", "alice")
		h.refusedEnqueue(site, stub("a4", "alice"), LimitRate)
		h.s.Testing().AdvanceClock(6_000_000) // full again, never more than the burst
		for i := range 3 {
			h.enqueue(fmt.Sprint("c", i), "alice")
		}
		h.refusedEnqueue(site, stub("c3", "alice"), LimitRate)
	})
}

// Random operations over two sites keep the use exact.
func TestSiteUseStaysExact(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		rng := rand.New(rand.NewPCG(7, 11))
		grants := map[string]ClaimedStub{}
		for step := range 300 {
			siteID := []string{site, siteB}[rng.IntN(2)]
			owner := []string{"alice", "bob"}[rng.IntN(2)]
			switch rng.IntN(8) {
			case 0, 1:
				st := stub(fmt.Sprint("j", rng.IntN(60)), owner)
				if _, err := h.s.Enqueue(h.ctx, EnqueueInput{ID: st.ID, SiteID: siteID, Stub: st}); err != nil {
					t.Fatal(err)
				}
			case 2:
				for _, g := range h.claim(maxJobs(3), deviceOwner(owner), runner("r_"+owner), func(in *ClaimInput) {
					in.Routes = []Route{{SiteID: site, Owner: owner}, {SiteID: siteB, Owner: owner}}
				}) {
					grants[g.Lease.ID] = g
				}
			case 3:
				for _, g := range grants {
					_, _ = h.s.Seal(h.ctx, siteOfStub(g), stubID(g), envelope)
					break
				}
			case 4:
				for id, g := range grants {
					_, _ = h.s.Complete(h.ctx, CompleteInput{JobID: stubID(g), RunnerID: g.Lease.RunnerID, LeaseID: id, Envelope: envelope, Disposition: "ok"})
					delete(grants, id)
					break
				}
			case 5:
				_, _ = h.s.Cancel(h.ctx, siteID, fmt.Sprint("j", rng.IntN(60)))
			case 6:
				h.s.Testing().AdvanceClock(int64(rng.IntN(15_000)))
				h.sweep()
			case 7:
				for id, g := range grants {
					h.release(g.Lease.RunnerID, []protocol.GrantRef{{JobID: stubID(g), LeaseID: id}}, "shutdown", nil)
					delete(grants, id)
					break
				}
			}
			if step%10 == 0 {
				h.checkSiteUse(site, siteB)
			}
		}
		h.checkSiteUse(site, siteB)
		h.s.Testing().AdvanceClock(farDeadline)
		h.sweep()
		h.checkSiteUse(site, siteB)
	})
}

func siteOfStub(c ClaimedStub) string { return c.SiteID }
