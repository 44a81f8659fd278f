// Package beatbatch coalesces calls arriving within a time window into one
// batch, handed to a send func at once: the relay batches daemon
// heartbeats' presence writes this way so that they share one pipelined
// round trip (internal/store decides what a batch sends: one script call
// per shard and form).
//
// A call may be idle: it may wait for the longer idle window. A batch goes
// out when it holds its limit of calls, or at the earliest instant any call in it
// may wait to, so whatever flushes it takes every waiting call along.
// Waiting for a call's answer, and giving up on it, is the caller's: the
// batch only decides when calls go out, and together with which.
package beatbatch

import (
	"sync"
	"time"
)

// Batch collects calls of type C for send.
type Batch[C any] struct {
	window, idleWindow time.Duration
	limit              int
	send               func([]C)

	mu      sync.Mutex
	pending []C
	timer   *time.Timer
	due     time.Time // when timer fires
}

// New is a batch that sends its calls window after the first (idleWindow,
// at least window, when every call is idle), or at once when it holds
// limit calls.
// send runs on a goroutine of its own, one batch a call.
func New[C any](window, idleWindow time.Duration, limit int, send func([]C)) *Batch[C] {
	return &Batch[C]{window: window, idleWindow: max(idleWindow, window), limit: limit, send: send}
}

// IdleWindow is how long an idle call may wait.
func (b *Batch[C]) IdleWindow() time.Duration { return b.idleWindow }

// Add queues c. It returns at once; c goes out with its batch.
func (b *Batch[C]) Add(c C, idle bool) {
	w := b.window
	if idle {
		w = b.idleWindow
	}
	at := time.Now().Add(w)
	b.mu.Lock()
	b.pending = append(b.pending, c)
	switch {
	case len(b.pending) >= b.limit:
		calls := b.takeLocked()
		b.mu.Unlock()
		go b.send(calls)
	case b.timer == nil || at.Before(b.due):
		// A timer that has fired already finds its flush waiting on mu;
		// that flush takes c too, and this timer then finds nothing.
		if b.timer != nil {
			b.timer.Stop()
		}
		b.timer, b.due = time.AfterFunc(w, b.flush), at
		b.mu.Unlock()
	default:
		b.mu.Unlock()
	}
}

// Flush sends what is waiting now, on a goroutine of its own, instead of
// at the end of its window: for when waiting can no longer pay (the store
// is unreachable, and the calls had better be refused at once).
func (b *Batch[C]) Flush() { go b.flush() }

// takeLocked empties the batch; b.mu is held.
func (b *Batch[C]) takeLocked() []C {
	calls := b.pending
	b.pending = nil
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	return calls
}

// flush sends what the window collected.
func (b *Batch[C]) flush() {
	b.mu.Lock()
	calls := b.takeLocked()
	b.mu.Unlock()
	if len(calls) > 0 {
		b.send(calls)
	}
}
