// Package workview is one replica's view of where work may be in the
// store: per shard, which queues were last seen empty and when the shard's
// earliest due job falls. It only decides whether the store asks Valkey
// (an idle claim the view rules out reads nothing): a stale view delays a
// grant, never makes one.
//
// Every store script that puts a job in a ready or sticky queue (enqueue,
// and requeue in settle, release and the rest) announces the queue on its
// shard's channel "<shard prefix>work" with SPUBLISH (lib/store.lua
// announce(); same slot as the shard's keys). Run holds one sharded
// subscription per shard through the PubSub the store gives it, and
// forgets that a queue was empty when it is named, and only that queue:
// job traffic elsewhere on the shard leaves its other empty queues known.
// A queue read that was in flight when its announcement arrived is not
// recorded. This replica's own writes are visible to its next claim at
// once: after a work script of this replica on a shard, empty queues read
// before it are not trusted until a fence (a probe this replica publishes
// on the shard's channel after the write, delivered in order behind the
// write's own announcements) comes back; the first claim that finds the
// shard unfenced reads its queues and sends the fence. A queue seen empty
// is asked again after 10 minutes anyway (a lost announcement costs at
// most that much latency); due heads are re-read every second and after
// this replica's work writes on the shard. It keeps at most
// Options.WorkViewQueues empty queues per shard (default 65,536, each as a
// 64-bit hash of its name, about 80 B), forgetting an eighth at random
// when full, so a fleet with more queues than that on a shard reads some
// queue heads, in proportion.
package workview

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"hash/maphash"
	"strings"
	"sync"
	"time"
)

// PubSub is what the view needs from the server: publish on a shard's
// channel, and hold a sharded subscription to it.
type PubSub interface {
	// Publish sends msg on channel (SPUBLISH).
	Publish(ctx context.Context, channel, msg string) error
	// Receive subscribes to channel (SSUBSCRIBE) and calls fn with each
	// message until ctx ends or the subscription fails.
	Receive(ctx context.Context, channel string, fn func(msg string)) error
}

// View is one replica's view of where work may be: per shard, which
// queues were last seen empty and when the shard's earliest due job falls.
// It only decides whether to ask Valkey; every decision is still made by
// the shard's scripts, so a stale view costs latency, never a job:
//
//   - a queue seen empty stays "empty" until a script announces an entry in
//     it (SPUBLISH on its shard's channel, announce() in lib/store.lua), or
//     for at most emptyTTL (the periodic re-check: what a lost
//     announcement costs). Only the announced queue is forgotten, so job
//     traffic on a shard leaves its other empty queues known.
//   - a read that was in flight when an announcement for its queue arrived
//     is not recorded (the read and the announcement travel on different
//     connections, in either order): announcements are numbered per shard,
//     a read carries the number current when it was sent, and the last
//     number of each recently announced queue is kept for between
//     recentAge and twice that (and at most recentMax a shard): a read
//     sent before what is still kept is simply not recorded. So the
//     memory it takes follows the traffic of the last seconds, not of
//     every queue ever announced.
//   - this Store's own writes must be visible to its next claim at once
//     (read-your-writes through one replica, as the reference): after a
//     work script of this Store on a shard, an empty entry read before it
//     is not trusted until a fence, a probe this Store publishes on the
//     shard's channel after the write, comes back through the subscription.
//     The channel delivers in order, so by then the write's own
//     announcements have been applied. The first claim that finds a shard
//     unfenced reads its queues as before and sends the fence.
//   - a shard's due head is trusted for dueTTL, or until this Store
//     runs a work script there. Another replica's write puts nothing due
//     sooner than the awaiting window or a lease, so a short TTL suffices.
//     Past the TTL one caller reads it again while the others keep using
//     the last reading until that read lands (at most another TTL).
//
// A shard's view is live only while this Store's subscription to the
// shard's channel is known to deliver (RunWorkView: a probe it published
// came back); otherwise every claim and sweep reads Valkey as before.
type View struct {
	mu     sync.Mutex
	skew   time.Duration // added to the local clock (tests: the TTLs pass at once)
	live   []bool
	sh     []shardView
	shards map[string]int // shard prefix -> index
	// maxQueues bounds the empty queues remembered per shard
	// (Options.WorkViewQueues); past it an eighth of them, chosen at
	// random, is forgotten, so a fleet with more queues than that loses a
	// share of its empty claims to reads instead of all of them.
	maxQueues int
	// seed keys the remembered queues: each is kept as a 64-bit hash of
	// its name, about 80 B an entry with the map's slack, where the name
	// alone was 100. A collision (two of a million queues: about 3 in
	// 10^8, and seeded per process, so it cannot be aimed at) makes a
	// queue look empty until its next announcement or the re-check:
	// latency, never a job.
	seed   maphash.Seed
	epoch  time.Time // emptySeen.at counts from here (monotonic)
	ps     PubSub
	prefix []string // shard i's key prefix; its channel is prefix+"work"
	// down is told each time a shard's subscription ends (OnDown).
	down func()
}

