package store

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/protocol"
)

// matrixOf is a JSON array of n bytes.
func matrixOf(n int) json.RawMessage {
	return json.RawMessage(`["` + strings.Repeat("m", n-4) + `"]`)
}

// A presence record holds at most MaxPresenceBytes of a client's lists
// (capabilities and withheld together): one byte past is ErrInvalidInput
// and changes nothing, exactly at it is stored.
func TestPresenceRecordBound(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{MaxPresenceBytes: 1000})
		dev := freshDevice()
		h.seen("runner_1", "alice", dev, `[]`, `[]`)
		before := dump(t, b, h.s)
		_, err := h.s.Seen(h.ctx, Presence{RunnerID: "runner_1", Owner: "alice", Device: dev,
			Capabilities: matrixOf(600), Withheld: matrixOf(401)})
		if !errors.Is(err, ErrInvalidInput) {
			t.Fatalf("seen past the bound: err = %v, want invalid input", err)
		}
		if after := dump(t, b, h.s); !reflect.DeepEqual(before, after) {
			t.Fatalf("store changed:\nbefore %v\nafter  %v", before, after)
		}
		// A record the store has never seen is not created either.
		if _, err := h.s.Seen(h.ctx, Presence{RunnerID: "runner_2", Owner: "alice", Device: dev,
			Capabilities: matrixOf(1001)}); !errors.Is(err, ErrInvalidInput) {
			t.Fatalf("new record past the bound: err = %v", err)
		}
		if after := dump(t, b, h.s); !reflect.DeepEqual(before, after) {
			t.Fatalf("store changed:\nbefore %v\nafter  %v", before, after)
		}
		got := h.seen("runner_1", "alice", dev, string(matrixOf(600)), string(matrixOf(400)))
		p := h.presence("runner_1")
		if string(p.Capabilities) != string(matrixOf(600)) || string(p.Withheld) != string(matrixOf(400)) || !reflect.DeepEqual(got, *p) {
			t.Fatalf("at the bound: seen answered %+v, stored %+v", got, p)
		}
	})
}

// presence_seen answers the record without the two lists the caller has
// just written, so a heartbeat does not carry them back from Valkey; Seen
// still answers the whole record (the contract's seen()).
func TestSeenReplyOmitsLists(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		dev := freshDevice()
		caps := string(matrixOf(5000))
		h.seen("runner_1", "alice", dev, caps, `[]`)
		devJSON, _ := json.Marshal(dev)
		msg, err := h.s.run(h.ctx, scPresenceSeen,
			h.s.presenceSeenKeys("runner_1", "alice"),
			enc("runner_1"), "runner_1", "alice", string(devJSON), caps, `[]`, "0",
			heartbeatDigest("alice", devJSON, []byte(caps), []byte(`[]`)), "")
		if err != nil {
			t.Fatal(err)
		}
		m, err := flatMap(msg)
		if err != nil {
			t.Fatal(err)
		}
		keys := []string{}
		for k := range m {
			keys = append(keys, k)
		}
		if _, has := m["capabilities"]; has || len(m) != 4 || m["runnerId"] != "runner_1" || m["owner"] != "alice" {
			t.Fatalf("presence_seen answered keys %q", keys)
		}
		if _, err := strconv.ParseInt(m["lastSeenAt"], 10, 64); err != nil {
			t.Fatalf("lastSeenAt %q", m["lastSeenAt"])
		}
		got := h.seen("runner_1", "alice", dev, caps, `[{"kind":"llm.chat"}]`)
		if p := h.presence("runner_1"); !reflect.DeepEqual(got, *p) {
			t.Fatalf("seen answered %+v, the record is %+v", got, p)
		}
	})
}

