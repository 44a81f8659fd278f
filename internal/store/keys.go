package store

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash"
	"strconv"
	"sync"
)

// enc is the key-part encoding of store.md §9.2: base64url without padding.
// Its alphabet has no ':', '{', '}' or ';', so every key splits unambiguously
// and a hash tag built from it stays well-formed, whatever bytes the id holds.
func enc(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// dec reverses enc: scripts answer ids, owners and kinds in the encoded
// form the keys and records hold (records keep no raw id, site, owner,
// kind or audience).
func dec(what, e string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(e)
	if err != nil {
		return "", fmt.Errorf("%s %q is not base64url: %w", what, e, err)
	}
	return string(b), nil
}

// encJob is a job id's key part. A UUID in canonical lowercase form (what
// @byollm/server mints, crypto.randomUUID) is '~' and its 16 bytes in
// base64url, 23 characters where enc takes 48: a job's id is in its record's
// key and in two to four index members, so this is about a hundred bytes a
// job (layout v5). Any other id is enc's. '~' is not in base64url's alphabet,
// so the two forms never name the same id, and like base64url it is none of
// ':', '{', '}', ';' or '.', which keys and members split on.
func encJob(id string) string {
	b, ok := uuidBytes(id)
	if !ok {
		return enc(id)
	}
	return compactMark + base64.RawURLEncoding.EncodeToString(b[:])
}

const compactMark = "~"

// decJob reverses encJob.
func decJob(e string) (string, error) {
	if len(e) != 23 || e[:1] != compactMark {
		return dec("job id", e)
	}
	var b [16]byte
	if n, err := base64.RawURLEncoding.Decode(b[:], []byte(e[1:])); err != nil || n != 16 {
		return "", fmt.Errorf("job id %q is not a compact UUID (%v)", e, err)
	}
	const hexd = "0123456789abcdef"
	out := make([]byte, 0, 36)
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out = append(out, '-')
		}
		out = append(out, hexd[c>>4], hexd[c&15])
	}
	return string(out), nil
}

// uuidBytes is the 16 bytes of id if it is a UUID in canonical lowercase
// form (8-4-4-4-12 hex digits), the only form encJob compacts: it is the
// one that decJob gives back byte for byte.
func uuidBytes(id string) (b [16]byte, ok bool) {
	if len(id) != 36 {
		return b, false
	}
	j := 0
	for i := 0; i < 36; i++ {
		switch i {
		case 8, 13, 18, 23:
			if id[i] != '-' {
				return b, false
			}
			continue
		}
		hi, ok1 := lowerHex(id[i])
		lo, ok2 := lowerHex(id[i+1])
		if !ok1 || !ok2 {
			return b, false
		}
		b[j] = hi<<4 | lo
		j++
		i++
	}
	return b, true
}

func lowerHex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// keys builds every key name of one namespace.
//
// Fleet-wide keys (pairing codes, the projection, the policy, the layout
// record) start with "<ns>:{<ns>}:" and share one slot: each is small and
// bounded. Everything else lives in one of the namespace's shards: shard i's
// keys start with "<ns>:{<ns>/<i>-<n>}:" where n is the first suffix that
// puts the tag's cluster slot in the i-th of Shards equal slot ranges, so the
// shards spread over a cluster's primaries as evenly as its slot ranges do.
// A runner's shard is an HMAC of its id under the namespace's salt, a
// site's is chosen by the placement record (internal/layout): derived, never
// taken from the id, so no id can be crafted to pick its slot.
type keys struct {
	p      string   // fleet-wide prefix "<ns>:{<ns>}:"
	ns     string   // the namespace
	shards []string // shard prefixes, by index
	salt   []byte
	macs   *sync.Pool // of *shardMAC keyed with salt (withLayout)
	// place is where each site is: the placement record, cached
	// (internal/layout).
	place placer
	// unplaced: for one call that must not place (Store.siteKeys), the
	// sites the record does not name yet, read on their hash shard.
	unplaced map[string]int
}

// shardMAC is a keyed HMAC and its input buffer, pooled: building the HMAC
// per lookup was about a tenth of a request's allocations.
type shardMAC struct {
	h   hash.Hash
	buf []byte
}

