package store

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/protocol"
)

// Seen records a heartbeat stamped with the store clock (§2.15). An existing
// record keeps its owner and device; capabilities and withheld are replaced.
func (s *Store) Seen(ctx context.Context, p Presence) (Presence, error) {
	rec, _, _, err := s.seen(ctx, p, false, false, unbatched, nil)
	if err != nil {
		return Presence{}, fmt.Errorf("seen: %w", err)
	}
	return rec, nil
}

// Heartbeat is a daemon heartbeat's presence write and, with in.Cancels,
// its cancel requests, in as few calls as possible: one script on the
// runner's shard writes the record (under in.RequirePresence only if it
// still holds the owner and device the caller remembered, which is the
// caller's authentication check made atomic with the write) and reads the
// runner's record of shards; only shards there whose cancel index holds
// something are read further. An idle device's heartbeat is that one call,
// and so is a busy one's on a server that is not a cluster: its renewals
// (in.Renew) ride in the short-form write (lua/presence_beat.lua).
func (s *Store) Heartbeat(ctx context.Context, in HeartbeatInput) (HeartbeatResult, error) {
	lane := batched
	switch {
	case s.runner.Unreachable():
		// Valkey failed the last call: waiting for a batch would only
		// delay the refusal (or the first answer once it is back).
		lane = unbatched
	case in.Idle != nil && s.claimLooksEmpty(in.RunnerID, in.Owner, in.Idle):
		lane = batchedIdle
	}
	var fold *renewal
	if in.Renew != nil {
		// Checked before anything is written: a refused renewal leaves the
		// record as it was.
		if err := s.checkRenew(*in.Renew); err != nil {
			return HeartbeatResult{}, fmt.Errorf("heartbeat: renew: %w", err)
		}
		if in.Renew.RunnerID != in.RunnerID {
			return HeartbeatResult{}, fmt.Errorf("heartbeat: renew: %w: runner %q renews for %q", ErrInvalidInput, in.RunnerID, in.Renew.RunnerID)
		}
		fold = s.foldRenewal(*in.Renew)
	}
	rec, shards, expiry, err := s.seen(ctx, in.Presence, in.RequirePresence, in.Cancels, lane, fold)
	if err != nil {
		return HeartbeatResult{}, fmt.Errorf("heartbeat: %w", err)
	}
	out := HeartbeatResult{Presence: rec}
	if in.Cancels {
		if out.Cancel, err = s.cancelRequests(ctx, in.RunnerID, shards); err != nil {
			return HeartbeatResult{}, fmt.Errorf("heartbeat: %w", err)
		}
	}
	switch {
	case in.Renew == nil:
	case expiry != nil || len(in.Renew.Leases) == 0:
		out.Renew, err = renewOutcome(in.Renew.Leases, expiry)
	default:
		// Not carried by the presence write (a cluster, the full form):
		// renewed on the leases' shards, after the cancel requests.
		out.Renew, err = s.renewLeases(ctx, *in.Renew)
	}
	if err != nil {
		return HeartbeatResult{}, fmt.Errorf("heartbeat: %w", err)
	}
	return out, nil
}

// beatLane says whether a presence write waits to share a round trip
// with other heartbeats (Options.HeartbeatBatch), and for how long.
type beatLane int

const (
	unbatched   beatLane = iota
	batched              // the heartbeat window
	batchedIdle          // the idle window (Options.HeartbeatIdleBatch)
)