// A heartbeat carrying the lists the record already holds writes only
// lastSeenAt and the expiry: the stored lists are not rewritten (a marker
// put in their place survives it). New lists replace them, and a record
// without a digest (written before presence_seen kept one) gets its lists
// rewritten on its next heartbeat. Fails on a presence_seen that rewrites
// the lists on every heartbeat.
func TestSeenRewritesListsOnlyWhenChanged(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		dev := freshDevice()
		caps := `[{"kind":"llm.chat"}]`
		h.seen("runner_1", "alice", dev, caps, `[]`)
		key := h.s.k.presence("runner_1")
		mark := func() {
			t.Helper()
			if err := b.client.Do(h.ctx, b.client.B().Hset().Key(key).FieldValue().FieldValue("capabilities", `"marker"`).Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
		stored := func() string {
			t.Helper()
			v, err := b.client.Do(h.ctx, b.client.B().Hget().Key(key).Field("capabilities").Build()).ToString()
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		mark()
		before := h.presence("runner_1").LastSeenAt
		h.s.Testing().AdvanceClock(1000)
		got := h.seen("runner_1", "alice", dev, caps, `[]`)
		if v := stored(); v != `"marker"` {
			t.Fatalf("an unchanged heartbeat rewrote the lists: %s", v)
		}
		if got.LastSeenAt <= before || h.presence("runner_1").LastSeenAt != got.LastSeenAt {
			t.Fatalf("lastSeenAt %d after %d, stored %d", got.LastSeenAt, before, h.presence("runner_1").LastSeenAt)
		}
		h.seen("runner_1", "alice", dev, caps, `[{"kind":"llm.chat"}]`)
		if v := stored(); v != caps {
			t.Fatalf("changed withheld did not rewrite the lists: capabilities %s", v)
		}
		mark()
		if err := b.client.Do(h.ctx, b.client.B().Hdel().Key(key).Field("ld").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		h.seen("runner_1", "alice", dev, caps, `[{"kind":"llm.chat"}]`)
		if v := stored(); v != caps {
			t.Fatalf("a record without a digest kept its lists: capabilities %s", v)
		}
	})
}

// presence_all ends a page at its byte budget, after the record that
// reaches it (a record may hold up to MaxPresenceBytes of a client's
// lists), and Everyone still reads every record in first-seen order.
func TestEveryonePagesByBytes(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		// Five runners on one shard, so one shard's index pages them.
		var want []string
		for i := 0; len(want) < 5; i++ {
			r := "r" + strconv.Itoa(i)
			if h.s.k.runnerShard(r) != h.s.k.runnerShard("r0") {
				continue
			}
			h.seen(r, "alice", freshDevice(), string(matrixOf(3000)), `[]`)
			want = append(want, r)
		}
		msg, err := h.s.run(h.ctx, scPresenceAll, []string{h.s.k.presenceIndex(h.s.k.runnerShard("r0"))}, "-inf", "128", "5000")
		if err != nil {
			t.Fatal(err)
		}
		parts, err := elems(msg, 1)
		if err != nil {
			t.Fatal(err)
		}
		if cursor, _ := str(parts[0]); len(parts) != 3 || cursor == "" {
			t.Fatalf("a 5,000-byte page of 3,000-byte records held %d records (cursor %q), want 2 and more to come", len(parts)-1, cursor)
		}
		h.s.limits.presenceBytes = 1
		all, err := h.s.Everyone(h.ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range all {
			got = append(got, p.RunnerID)
		}
		equalStrings(t, "everyone", got, want)
	})
}

// PresenceHead answers a record's owner, device and lastSeenAt, never the
// lists (what every daemon request's authentication reads); an absent
// record is nil.
func TestPresenceHead(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		dev := freshDevice()
		if p, err := h.s.PresenceHead(h.ctx, "runner_1"); err != nil || p != nil {
			t.Fatalf("no record: %+v %v", p, err)
		}
		h.seen("runner_1", "alice", dev, string(matrixOf(5000)), `[{"kind":"llm.chat"}]`)
		full := h.presence("runner_1")
		head, err := h.s.PresenceHead(h.ctx, "runner_1")
		if err != nil || head == nil {
			t.Fatalf("head: %+v %v", head, err)
		}
		want := *full
		want.Capabilities, want.Withheld = nil, nil
		if !reflect.DeepEqual(*head, want) {
			t.Fatalf("head %+v, want %+v", *head, want)
		}
	})
}

