package payloadwait

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/byollm/relay-go/test/relaytest"
)

func TestSealedWakesEveryFetchOfThatLeaseOnly(t *testing.T) {
	t.Parallel()
	w := New()
	a1, _, doneA1 := w.Wait("a", "", "")
	a2, _, doneA2 := w.Wait("a", "", "")
	b, _, doneB := w.Wait("b", "", "")
	if w.Len() != 2 {
		t.Fatalf("Len %d, want 2", w.Len())
	}
	w.Sealed("a")
	if !relaytest.Closed(a1) || !relaytest.Closed(a2) || relaytest.Closed(b) {
		t.Fatalf("after Sealed(a): a1 %v a2 %v b %v", relaytest.Closed(a1), relaytest.Closed(a2), relaytest.Closed(b))
	}
	w.Sealed("a")      // again: nothing waits, nothing happens
	w.Sealed("nobody") // a lease no fetch waits for
	doneA1()
	doneA2()
	doneA2() // twice: counted once
	if w.Len() != 1 {
		t.Fatalf("Len %d after a's fetches ended, want 1 (b)", w.Len())
	}
	doneB()
	if w.Len() != 0 || relaytest.Closed(b) {
		t.Fatalf("Len %d, b closed %v: a fetch that stops waiting leaves nothing behind", w.Len(), relaytest.Closed(b))
	}
	// A fetch that registers after the seal waits for the next one: the
	// caller reads the store after registering, so it sees that seal there.
	c, _, doneC := w.Wait("a", "", "")
	if relaytest.Closed(c) {
		t.Fatal("a new wait on a sealed lease is closed at once")
	}
	doneC()
}

// A seal that took the payload for a waiting fetch hands it to every fetch
// waiting on that lease when it releases the Holder, and the news of that
// seal heard meanwhile (its own announcement) waits for the release
// instead of waking them with nothing. A seal that did not take releases
// them to read the store, or leaves them waiting when it sealed nothing.
// Holder finds a waiting fetch's grant by job id while it waits, and not
// after.
func TestHolderHandsThePayloadToTheWaitingFetches(t *testing.T) {
	t.Parallel()
	w := New()
	s1, p1, done1 := w.Wait("lease-1", "job-1", "runner-1")
	s2, p2, done2 := w.Wait("lease-1", "job-1", "runner-1") // the daemon asked again
	s3, p3, done3 := w.Wait("lease-2", "job-2", "runner-2")
	_, _, done4 := w.Wait("lease-3", "", "") // no holder named
	defer func() {
		for _, d := range []func(){done1, done2, done3, done4} {
			d()
		}
		if w.Len() != 0 {
			t.Errorf("Len %d after every fetch ended", w.Len())
		}
	}()
	if _, _, _, ok := w.Holder("job-none"); ok {
		t.Fatal("a job no fetch waits for has a holder")
	}
	if _, _, _, ok := w.Holder(""); ok {
		t.Fatal("the empty job id has a holder")
	}
	lease, runner, release, ok := w.Holder("job-1")
	if !ok || lease != "lease-1" || runner != "runner-1" {
		t.Fatalf("Holder(job-1) = %q %q %v", lease, runner, ok)
	}
	w.Sealed("lease-1") // the seal's announcement, before its reply
	if relaytest.Closed(s1) || relaytest.Closed(s2) {
		t.Fatal("news of the seal woke the fetches before the seal said whether it took the payload")
	}
	release([]byte("envelope"), true)
	release(nil, true) // twice: counted once
	if !relaytest.Closed(s1) || !relaytest.Closed(s2) || relaytest.Closed(s3) {
		t.Fatalf("after the release: %v %v %v", relaytest.Closed(s1), relaytest.Closed(s2), relaytest.Closed(s3))
	}
	if string(p1()) != "envelope" || string(p2()) != "envelope" || p3() != nil {
		t.Fatalf("payloads %q %q %q", p1(), p2(), p3())
	}
	if _, _, _, ok := w.Holder("job-1"); ok {
		t.Fatal("a woken grant still has a holder")
	}

	_, _, release, _ = w.Holder("job-2")
	release(nil, false) // refused: nothing sealed, nothing heard
	if relaytest.Closed(s3) {
		t.Fatal("a seal that sealed nothing woke the fetch")
	}
	_, _, release, _ = w.Holder("job-2")
	release(nil, true) // sealed without taking: the fetch reads the store
	if !relaytest.Closed(s3) || p3() != nil {
		t.Fatalf("a seal that did not take: woken %v, payload %q", relaytest.Closed(s3), p3())
	}

	s5, _, done5 := w.Wait("lease-5", "job-5", "runner-5")
	_, _, release, _ = w.Holder("job-5")
	w.WakeAll() // a subscription ended: every fetch reads the store
	if !relaytest.Closed(s5) {
		t.Fatal("WakeAll left a fetch waiting behind a seal in flight")
	}
	release([]byte("late"), true) // nothing left to hand it to
	done5()
	_, _, done6 := w.Wait("lease-6", "job-6", "runner-6")
	done6()
	if _, _, _, ok := w.Holder("job-6"); ok {
		t.Fatal("a fetch that stopped waiting left its holder")
	}
}