// seen runs presence_seen: with require, only on a record holding p's
// owner and device (ErrPresenceChanged otherwise); with shards, it also
// answers the runner's record of shards (runnerShardList); lane says
// whether it shares a round trip with other heartbeats. A renewal (nil
// for none) rides in the short form only; its expiries (one per grant,
// "" for lost) come back when it did, else nil.
func (s *Store) seen(ctx context.Context, p Presence, require, shards bool, lane beatLane, r *renewal) (Presence, []int, []string, error) {
	if err := s.checkID("runner id", p.RunnerID); err != nil {
		return Presence{}, nil, nil, err
	}
	if err := s.checkID("owner", p.Owner); err != nil {
		return Presence{}, nil, nil, err
	}
	device, err := protocol.Marshal(p.Device)
	if err != nil {
		return Presence{}, nil, nil, err
	}
	caps, withheld := orEmptyArray(p.Capabilities), orEmptyArray(p.Withheld)
	if err := s.checkBlob("capabilities", caps); err != nil {
		return Presence{}, nil, nil, err
	}
	if err := s.checkBlob("withheld", withheld); err != nil {
		return Presence{}, nil, nil, err
	}
	if n := len(caps) + len(withheld); n > s.opts.MaxPresenceBytes {
		return Presence{}, nil, nil, fmt.Errorf("%w: capabilities and withheld are %d bytes, the limit is %d",
			ErrInvalidInput, n, s.opts.MaxPresenceBytes)
	}
	if require {
		// The short form first: a remembered device whose lists have not
		// changed sends digests, not its device and lists.
		rec, in, expiry, ok, err := s.beat(ctx, p, device, caps, withheld, shards, lane, r)
		if err != nil || ok {
			return rec, in, expiry, err
		}
		if lane == batchedIdle {
			// The idle wait is spent; the full form goes in the short
			// window, so the two waits stay within the caller's timeout.
			lane = batched
		}
	}
	keys, args := s.seenCall(p, device, caps, withheld, require, shards)
	var msg valkey.ValkeyMessage
	if lane != unbatched && s.beats != nil {
		msg, err = s.beats.run(ctx, lane == batchedIdle, keys, args...)
	} else {
		msg, err = s.run(ctx, scPresenceSeen, keys, args...)
	}
	if err != nil {
		return Presence{}, nil, nil, err
	}
	// The script answers the record without its two lists, which it has
	// just replaced with exactly these bytes: a heartbeat does not carry
	// them back from Valkey.
	h, err := flatMap(msg)
	if err != nil {
		return Presence{}, nil, nil, fmt.Errorf("record: %w", err)
	}
	if len(h) == 0 {
		if require {
			return Presence{}, nil, nil, ErrPresenceChanged
		}
		return Presence{}, nil, nil, fmt.Errorf("record: %w: empty reply", ErrUnexpectedReply)
	}
	var rec *Presence
	if require {
		// The condition held, so the record holds exactly p's runner id,
		// owner and device: the script answered only lastSeenAt.
		rec = &Presence{RunnerID: p.RunnerID, Owner: p.Owner, Device: p.Device}
		if rec.LastSeenAt, err = strconv.ParseInt(h["lastSeenAt"], 10, 64); err != nil {
			return Presence{}, nil, nil, fmt.Errorf("record lastSeenAt: %w", err)
		}
	} else if rec, err = parsePresence(msg); err != nil || rec == nil {
		return Presence{}, nil, nil, fmt.Errorf("record: %v", err)
	}
	rec.Capabilities, rec.Withheld = caps, withheld
	var in []int
	if shards {
		in = s.shardList(strings.Fields(h["rsh"]))
	}
	return *rec, in, nil, nil
}

// seenCall is presence_seen's keys and op-specific args for p (its device
// and lists already encoded and checked): under require, the condition;
// with shards, the runner's record of shards.
func (s *Store) seenCall(p Presence, device, caps, withheld []byte, require, shards bool) (keys, args []string) {
	keys = s.presenceSeenKeys(p.RunnerID, p.Owner)
	if shards {
		keys = append(keys, s.k.runnerShards(p.RunnerID))
	}
	cond := ""
	if require {
		cond = "1"
	}
	args = []string{enc(p.RunnerID), p.RunnerID, p.Owner, string(device), string(caps), string(withheld),
		strconv.FormatInt(max(s.opts.PresenceTTLMs, 0), 10), heartbeatDigest(p.Owner, device, caps, withheld), cond}
	return keys, args
}

// beat is a remembered device's heartbeat in short form (presence_beat):
// written, with ok, only if the record holds exactly p's owner and device
// and these lists; otherwise nothing was written and the caller sends the
// heartbeat in full. With shards, the runner's record of shards where it
// may hold a live grant comes back too; with r, its grants are renewed in
// the same call when the record is written, and their expiries come back
// (one per grant of the heartbeat, "" for lost).
func (s *Store) beat(ctx context.Context, p Presence, device, caps, withheld []byte, shards bool, lane beatLane, r *renewal) (Presence, []int, []string, bool, error) {
	keys, args := s.beatCall(p, device, caps, withheld, shards)
	c := &batchedCall{ctx: ctx, beat: true, keys: keys, args: args, renew: r, done: make(chan struct{})}
	if lane != unbatched && s.beats != nil {
		if err := s.beats.wait(c, lane == batchedIdle); err != nil {
			return Presence{}, nil, nil, false, err
		}
	} else {
		// A call of one record, sent and read as the batch sends and
		// reads a group.
		g := []*batchedCall{c}
		msg, runErr := s.run(ctx, scPresenceBeat, beatKeys(g), beatArgs(s, g)...)
		s.spreadBeats(g, msg, runErr)
		if c.err != nil {
			return Presence{}, nil, nil, false, c.err
		}
	}
	entry := c.msg
	if n, err := entry.AsInt64(); err == nil && n == 0 {
		return Presence{}, nil, nil, false, nil
	}
	var expiry []string
	if r != nil {
		var err error
		if entry, expiry, err = r.outcome(entry); err != nil {
			return Presence{}, nil, nil, false, fmt.Errorf("beat: %w", err)
		}
	}
	list, err := entry.ToString()
	if err != nil {
		return Presence{}, nil, nil, false, fmt.Errorf("beat: %w: %v", ErrUnexpectedReply, err)
	}
	rec := Presence{RunnerID: p.RunnerID, Owner: p.Owner, Device: p.Device, Capabilities: caps, Withheld: withheld}
	if rec.LastSeenAt, err = strconv.ParseInt(c.now, 10, 64); err != nil {
		return Presence{}, nil, nil, false, fmt.Errorf("beat lastSeenAt: %w", err)
	}
	var in []int
	if shards {
		in = s.shardList(strings.Fields(list))
	}
	return rec, in, expiry, true, nil
}

