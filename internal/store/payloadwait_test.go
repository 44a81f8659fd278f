package store

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/byollm/relay-go/test/relaytest"
)

// twoReplicas is two Stores of one namespace on the shared server, as two
// replicas; the test is skipped where the server has no sharded pub/sub
// (nothing would carry one replica's seal to the other).
func twoReplicas(t *testing.T) (h, other *storeFixture) {
	t.Helper()
	b := realBackend(t)
	h = newFixture(t, b, Options{})
	if !h.s.announce {
		t.Skip("the server has no sharded pub/sub")
	}
	s := newStore(t, b, Options{Namespace: h.s.Namespace(), Logger: relaytest.Discard()})
	return h, &storeFixture{t: t, b: b, s: s, ctx: context.Background()}
}

// AwaitPayload offers a wait only while a seal anywhere would be heard
// (every shard's subscription live); the seal of the awaited grant, made
// through another Store of the namespace, wakes it, and no other seal does.
func TestAwaitPayloadHearsSealsOfOtherReplicas(t *testing.T) {
	t.Parallel()
	h, ho := twoReplicas(t)

	if _, _, done, ok := h.s.AwaitPayload(HolderInput{LeaseID: "lease"}); ok {
		done()
		t.Fatal("a wait offered before the work view subscribed: another replica's seal would go unheard")
	}
	withView(t, h.s)

	h.enqueue("j1", "alice")
	h.enqueue("j2", "alice")
	got := h.claim(runner("runner_1"))
	if len(got) != 2 {
		t.Fatalf("claimed %d, want 2", len(got))
	}
	lease := map[string]string{}
	for _, c := range got {
		lease[stubID(c)] = c.Lease.ID
	}
	s1, _, done1, ok := h.s.AwaitPayload(HolderInput{LeaseID: lease["j1"]})
	if !ok {
		t.Fatal("no wait offered with the view live")
	}
	defer done1()
	s2, _, done2, _ := h.s.AwaitPayload(HolderInput{LeaseID: lease["j2"]})
	defer done2()

	if r := ho.seal("j2"); r.State != StateReady {
		t.Fatalf("seal j2: %+v", r)
	}
	select {
	case <-s2:
	case <-time.After(5 * time.Second):
		t.Fatal("another replica's seal of j2 did not wake its fetch")
	}
	select {
	case <-s1:
		t.Fatal("j1's fetch woke on j2's seal")
	case <-time.After(100 * time.Millisecond):
	}
	if r := ho.seal("j1"); r.State != StateReady {
		t.Fatalf("seal j1: %+v", r)
	}
	select {
	case <-s1:
	case <-time.After(5 * time.Second):
		t.Fatal("another replica's seal of j1 did not wake its fetch")
	}
	done1()
	done2()
	if n := h.s.Testing().PayloadWaits(); n != 0 {
		t.Fatalf("%d waits left", n)
	}
}

// A fetch waiting for a seal is woken when a shard's subscription ends
// (here: its server is killed), so it reads again and answers as any
// request to a store that went away does, instead of waiting out its
// time; until the subscription is back no new wait is offered, and once
// it is back waits are offered again.
func TestAwaitPayloadWakesWhenTheSubscriptionEnds(t *testing.T) {
	t.Parallel()
	srv := relaytest.StartServer(t)
	s := newStore(t, backend{"private", relaytest.Open(t, srv.URL())}, Options{})
	if !s.announce {
		t.Skip("the server has no sharded pub/sub")
	}
	withView(t, s)
	sealed, _, done, ok := s.AwaitPayload(HolderInput{LeaseID: "lease-1"})
	if !ok {
		t.Fatal("no wait offered with the view live")
	}
	defer done()
	s.payloads.Granted("lease-1", s.view.Now(), s.view.Now().Add(time.Minute))
	if _, err := srv.Stop(syscall.SIGKILL, 10*time.Second); err != nil {
		t.Logf("stop: %v", err)
	}
	select {
	case <-sealed:
	case <-time.After(5 * time.Second):
		t.Fatal("the wait outlived its server's subscription")
	}
	if s.PayloadUnsealed("lease-1") {
		t.Fatal("a grant's note outlived the subscription that would hear its seal")
	}
	if _, _, d, ok := s.AwaitPayload(HolderInput{LeaseID: "lease-2"}); ok {
		d()
		t.Fatal("a wait offered with the subscription down")
	}
	// The server back (and with it the namespace cleanup): the view
	// subscribes again and waits are offered again.
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	relaytest.WaitFor(t, 15*time.Second, "a wait offered again", func() bool {
		_, _, d, ok := s.AwaitPayload(HolderInput{LeaseID: "lease-3"})
		d()
		return ok
	})
}