// OnDown sets fn, called each time a shard's subscription ends, after the
// view stopped counting the shard live: whoever waits for a message on the
// shard's channel may now never hear it. Set it before Run.
func (v *View) OnDown(fn func()) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.down = fn
}

// shardView is one shard's part of the view.
type shardView struct {
	ver     uint64 // bumped when the view goes live or off: everything read before is dropped
	dueVer  uint64 // bumped by this Store's work writes on the shard
	own     uint64 // this Store's work scripts run on the shard
	fenced  uint64 // own writes whose announcements are known applied
	fence   string // the fence in flight ("" when none)
	fenceT  uint64 // own when it was sent
	fenceAt time.Time
	ann     uint64 // announcements received
	// recent and older: queue -> number of its last announcement, in two
	// generations of recentAge each; when recent is older than that,
	// older is dropped and recent takes its place.
	recent, older map[string]uint64
	recentFrom    time.Time            // when recent was started
	olderTo       uint64               // the last announcement older holds
	floor         uint64               // reads sent before this number are not recorded
	empty         map[uint64]emptySeen // queueKey -> when it was seen empty
	due           dueSeen
}

type emptySeen struct {
	own uint64        // this Store's writes on the shard when the read was sent
	at  time.Duration // when the read was sent, from View.epoch
	ver uint32        // shardView.ver then (low bits; it changes only when the view goes live or off)
}

type dueSeen struct {
	ver uint64
	at  time.Time // local clock at the read
	// refresh: when the first caller past dueTTL set out to read
	// the head again; until that read lands (or for another
	// dueTTL), other callers use this reading rather than all
	// reading at once (a relay answers many requests in the meantime).
	refresh time.Time
	raw     int64 // store clock at the read, without the test offset
	head    int64 // the due head's score; maxScore when nothing is indexed
	ok      bool
}

// Stamp is what a read of a shard carries from the instant it was sent.
type Stamp struct {
	ver, dueVer, own, ann uint64
}

const (
	// emptyTTL is the periodic re-check of a queue seen empty: it
	// bounds what a lost announcement costs (an announcement is lost
	// unnoticed only if it is never delivered while the subscription
	// stays up; a dropped subscription turns the shard's view off). Each
	// replica keeps its own view, and behind a balancer that rotates a
	// daemon's requests over R replicas each one sees that daemon every
	// R ticks (about 10 s each): at one minute, with three replicas, every
	// second claim re-read its queues; at ten, one in twenty.
	emptyTTL = 10 * time.Minute
	dueTTL   = time.Second
	// DefaultQueues is Options.WorkViewQueues' default: the empty
	// queues remembered per shard (each device adds its own queues: about
	// three per consenting owner and site). 65,536 a shard is at most
	// about 84 MB over 16 shards, reached only by a fleet that large.
	DefaultQueues = 65536
	// recentAge is how long an announcement's number is kept at least
	// (twice that at most): far longer than a queue read stays in flight
	// (the store's per-call deadline, 500 ms by default). recentMax bounds
	// the numbers kept per shard whatever the traffic.
	recentAge = 10 * time.Second
	recentMax = 4096
	// fenceWait: a fence not back by then is sent again.
	fenceWait = time.Second
)

// New is the view of the shards whose key prefixes are shards, remembering
// at most maxQueues empty queues a shard (at least 8). ps may be nil when
// Run is never called (a server without sharded pub/sub).
func New(shards []string, maxQueues int, ps PubSub) *View {
	v := &View{live: make([]bool, len(shards)), sh: make([]shardView, len(shards)),
		shards: make(map[string]int, len(shards)), maxQueues: max(maxQueues, 8),
		seed: maphash.MakeSeed(), epoch: time.Now(), ps: ps, prefix: shards}
	for i, p := range shards {
		v.shards[p] = i
		v.sh[i].empty = map[uint64]emptySeen{}
		v.sh[i].recent = map[string]uint64{}
		v.sh[i].recentFrom = v.epoch
	}
	return v
}

// Now is the local clock the view's TTLs are measured on.
func (v *View) Now() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return time.Now().Add(v.skew)
}

// Touched notes a work script of this Store on the shard of prefix: it may
// have added queue entries (announced, see fence) or brought a due instant
// closer (the due head is read again).
func (v *View) Touched(prefix string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if i, ok := v.shards[prefix]; ok {
		v.sh[i].own++
		v.sh[i].dueVer++
		v.sh[i].due = dueSeen{}
	}
}

