package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"
)

// deviceKeys is every key of the namespace that holds something of a
// device: presence records, owner indexes, runner indexes, retention
// indexes, records of shards, with the members of the indexes.
func deviceKeys(t *testing.T, h *storeFixture) []string {
	t.Helper()
	var out []string
	for _, k := range scanKeys(t, h.b.client, h.s.KeyPattern()) {
		tail := k[strings.Index(k, "}:")+2:]
		switch {
		case strings.HasPrefix(tail, "p:"), strings.HasPrefix(tail, "rsh:"):
			out = append(out, tail)
		case strings.HasPrefix(tail, "po:"):
			m, err := h.b.client.Do(h.ctx, h.b.client.B().Smembers().Key(k).Build()).AsStrSlice()
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(m)
			out = append(out, tail+"="+strings.Join(m, ","))
		case tail == "pidx" || tail == "ls":
			m, err := h.b.client.Do(h.ctx, h.b.client.B().Zrange().Key(k).Min("0").Max("-1").Build()).AsStrSlice()
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(m)
			out = append(out, tail+"="+strings.Join(m, ","))
		}
	}
	slices.Sort(out)
	return out
}

// A device silent for longer than the retention loses its presence
// record, its owner-index entry, its runner-index and retention-index
// entries and its record of shards, in one reap; a device that beat within
// the retention (short-form heartbeats included) keeps everything, and
// the reap reads nothing while nothing is due.
func TestReapForgetsSilentDevices(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		var reaps atomic.Int64
		h := newFixture(t, b, Options{DeviceRetention: 24 * time.Hour, ObserveScript: func(ctx context.Context, name string) (context.Context, func(error)) {
			if name == scPresenceReap.Name {
				reaps.Add(1)
			}
			return ctx, func(error) {}
		}})
		gone, stays, held := freshDevice(), freshDevice(), freshDevice()
		h.seen("gone_1", "olga", gone, `[{"kind":"generate"}]`, `[]`)
		h.seen("stays_1", "sam", stays, `[]`, `[]`)
		h.seen("held_1", "alice", held, `[]`, `[]`)
		// held_1 holds a grant whose deadline is far ahead.
		h.enqueue("j1", "alice")
		if got := h.claim(runner("held_1")); len(got) != 1 {
			t.Fatalf("claimed %d", len(got))
		}
		if n, more, err := h.s.ReapDevices(h.ctx, 100); err != nil || n != 0 || more {
			t.Fatalf("reap with nothing due: %d %v %v", n, more, err)
		}
		if reaps.Load() != 0 {
			t.Fatalf("a reap with nothing due ran presence_reap %d times", reaps.Load())
		}
		// 23 h later stays_1 beats in short form, then once more an hour on.
		h.s.Testing().AdvanceClock((23 * time.Hour).Milliseconds())
		for range 2 {
			if _, err := h.s.Heartbeat(h.ctx, HeartbeatInput{Presence: Presence{RunnerID: "stays_1", Owner: "sam", Device: stays,
				Capabilities: []byte(`[]`), Withheld: []byte(`[]`)}, RequirePresence: true}); err != nil {
				t.Fatal(err)
			}
			h.s.Testing().AdvanceClock(time.Hour.Milliseconds())
		}
		h.s.Testing().AdvanceClock(time.Hour.Milliseconds()) // now 26 h after the first beats
		n, more, err := h.s.ReapDevices(h.ctx, 100)
		if err != nil || more {
			t.Fatalf("reap: %v %v", more, err)
		}
		if n != 2 {
			t.Fatalf("reap forgot %d records, want 2 (gone_1, held_1)", n)
		}
		if p, _ := h.s.Presence(h.ctx, "gone_1"); p != nil {
			t.Fatalf("gone_1 still present: %+v", p)
		}
		h.presence("stays_1")
		if caps, err := h.s.Advertised(h.ctx, "olga"); err != nil || len(caps) != 0 {
			t.Fatalf("olga still advertises %v (%v)", caps, err)
		}
		everyone, err := h.s.Everyone(h.ctx)
		if err != nil || len(everyone) != 1 || everyone[0].RunnerID != "stays_1" {
			t.Fatalf("everyone = %+v %v", everyone, err)
		}
		shStays := h.s.k.runnerShard("stays_1")
		want := []string{"ls=" + enc("stays_1"), "pidx=" + enc("stays_1"), "p:" + enc("stays_1"), "po:" + enc("sam") + "=" + enc("stays_1")}
		got := deviceKeys(t, h)
		var rest []string
		if !slices.Contains(got, "rsh:"+enc("held_1")) {
			t.Fatalf("held_1's record of shards, naming a live grant, is gone: %v", got)
		}
		for _, k := range got {
			if strings.HasPrefix(k, "rsh:") {
				// A record of shards naming a live grant stays until its deadline.
				pttl, err := b.client.Do(h.ctx, b.client.B().Pttl().Key(h.s.k.shards[h.s.k.runnerShard("held_1")]+k).Build()).AsInt64()
				if err != nil || pttl <= 0 {
					t.Fatalf("%s kept without an expiry: %d %v", k, pttl, err)
				}
				continue
			}
			rest = append(rest, k)
		}
		slices.Sort(want)
		if !slices.Equal(rest, want) {
			t.Fatalf("device keys after the reap:\n got %v\nwant %v (stays_1 on shard %d)", rest, want, shStays)
		}
	})
}

