package workview

import "time"

// Testing returns the view's test-only hooks. Production code must not call
// it (internal/store's TestTestingOnlyFromTests fails the build's tests if a
// non-test file outside test/ does).
func (v *View) Testing() Hooks { return Hooks{v} }

// Hooks reach into a View for tests: they bend its clock and read its
// counters, which no production decision may depend on.
type Hooks struct{ v *View }

// PassEmptyTTL moves the view's clock past the re-check of queues seen
// empty, as if an announcement had been lost that long ago.
func (h Hooks) PassEmptyTTL() {
	h.v.mu.Lock()
	defer h.v.mu.Unlock()
	h.v.skew += emptyTTL + time.Second
}

// Shard is shard i's counters: this Store's work scripts run there, those
// known fenced, and the announcements received.
func (h Hooks) Shard(i int) (own, fenced, ann uint64) {
	h.v.mu.Lock()
	defer h.v.mu.Unlock()
	return h.v.sh[i].own, h.v.sh[i].fenced, h.v.sh[i].ann
}

// SeenEmpty: does the view hold queue of shard i as seen empty, whether or
// not a fence is still due before it trusts that?
func (h Hooks) SeenEmpty(i int, queue string) bool {
	h.v.mu.Lock()
	defer h.v.mu.Unlock()
	_, ok := h.v.seenEmpty(&h.v.sh[i], queue, time.Now().Add(h.v.skew))
	return ok
}