// beatCall is one record's keys and values for presence_beat: its record,
// its rsh (the record's key holds its place when rsh is not asked for)
// and its shard's retention index.
func (s *Store) beatCall(p Presence, device, caps, withheld []byte, shards bool) (keys, args []string) {
	kp, rsh, flag := s.k.presence(p.RunnerID), s.k.presence(p.RunnerID), ""
	if shards {
		rsh, flag = s.k.runnerShards(p.RunnerID), "1"
	}
	return []string{kp, rsh, s.k.retentionIndex(s.k.runnerShard(p.RunnerID))}, []string{heartbeatDigest(p.Owner, device, caps, withheld), flag}
}

// beatCallArgs is presence_beat's per-call values: the record expiry and
// how long a read of rsh without a live grant stands.
func (s *Store) beatCallArgs() []string {
	return []string{strconv.FormatInt(max(s.opts.PresenceTTLMs, 0), 10), strconv.FormatInt(s.opts.shardRecheckMs(), 10)}
}

// heartbeatDigest names what a heartbeat says of its device: owner,
// device and the two lists. The record keeps it (field ld), so a full
// heartbeat rewrites the lists only when they changed and an idle one
// (presence_beat) sends this name alone. SHA-256 over a domain tag and
// the four values, each but the last length-prefixed so no shift of bytes
// between them collides; 128 bits in base64url (22 characters). A device
// can only make its own record keep its own older lists, and 128 bits
// leave no practical collision anyway.
func heartbeatDigest(owner string, device, caps, withheld []byte) string {
	h := sha256.New()
	h.Write([]byte("byollm-relay heartbeat v1\x00"))
	var n [8]byte
	for _, b := range [][]byte{[]byte(owner), device, caps} {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	h.Write(withheld)
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:16])
}

// orEmptyArray stores a missing matrix as [], the reference's empty answer.
func orEmptyArray(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("[]")
	}
	return b
}

// Presence reads one runner's record; nil, nil when there is none.
func (s *Store) Presence(ctx context.Context, runnerID string) (*Presence, error) {
	if err := s.checkID("runner id", runnerID); err != nil {
		return nil, fmt.Errorf("presence: %w", err)
	}
	msg, err := s.run(ctx, scPresenceGet, []string{s.k.presence(runnerID)})
	if err != nil {
		return nil, fmt.Errorf("presence: %w", err)
	}
	p, err := parsePresence(msg)
	if err != nil {
		return nil, fmt.Errorf("presence: %w", err)
	}
	return p, nil
}

// PresenceHead reads one runner's record without its capabilities and
// withheld lists (they are nil): its owner, device and lastSeenAt, which is
// all a daemon's authentication uses. nil, nil when there is none.
func (s *Store) PresenceHead(ctx context.Context, runnerID string) (*Presence, error) {
	if err := s.checkID("runner id", runnerID); err != nil {
		return nil, fmt.Errorf("presence head: %w", err)
	}
	// One plain HMGET, not a script: it authenticates every daemon
	// request (an idle claim included), and a single-key read needs no
	// atomicity a command does not have. A record always has runnerId, so
	// all-nil fields mean there is none.
	vals, err := s.do(ctx, "presence_head", s.c.B().Hmget().Key(s.k.presence(runnerID)).
		Field("runnerId", "owner", "device", "lastSeenAt").Build()).ToArray()
	if err != nil {
		return nil, fmt.Errorf("presence head: %w", err)
	}
	if len(vals) != 4 {
		return nil, fmt.Errorf("presence head: %w: %d fields", ErrUnexpectedReply, len(vals))
	}
	f := make([]string, 4)
	for i, v := range vals {
		if v.IsNil() {
			if i == 0 {
				return nil, nil
			}
			return nil, fmt.Errorf("presence head: %w: field %d of a record is missing", ErrUnexpectedReply, i)
		}
		if f[i], err = v.ToString(); err != nil {
			return nil, fmt.Errorf("presence head: %w", err)
		}
	}
	p := &Presence{RunnerID: f[0], Owner: f[1]}
	if p.LastSeenAt, err = strconv.ParseInt(f[3], 10, 64); err != nil {
		return nil, fmt.Errorf("presence head: lastSeenAt: %w", err)
	}
	if err := json.Unmarshal([]byte(f[2]), &p.Device); err != nil {
		return nil, fmt.Errorf("presence head: device: %w", err)
	}
	return p, nil
}