// One reap examines at most its limit of entries per shard and says when
// more may be due; further calls finish the work.
func TestReapIsBounded(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{DeviceRetention: time.Hour})
		ids, _ := sameShardRunners(h.s, "batch_", 7)
		for _, id := range ids {
			h.seen(id, "o", freshDevice(), `[]`, `[]`)
		}
		h.s.Testing().AdvanceClock((2 * time.Hour).Milliseconds())
		total, calls := 0, 0
		for {
			n, more, err := h.s.ReapDevices(h.ctx, 3)
			if err != nil {
				t.Fatal(err)
			}
			if n > 3 {
				t.Fatalf("one reap of limit 3 forgot %d", n)
			}
			total, calls = total+n, calls+1
			if !more {
				break
			}
			if calls > 10 {
				t.Fatal("the reap never finished")
			}
		}
		if total != 7 || calls != 3 {
			t.Fatalf("forgot %d in %d calls, want 7 in 3", total, calls)
		}
		if k := deviceKeys(t, h); len(k) != 0 {
			t.Fatalf("left %v", k)
		}
	})
}

// ForgetDevices drops named devices at once, whatever their last beat;
// unknown runners cost nothing, bad ids are refused with nothing written.
func TestForgetDevices(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		h.seen("a_1", "ann", freshDevice(), `[{"kind":"generate"}]`, `[]`)
		h.seen("a_2", "ann", freshDevice(), `[{"kind":"generate"}]`, `[]`)
		before := dump(t, b, h.s)
		if _, err := h.s.ForgetDevices(h.ctx, []string{"a_1", "bad\x00"}); !errors.Is(err, ErrInvalidInput) {
			t.Fatalf("bad id: %v", err)
		}
		if after := dump(t, b, h.s); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatal("a refused forget changed the store")
		}
		n, err := h.s.ForgetDevices(h.ctx, []string{"a_1", "never_seen"})
		if err != nil || n != 1 {
			t.Fatalf("forget: %d %v", n, err)
		}
		if p, _ := h.s.Presence(h.ctx, "a_1"); p != nil {
			t.Fatal("a_1 still present")
		}
		if caps, _ := h.s.Advertised(h.ctx, "ann"); len(caps) != 1 {
			t.Fatalf("ann advertises %d rows, want a_2's one", len(caps))
		}
		n, err = h.s.ForgetDevices(h.ctx, []string{"a_2"})
		if err != nil || n != 1 {
			t.Fatalf("forget: %d %v", n, err)
		}
		if k := deviceKeys(t, h); len(k) != 0 {
			t.Fatalf("left %v", k)
		}
	})
}

