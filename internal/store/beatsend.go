package store

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/beatbatch"
	"github.com/byollm/relay-go/internal/valkeyconn"
)

// beatBatchMax bounds one batch: past it the batch is sent at once rather
// than at the end of its window.
const beatBatchMax = 256

// A batch goes out as one presence_seen_batch call per shard, each of at
// most beatGroupMax records and, past its first record, beatGroupBytes of
// arguments: a heartbeat is about a kilobyte, but a device may send up to
// Options.MaxPresenceBytes of lists, and one script call should stay
// short for the server (it runs nothing else meanwhile).
const (
	beatGroupMax   = 64 // lua/presence_seen_batch.lua's own bound
	beatGroupBytes = 1 << 20
	// beatGroupGrants bounds the renewals one presence_beat call carries
	// (each heartbeat's at most GrantChunk): four devices' worth of full
	// slots, about 2 ms of the server's time at GrantChunk's measure.
	beatGroupGrants = 4 * GrantChunk
)

// beatBatchNoDeadline bounds a batch none of whose callers set a deadline.
const beatBatchNoDeadline = 10 * time.Second

// beatBatch sends daemon heartbeats' presence writes that arrive within a
// window (internal/beatbatch decides which go together, and when) as one
// pipelined DoMulti, in which the heartbeats of one shard share one script
// call (lua/presence_seen_batch.lua).
//
// Why: on the server a round trip costs far more than the few commands a
// heartbeat runs (an epoll wake, a read and a write syscall each), and a
// script call's own setup costs about as much as the commands inside it.
// An idle fleet is made of heartbeats spread thinly over time, too sparse
// for the client's own pipelining to merge. Waiting up to the window lets
// the heartbeats of one replica share a write and a read per node and a
// script call per shard. Each heartbeat is still decided on its own and
// answered on its own; only the reply is later, by at most the window.
// Nothing else is batched: a claim, a seal or a fetch goes out at once.
//
// An idle heartbeat (HeartbeatInput.Idle) may wait for the longer
// idleWindow; the batch goes out at the earliest instant any call in it
// may wait to, so whatever flushes it takes every waiting call along.
type beatBatch struct {
	s     *Store
	queue *beatbatch.Batch[*batchedCall]
	sent  atomic.Int64 // batches sent (tests)
	calls atomic.Int64 // script calls sent (tests)
}

// batchedCall is one heartbeat: presence_seen's keys and op-specific args
// (before scriptArgs adds the guard and the common ARGV), or with beat one
// record's keys and values of presence_beat, the short form, and the
// grants it renews (renew, nil for none).
type batchedCall struct {
	ctx        context.Context
	beat       bool
	keys, args []string
	renew      *renewal
	done       chan struct{}
	msg        valkey.ValkeyMessage
	now        string // beat: the call's lastSeenAt
	err        error
}

func newBeatBatch(s *Store, window, idleWindow time.Duration) *beatBatch {
	b := &beatBatch{s: s}
	b.queue = beatbatch.New(window, idleWindow, beatBatchMax, b.send)
	return b
}

// run queues one call and waits for its reply, or for ctx to end (the
// call may then still run, as an unbatched call cut short by its deadline
// may have). An idle call may wait for the idle window.
func (b *beatBatch) run(ctx context.Context, idle bool, keys []string, args ...string) (valkey.ValkeyMessage, error) {
	if len(keys) < 4 || len(keys) > 5 || len(args) != 9 {
		return valkey.ValkeyMessage{}, fmt.Errorf("heartbeat batch: %d keys and %d args are not presence_seen's", len(keys), len(args))
	}
	c := &batchedCall{ctx: ctx, keys: keys, args: args, done: make(chan struct{})}
	err := b.wait(c, idle)
	return c.msg, err
}

// wait queues c and waits for its reply, or for c.ctx to end.
func (b *beatBatch) wait(c *batchedCall, idle bool) error {
	b.queue.Add(c, idle)
	select {
	case <-c.done:
		return c.err
	case <-c.ctx.Done():
		return c.ctx.Err()
	}
}