// Announced: queue (a full key name) of shard i gained an entry.
func (v *View) Announced(i int, queue string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	sv := &v.sh[i]
	if now := time.Now().Add(v.skew); now.Sub(sv.recentFrom) >= recentAge {
		// older goes: the reads it could still refuse are those sent
		// before its last announcement.
		sv.floor = max(sv.floor, sv.olderTo)
		sv.older, sv.olderTo = sv.recent, sv.ann
		sv.recent, sv.recentFrom = map[string]uint64{}, now
	}
	sv.ann++
	delete(sv.empty, maphash.String(v.seed, queue))
	if len(sv.recent) >= recentMax {
		sv.recent, sv.older = map[string]uint64{}, nil
		sv.floor = sv.ann
	}
	sv.recent[queue] = sv.ann
}

func (v *View) SetLive(i int, live bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.live[i] = live
	sv := &v.sh[i]
	sv.ver++
	sv.dueVer++
	clear(sv.empty)
	sv.due = dueSeen{}
	sv.fence = ""
	// Every write so far counts as fenced: the view starts empty.
	sv.fenced = sv.own
}

// Stamp is shard i's state, taken before a read whose result may be kept.
func (v *View) Stamp(i int) Stamp {
	v.mu.Lock()
	defer v.mu.Unlock()
	sv := &v.sh[i]
	return Stamp{ver: sv.ver, dueVer: sv.dueVer, own: sv.own, ann: sv.ann}
}

// AfterOwnWrite is st for a read made after one more write of this Store
// on the shard (Touched): a script that wrote and then read its queues or
// due head, whose own write is thus no reason to distrust what it read.
func (st Stamp) AfterOwnWrite() Stamp {
	st.own++
	st.dueVer++
	return st
}