// Records written before the retention index (no ls entry, no lx field)
// that never beat again are indexed by the backfill, once per namespace,
// and reaped like any other; pidx entries of gone records are dropped.
func TestBackfillIndexesOlderRecords(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{DeviceRetention: time.Hour})
		c := b.client
		for i := range 5 {
			id := fmt.Sprint("old_", i)
			h.seen(id, "o", freshDevice(), `[]`, `[]`)
			// As a relay before the index wrote it.
			sh := h.s.k.runnerShard(id)
			if err := c.Do(h.ctx, c.B().Zrem().Key(h.s.k.retentionIndex(sh)).Member(enc(id)).Build()).Error(); err != nil {
				t.Fatal(err)
			}
			if err := c.Do(h.ctx, c.B().Hdel().Key(h.s.k.presence(id)).Field("lx").Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
		// A pidx entry whose record is gone.
		lost := "lost_1"
		h.seen(lost, "o", freshDevice(), `[]`, `[]`)
		if err := c.Do(h.ctx, c.B().Del().Key(h.s.k.presence(lost)).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if err := c.Do(h.ctx, c.B().Zrem().Key(h.s.k.retentionIndex(h.s.k.runnerShard(lost))).Member(enc(lost)).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		h.s.Testing().AdvanceClock((2 * time.Hour).Milliseconds())
		if n, _, err := h.s.ReapDevices(h.ctx, 100); err != nil || n != 0 {
			t.Fatalf("reap before the backfill: %d %v (unindexed records cannot be found)", n, err)
		}
		for i := 0; ; i++ {
			done, err := h.s.BackfillRetention(h.ctx, 2)
			if err != nil {
				t.Fatal(err)
			}
			if done {
				break
			}
			if i > 100 {
				t.Fatal("the backfill never finished")
			}
		}
		// Done is remembered in Valkey: another Store does nothing.
		other := newStore(t, b, Options{Namespace: h.s.Namespace(), DeviceRetention: time.Hour})
		other.Testing().SetClockOffset((2 * time.Hour).Milliseconds())
		if done, err := other.BackfillRetention(h.ctx, 1); err != nil || !done {
			t.Fatalf("second store's backfill: %v %v", done, err)
		}
		n, _, err := other.ReapDevices(h.ctx, 100)
		if err != nil || n != 5 {
			t.Fatalf("reap after the backfill: %d %v, want 5", n, err)
		}
		// What is left is the lost record's owner-index entry: a record
		// deleted behind the store's back (a presence TTL) no longer says
		// its owner. The owner's next Advertised drops it.
		want := []string{"po:" + enc("o") + "=" + enc(lost)}
		if k := deviceKeys(t, h); !slices.Equal(k, want) {
			t.Fatalf("left %v, want %v", k, want)
		}
		if _, err := h.s.Advertised(h.ctx, "o"); err != nil {
			t.Fatal(err)
		}
		if k := deviceKeys(t, h); len(k) != 0 {
			t.Fatalf("left %v", k)
		}
	})
}

// Heartbeats index their record: a new one at once, a known one at most
// once an hour (lx), so an idle tick adds no write to the index.
func TestHeartbeatIndexesOncePerStep(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		dev := freshDevice()
		h.seen("r_1", "o", dev, `[]`, `[]`)
		score := func() float64 {
			v, err := b.client.Do(h.ctx, b.client.B().Zscore().Key(h.s.k.retentionIndex(h.s.k.runnerShard("r_1"))).Member(enc("r_1")).Build()).AsFloat64()
			if err != nil && !valkey.IsValkeyNil(err) {
				t.Fatal(err)
			}
			return v
		}
		first := score()
		if first == 0 {
			t.Fatal("a new record is not in the retention index")
		}
		beat := func() {
			if _, err := h.s.Heartbeat(h.ctx, HeartbeatInput{Presence: Presence{RunnerID: "r_1", Owner: "o", Device: dev,
				Capabilities: []byte(`[]`), Withheld: []byte(`[]`)}, RequirePresence: true}); err != nil {
				t.Fatal(err)
			}
		}
		h.s.Testing().AdvanceClock(30 * 60_000)
		beat()
		if score() != first {
			t.Fatal("a beat within the step rewrote the index")
		}
		h.s.Testing().AdvanceClock(31 * 60_000)
		beat()
		if s := score(); s <= first+60*60_000 {
			t.Fatalf("a beat past the step left the index at %v (first %v)", s, first)
		}
	})
}

// A runner's record of shards ends ten minutes after its latest grant
// deadline (as recorded: rounded up) by itself, so it cannot outlive a presence record reaped or
// forgotten while a claim was being made.
func TestRunnerShardsExpire(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		now := h.now()
		st := stub("j1", "alice")
		st.DeadlineAt = now + 5000
		h.enqueueStub(site, st)
		if got := h.claim(runner("r_1")); len(got) != 1 {
			t.Fatalf("claimed %d", len(got))
		}
		// No presence record at all: nothing but the TTL ends it.
		pttl, err := b.client.Do(h.ctx, b.client.B().Pttl().Key(h.s.k.runnerShards("r_1")).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		// The record takes the deadline rounded up to runnerShardsGrain.
		if pttl <= 0 || pttl > recordedDeadline(now+5000)-now+600_000+1000 {
			t.Fatalf("rsh PTTL %d ms, want at most 5 s + %d ms + 10 min", pttl, runnerShardsGrain)
		}
	})
}