// send runs the calls as one DoMulti (the client splits it by node and
// writes each node's part at once): one presence_seen_batch call per shard
// group (groups), or presence_seen for a call alone on its shard. A call
// whose caller has already given up is not sent. A node that lacks the
// script (NOSCRIPT) or the functions library (a restarted or new node) is
// given it and the call is made again on its own (Store.resend).
func (b *beatBatch) send(calls []*batchedCall) {
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
	s := b.s
	// The batch is one call: the runner's bound applies to it from here,
	// not to the time its heartbeats waited for it.
	ctx, release := s.runner.Bound(ctx)
	defer release()
	groups := groupByShard(live, !valkeyconn.IsCluster(s.c))
	b.calls.Add(int64(len(groups)))
	// Each heartbeat is observed as the presence_seen it stands for.
	ends := make([]func(error), len(live))
	for i, c := range live {
		name := scPresenceSeen.Name
		if c.beat {
			name = scPresenceBeat.Name
		}
		_, ends[i] = s.runner.Observe(c.ctx, name)
	}
	type groupCall struct {
		script     Script
		keys, args []string // as sent: guard and common ARGV included
	}
	sends := make([]groupCall, len(groups))
	cmds := make(valkey.Commands, len(groups))
	for i, g := range groups {
		var gc groupCall
		switch {
		case g[0].beat:
			gc = groupCall{scPresenceBeat, beatKeys(g), beatArgs(s, g)}
		case len(g) > 1:
			gc = groupCall{scPresenceSeenBatch, batchKeys(g), batchArgs(g)}
		default:
			gc = groupCall{scPresenceSeen, g[0].keys, g[0].args}
		}
		// scriptArgs fails only without keys, and run refuses those.
		gc.keys, gc.args, _ = s.scriptArgs(gc.script, gc.keys, gc.args)
		sends[i] = gc
		cmds[i] = s.runner.ScriptCommand(s.scripts[gc.script.Name], gc.keys, gc.args)
	}
	gen := s.runner.Generation()
	res := s.c.DoMulti(ctx, cmds...)
	for i, g := range groups {
		msg, err := res[i].ToMessage()
		if err != nil {
			gc := sends[i]
			msg, err = s.runner.Resend(ctx, gen, s.scripts[gc.script.Name], gc.keys, gc.args, msg, err)
		}
		if err != nil && valkey.IsValkeyNil(err) {
			err = nil
		}
		switch {
		case g[0].beat:
			s.spreadBeats(g, msg, err)
		case len(g) == 1:
			g[0].msg, g[0].err = msg, err
		default:
			spread(g, scPresenceSeenBatch, msg, err, 0)
		}
	}
	for i, c := range live {
		ends[i](c.err)
		close(c.done)
	}
}

// spread hands each call of g its entry of one batched reply: after lead
// entries (presence_beat's lastSeenAt, which every call of it shares, and
// its churn reports), one entry per call, in order; a failed call or a
// reply of the wrong length fails every call of the group. It answers
// the lead entries (nil when the group failed).
func spread(g []*batchedCall, sc Script, msg valkey.ValkeyMessage, err error, lead int) []valkey.ValkeyMessage {
	var each []valkey.ValkeyMessage
	var now string
	if err == nil {
		var perr error
		if each, perr = msg.ToArray(); perr != nil || len(each) != len(g)+lead {
			err = fmt.Errorf("%w: %s answered %d entries for %d records (%v)", ErrUnexpectedReply, sc.Name, len(each), len(g), perr)
		}
	}
	if err == nil && lead > 0 {
		var perr error
		if now, perr = each[0].ToString(); perr != nil {
			err = fmt.Errorf("%w: %s: lastSeenAt: %v", ErrUnexpectedReply, sc.Name, perr)
		}
	}
	for j, c := range g {
		if c.err = err; err == nil {
			c.now, c.msg = now, each[j+lead]
		}
	}
	if err != nil {
		return nil
	}
	return each[:lead]
}

// spreadBeats is spread for a presence_beat reply, whose second lead
// entry is the churn reports of its renewals' settling: handed to
// OnChurn once the reply is read, as every settling call's are.
func (s *Store) spreadBeats(g []*batchedCall, msg valkey.ValkeyMessage, err error) {
	lead := spread(g, scPresenceBeat, msg, err, 2)
	if lead == nil {
		return
	}
	reports, perr := parseReports(lead[1])
	if perr != nil {
		for _, c := range g {
			c.err = fmt.Errorf("%w: %s: %v", ErrUnexpectedReply, scPresenceBeat.Name, perr)
		}
		return
	}
	s.fireChurn(reports)
}

