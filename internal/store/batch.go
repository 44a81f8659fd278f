package store

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valkey-io/valkey-go"
)

// beatBatchMax bounds one batch: past it the batch is sent at once rather
// than at the end of its window.
const beatBatchMax = 256

// beatBatchNoDeadline bounds a batch none of whose callers set a deadline.
const beatBatchNoDeadline = 10 * time.Second

// beatBatch coalesces the calls of one script (a daemon heartbeat's
// presence write) arriving within a window into one pipelined DoMulti.
//
// Why: on the server a round trip costs far more than the few commands a
// heartbeat runs (an epoll wake, a read and a write syscall each), and an
// idle fleet is made of heartbeats spread thinly over time, too sparse
// for the client's own pipelining to merge. Waiting up to the window lets
// the heartbeats of one replica share a write and a read per node. Each
// call stays its own script, atomic and answered on its own; only the
// reply is later, by at most the window. Nothing else is batched: a claim,
// a seal or a fetch goes out at once.
type beatBatch struct {
	s      *Store
	script Script
	window time.Duration

	mu      sync.Mutex
	pending []*batchedCall
	timer   *time.Timer
	sent    atomic.Int64 // batches sent (tests)
}

type batchedCall struct {
	ctx        context.Context
	keys, args []string // as sent: guard key and common ARGV included (scriptArgs)
	done       chan struct{}
	msg        valkey.ValkeyMessage
	err        error
}

func newBeatBatch(s *Store, script Script, window time.Duration) *beatBatch {
	return &beatBatch{s: s, script: script, window: window}
}

// run queues one call and waits for its reply, or for ctx to end (the
// call may then still run, as an unbatched call cut short by its deadline
// may have).
func (b *beatBatch) run(ctx context.Context, keys []string, args ...string) (valkey.ValkeyMessage, error) {
	keys, args, err := b.s.scriptArgs(b.script, keys, args)
	if err != nil {
		return valkey.ValkeyMessage{}, err
	}
	c := &batchedCall{ctx: ctx, keys: keys, args: args, done: make(chan struct{})}
	b.mu.Lock()
	b.pending = append(b.pending, c)
	switch {
	case len(b.pending) >= beatBatchMax:
		calls := b.takeLocked()
		b.mu.Unlock()
		go b.send(calls)
	case len(b.pending) == 1:
		b.timer = time.AfterFunc(b.window, b.flush)
		b.mu.Unlock()
	default:
		b.mu.Unlock()
	}
	select {
	case <-c.done:
		return c.msg, c.err
	case <-ctx.Done():
		return valkey.ValkeyMessage{}, ctx.Err()
	}
}

// takeLocked empties the batch; b.mu is held.
func (b *beatBatch) takeLocked() []*batchedCall {
	calls := b.pending
	b.pending = nil
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	return calls
}

// flush sends what the window collected.
func (b *beatBatch) flush() {
	b.mu.Lock()
	calls := b.takeLocked()
	b.mu.Unlock()
	if len(calls) > 0 {
		b.send(calls)
	}
}

// send runs the calls as one DoMulti of EVALSHAs (the client splits it by
// node and writes each node's part at once). A call whose caller has
// already given up is not sent. A NOSCRIPT reply (a restarted or new node)
// is retried alone with the script loader (EVALSHA, then EVAL).
func (b *beatBatch) send(calls []*batchedCall) {
	s := b.s
	live := calls[:0]
	for _, c := range calls {
		if c.ctx.Err() != nil {
			c.err = c.ctx.Err()
			close(c.done)
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	b.sent.Add(1)
	ctx, cancel := batchContext(live)
	defer cancel()
	cmds := make(valkey.Commands, len(live))
	ends := make([]func(error), len(live))
	sha := s.sha1[b.script.Name]
	for i, c := range live {
		if obs := s.opts.ObserveScript; obs != nil {
			_, ends[i] = obs(c.ctx, b.script.Name)
		}
		cmds[i] = s.c.B().Evalsha().Sha1(sha).Numkeys(int64(len(c.keys))).Key(c.keys...).Arg(c.args...).Build()
	}
	res := s.c.DoMulti(ctx, cmds...)
	for i, c := range live {
		c.msg, c.err = res[i].ToMessage()
		if c.err != nil && strings.HasPrefix(c.err.Error(), "NOSCRIPT") {
			c.msg, c.err = s.scripts[b.script.Name].Exec(ctx, s.c, c.keys, c.args).ToMessage()
		}
		if c.err != nil && valkey.IsValkeyNil(c.err) {
			c.err = nil
		}
		if ends[i] != nil {
			ends[i](classify(c.err))
		}
		close(c.done)
	}
}

// batchContext lives as long as the latest deadline among the calls, so
// the batch is not cut short for any caller still waiting.
func batchContext(calls []*batchedCall) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, c := range calls {
		d, ok := c.ctx.Deadline()
		if !ok {
			return context.WithTimeout(context.Background(), beatBatchNoDeadline)
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.Background(), latest)
}