func TestWaitersUnderConcurrency(t *testing.T) {
	t.Parallel()
	w := New()
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lease := string(rune('a' + i%8))
			for range 200 {
				ch, _, done := w.Wait(lease, "", "")
				w.Sealed(lease)
				<-ch // sealed by this goroutine's call, or an earlier one
				done()
			}
		}()
	}
	wg.Wait()
	if w.Len() != 0 {
		t.Fatalf("Len %d after every fetch ended", w.Len())
	}
}

func TestWakeAllWakesEveryFetch(t *testing.T) {
	t.Parallel()
	w := New()
	a, _, doneA := w.Wait("a", "", "")
	b, _, doneB := w.Wait("b", "", "")
	w.WakeAll()
	if !relaytest.Closed(a) || !relaytest.Closed(b) || w.Len() != 0 {
		t.Fatalf("after WakeAll: a %v b %v, Len %d", relaytest.Closed(a), relaytest.Closed(b), w.Len())
	}
	doneA()
	doneB()
	w.Sealed("a") // nothing waits: nothing to close twice
	c, _, doneC := w.Wait("a", "", "")
	defer doneC()
	if relaytest.Closed(c) || w.Len() != 1 {
		t.Fatalf("a wait after WakeAll: closed %v, Len %d", relaytest.Closed(c), w.Len())
	}
}

// A note says a grant made here is unsealed until its seal is heard (under
// the id as announced, with the site appended), its time ends, it is
// forgotten, or every note is dropped; notes are bounded, and a full
// registry makes room only from notes whose time has ended.
func TestGrantNotes(t *testing.T) {
	t.Parallel()
	w := New()
	now := time.Unix(1000, 0)
	if !w.Granted("u1", now, now.Add(10*time.Second)) || !w.Granted("u2", now, now.Add(10*time.Second)) {
		t.Fatal("a note refused with room")
	}
	if !w.Unsealed("u1", now) || !w.Unsealed("u1.c2l0ZQ", now) {
		t.Fatal("a noted grant is not unsealed, as minted or as granted")
	}
	if w.Unsealed("u1", now.Add(10*time.Second)) {
		t.Fatal("a note counts after its time")
	}
	if w.Unsealed("u3", now) || w.Unsealed("", now) || w.Unsealed(".", now) {
		t.Fatal("an id never noted is unsealed")
	}
	w.Sealed("u1.c2l0ZQ")
	if w.Unsealed("u1", now) {
		t.Fatal("a sealed grant is still unsealed")
	}
	w.Forget("u2")
	if w.Unsealed("u2", now) || w.Notes() != 0 {
		t.Fatalf("after Forget: unsealed %v, %d notes", w.Unsealed("u2", now), w.Notes())
	}
	w.Granted("u4", now, now.Add(time.Second))
	w.WakeAll()
	if w.Unsealed("u4", now) {
		t.Fatal("a note outlived WakeAll")
	}

	for i := range MaxNotes {
		if !w.Granted(fmt.Sprint("n", i), now, now.Add(time.Second)) {
			t.Fatalf("note %d refused below the bound", i)
		}
	}
	if w.Granted("over", now, now.Add(time.Second)) || w.Unsealed("over", now) {
		t.Fatal("a note taken past MaxNotes with every note current")
	}
	if w.Granted("over", now.Add(500*time.Millisecond), now.Add(2*time.Second)) {
		t.Fatal("a note taken while every note is still current")
	}
	later := now.Add(2 * time.Second)
	if !w.Granted("over", later, later.Add(time.Second)) || w.Notes() != 1 || !w.Unsealed("over", later) {
		t.Fatalf("a full registry of ended notes made no room: %d notes", w.Notes())
	}
}