// groupByShard splits calls into the groups that share one script call:
// the calls of one shard (one slot: their keys share its prefix) and one
// form (full or short), in arrival order, at most beatGroupMax and
// beatGroupBytes each. With oneNode (a server that is not a cluster, so
// has no slots to keep a call in) short-form calls of every shard share a
// group: presence_beat reads and writes only the keys it is given, never a
// key built from a shard's prefix, so nothing in it depends on the shard,
// and where a replica's window holds a few heartbeats per shard this is
// one call instead of up to one per shard (test/bench/results/2026-12-02-idle-ticks-one-server.md, "Idle ticks on one
// server"). A cluster keeps one call per shard, as every script.
func groupByShard(calls []*batchedCall, oneNode bool) [][]*batchedCall {
	type openGroup struct{ i, bytes, grants int }
	type groupKey struct {
		prefix string
		beat   bool
	}
	var groups [][]*batchedCall
	open := map[groupKey]*openGroup{} // shard and form -> its group still taking calls
	for _, c := range calls {
		p := groupKey{prefixOf(c.keys[0]), c.beat}
		if oneNode && c.beat {
			p.prefix = ""
		}
		n, grants := 0, 0
		for _, a := range c.args {
			n += len(a)
		}
		if c.renew != nil {
			grants = len(c.renew.at)
			for _, a := range c.renew.grants {
				n += len(a)
			}
		}
		g := open[p]
		if g == nil || len(groups[g.i]) >= beatGroupMax || g.bytes+n > beatGroupBytes || g.grants+grants > beatGroupGrants {
			groups = append(groups, nil)
			g = &openGroup{i: len(groups) - 1}
			open[p] = g
		}
		groups[g.i] = append(groups[g.i], c)
		g.bytes += n
		g.grants += grants
	}
	return groups
}

// batchKeys and batchArgs are presence_seen_batch's KEYS and op-specific
// ARGV for the calls of one shard (the layout its header gives): the
// shard's listing keys once, then each record's own.
func batchKeys(g []*batchedCall) []string {
	keys := make([]string, 0, 2+3*len(g))
	keys = append(keys, g[0].keys[1], g[0].keys[2]) // pidx, pseq: the shard's
	for _, c := range g {
		rsh := c.keys[0] // read only when asked; any key of the shard holds the place
		if len(c.keys) == 5 {
			rsh = c.keys[4]
		}
		keys = append(keys, c.keys[0], c.keys[3], rsh)
	}
	return keys
}

func batchArgs(g []*batchedCall) []string {
	args := make([]string, 0, 1+10*len(g))
	args = append(args, strconv.Itoa(len(g)))
	for _, c := range g {
		withShards := ""
		if len(c.keys) == 5 {
			withShards = "1"
		}
		args = append(args, c.args...)
		args = append(args, withShards)
	}
	return args
}

// beatKeys and beatArgs are presence_beat's KEYS and op-specific ARGV
// for the short-form calls of one group (the layout its header gives):
// each record's three keys, then the lease indexes its renewals name,
// each once.
func beatKeys(g []*batchedCall) []string {
	keys := make([]string, 0, 3*len(g))
	for _, c := range g {
		keys = append(keys, c.keys...)
	}
	seen := map[string]bool{}
	for _, c := range g {
		if c.renew == nil {
			continue
		}
		for _, k := range c.renew.keys {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	return keys
}

func beatArgs(s *Store, g []*batchedCall) []string {
	args := append(make([]string, 0, 3+3*len(g)), s.beatCallArgs()...)
	args = append(args, strconv.Itoa(len(g)))
	place := map[string]string{} // lease index -> its place among the lease keys, as beatKeys lists them
	for _, c := range g {
		args = append(args, c.args...)
		if c.renew == nil || len(c.renew.at) == 0 {
			args = append(args, "0")
			continue
		}
		r := c.renew
		args = append(args, strconv.Itoa(len(r.at)), r.runner, strconv.FormatInt(r.leaseMs, 10))
		for i, k := range r.keys {
			at, ok := place[k]
			if !ok {
				at = strconv.Itoa(len(place) + 1)
				place[k] = at
			}
			args = append(args, at, r.grants[2*i], r.grants[2*i+1])
		}
	}
	return args
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
