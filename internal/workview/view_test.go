package workview

import (
	"fmt"
	"testing"
	"time"
)

// A queue read sent before an announcement of that queue arrived is not
// recorded as empty, whichever of the two Valkey answered first; a read
// sent before this Store's own write is trusted only once the fence sent
// after the write came back.
func TestWorkViewOrdering(t *testing.T) {
	t.Parallel()
	v := New([]string{"p:"}, DefaultQueues, nil)
	v.SetLive(0, true)
	at := time.Now()
	q := []string{"p:q"}

	st := v.Stamp(0)
	v.Announced(0, "p:q")
	v.SawEmpty(0, st, "p:q", at)
	if empty, _ := v.QueuesEmpty(0, q, at); empty {
		t.Fatal("a read racing an announcement of its queue was recorded")
	}
	v.SawEmpty(0, v.Stamp(0), "p:q", at)
	if empty, _ := v.QueuesEmpty(0, q, at); !empty {
		t.Fatal("a read after the announcement was not recorded")
	}
	v.Announced(0, "p:other")
	if empty, _ := v.QueuesEmpty(0, q, at); !empty {
		t.Fatal("an announcement of another queue forgot this one")
	}

	v.Touched("p:")
	empty, fence := v.QueuesEmpty(0, q, at)
	if empty || fence == "" {
		t.Fatalf("after this Store's write: empty %v, fence %q", empty, fence)
	}
	if _, again := v.QueuesEmpty(0, q, at); again != "" {
		t.Fatal("a second fence while the first is in flight")
	}
	v.FenceBack(0, "~someone-else")
	if empty, _ := v.QueuesEmpty(0, q, at); empty {
		t.Fatal("another probe counted as this fence")
	}
	v.FenceBack(0, fence)
	if empty, _ := v.QueuesEmpty(0, q, at); !empty {
		t.Fatal("not trusted after the fence came back")
	}
	if empty, _ := v.QueuesEmpty(0, q, at.Add(emptyTTL+time.Second)); empty {
		t.Fatal("trusted past emptyTTL")
	}
}

// Past dueTTL one caller reads the due head again; the others use
// the last reading until that read lands, for at most another TTL, so a
// busy replica does not send every concurrent request to Valkey at once.
// A due instant the last reading shows passed is never hidden.
func TestWorkViewDueRefreshedByOneCaller(t *testing.T) {
	t.Parallel()
	v := New([]string{"p:"}, DefaultQueues, nil)
	v.SetLive(0, true)
	t0 := time.Now()
	v.SawDue(0, v.Stamp(0), t0, 1_000_000, 1_000_000+10*dueTTL.Milliseconds())
	if !v.NotDue(0, t0, 0) {
		t.Fatal("a fresh reading with nothing due not trusted")
	}
	late := t0.Add(dueTTL + time.Millisecond)
	if v.NotDue(0, late, 0) {
		t.Fatal("the first caller past the TTL was not sent to read")
	}
	if !v.NotDue(0, late, 0) {
		t.Fatal("a second caller read too while the first one's read is in flight")
	}
	if v.NotDue(0, late, 20*dueTTL.Milliseconds()) {
		t.Fatal("the last reading hid a due instant it shows passed")
	}
	if v.NotDue(0, late.Add(dueTTL+time.Millisecond), 0) {
		t.Fatal("a read that never landed kept the others waiting past another TTL")
	}
	v.Touched("p:")
	if v.NotDue(0, t0, 0) {
		t.Fatal("trusted after this Store's work write")
	}
}

// Past Options.WorkViewQueues a shard's view forgets an eighth of its empty
// queues, not all of them: with a fleet one and a half times the bound,
// most queues stay known empty, the newest reading always among them, and
// a queue never read is never taken for empty (the names are hashed).
func TestWorkViewBoundForgetsAShare(t *testing.T) {
	t.Parallel()
	const bound = 1024
	v := New([]string{"p:"}, bound, nil)
	v.SetLive(0, true)
	at := v.Now()
	const n = bound * 3 / 2
	for i := range n {
		v.SawEmpty(0, v.Stamp(0), fmt.Sprint("p:q", i), at)
		if empty, _ := v.QueuesEmpty(0, []string{fmt.Sprint("p:q", i)}, at); !empty {
			t.Fatalf("queue %d, just read empty, is not known empty", i)
		}
		if len(v.sh[0].empty) > bound {
			t.Fatalf("%d queues remembered, bound %d", len(v.sh[0].empty), bound)
		}
	}
	known := 0
	for i := range n {
		if empty, _ := v.QueuesEmpty(0, []string{fmt.Sprint("p:q", i)}, at); empty {
			known++
		}
	}
	if known < bound-bound/8-1 || known > bound {
		t.Fatalf("%d of %d queues known empty under a bound of %d; clearing everything would leave about %d", known, n, bound, n-bound)
	}
	for _, q := range []string{"p:never", "p:", "", "p:q" + fmt.Sprint(n), "p:q0 ", "p:Q1", "p:q１"} {
		if empty, _ := v.QueuesEmpty(0, []string{q}, at); empty {
			t.Fatalf("queue %q was never read yet counts as empty", q)
		}
	}
	if empty, _ := v.QueuesEmpty(0, nil, at); !empty {
		t.Fatal("no queues at all: nothing to read")
	}
}