// Heartbeat under RequirePresence writes only a record that still holds
// the owner and device the caller remembered: a missing record, another
// device or another owner answer ErrPresenceChanged and change nothing.
// Without the condition it writes as Seen does.
func TestHeartbeatRequiresTheRememberedRecord(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		for _, batch := range []time.Duration{0, 5 * time.Millisecond} {
			t.Run("batch="+batch.String(), func(t *testing.T) {
				h := newFixture(t, b, Options{HeartbeatBatch: batch})
				dev, other := freshDevice(), freshDevice()
				beat := func(owner string, d protocol.PublicIdentity, caps string, require bool) (HeartbeatResult, error) {
					return h.s.Heartbeat(h.ctx, HeartbeatInput{Presence: Presence{RunnerID: "runner_1", Owner: owner, Device: d,
						Capabilities: json.RawMessage(caps), Withheld: json.RawMessage(`[]`)}, RequirePresence: require, Cancels: true})
				}
				if _, err := beat("alice", dev, `[]`, true); !errors.Is(err, ErrPresenceChanged) {
					t.Fatalf("no record: %v", err)
				}
				if p, err := h.s.Presence(h.ctx, "runner_1"); err != nil || p != nil {
					t.Fatalf("a refused heartbeat wrote %+v %v", p, err)
				}
				first := h.seen("runner_1", "alice", dev, `[]`, `[]`)
				for _, c := range []struct {
					owner string
					dev   protocol.PublicIdentity
				}{{"alice", other}, {"bob", dev}} {
					if _, err := beat(c.owner, c.dev, `[{"kind":"x"}]`, true); !errors.Is(err, ErrPresenceChanged) {
						t.Fatalf("%s: %v", c.owner, err)
					}
				}
				if p := h.presence("runner_1"); !reflect.DeepEqual(*p, first) {
					t.Fatalf("a refused heartbeat changed the record: %+v, was %+v", p, first)
				}
				got, err := beat("alice", dev, `[{"kind":"x"}]`, true)
				if err != nil {
					t.Fatal(err)
				}
				if p := h.presence("runner_1"); !reflect.DeepEqual(*p, got.Presence) || string(p.Capabilities) != `[{"kind":"x"}]` {
					t.Fatalf("heartbeat answered %+v, the record is %+v", got.Presence, p)
				}
				if got.Cancel == nil || len(got.Cancel) != 0 {
					t.Fatalf("cancel requests of a runner holding nothing: %#v", got.Cancel)
				}
				// Without the condition, another device's heartbeat is Seen's:
				// the record keeps its device.
				if _, err := beat("alice", other, `[]`, false); err != nil {
					t.Fatal(err)
				}
				if p := h.presence("runner_1"); !reflect.DeepEqual(p.Device, dev) {
					t.Fatal("an unconditional heartbeat rewrote the device")
				}
			})
		}
	})
}

// Heartbeat's cancel requests are CancelRequests', read through the
// runner's record of shards that the presence write returns: grants on two
// shards, cancelled, come back in first-enqueue order.
func TestHeartbeatAnswersCancelRequests(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		for _, batch := range []time.Duration{0, 5 * time.Millisecond} {
			t.Run("batch="+batch.String(), func(t *testing.T) {
				h := newFixture(t, b, Options{HeartbeatBatch: batch})
				far := otherShardSite(h.s, site)
				h.enqueue("a", "alice")
				h.enqueueStub(far, stub("b", "alice"))
				dev := freshDevice()
				h.seen("runner_1", "alice", dev, `[]`, `[]`)
				got := h.claim(routes([]string{site, far}, []string{"alice"}))
				if len(got) != 2 {
					t.Fatalf("claimed %v", ids(got))
				}
				for _, c := range []struct{ site, id string }{{site, "a"}, {far, "b"}} {
					if ok, err := h.s.Cancel(h.ctx, c.site, c.id); err != nil || !ok {
						t.Fatalf("cancel %s: %v %v", c.id, ok, err)
					}
				}
				want, err := h.s.CancelRequests(h.ctx, "runner_1")
				if err != nil || len(want) != 2 {
					t.Fatalf("cancel requests %+v %v", want, err)
				}
				hb, err := h.s.Heartbeat(h.ctx, HeartbeatInput{Presence: Presence{RunnerID: "runner_1", Owner: "alice", Device: dev},
					RequirePresence: true, Cancels: true})
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(hb.Cancel, want) || hb.Cancel[0].JobID != "a" {
					t.Fatalf("heartbeat's cancel requests %+v, CancelRequests' %+v", hb.Cancel, want)
				}
			})
		}
	})
}