// Everyone lists every record in first-seen order, dropping index entries
// whose record is gone. Read in pages, so not one atomic snapshot.
func (s *Store) Everyone(ctx context.Context) ([]Presence, error) {
	type seen struct {
		p   Presence
		seq float64
	}
	var all []seen
	// Shard by shard (a runner's record and index entry are on its shard),
	// merged by first-seen number: a server-clock instant (next_seq), so
	// the merge is first-seen order across shards too.
	for sh := range s.k.shards {
		err := s.pages(ctx, scPresenceAll, s.k.presenceIndex(sh), nil, []string{strconv.Itoa(s.limits.presenceEntries), strconv.Itoa(s.limits.presenceBytes)},
			func(items []valkey.ValkeyMessage) error {
				for _, r := range items {
					p, err := parsePresence(r)
					if err != nil {
						return err
					}
					h, err := flatMap(r)
					if err != nil {
						return err
					}
					if p != nil {
						n, _ := strconv.ParseFloat(h["_seq"], 64)
						all = append(all, seen{*p, n})
					}
				}
				return nil
			})
		if err != nil {
			return nil, fmt.Errorf("everyone: %w", err)
		}
	}
	slices.SortStableFunc(all, func(a, b seen) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]Presence, len(all))
	for i, e := range all {
		out[i] = e.p
	}
	return out, nil
}

// DropPresence deletes a runner's record, as a presence TTL would.
func (s *Store) DropPresence(ctx context.Context, runnerID string) error {
	if err := s.checkID("runner id", runnerID); err != nil {
		return fmt.Errorf("drop presence: %w", err)
	}
	if _, err := s.run(ctx, scPresenceDrop, []string{s.k.presence(runnerID), s.k.presenceIndex(s.k.runnerShard(runnerID))}, enc(runnerID)); err != nil {
		return fmt.Errorf("drop presence: %w", err)
	}
	return nil
}

// Advertised lists what one owner's devices advertise now: the capability
// rows of every presence record of that owner (grantengine.Advertiser; the
// built-in grant engine's satisfiable reads it). One script call, reading
// only that owner's records.
func (s *Store) Advertised(ctx context.Context, owner string) ([]protocol.Capability, error) {
	if err := s.checkID("owner", owner); err != nil {
		return nil, fmt.Errorf("advertised: %w", err)
	}
	// An owner's devices may be on any shard (each record is on its
	// runner's): one read-only call per shard.
	var blobs []string
	for sh := range s.k.shards {
		msg, err := s.run(ctx, scPresenceByOwner, []string{s.k.presenceByOwner(sh, owner)}, owner)
		if err != nil {
			return nil, fmt.Errorf("advertised: %w", err)
		}
		got, err := msg.AsStrSlice()
		if err != nil {
			return nil, fmt.Errorf("advertised: reply: %w", err)
		}
		blobs = append(blobs, got...)
	}
	var out []protocol.Capability
	for _, b := range blobs {
		var caps []protocol.Capability
		if err := json.Unmarshal([]byte(b), &caps); err != nil {
			return nil, fmt.Errorf("advertised: stored capabilities: %w", err)
		}
		out = append(out, caps...)
	}
	return out, nil
}

// presenceSeenKeys is presence_seen's keys, all on the runner's shard.
func (s *Store) presenceSeenKeys(runnerID, owner string) []string {
	sh := s.k.runnerShard(runnerID)
	return []string{s.k.presence(runnerID), s.k.presenceIndex(sh), s.k.presenceSeq(sh), s.k.presenceByOwner(sh, owner)}
}

func (o Options) shardRecheckMs() int64 {
	if o.ShardRecheckMs > 0 {
		return o.ShardRecheckMs
	}
	return DefaultShardRecheckMs
}