// The numbers of announced queues are kept for a while, not for good: a
// replica that has seen a million queues announced once holds only those
// of the last seconds, and a read sent before what it still holds is not
// recorded, while a read it can still judge is judged as before.
func TestWorkViewForgetsOldAnnouncements(t *testing.T) {
	t.Parallel()
	v := New([]string{"p:"}, DefaultQueues, nil)
	v.SetLive(0, true)
	at := time.Now()
	before := v.Stamp(0)
	for n := range 100 {
		v.Announced(0, fmt.Sprintf("p:q%d", n))
	}
	afterAll := v.Stamp(0)
	if got := len(v.sh[0].recent); got != 100 {
		t.Fatalf("%d announced queues kept, want 100", got)
	}
	v.skew += recentAge
	v.Announced(0, "p:x") // the 100 become the older generation
	v.skew += recentAge
	v.Announced(0, "p:y") // and are dropped
	if kept := len(v.sh[0].recent) + len(v.sh[0].older); kept != 2 {
		t.Fatalf("%d announced queues kept two ages later, want 2 (x and y)", kept)
	}
	v.SawEmpty(0, before, "p:q1", at)
	if empty, _ := v.QueuesEmpty(0, []string{"p:q1"}, at); empty {
		t.Fatal("a read sent before announcements the view no longer holds was recorded")
	}
	v.SawEmpty(0, afterAll, "p:x", at)
	if empty, _ := v.QueuesEmpty(0, []string{"p:x"}, at); empty {
		t.Fatal("a read sent before its queue's announcement was recorded")
	}
	v.SawEmpty(0, afterAll, "p:q1", at)
	if empty, _ := v.QueuesEmpty(0, []string{"p:q1"}, at); !empty {
		t.Fatal("a read sent after its queue's announcement was not recorded")
	}
}

// A queue announced lately is said to be so, on a live view only, until
// it is seen empty after the announcement or the announcement ages out of
// the view's record; others never are.
func TestWorkViewRecentlyAnnounced(t *testing.T) {
	t.Parallel()
	v := New([]string{"p:"}, DefaultQueues, nil)
	v.Announced(0, "p:q")
	if v.RecentlyAnnounced(0, []string{"p:q"}) {
		t.Fatal("a view that is not live answered")
	}
	v.SetLive(0, true)
	v.Announced(0, "p:q")
	if !v.RecentlyAnnounced(0, []string{"p:other", "p:q"}) {
		t.Fatal("an announced queue was not recent")
	}
	if v.RecentlyAnnounced(0, []string{"p:other"}) || v.RecentlyAnnounced(0, nil) {
		t.Fatal("a queue never announced was recent")
	}
	v.SawEmpty(0, v.Stamp(0), "p:q", v.Now())
	if v.RecentlyAnnounced(0, []string{"p:q"}) {
		t.Fatal("a queue seen empty after its announcement was still recent")
	}
	v.Announced(0, "p:q")
	if !v.RecentlyAnnounced(0, []string{"p:q"}) {
		t.Fatal("a queue announced again after it was seen empty was not recent")
	}
	v.mu.Lock()
	v.skew = 2*recentAge + time.Second
	v.mu.Unlock()
	v.Announced(0, "p:x") // rotates: p:q is one generation old
	if !v.RecentlyAnnounced(0, []string{"p:q"}) {
		t.Fatal("an announcement one generation old was forgotten")
	}
	v.mu.Lock()
	v.skew = 4*recentAge + time.Second
	v.mu.Unlock()
	v.Announced(0, "p:y")
	if v.RecentlyAnnounced(0, []string{"p:q"}) {
		t.Fatal("an announcement two generations old was still recent")
	}
}
