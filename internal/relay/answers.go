package relay

import (
	"context"
	"sync"

	"github.com/byollm/relay-go/internal/protocol"
)

// MaxResultsInFlightPerSite bounds the results answers one site may have
// being built or written on one replica at once. With the answer cap
// (MaxResultsAnswerBytes) it bounds what one site key can make a replica
// hold, 4 × 4 MiB, however many connections it opens and however slowly it
// reads them; the cloud lane reads results one poll at a time, so a
// well-behaved site never meets it.
const MaxResultsInFlightPerSite = 4

// resultsBusy is the retryable answer past that bound.
var resultsBusy = fail(503, protocol.CodeServerError, "this site has as many results reads in flight on this relay as it may — try again shortly")

// siteAnswers counts each site's results answers in flight on this replica.
type siteAnswers struct {
	mu sync.Mutex
	n  map[string]int
}

// take claims one of siteID's slots; false when all are held.
func (a *siteAnswers) take(siteID string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n[siteID] >= MaxResultsInFlightPerSite {
		return false
	}
	if a.n == nil {
		a.n = map[string]int{}
	}
	a.n[siteID]++
	return true
}

// give returns one slot; a site holding none leaves the map, so it holds
// only the sites with answers in flight.
func (a *siteAnswers) give(siteID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n[siteID] <= 1 {
		delete(a.n, siteID)
		return
	}
	a.n[siteID]--
}

// afterWriteKey holds, in a request's context, what serve runs once the
// answer has been written (or the write failed): an answer's memory is held
// until then, not only until its handler returns.
type afterWriteKey struct{}

type afterWrite struct{ fns []func() }

// withAfterWrite gives ctx a place for such functions, and the function
// that runs them.
func withAfterWrite(ctx context.Context) (context.Context, func()) {
	aw := &afterWrite{}
	return context.WithValue(ctx, afterWriteKey{}, aw), func() {
		for _, f := range aw.fns {
			f()
		}
	}
}

// onWritten runs f after the answer is written; outside serve (a request
// that has no such place) it reports false and the caller runs f itself.
func onWritten(ctx context.Context, f func()) bool {
	aw, ok := ctx.Value(afterWriteKey{}).(*afterWrite)
	if !ok {
		return false
	}
	aw.fns = append(aw.fns, f)
	return true
}

// answerBuffers holds byte slices that results answers were built in, for
// the next answer to reuse. Results stay until their deadline and are
// re-sent on every poll, so a busy site's answer is rebuilt several times
// a second at up to MaxResultsAnswerBytes each; fresh slices made those
// answers most of a replica's allocation, each zeroed when made and each
// pacing the collector.
var answerBuffers sync.Pool // *[]byte

// maxRecycledAnswer is the largest buffer kept for reuse: an answer holding
// one oversized result (a result envelope may be larger than the cap) is
// left to the collector rather than kept.
const maxRecycledAnswer = 2 * MaxResultsAnswerBytes

// answerBuffer returns an empty slice with room for size bytes, reused
// from an earlier answer when one large enough is free.
func answerBuffer(size int) []byte {
	if p, ok := answerBuffers.Get().(*[]byte); ok {
		if cap(*p) >= size {
			return (*p)[:0]
		}
		answerBuffers.Put(p) // a later, smaller answer may use it
	}
	// Headroom, so an answer that grows by a few results from one poll to
	// the next still fits the buffer it leaves behind.
	return make([]byte, 0, size+size/4)
}

// recycleAfterWrite gives b back for reuse once the answer it holds has
// been written; outside serve (no place to wait for the write) it is left
// to the collector.
func recycleAfterWrite(ctx context.Context, b []byte) {
	if cap(b) > maxRecycledAnswer {
		return
	}
	onWritten(ctx, func() { answerBuffers.Put(&b) })
}
