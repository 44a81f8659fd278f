// Package payloadwait lets a daemon's fetch of a payload its site has not
// sealed yet wait for the seal instead of answering not-ready and being
// asked again: each waiting fetch registers under its grant's lease id, and
// whoever learns of the seal (this replica's own seal, or another replica's
// announced on the shard's channel) wakes every fetch waiting on that lease.
// An entry lives only while a fetch waits, so the registry is bounded by
// the requests in flight.
package payloadwait

import "sync"

// Waiters are the fetches waiting for a payload, by lease id.
type Waiters struct {
	mu sync.Mutex
	m  map[string]*entry
}

type entry struct {
	sealed  chan struct{}
	waiting int
}

// New returns an empty registry.
func New() *Waiters { return &Waiters{m: map[string]*entry{}} }

// Wait registers a fetch waiting for the payload of lease: sealed is closed
// when Sealed(lease) is called after this. done must be called when the
// fetch stops waiting, sealed or not.
func (w *Waiters) Wait(lease string) (sealed <-chan struct{}, done func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.m[lease]
	if e == nil {
		e = &entry{sealed: make(chan struct{})}
		w.m[lease] = e
	}
	e.waiting++
	var once sync.Once
	return e.sealed, func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			e.waiting--
			if e.waiting == 0 && w.m[lease] == e {
				delete(w.m, lease)
			}
		})
	}
}

// Sealed wakes every fetch waiting for the payload of lease. A lease no
// fetch waits for costs a map lookup.
func (w *Waiters) Sealed(lease string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.m[lease]; e != nil {
		close(e.sealed)
		delete(w.m, lease)
	}
}

// WakeAll wakes every waiting fetch, sealed or not: the seals of some
// shard may go unheard from now on (its subscription ended), so each
// fetch reads the store again instead of waiting out its time.
func (w *Waiters) WakeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for lease, e := range w.m {
		close(e.sealed)
		delete(w.m, lease)
	}
}

// Len is how many leases have a fetch waiting.
func (w *Waiters) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.m)
}