func newKeys(namespace string) (keys, error) {
	if err := CheckNamespace(namespace); err != nil {
		return keys{}, err
	}
	return keys{p: KeyPrefix(namespace), ns: namespace}, nil
}

// withLayout fixes the shard count and salt of the namespace's layout record.
func (k keys) withLayout(shards int, salt []byte) keys {
	k.shards = make([]string, shards)
	for i := range shards {
		k.shards[i] = shardPrefix(k.ns, i, shards)
	}
	k.salt = salt
	k.macs = &sync.Pool{New: func() any { return &shardMAC{h: hmac.New(sha256.New, salt)} }}
	return k
}

// shardPrefix finds shard i's tag: the first "<ns>/<i>-<n>" whose slot lies
// in [i*16384/shards, (i+1)*16384/shards).
func shardPrefix(ns string, i, shards int) string {
	lo, hi := i*16384/shards, (i+1)*16384/shards
	for n := 0; ; n++ {
		tag := ns + "/" + strconv.Itoa(i) + "-" + strconv.Itoa(n)
		if s := int(keySlot(tag)); s >= lo && s < hi {
			return ns + ":{" + tag + "}:"
		}
	}
}

// keySlot is the cluster slot of a hash tag's content: CRC16/XMODEM mod 16384.
func keySlot(tag string) uint16 {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

// shardOf maps an id of one domain ("site", "runner") to its shard.
func (k keys) shardOf(domain, id string) int {
	m := k.macs.Get().(*shardMAC)
	defer k.macs.Put(m)
	m.h.Reset()
	m.buf = append(append(append(m.buf[:0], domain...), 0), id...)
	m.h.Write(m.buf)
	var sum [sha256.Size]byte
	return int(binary.BigEndian.Uint32(m.h.Sum(sum[:0])[:4]) % uint32(len(k.shards)))
}

// siteShard is a site's shard from the placement record. Every Store entry
// point that names a site places it first (Store.placeSites), so a miss is
// a bug in this package, never a reason to guess: a guess could split the
// site's keys over two shards.
func (k keys) siteShard(siteID string) int {
	if sh, ok := k.placedShard(siteID); ok {
		return sh
	}
	// Placed by this call, then forgotten by the bounded cache before its
	// use (the placer's bounded cache): the record has it.
	if sh, ok := k.place.Read(siteID); ok {
		return sh
	}
	panic("store: site " + strconv.Quote(siteID) + " used before it was placed")
}

// placedShard is a site's shard if this Store already knows it, without
// asking Valkey.
func (k keys) placedShard(siteID string) (int, bool) {
	if sh, ok := k.place.Cached(siteID); ok {
		return sh, true
	}
	sh, ok := k.unplaced[siteID]
	return sh, ok
}

// siteHashShard is an HMAC of a site id over the shards: where a read of
// a site with no placement looks (siteKeys), so such reads spread out.
func (k keys) siteHashShard(siteID string) int { return k.shardOf("site", siteID) }
func (k keys) runnerShard(runnerID string) int { return k.shardOf("runner", runnerID) }

// leaseShard is the shard whose script minted a lease: its first two hex
// digits (see mintLease). false for an id this store did not mint.
func (k keys) leaseShard(leaseID string) (int, bool) {
	if len(leaseID) < 2 {
		return 0, false
	}
	v, err := strconv.ParseUint(leaseID[:2], 16, 8)
	if err != nil || int(v) >= len(k.shards) {
		return 0, false
	}
	return int(v), true
}

// member names a job inside indexes that span sites: <eS>:<eJ>.
func member(siteID, jobID string) string { return enc(siteID) + ":" + encJob(jobID) }

// Per-shard keys. A site's keys are on its shard; a runner's hid and
// cxl sets exist once per shard where it holds grants.
func (k keys) sp(siteID string) string         { return k.shards[k.siteShard(siteID)] }
func (k keys) job(siteID, jobID string) string { return k.siteJobs(siteID) + encJob(jobID) }

func (k keys) seq(shard int) string         { return k.shards[shard] + "seq" }
func (k keys) due(shard int) string         { return k.shards[shard] + "due" }
func (k keys) lease(shard int) string       { return k.shards[shard] + "lease" }
func (k keys) epoch(shard int) string       { return k.shards[shard] + "epoch" }
func (k keys) stateCounts(shard int) string { return k.shards[shard] + "stc" }

// siteJobs is the prefix of the site's job records: the record of the job
// an index names by eJ is siteJobs(siteID) + eJ.
func (k keys) siteJobs(siteID string) string { return k.sp(siteID) + "j:" + enc(siteID) + ":" }

func (k keys) readyQueue(siteID, owner, kind, audience string) string {
	return k.sp(siteID) + "q:" + enc(siteID) + ":" + enc(owner) + ":" + enc(kind) + ":" + enc(audience)
}
func (k keys) stickyQueue(siteID, owner, runnerID string) string {
	return k.sp(siteID) + "sq:" + enc(siteID) + ":" + enc(owner) + ":" + enc(runnerID)
}
func (k keys) unsealed(siteID, owner string) string {
	return k.sp(siteID) + "uns:" + enc(siteID) + ":" + enc(owner)
}
func (k keys) awaiting(siteID string) string  { return k.sp(siteID) + "aw:" + enc(siteID) }
func (k keys) siteLive(siteID string) string  { return k.sp(siteID) + "sl:" + enc(siteID) }
func (k keys) siteBytes(siteID string) string { return k.sp(siteID) + "sb:" + enc(siteID) }
func (k keys) siteRate(siteID string) string  { return k.sp(siteID) + "sr:" + enc(siteID) }
func (k keys) finished(siteID string) string  { return k.sp(siteID) + "fin:" + enc(siteID) }

// siteState is every key that holds a site's state on shard (its live
// jobs, awaiting, finished results, stored bytes): a site with none of
// them has nothing to split, so its placement may end (ReapSites).
func (k keys) siteState(shard int, siteID string) []string {
	p, e := k.shards[shard], enc(siteID)
	return []string{p + "sl:" + e, p + "aw:" + e, p + "fin:" + e, p + "sb:" + e}
}
func (k keys) heldIDs(shard int, runnerID string) string {
	return k.shards[shard] + "hid:" + enc(runnerID)
}
func (k keys) cancelled(shard int, runnerID string) string {
	return k.shards[shard] + "cxl:" + enc(runnerID)
}

// runnerShards is the runner-side record of the shards where a runner may
// hold grants: shard index -> the latest deadline of a grant made there
// (ZADD GT). A superset: every holder operation re-checks inside the
// shard's own script.
func (k keys) runnerShards(runnerID string) string {
	return k.shards[k.runnerShard(runnerID)] + "rsh:" + enc(runnerID)
}

// Presence lives on the runner's shard, with that shard's listing indexes.
func (k keys) presence(runnerID string) string {
	return k.shards[k.runnerShard(runnerID)] + "p:" + enc(runnerID)
}
func (k keys) presenceIndex(shard int) string { return k.shards[shard] + "pidx" }
func (k keys) presenceSeq(shard int) string   { return k.shards[shard] + "pseq" }

// retentionIndex is the shard's ls: runner -> an instant at most an hour
// before its last heartbeat (lua/lib/presence.lua index_seen); retentionFill
// the backfill's cursor over pidx (lua/presence_backfill.lua).
func (k keys) retentionIndex(shard int) string { return k.shards[shard] + "ls" }
func (k keys) retentionFill(shard int) string  { return k.shards[shard] + "lsfill" }
func (k keys) presenceByOwner(shard int, owner string) string {
	return k.shards[shard] + "po:" + enc(owner)
}

// Fleet-wide keys.
func (k keys) pairing(part string) string { return k.p + "pc:" + part }
func (k keys) layout() string             { return k.p + "layout" }

// pattern matches every key of the namespace, fleet-wide and sharded
// (tests, operators). No other namespace's key starts with "<ns>:".
func (k keys) pattern() string { return k.ns + ":*" }