// PayloadUnsealed: a grant this Store made while every seal would be heard
// is unsealed until a seal of it is heard, from this Store's own Seal or
// from another replica's announcement; another Store knows nothing of it,
// the minted ids a claim did not grant leave no note, and a grant made
// before the work view was live is not noted at all.
func TestPayloadUnsealedNotesGrantsMadeHere(t *testing.T) {
	t.Parallel()
	h, ho := twoReplicas(t)

	h.enqueue("j0", "alice")
	early := h.claim(runner("runner_0"))
	if len(early) != 1 || h.s.PayloadUnsealed(early[0].Lease.ID) || h.s.Testing().PayloadNotes() != 0 {
		t.Fatalf("a grant made before the view was live is noted (%d grants, %d notes)", len(early), h.s.Testing().PayloadNotes())
	}
	h.seal("j0") // two unsealed grants per pair at most: make room
	withView(t, h.s)

	h.enqueue("j1", "alice")
	got := h.claim(runner("runner_1")) // mints two ids (two unsealed per pair), grants one
	if len(got) != 1 {
		t.Fatalf("claimed %d, want 1", len(got))
	}
	l1 := got[0].Lease.ID
	if n := h.s.Testing().PayloadNotes(); n != 1 {
		t.Fatalf("%d notes after one grant: the id it did not grant is kept", n)
	}
	if !h.s.PayloadUnsealed(l1) {
		t.Fatal("a grant made here is not unsealed")
	}
	if ho.s.PayloadUnsealed(l1) {
		t.Fatal("a replica that did not make the grant says it is unsealed")
	}
	h.enqueue("j2", "alice")
	got = h.claim(runner("runner_2"))
	if len(got) != 1 {
		t.Fatalf("claimed %d, want 1", len(got))
	}
	l2 := got[0].Lease.ID
	if r := ho.seal("j2"); r.State != StateReady {
		t.Fatalf("seal j2 elsewhere: %+v", r)
	}
	relaytest.WaitFor(t, 5*time.Second, "another replica's seal ends the note", func() bool { return !h.s.PayloadUnsealed(l2) })
	if !h.s.PayloadUnsealed(l1) {
		t.Fatal("j2's seal ended j1's note")
	}
	if r := h.seal("j1"); r.State != StateReady {
		t.Fatalf("seal j1: %+v", r)
	}
	if h.s.PayloadUnsealed(l1) || h.s.Testing().PayloadNotes() != 0 {
		t.Fatalf("this Store's own seal left its note (%d notes)", h.s.Testing().PayloadNotes())
	}
}

// GrantAwaitsPayload says yes exactly where take.lua would answer
// not-ready without changing anything: a grant held by its runner, unsealed,
// inside its awaiting window and its deadline, not cancelled. Every other
// case is a no (a seal, another runner, an expired window, a cancel, a
// lease id without its site or of another job, input the store refuses),
// after which TakePayload answers for itself.
func TestGrantAwaitsPayload(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		n := 0
		grant := func() (string, HolderInput) {
			t.Helper()
			n++
			in := h.unsealedGrant(fmt.Sprint("await-", n))
			if _, ok := leaseSite(in.LeaseID); !ok {
				t.Fatalf("lease id %q carries no site", in.LeaseID)
			}
			return in.JobID, in
		}
		awaits := func(in HolderInput) bool { return h.s.GrantAwaitsPayload(h.ctx, in) }

		_, in := grant()
		if !awaits(in) {
			t.Fatal("an unsealed grant does not await its payload")
		}
		if r := h.take(in.JobID, in.RunnerID, in.LeaseID); r.Refused != RefusedNotReady {
			t.Fatalf("take of an awaiting grant: %+v, want not-ready", r)
		}
		if !awaits(in) {
			t.Fatal("a take refused not-ready changed the answer")
		}

		other := in
		other.RunnerID = "runner_2"
		minted, _, _ := strings.Cut(in.LeaseID, ".")
		for name, x := range map[string]HolderInput{
			"another runner":            other,
			"the lease id without site": {JobID: in.JobID, RunnerID: in.RunnerID, LeaseID: minted},
			"another site in the lease": {JobID: in.JobID, RunnerID: in.RunnerID, LeaseID: minted + "." + enc("site_other")},
			"another job":               {JobID: "await-none", RunnerID: in.RunnerID, LeaseID: in.LeaseID},
			"no job id":                 {RunnerID: in.RunnerID, LeaseID: in.LeaseID},
			"a lease naming no shard":   {JobID: in.JobID, RunnerID: in.RunnerID, LeaseID: "zz" + in.LeaseID[2:]},
		} {
			if awaits(x) {
				t.Errorf("%s: awaits its payload", name)
			}
		}

		id, in := grant()
		h.seal(id)
		if awaits(in) {
			t.Error("a sealed grant awaits its payload")
		}

		id, in = grant()
		if ok, err := h.s.Cancel(h.ctx, site, id); err != nil || !ok {
			t.Fatalf("cancel: %v %v", ok, err)
		}
		if awaits(in) {
			t.Error("a cancelled grant awaits its payload")
		}

		_, in = grant()
		h.s.Testing().AdvanceClock(AwaitingPayloadMs)
		defer h.s.Testing().SetClockOffset(0)
		if awaits(in) {
			t.Error("a grant past its awaiting window awaits its payload")
		}
		if r := h.take(in.JobID, in.RunnerID, in.LeaseID); r.Refused == RefusedNotReady || r.Refused == "" {
			t.Fatalf("take past the awaiting window: %+v, want the grant gone", r)
		}
	})
}

