package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
	"time"

	"github.com/valkey-io/valkey-go"
)

// workView is one replica's view of where work may be: per shard, which
// queues were last seen empty and when the shard's earliest due job falls.
// It only decides whether to ask Valkey; every decision is still made by
// the shard's scripts, so a stale view costs latency, never a job:
//
//   - a queue seen empty stays "empty" until a script announces an entry in
//     it (SPUBLISH on its shard's channel, announce() in lib/store.lua),
//     until this Store runs a script there that may add queue entries, or
//     for at most workViewEmptyTTL (a lost announcement);
//   - a shard's due head is trusted for workViewDueTTL, or until this Store
//     runs such a script there. Another replica's write puts nothing due
//     sooner than the awaiting window or a lease, so a short TTL suffices.
//
// A shard's view is live only while this Store's subscription to the
// shard's channel is known to deliver (RunWorkView: a probe it published
// came back); otherwise every claim and sweep reads Valkey as before.
type workView struct {
	mu     sync.Mutex
	live   []bool
	ver    []uint64 // per shard: bumped by this Store's work writes there
	empty  []map[string]emptySeen
	due    []dueSeen
	shards map[string]int // shard prefix -> index
}

type emptySeen struct {
	ver uint64
	at  time.Time
}

type dueSeen struct {
	ver  uint64
	at   time.Time // local clock at the read
	raw  int64     // store clock at the read, without the test offset
	head int64     // the due head's score; maxScore when nothing is indexed
	ok   bool
}

const (
	// workViewEmptyTTL outlasts a daemon's idle tick (about 10 s), so an
	// idle device's next claim finds its queues still known empty; it only
	// bounds what a lost announcement costs.
	workViewEmptyTTL = 30 * time.Second
	workViewDueTTL   = time.Second
	// workViewQueues bounds the queues remembered per shard (each device
	// adds its sticky queues): past it the shard's entries are dropped and
	// refilled by the next reads.
	workViewQueues = 16384
	maxScore       = int64(1) << 62
)

func newWorkView(shards []string) *workView {
	v := &workView{live: make([]bool, len(shards)), ver: make([]uint64, len(shards)),
		empty: make([]map[string]emptySeen, len(shards)), due: make([]dueSeen, len(shards)),
		shards: make(map[string]int, len(shards))}
	for i, p := range shards {
		v.shards[p] = i
		v.empty[i] = map[string]emptySeen{}
	}
	return v
}

// touched notes a write of this Store that may add queue entries or bring
// a due instant closer on the shard of prefix.
func (v *workView) touched(prefix string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if i, ok := v.shards[prefix]; ok {
		v.forget(i)
	}
}

func (v *workView) forget(i int) {
	v.ver[i]++
	clear(v.empty[i])
	v.due[i] = dueSeen{}
}

// announced: queue (a full key name) of shard i gained an entry.
func (v *workView) announced(i int, queue string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.empty[i], queue)
}

func (v *workView) setLive(i int, live bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.live[i] = live
	v.forget(i)
}

// stamp is shard i's version, taken before a read whose result may be kept.
func (v *workView) stamp(i int) uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.ver[i]
}

// queuesEmpty: were all these queues of shard i seen empty, and is that
// still to be trusted?
func (v *workView) queuesEmpty(i int, queues []string, at time.Time) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.live[i] {
		return false
	}
	for _, q := range queues {
		e, ok := v.empty[i][q]
		if !ok || e.ver != v.ver[i] || at.Sub(e.at) > workViewEmptyTTL {
			return false
		}
	}
	return true
}

func (v *workView) sawEmpty(i int, ver uint64, queue string, at time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.live[i] && v.ver[i] == ver {
		if len(v.empty[i]) >= workViewQueues {
			clear(v.empty[i])
		}
		v.empty[i][queue] = emptySeen{ver: ver, at: at}
	}
}

// notDue: is shard i known to hold nothing due at the store clock, offset
// applied, estimated from the last read plus the local time since?
func (v *workView) notDue(i int, at time.Time, offset int64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	d := v.due[i]
	if !v.live[i] || !d.ok || d.ver != v.ver[i] || at.Sub(d.at) > workViewDueTTL {
		return false
	}
	return d.head > d.raw+at.Sub(d.at).Milliseconds()+1+offset
}

func (v *workView) sawDue(i int, ver uint64, at time.Time, raw, head int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.live[i] && v.ver[i] == ver {
		v.due[i] = dueSeen{ver: ver, at: at, raw: raw, head: head, ok: true}
	}
}

// RunWorkView keeps this Store's work view (see workView) until ctx ends:
// one sharded subscription per shard, each restarted after a failure (that
// shard's view is off meanwhile). While a shard's view is live, an empty
// claim or a sweep with nothing due asks that shard nothing. It returns at
// once when the server has no sharded pub/sub (the embedded store).
func (s *Store) RunWorkView(ctx context.Context) {
	if !s.announce {
		return
	}
	var wg sync.WaitGroup
	for i, p := range s.k.shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.view.setLive(i, false)
			for ctx.Err() == nil {
				s.subscribeShard(ctx, i, p+"work")
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
func (s *Store) subscribeShard(ctx context.Context, i int, channel string) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	probe := "~" + hex.EncodeToString(b[:])
	sub, cancel := context.WithCancel(ctx)
	defer cancel()
	arrived := make(chan struct{})
	var once sync.Once
	go func() {
		for {
			_ = s.c.Do(sub, s.c.B().Spublish().Channel(channel).Message(probe).Build()).Error()
			select {
			case <-sub.Done():
				return
			case <-arrived:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	_ = s.c.Receive(sub, s.c.B().Ssubscribe().Channel(channel).Build(), func(m valkey.PubSubMessage) {
		if strings.HasPrefix(m.Message, "~") { // a probe, ours or another replica's
			if m.Message == probe {
				once.Do(func() {
					close(arrived)
					s.view.setLive(i, true)
				})
			}
			return
		}
		s.view.announced(i, s.k.shards[i]+m.Message)
	})
	s.view.setLive(i, false)
}

// viewLive: every shard's view is live (tests, benchmarks).
func (s *Store) viewLive() bool {
	s.view.mu.Lock()
	defer s.view.mu.Unlock()
	for _, l := range s.view.live {
		if !l {
			return false
		}
	}
	return true
}
