// Package payloadwait lets a daemon's fetch of a payload its site has not
// sealed yet wait for the seal instead of answering not-ready and being
// asked again: each waiting fetch registers under its grant's lease id, and
// whoever learns of the seal (this replica's own seal, or another replica's
// announced on the shard's channel) wakes every fetch waiting on that lease.
// An entry lives only while a fetch waits, so the registry is bounded by
// the requests in flight.
//
// It also keeps notes of the grants this replica made whose seal it has
// not heard (Granted, Unsealed): a fetch of such a grant would only read
// not-ready, so it can wait for the seal first and read the store once.
// Notes are bounded (MaxNotes) and each ends with its seal, its time, or
// WakeAll.
package payloadwait

import (
	"strings"
	"sync"
	"time"
)

// MaxNotes bounds the grant notes one replica keeps (about 100 B each):
// at the awaiting window of 10 s it covers 6,500 grants a second; past it,
// grants go unnoted and their fetches read first, as without notes.
const MaxNotes = 65536

// Waiters are the fetches waiting for a payload, by lease id, and the
// notes of unsealed grants made here.
type Waiters struct {
	mu    sync.Mutex
	m     map[string]*entry
	byJob map[string]string    // job id -> a lease a fetch of it waits on
	notes map[string]time.Time // Minted(lease id) -> when the note stops counting
	// pruneAt: while the notes are full, no note ends before this, so a
	// Granted before it refuses without scanning them again.
	pruneAt time.Time
}

type entry struct {
	sealed  chan struct{}
	waiting int
	// The grant's holder as the first fetch to wait named it (job id and
	// runner id), so a seal on this replica can take the payload for it
	// (Holder), and the payload handed over that way, set before sealed is
	// closed.
	job, runner string
	payload     []byte
	// sealing: seals on this replica that may take the payload for these
	// fetches are in flight, so the news of a seal (heard) waits for them
	// to say whether they took it; the seal's own announcement can arrive
	// before its reply.
	sealing int
	heard   bool
	closed  bool
}

// New returns an empty registry.
func New() *Waiters {
	return &Waiters{m: map[string]*entry{}, byJob: map[string]string{}, notes: map[string]time.Time{}}
}

// Minted is a lease id up to its first '.': the id as minted, before the
// claim script appends the job's site. Notes are kept under it, so a note
// taken before the grant matches the id the seal announces.
func Minted(lease string) string {
	k, _, _ := strings.Cut(lease, ".")
	return k
}

// Granted notes that lease (as minted) may be granted here, its payload
// not sealed, until until. Taken before the claim is sent, so a seal
// heard right after the grant finds it. It reports whether the note was
// taken (false: MaxNotes notes are current).
func (w *Waiters) Granted(lease string, now, until time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.notes) >= MaxNotes {
		if now.Before(w.pruneAt) {
			return false
		}
		var first time.Time
		for k, t := range w.notes {
			if !t.After(now) {
				delete(w.notes, k)
			} else if first.IsZero() || t.Before(first) {
				first = t
			}
		}
		if len(w.notes) >= MaxNotes {
			w.pruneAt = first
			return false
		}
	}
	w.notes[Minted(lease)] = until
	return true
}

// Forget drops the note of lease: it was not granted after all.
func (w *Waiters) Forget(lease string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.notes, Minted(lease))
}

// Unsealed reports whether lease has a current note: granted here, and no
// seal of it heard since. Call it after Wait: a seal heard after this
// answers true closes the wait's channel.
func (w *Waiters) Unsealed(lease string, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	until, ok := w.notes[Minted(lease)]
	return ok && until.After(now)
}

// Wait registers a fetch of job by runner waiting for the payload of
// lease: sealed is closed when Sealed(lease) is called after this, or a
// seal that took the payload for it releases its Holder, and payload then
// answers what was handed over (nil: the fetch reads the store). done must be called when the fetch
// stops waiting, sealed or not.
func (w *Waiters) Wait(lease, job, runner string) (sealed <-chan struct{}, payload func() []byte, done func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.m[lease]
	if e == nil {
		e = &entry{sealed: make(chan struct{}), job: job, runner: runner}
		w.m[lease] = e
		if job != "" {
			w.byJob[job] = lease
		}
	}
	e.waiting++
	payload = func() []byte {
		w.mu.Lock()
		defer w.mu.Unlock()
		return e.payload
	}
	var once sync.Once
	done = func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			e.waiting--
			if e.waiting == 0 && w.m[lease] == e {
				w.drop(lease, e)
			}
		})
	}
	return e.sealed, payload, done
}

// drop removes lease's entry e (w.mu held).
func (w *Waiters) drop(lease string, e *entry) {
	if w.m[lease] == e {
		delete(w.m, lease)
	}
	if e.job != "" && w.byJob[e.job] == lease {
		delete(w.byJob, e.job)
	}
}

// wake closes e's channel, handing payload to its fetches (w.mu held).
func (w *Waiters) wake(lease string, e *entry, payload []byte) {
	if e.closed {
		return
	}
	e.payload, e.closed = payload, true
	close(e.sealed)
	w.drop(lease, e)
}

// Holder is a grant of job that a fetch waits on here: its lease and its
// runner, as the fetch named them (the seal checks them against the
// record before it takes anything for it). Until release is called, news
// of that lease's seal (Sealed) is held back; release says what the seal
// did: payload when it took the payload for the fetches, sealed when it
// sealed the grant without taking. Call release exactly once, whatever the
// seal answered; with no fetch waiting (ok false) it does nothing.
func (w *Waiters) Holder(job string) (lease, runner string, release func(payload []byte, sealed bool), ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	lease, ok = w.byJob[job]
	if !ok {
		return "", "", func([]byte, bool) {}, false
	}
	e := w.m[lease]
	e.sealing++
	var once sync.Once
	release = func(payload []byte, sealed bool) {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			e.sealing--
			e.heard = e.heard || sealed
			switch {
			case payload != nil:
				w.wake(lease, e, payload)
			case e.heard && e.sealing == 0:
				w.wake(lease, e, nil)
			}
		})
	}
	return lease, e.runner, release, true
}

// Sealed wakes every fetch waiting for the payload of lease (once no seal
// of it on this replica is in flight, see Holder) and ends its note. A
// lease no fetch waits for costs two map lookups.
func (w *Waiters) Sealed(lease string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.notes, Minted(lease))
	if e := w.m[lease]; e != nil {
		if e.sealing > 0 {
			e.heard = true
			return
		}
		w.wake(lease, e, nil)
	}
}

// WakeAll wakes every waiting fetch, sealed or not, and drops every
// note: the seals of some shard may go unheard from now on (its
// subscription ended), so each fetch reads the store again instead of
// waiting out its time.
func (w *Waiters) WakeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	clear(w.notes)
	for lease, e := range w.m {
		w.wake(lease, e, nil)
	}
}

// Notes is how many grant notes are kept (current or not yet pruned).
func (w *Waiters) Notes() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.notes)
}

// Len is how many leases have a fetch waiting.
func (w *Waiters) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.m)
}