// A seal on the Store where the holder's fetch waits takes the payload for
// it in the same script: the job is running, the fetch is handed the
// envelope as stored, and a repeated fetch reads it again as from any
// running job. A fetch that names another runner or another lease gets
// nothing taken for it: the job is ready, and the fetch is woken to read
// the store. A seal with no fetch waiting is a plain seal.
func TestSealTakesThePayloadForAWaitingFetch(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		if h.s.announce {
			withView(t, h.s)
		}
		n := 0
		grant := func() HolderInput {
			n++
			return h.unsealedGrant(fmt.Sprint("seal-take-", n))
		}
		await := func(in HolderInput) (<-chan struct{}, func() []byte) {
			t.Helper()
			sealed, taken, done, ok := h.s.AwaitPayload(in)
			if !ok {
				t.Fatal("no wait offered")
			}
			t.Cleanup(done)
			return sealed, taken
		}

		in := grant()
		sealed, taken := await(in)
		r := h.seal(in.JobID)
		if r.State != StateReady || !r.TakenForFetch {
			t.Fatalf("seal with the holder's fetch waiting: %+v", r)
		}
		if !relaytest.Closed(sealed) || string(taken()) != string(envelope) {
			t.Fatalf("the fetch: woken %v, handed %q", relaytest.Closed(sealed), taken())
		}
		h.mustState(in.JobID, StateRunning)
		if got := h.take(in.JobID, in.RunnerID, in.LeaseID); got.Refused != "" || string(got.Envelope) != string(envelope) {
			t.Fatalf("a repeated fetch: %+v", got)
		}

		for _, c := range []struct {
			name  string
			other func(HolderInput) HolderInput
		}{
			{"another runner", func(in HolderInput) HolderInput { in.RunnerID = "runner_2"; return in }},
			{"another lease", func(in HolderInput) HolderInput { in.LeaseID = in.LeaseID[:len(in.LeaseID)-1] + "x"; return in }},
		} {
			in := grant()
			sealed, taken := await(c.other(in))
			if r := h.seal(in.JobID); r.State != StateReady || r.TakenForFetch {
				t.Fatalf("%s: seal %+v", c.name, r)
			}
			if !relaytest.Closed(sealed) || taken() != nil {
				t.Fatalf("%s: woken %v, handed %q", c.name, relaytest.Closed(sealed), taken())
			}
			h.mustState(in.JobID, StateReady)
		}

		in = grant()
		if r := h.seal(in.JobID); r.State != StateReady || r.TakenForFetch {
			t.Fatalf("seal with no fetch waiting: %+v", r)
		}
		h.mustState(in.JobID, StateReady)
	})
}

// unsealedGrant enqueues job id under an owner of its own (a site and
// owner pair holds only so many unsealed jobs) and claims it as runner_1:
// the grant, awaiting its payload.
func (h *storeFixture) unsealedGrant(id string) HolderInput {
	h.t.Helper()
	owner := "owner-" + id
	h.enqueue(id, owner)
	g := h.claim(deviceOwner(owner), routes([]string{site}, []string{owner}))
	if len(g) != 1 {
		h.t.Fatalf("claim %s: %q", id, ids(g))
	}
	return HolderInput{JobID: id, RunnerID: "runner_1", LeaseID: g[0].Lease.ID}
}