// QueuesEmpty: were all these queues of shard i seen empty, and is that
// still to be trusted? fence is non-empty when the answer is no only
// because this Store wrote to the shard since: the caller publishes it
// (publishFence), and the entries are trusted again once it is back.
func (v *View) QueuesEmpty(i int, queues []string, at time.Time) (empty bool, fence string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.live[i] {
		return false, ""
	}
	sv := &v.sh[i]
	unfenced := false
	for _, q := range queues {
		e, ok := v.seenEmpty(sv, q, at)
		if !ok {
			return false, ""
		}
		if e.own != sv.own && sv.fenced < sv.own {
			unfenced = true
		}
	}
	if !unfenced {
		return true, ""
	}
	if sv.fence != "" && at.Sub(sv.fenceAt) < fenceWait {
		return false, ""
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	sv.fence, sv.fenceT, sv.fenceAt = "~f"+hex.EncodeToString(b[:]), sv.own, at
	return false, sv.fence
}

// RecentlyAnnounced: was any of these queues of shard i announced (did it
// gain an entry) within about the last recentAge, by the view's record of
// announcements, and not seen empty since (a claim took what it gained)?
// A claim on them then likely finds work, so the store sends its claim
// script at once rather than reading the queue heads first. False
// whenever the view cannot say.
func (v *View) RecentlyAnnounced(i int, queues []string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.live[i] {
		return false
	}
	sv := &v.sh[i]
	for _, q := range queues {
		_, recent := sv.recent[q]
		_, older := sv.older[q]
		if !recent && !older {
			continue
		}
		// An announcement deletes the queue's empty entry, so one that
		// stands was read after it, whether or not a fence is due.
		if e, ok := sv.empty[maphash.String(v.seed, q)]; ok && e.ver == uint32(sv.ver) {
			continue
		}
		return true
	}
	return false
}

// Quiet: does the view already know that shard i holds nothing due and
// that every one of these queues is empty? Unlike notDue and queuesEmpty
// it changes nothing (it takes no part in refreshing the due reading and
// starts no fence), so asking costs the next claim nothing; an answer it
// cannot give without a read is false.
func (v *View) Quiet(i int, queues []string, at time.Time, offset int64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	sv := &v.sh[i]
	d := &sv.due
	if !v.live[i] || !d.ok || d.ver != sv.dueVer || at.Sub(d.at) > dueTTL || !d.clearAt(at, offset) {
		return false
	}
	for _, q := range queues {
		e, ok := v.seenEmpty(sv, q, at)
		if !ok || (e.own != sv.own && sv.fenced < sv.own) {
			return false
		}
	}
	return true
}

// seenEmpty is shard sv's entry for queue q if it still stands: written in
// the shard's current version and not older than emptyTTL. v.mu
// is held.
func (v *View) seenEmpty(sv *shardView, q string, at time.Time) (emptySeen, bool) {
	e, ok := sv.empty[maphash.String(v.seed, q)]
	if !ok || e.ver != uint32(sv.ver) || at.Sub(v.epoch)-e.at > emptyTTL {
		return emptySeen{}, false
	}
	return e, true
}

// clearAt: by this reading, is nothing due at at, the store clock's offset
// applied? v.mu is held.
func (d *dueSeen) clearAt(at time.Time, offset int64) bool {
	return d.head > d.raw+at.Sub(d.at).Milliseconds()+1+offset
}

// FenceBack: a probe came back on shard i's subscription.
func (v *View) FenceBack(i int, msg string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	sv := &v.sh[i]
	if sv.fence != "" && msg == sv.fence {
		sv.fenced = max(sv.fenced, sv.fenceT)
		sv.fence = ""
	}
}

func (v *View) SawEmpty(i int, st Stamp, queue string, at time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	sv := &v.sh[i]
	if !v.live[i] || sv.ver != st.ver || st.ann < sv.floor || sv.recent[queue] > st.ann || sv.older[queue] > st.ann {
		return
	}
	if len(sv.empty) >= v.maxQueues {
		// Map iteration starts at a random place: this forgets an
		// arbitrary eighth.
		n := v.maxQueues/8 + 1
		for k := range sv.empty {
			delete(sv.empty, k)
			if n--; n == 0 {
				break
			}
		}
	}
	sv.empty[maphash.String(v.seed, queue)] = emptySeen{ver: uint32(st.ver), own: st.own, at: at.Sub(v.epoch)}
}

// NotDue: is shard i known to hold nothing due at the store clock, offset
// applied, estimated from the last read plus the local time since?
func (v *View) NotDue(i int, at time.Time, offset int64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	d := &v.sh[i].due
	if !v.live[i] || !d.ok || d.ver != v.sh[i].dueVer {
		return false
	}
	if at.Sub(d.at) > dueTTL {
		if d.refresh.IsZero() || at.Sub(d.refresh) > dueTTL {
			d.refresh = at // this caller reads; the others wait for it
			return false
		}
	}
	return d.clearAt(at, offset)
}

func (v *View) SawDue(i int, st Stamp, at time.Time, raw, head int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.live[i] && v.sh[i].dueVer == st.dueVer {
		v.sh[i].due = dueSeen{ver: st.dueVer, at: at, raw: raw, head: head, ok: true}
	}
}

// SendFence sends shard i's fence (QueuesEmpty) on its channel; its
// arrival is handled by Run's subscription. A fence lost on the way is sent
// again by a later claim after fenceWait.
func (v *View) SendFence(i int, fence string) {
	ctx, cancel := context.WithTimeout(context.Background(), fenceWait)
	defer cancel()
	_ = v.ps.Publish(ctx, v.prefix[i]+"work", fence)
}

// Run keeps the view until ctx ends: one sharded subscription per shard,
// each restarted after a failure (that shard's view is off meanwhile).
// While a shard's view is live, an empty claim or a sweep with nothing due
// asks that shard nothing.
func (v *View) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for i, p := range v.prefix {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer v.SetLive(i, false)
			for ctx.Err() == nil {
				v.subscribeShard(ctx, i, p+"work")
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}()
	}
	wg.Wait()
}

// subscribeShard holds one shard's subscription until it fails or ctx
// ends. The shard's view goes live when a probe published after the
// subscription started comes back through it: from then on no
// announcement can be missed unnoticed.
func (v *View) subscribeShard(ctx context.Context, i int, channel string) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	probe := "~" + hex.EncodeToString(b[:])
	sub, cancel := context.WithCancel(ctx)
	defer cancel()
	arrived := make(chan struct{})
	var once sync.Once
	go func() {
		for {
			_ = v.ps.Publish(sub, channel, probe)
			select {
			case <-sub.Done():
				return
			case <-arrived:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	_ = v.ps.Receive(sub, channel, func(msg string) {
		if strings.HasPrefix(msg, "~") { // a probe or fence, ours or another replica's
			v.FenceBack(i, msg)
			if msg == probe {
				once.Do(func() {
					close(arrived)
					v.SetLive(i, true)
				})
			}
			return
		}
		v.Announced(i, v.prefix[i]+msg)
	})
	v.SetLive(i, false)
	v.mu.Lock()
	down := v.down
	v.mu.Unlock()
	if down != nil {
		down()
	}
}

// Live: every shard's view is live.
func (v *View) Live() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, l := range v.live {
		if !l {
			return false
		}
	}
	return true
}
