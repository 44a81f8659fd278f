package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/payloadwait"
	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/valkeyconn"
	"github.com/byollm/relay-go/internal/workview"
)

// claimStats describes one claim call; tests use it to show that a claim's
// cost does not depend on jobs outside its routes.
type claimStats struct {
	Scanned     int  // queue entries examined
	Truncated   bool // stopped by ClaimScanBudget
	Quarantined int  // stubs that failed strict validation
	Attempts    int  // claim scripts run (more than 1 when a sweep came first or the scan continued)
	// PresenceVerified: under RequirePresence, the claim read the
	// runner's presence record and found it holding Owner and Device.
	PresenceVerified bool
}

// ErrPresenceChanged is Claim's answer under RequirePresence when the
// runner's presence record does not hold exactly the given owner and
// device (or is gone). Nothing was written.
var ErrPresenceChanged = errors.New("presence record changed")

// claimAttemptsBeforeForce: after this many claim scripts found more due
// work than ClaimSettleBudget (each followed by a full Sweep), the next one
// settles everything itself rather than loop.
const claimAttemptsBeforeForce = 3

// Claim settles what is due, then grants the oldest queued jobs of the
// caller's routes that pass every filter of §3.2, at most Max, at most two
// unsealed per (site, job owner) pair. Each grant is atomic with its choice.
//
// Settling first is bounded: the claim script settles up to
// ClaimSettleBudget due jobs itself; when more are due it changes nothing and
// asks Go to drain them with Sweep (bounded batches), then runs again. Either
// way the grants are chosen only after everything due at that instant was
// settled, as the reference's sweep-first claim does.
//
// A claim that fails after one of its claim scripts may have run (its
// context ended while a reply was due, or a later step failed) returns an
// *UnansweredClaim naming every lease id it may have granted; GiveBack
// hands them back.
func (s *Store) Claim(ctx context.Context, in ClaimInput) ([]ClaimedStub, error) {
	out, _, err := s.claim(ctx, in)
	return out, err
}

// ClaimVerified is Claim that also says whether the claim verified the
// runner's presence record: under RequirePresence, it read the record and
// found it holding Owner and Device. A claim the work view rules out reads
// nothing and verifies nothing.
func (s *Store) ClaimVerified(ctx context.Context, in ClaimInput) ([]ClaimedStub, bool, error) {
	out, stats, err := s.claim(ctx, in)
	return out, stats.PresenceVerified, err
}

func (s *Store) claim(ctx context.Context, in ClaimInput) ([]ClaimedStub, claimStats, error) {
	token, err := newClaimToken()
	if err != nil {
		return nil, claimStats{}, fmt.Errorf("claim: token: %w", err)
	}
	u := &UnansweredClaim{RunnerID: in.RunnerID, Token: token}
	out, stats, err := s.claimWith(ctx, in, u)
	s.forgetUngranted(u.Leases, out)
	if err != nil && len(u.Leases) > 0 {
		u.Err = err
		return nil, stats, u
	}
	return out, stats, err
}

// forgetUngranted drops the notes (taken in claimShard) of the minted
// lease ids that granted nothing: no fetch will present them.
func (s *Store) forgetUngranted(minted []string, out []ClaimedStub) {
	if len(minted) == 0 {
		return
	}
	granted := make(map[string]bool, len(out))
	for _, g := range out {
		granted[payloadwait.Minted(g.Lease.ID)] = true
	}
	for _, id := range minted {
		if !granted[id] {
			s.payloads.Forget(id)
		}
	}
}

// claimWith is Claim under u's token; each lease id minted for a claim
// script is added to u.Leases before the script is sent.
func (s *Store) claimWith(ctx context.Context, in ClaimInput, u *UnansweredClaim) ([]ClaimedStub, claimStats, error) {
	var stats claimStats
	if err := s.checkClaim(in); err != nil {
		return nil, stats, fmt.Errorf("claim: %w", err)
	}
	routes := dedupeRoutes(in.Routes)
	kinds := dedupe(in.Kinds)
	if in.Max <= 0 || len(routes) == 0 || len(kinds) == 0 {
		// Nothing can be granted, but the reference still sweeps (trap 19).
		if _, err := s.Sweep(ctx); err != nil {
			return nil, stats, fmt.Errorf("claim: %w", err)
		}
		return []ClaimedStub{}, stats, nil
	}
	device, err := protocol.Marshal(in.Device)
	if err != nil {
		return nil, stats, fmt.Errorf("claim: %w", err)
	}
	// Routes by shard, each shard's in input order.
	sites := make([]string, len(routes))
	for i, r := range routes {
		sites[i] = r.SiteID
	}
	if err := s.placeSites(ctx, sites...); err != nil {
		return nil, stats, fmt.Errorf("claim: %w", err)
	}
	byShard := map[int][]Route{}
	for _, r := range routes {
		sh := s.k.siteShard(r.SiteID)
		byShard[sh] = append(byShard[sh], r)
	}
	// The runner's records are on the runner's shard, the grants on the
	// sites' shards, so they are read just before the claim scripts rather
	// than inside them (a change racing with this read is
	// indistinguishable from one landing just after the claim), in the
	// same pipelined batch as the claim's queue heads: its presence (owner
	// and device, the condition under RequirePresence; ld, whether a
	// heartbeat marked its record of shards as holding nothing) and that
	// record (rsh), so a claim whose grants rsh already covers writes
	// nothing there (shardsRecorded). When the work view knows there is
	// nothing to read, nothing can be granted and nothing is read: an idle
	// device's empty claim costs Valkey nothing, and a lost record is
	// rebuilt by its next heartbeat instead.
	plan := s.claimPlan(in, byShard, kinds)
	if len(plan.live) == 1 && plan.announced && !valkeyconn.IsCluster(s.c) {
		out, err := s.claimFused(ctx, in, u, plan, byShard, kinds, device, &stats)
		return out, stats, err
	}
	runnerRead := []valkey.Completed{
		s.c.B().Hmget().Key(s.k.presence(in.RunnerID)).Field("owner", "device", "ld").Build(),
		s.c.B().Zrange().Key(s.k.runnerShards(in.RunnerID)).Min("0").Max("-1").Withscores().Build(),
	}
	order, others, runnerRecs, err := s.claimOrder(ctx, plan, byShard, runnerRead)
	if err != nil {
		return nil, stats, fmt.Errorf("claim: %w", err)
	}
	if runnerRecs != nil && in.RequirePresence {
		p, err := runnerRecs[0].ToArray()
		if err != nil {
			return nil, stats, fmt.Errorf("claim: presence: %w", err)
		}
		owner, err1 := p[0].ToString()
		dev, err2 := p[1].ToString()
		if err1 != nil || err2 != nil || owner != in.Owner || dev != string(device) {
			return nil, stats, fmt.Errorf("claim: %w", ErrPresenceChanged)
		}
		stats.PresenceVerified = true
	}
	if len(others) > 0 {
		// Only now: a claim refused for its presence writes nothing.
		if _, err := s.sweepShards(ctx, others); err != nil {
			return nil, stats, fmt.Errorf("claim: %w", err)
		}
	}
	out := []ClaimedStub{}
	deadlines := map[int]int64{}
	rest := order
	var open *claimSection
	if len(order) > 1 && !valkeyconn.IsCluster(s.c) {
		got, dls, next, stopped, err := s.claimShards(ctx, in, u, order, byShard, kinds, device, &stats)
		if err != nil {
			return out, stats, err
		}
		out = append(out, got...)
		maps.Copy(deadlines, dls)
		rest, open = order[next:], stopped
	}
	for _, sh := range rest {
		if len(out) >= in.Max {
			break
		}
		sec := open // the section claimShards stopped in is rest's first
		if sec == nil {
			var err error
			if sec, err = s.newClaimSection(in, u, sh, byShard[sh], kinds, in.Max-len(out)); err != nil {
				return out, stats, err
			}
		}
		open = nil
		got, dl, err := s.claimShard(ctx, in, u, sec, kinds, device, in.Max-len(out), &stats)
		if err != nil {
			return out, stats, err
		}
		out = append(out, got...)
		if len(got) > 0 {
			deadlines[sh] = max(deadlines[sh], dl)
		}
	}
	// One answer in first-enqueue order, whichever shard granted what.
	slices.SortStableFunc(out, func(a, b ClaimedStub) int { return cmp.Compare(a.seq, b.seq) })
	if len(deadlines) > 0 && !shardsRecorded(runnerRecs, deadlines) {
		if err := s.recordRunnerShards(ctx, in.RunnerID, deadlines); err != nil {
			return out, stats, err
		}
	}
	return out, stats, nil
}

// recordRunnerShards writes the runner-side record of the shards to visit
// for the bare-id probe and cancel requests, deadlines being the latest
// deadline of the claim's grants on each shard: written before the reply,
// so it exists before the daemon can present any lease (store.md trap
// 36); the same call tells the runner's heartbeats to read it again
// (lua/presence_beat.lua).
func (s *Store) recordRunnerShards(ctx context.Context, runnerID string, deadlines map[int]int64) error {
	args := make([]string, 0, 2*len(deadlines))
	for sh, dl := range deadlines {
		args = append(args, strconv.Itoa(sh), strconv.FormatInt(recordedDeadline(dl), 10))
	}
	if _, err := s.run(ctx, scRunnerShardsAdd, []string{s.k.runnerShards(runnerID), s.k.presence(runnerID)}, args...); err != nil {
		return fmt.Errorf("claim: runner shards: %w", err)
	}
	return nil
}

// claimFused is a claim whose routes may hold queued work on one shard
// only (plan.live), lately announced, on a server that is not a cluster:
// one script call,
// with no read before it. The call checks the runner's presence (under
// RequirePresence) and keeps its record of shards itself, and settles
// the shards whose due head the work view does not know in sections of
// their own, so it does everything the read and the calls around the
// claim script would have done. What it leaves (a section that stopped
// it with more to do) goes on as the other path's calls do.
func (s *Store) claimFused(ctx context.Context, in ClaimInput, u *UnansweredClaim, plan claimPlan, byShard map[int][]Route, kinds []string, device []byte, stats *claimStats) ([]ClaimedStub, error) {
	home := plan.live[0]
	first, err := s.newClaimSection(in, u, home, byShard[home], kinds, in.Max)
	if err != nil {
		return nil, err
	}
	secs := []*claimSection{first}
	for _, sh := range plan.dueRead {
		if sh == home {
			continue // its section settles it
		}
		sec, err := s.newClaimSection(in, u, sh, nil, kinds, in.Max)
		if err != nil {
			return nil, err
		}
		secs = append(secs, sec)
	}
	rp := &runnerPart{mode: "r", keys: []string{s.k.presence(in.RunnerID), s.k.runnerShards(in.RunnerID)}}
	if in.RequirePresence {
		rp.mode = "R"
	}
	stats.Attempts++
	scan := max(1, min(s.limits.claimScan, s.opts.ClaimScanBudget))
	rep, err := s.runClaim(ctx, in, u, kinds, device, in.Max, scan, s.opts.ClaimSettleBudget, secs, rp)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	switch rep.status {
	case "presence":
		return nil, fmt.Errorf("claim: %w", ErrPresenceChanged)
	case "revoked":
		return nil, fmt.Errorf("claim: %w", errClaimRevoked)
	}
	stats.PresenceVerified = in.RequirePresence
	s.note(stats, rep)
	out := []ClaimedStub{}
	for _, g := range rep.grants {
		out = append(out, g...)
	}
	// Settling sections the call did not get to, or that found more due
	// than their budget, are swept as the other path sweeps shards outside
	// the claim's routes.
	var left []int
	stopped := len(rep.grants)
	for i, sec := range secs {
		if i >= stopped || (i == stopped-1 && rep.status == "sweep") {
			left = append(left, sec.sh)
		}
	}
	if len(left) > 0 {
		if _, err := s.sweepShards(ctx, left); err != nil {
			return out, fmt.Errorf("claim: %w", err)
		}
	}
	more := stopped == 1 && len(out) < in.Max && (rep.status == "sweep" || rep.truncated == 1)
	if more && rep.status != "sweep" && stats.Scanned >= s.opts.ClaimScanBudget {
		stats.Truncated = true
		s.log.Warn("store: claim stopped at its scan budget", "runner", in.RunnerID, "budget", s.opts.ClaimScanBudget)
		more = false
	}
	if more {
		// The claim's own section has more to do: on from where it stopped
		// (from its queues' heads after a sweep), the record of shards
		// kept by Go for what it grants now.
		if rep.status != "sweep" {
			first.granted(len(rep.grants[0]), rep.cursors)
		}
		got, dl, err := s.claimShard(ctx, in, u, first, kinds, device, in.Max-len(out), stats)
		if err != nil {
			return out, err
		}
		out = append(out, got...)
		if len(got) > 0 {
			if err := s.recordRunnerShards(ctx, in.RunnerID, map[int]int64{home: dl}); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// runnerShardsGrain rounds up the deadlines a runner's record of shards
// (rsh) takes, in ms: the claims of one runner whose grants end within the
// same 30 s find their shards recorded already and write nothing there
// (shardsRecorded). The record is a superset anyway; a shard stays in it
// at most this much longer than its latest grant needs.
const runnerShardsGrain = 30_000

// recordedDeadline is deadline dl as rsh records it.
func recordedDeadline(dl int64) int64 {
	return (dl + runnerShardsGrain - 1) / runnerShardsGrain * runnerShardsGrain
}

// shardsRecorded: does what the claim read of the runner's records (its
// presence fields owner, device, ld and rsh with scores, read before the
// grants; nil when not read) show that runner_shards_add would change
// nothing that matters? It would not when the presence record exists
// without nr (no ":" in ld: heartbeats read rsh) and rsh holds every shard
// granted on, each at or past its new deadline: then rsh already names
// those shards until the grants end (its TTL lies ten minutes past its
// latest score), and nothing between the read and here can take a shard
// out whose deadline lies ahead (a heartbeat drops only past ones). A
// record deleted meanwhile (forgotten, reaped) is the same race as one
// deleted just after runner_shards_add.
func shardsRecorded(recs []valkey.ValkeyResult, deadlines map[int]int64) bool {
	if recs == nil {
		return false
	}
	p, err := recs[0].ToArray()
	if err != nil || len(p) != 3 || p[0].IsNil() {
		return false
	}
	if !p[2].IsNil() {
		ld, err := p[2].ToString()
		if err != nil || strings.Contains(ld, ":") {
			return false
		}
	}
	z, err := recs[1].AsZScores()
	if err != nil {
		return false
	}
	recorded := make(map[string]float64, len(z))
	for _, e := range z {
		recorded[e.Member] = e.Score
	}
	for sh, dl := range deadlines {
		if at, ok := recorded[strconv.Itoa(sh)]; !ok || at < float64(dl) {
			return false
		}
	}
	return true
}

// claimOrder finds what is due outside the claim's shards (others: the
// reference sweeps everything before a claim, which the caller does once
// the claim may go ahead) and chooses which of the claim's shards to call
// (plan.live and those with due work), in which order: by the oldest
// entry (lowest seq, an enqueue instant) at the head of any of the claim's
// queues there, so the oldest eligible job over all routes is considered
// first. A shard with no queued
// entry on these routes and nothing due is not called at all: it has
// nothing to grant. All of it is read with one TIME and one pipelined batch
// of ZRANGEs, no script. The commands of extra join that batch, and their
// replies are returned; when nothing is read they are not sent either (nil
// replies).
func (s *Store) claimOrder(ctx context.Context, plan claimPlan, byShard map[int][]Route, extra []valkey.Completed) (order, others []int, extraReplies []valkey.ValkeyResult, err error) {
	at, dueRead := plan.at, plan.dueRead
	type qref struct {
		shard int
		key   string
		st    workview.Stamp
	}
	var refs []qref
	var cmds []valkey.Completed
	for _, sh := range plan.live {
		st := s.view.Stamp(sh)
		for _, key := range plan.queues[sh] {
			refs = append(refs, qref{sh, key, st})
			cmds = append(cmds, s.c.B().Zrange().Key(key).Min("0").Max("0").Withscores().Build())
		}
	}
	withExtra := len(extra) > 0 && (len(cmds) > 0 || len(dueRead) > 0)
	if withExtra {
		cmds = append(cmds, extra...)
	}
	var replies []valkey.ValkeyResult
	heads, now, err := s.dueHeadsWith(ctx, "claim_heads", dueRead, cmds, &replies)
	if err != nil {
		return nil, nil, nil, err
	}
	if withExtra {
		extraReplies = replies[len(replies)-len(extra):]
		replies = replies[:len(replies)-len(extra)]
	}
	due := make([]bool, len(s.k.shards))
	for i, sh := range dueRead {
		due[sh] = heads[i] <= now
		if _, mine := byShard[sh]; due[sh] && !mine {
			others = append(others, sh)
		}
	}
	head := map[int]float64{}
	for i, r := range refs {
		z, err := replies[i].AsZScores()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("queue head: %w", err)
		}
		if len(z) == 0 {
			s.view.SawEmpty(r.shard, r.st, r.key, at)
			continue
		}
		if h, ok := head[r.shard]; !ok || z[0].Score < h {
			head[r.shard] = z[0].Score
		}
	}
	for sh := range byShard {
		_, queued := head[sh]
		if queued || due[sh] {
			order = append(order, sh)
		}
	}
	slices.SortFunc(order, func(a, b int) int {
		ha, qa := head[a]
		hb, qb := head[b]
		switch {
		case qa && qb && ha != hb:
			return cmp.Compare(ha, hb)
		case qa != qb: // a shard with queued entries before one with only due work
			if qa {
				return -1
			}
			return 1
		}
		return cmp.Compare(a, b)
	})
	return order, others, extraReplies, nil
}

// claimPlan is what the work view says before a claim reads anything: the
// shards whose due head it does not know (dueRead), the claim's shards
// whose queues it does not know to be empty (live, in shard order, with
// their queue keys), and whether a queue of those was announced lately
// (announced: the claim likely finds work, so claimFused's one call beats
// a read first; a claim that finds nothing costs less as a read).
type claimPlan struct {
	at        time.Time
	dueRead   []int
	live      []int
	queues    map[int][]string
	announced bool
}

// claimPlan asks the work view what a claim for routes (byShard) and
// kinds must read: shards with nothing due and queues seen empty since
// are not read (see internal/workview). A queue whose emptiness is
// untrusted only because of this Store's own writes gets its fence sent.
func (s *Store) claimPlan(in ClaimInput, byShard map[int][]Route, kinds []string) claimPlan {
	p := claimPlan{at: s.view.Now(), queues: map[int][]string{}}
	offset := s.offset.Load()
	for sh := range s.k.shards {
		if !s.view.NotDue(sh, p.at, offset) {
			p.dueRead = append(p.dueRead, sh)
		}
	}
	for sh := range s.k.shards {
		rs, ok := byShard[sh]
		if !ok {
			continue
		}
		queues := s.claimQueues(in, rs, kinds)
		empty, fence := s.view.QueuesEmpty(sh, queues, p.at)
		if empty {
			continue
		}
		if fence != "" {
			// Sent after this Store's writes on the shard; the read
			// that follows answers this claim meanwhile.
			go s.view.SendFence(sh, fence)
		}
		p.live = append(p.live, sh)
		p.queues[sh] = queues
		p.announced = p.announced || s.view.RecentlyAnnounced(sh, queues)
	}
	return p
}

// claimLooksEmpty: does the work view know that a claim by this runner
// for c's routes and kinds would grant nothing, so that nothing its
// heartbeat answers can lead to work sooner? It reads nothing from Valkey
// and changes nothing; anything it does not know (a site not placed yet,
// a queue not seen empty, a shard whose due reading is old) is false.
func (s *Store) claimLooksEmpty(runnerID, owner string, c *IdleClaim) bool {
	routes, kinds := dedupeRoutes(c.Routes), dedupe(c.Kinds)
	if len(routes) == 0 || len(kinds) == 0 {
		return true // such a claim reads nothing and grants nothing (Claim)
	}
	in := ClaimInput{RunnerID: runnerID, Owner: owner}
	byShard := map[int][]Route{}
	for _, r := range routes {
		sh, ok := s.k.placedShard(r.SiteID)
		if !ok {
			return false
		}
		byShard[sh] = append(byShard[sh], r)
	}
	at, offset := s.view.Now(), s.offset.Load()
	for sh, rs := range byShard {
		if !s.view.Quiet(sh, s.claimQueues(in, rs, kinds), at, offset) {
			return false
		}
	}
	return true
}

// claimQueues is the queue keys claim reads for routes (all on one shard),
// in the order the claim script expects them: per route, the ready queues
// of the kinds (private only on the device owner's own routes), then the
// runner's sticky queue.
func (s *Store) claimQueues(in ClaimInput, routes []Route, kinds []string) []string {
	var out []string
	for _, r := range routes {
		out = append(out, s.routeQueues(in, r, kinds)...)
	}
	return out
}

func (s *Store) routeQueues(in ClaimInput, r Route, kinds []string) []string {
	queues := make([]string, 0, 2*len(kinds)+1)
	for _, kind := range kinds {
		if r.Owner == in.Owner {
			queues = append(queues, s.k.readyQueue(r.SiteID, r.Owner, kind, protocol.AudiencePrivate))
		}
		queues = append(queues, s.k.readyQueue(r.SiteID, r.Owner, kind, protocol.AudienceTeam))
	}
	return append(queues, s.k.stickyQueue(r.SiteID, r.Owner, in.RunnerID))
}

// mintLease is a UUID v4 (crypto/rand) whose first byte names the shard
// that grants it, so a holder operation finds the grant's shard from the
// lease id alone. The version and variant bits are untouched. The claim
// script appends the granted job's site to it when that fits MaxIDBytes
// (lua/lib/store.lua: a done job then needs no lease-index entry).
func mintLease(shard int) (string, error) {
	id, err := uuid.NewRandom()
	if err != nil {
		return "", err
	}
	id[0] = byte(shard)
	return id.String(), nil
}

// claimSection is one shard's part of a claim script call (lua/claim.lua's
// sections): its keys, and its ARGV after the shared ones.
type claimSection struct {
	sh       int
	keys     []string
	args     []string // its number of keys, nr, per route eS eO nq, the cursors, nl and the lease ids
	cursorAt int      // where in args the cursors start
	queues   []string // its queue keys, in KEYS order
	leaseAt  int      // where in args nl stands; the lease ids follow it
}

// newClaimSection is shard sh's section of a claim for at most remaining
// grants on routes (all on sh), with every queue read from its head. Its
// lease ids are minted here: one per possible grant (at most remaining,
// at most 2 per pair), each added to u.Leases and noted as an unsealed
// grant of this replica before any script is sent (a seal announced
// right after the grant must find the note to end it), and only while
// every seal would be heard: a fetch of a noted grant waits for the seal
// before it reads (Store.PayloadUnsealed).
func (s *Store) newClaimSection(in ClaimInput, u *UnansweredClaim, sh int, routes []Route, kinds []string, remaining int) (*claimSection, error) {
	c := &claimSection{sh: sh, keys: []string{s.k.due(sh), s.k.lease(sh), s.k.heldIDs(sh, in.RunnerID)}}
	c.args = []string{"", strconv.Itoa(len(routes))}
	for _, r := range routes {
		queues := s.routeQueues(in, r, kinds)
		c.keys = append(c.keys, s.k.unsealed(r.SiteID, r.Owner), s.k.awaiting(r.SiteID))
		c.keys = append(c.keys, queues...)
		c.args = append(c.args, enc(r.SiteID), enc(r.Owner), strconv.Itoa(len(queues)))
		c.queues = append(c.queues, queues...)
	}
	c.args[0] = strconv.Itoa(len(c.keys))
	c.cursorAt = len(c.args)
	for range c.queues {
		c.args = append(c.args, "") // every queue from its head
	}
	c.leaseAt = len(c.args)
	n := min(remaining, UnsealedPerPair*len(routes))
	c.args = append(c.args, strconv.Itoa(n))
	at := s.view.Now()
	noting := !s.announce || s.view.Live()
	for range n {
		id, err := mintLease(sh)
		if err != nil {
			return nil, fmt.Errorf("claim: lease id: %w", err)
		}
		c.args = append(c.args, id)
		u.Leases = append(u.Leases, id) // before the script is sent: it may run unanswered
		if noting {
			s.payloads.Granted(id, at, at.Add(AwaitingPayloadMs*time.Millisecond))
		}
	}
	if u.Sites == nil {
		u.Sites = map[int][]string{}
	}
	seen := make(map[string]bool, len(routes)) // a claim calls each shard once
	for _, r := range routes {
		if !seen[r.SiteID] {
			seen[r.SiteID] = true
			u.Sites[sh] = append(u.Sites[sh], enc(r.SiteID))
		}
	}
	return c, nil
}

// granted drops the first n lease ids of c (a call granted with them) and
// sets the cursors where that call stopped.
func (c *claimSection) granted(n int, cursors []string) {
	copy(c.args[c.cursorAt:], cursors)
	left, _ := strconv.Atoi(c.args[c.leaseAt])
	c.args = append(c.args[:c.leaseAt+1], c.args[c.leaseAt+1+n:]...)
	c.args[c.leaseAt] = strconv.Itoa(left - n)
}

// claimReply is one claim script call's answer (lua/claim.lua).
type claimReply struct {
	status                          string
	grants                          [][]ClaimedStub // per section run
	deadlines                       []int64         // per section run: the latest deadline it granted (0: none)
	scanned, truncated, quarantined int64
	cursors                         []string // of the last section run
}

// runnerPart is the runner's share of a claim call that keeps the
// runner's records itself (lua/claim.lua runner_mode): "r", or "R" when
// the presence record must hold the claimant; keys are its presence
// record and its record of shards.
type runnerPart struct {
	mode string
	keys []string
}

// runClaim sends one claim call of secs for at most remaining grants,
// scanning at most scan entries and settling at most settle due jobs a
// section (-1: all), and hands its churn reports on. With rp the call
// also checks and keeps the runner's records (claimFused). What the call
// found empty it tells the work view, and every shard it wrote on.
func (s *Store) runClaim(ctx context.Context, in ClaimInput, u *UnansweredClaim, kinds []string, device []byte, remaining, scan, settle int, secs []*claimSection, rp *runnerPart) (claimReply, error) {
	args := []string{in.RunnerID, enc(in.RunnerID), in.Owner, string(device), strconv.FormatInt(in.LeaseMs, 10),
		strconv.Itoa(remaining), strconv.Itoa(scan), strconv.Itoa(settle), enc(in.Owner), u.Token, strconv.Itoa(s.opts.MaxIDBytes)}
	if rp != nil {
		shards := make([]string, len(secs))
		for i, c := range secs {
			shards[i] = strconv.Itoa(c.sh)
		}
		args = append(args, rp.mode, strings.Join(shards, " "))
	} else {
		args = append(args, "", "")
	}
	args = append(args, strconv.Itoa(len(kinds)))
	for _, k := range kinds {
		args = append(args, enc(k))
	}
	args = append(args, strconv.Itoa(len(secs)))
	var keys []string
	at := s.view.Now()
	stamps := make([]workview.Stamp, len(secs))
	for i, c := range secs {
		keys = append(keys, c.keys...)
		args = append(args, c.args...)
		stamps[i] = s.view.Stamp(c.sh)
	}
	if rp != nil {
		keys = append(keys, rp.keys...)
	}
	msg, err := s.run(ctx, scClaim, keys, args...)
	if err != nil {
		// It may have run: every section may have written.
		for _, c := range secs {
			s.view.Touched(prefixOf(c.keys[0]))
		}
		return claimReply{}, err
	}
	parts, err := elems(msg, 12)
	if err != nil {
		return claimReply{}, err
	}
	var rep claimReply
	if rep.status, err = str(parts[0]); err != nil {
		return claimReply{}, err
	}
	if rep.status == "presence" {
		return rep, nil // nothing ran
	}
	reports, err := parseReports(parts[2])
	if err != nil {
		return claimReply{}, err
	}
	s.fireChurn(reports)
	rep.scanned, _ = num(parts[3])
	rep.truncated, _ = num(parts[4])
	rep.quarantined, _ = num(parts[5])
	stopped, err := num(parts[7])
	if err != nil || stopped < 1 || stopped > int64(len(secs)) {
		return claimReply{}, fmt.Errorf("%w: claim stopped in section %d of %d (%v)", ErrUnexpectedReply, stopped, len(secs), err)
	}
	each, err := parts[1].ToArray()
	if err != nil || len(each) != int(stopped) {
		return claimReply{}, fmt.Errorf("%w: claim answered grants of %d sections for %d run (%v)", ErrUnexpectedReply, len(each), stopped, err)
	}
	if err := s.claimSeen(secs[:stopped], stamps, at, parts[8:12]); err != nil {
		return claimReply{}, err
	}
	for _, g := range each {
		grants, dl, err := parseGrants(g, in.RunnerID)
		if err != nil {
			return claimReply{}, err
		}
		rep.grants = append(rep.grants, grants)
		rep.deadlines = append(rep.deadlines, dl)
	}
	if rep.status == "ok" && rep.truncated == 1 {
		last := secs[stopped-1]
		if rep.cursors, err = parts[6].AsStrSlice(); err != nil || len(rep.cursors) != len(last.queues) {
			return claimReply{}, fmt.Errorf("%w: claim: %d cursors for %d queues (%v)", ErrUnexpectedReply, len(rep.cursors), len(last.queues), err)
		}
	}
	return rep, nil
}

// claimSeen tells the work view what a claim call's sections (those that
// ran, with the stamps taken before it was sent) found, from the reply's
// empties, wrote, heads and now: the queues empty when the section ended,
// the shards they wrote on (what Store.exec does for a Work script, here
// per section, so a claim that found nothing leaves the view's empty
// queues trusted) and their due heads. What a section saw when it ended
// it saw after its own write: its stamp counts that write as one this
// Store made before the read, so it is trusted without a fence or a new
// due read unless another write of this Store on the shard came in
// between.
func (s *Store) claimSeen(secs []*claimSection, stamps []workview.Stamp, at time.Time, parts []valkey.ValkeyMessage) error {
	e, err1 := parts[0].ToArray()
	w, err2 := parts[1].AsIntSlice()
	heads, err3 := parts[2].AsStrSlice()
	now, err4 := parts[3].AsInt64()
	if err := errors.Join(err1, err2, err3, err4); err != nil || len(e) != len(secs) || len(w) != len(secs) || len(heads) != len(secs) {
		return fmt.Errorf("%w: claim: empties, writes and heads of %d, %d, %d sections for %d run (%v)", ErrUnexpectedReply, len(e), len(w), len(heads), len(secs), err)
	}
	raw := now - s.offset.Load()
	for i, c := range secs {
		st := stamps[i]
		if w[i] == 1 {
			s.view.Touched(prefixOf(c.keys[0]))
			st = st.AfterOwnWrite()
		}
		switch {
		case heads[i] == "-":
			s.view.SawDue(c.sh, st, at, raw, maxScore)
		case heads[i] != "":
			h, err := strconv.ParseFloat(heads[i], 64)
			if err != nil {
				return fmt.Errorf("%w: claim: due head %q", ErrUnexpectedReply, heads[i])
			}
			s.view.SawDue(c.sh, st, at, raw, int64(h))
		}
		idx, err := e[i].AsIntSlice()
		if err != nil {
			return fmt.Errorf("%w: claim: empties: %v", ErrUnexpectedReply, err)
		}
		for _, q := range idx {
			if q < 1 || int(q) > len(c.queues) {
				return fmt.Errorf("%w: claim: empty queue %d of %d", ErrUnexpectedReply, q, len(c.queues))
			}
			s.view.SawEmpty(c.sh, st, c.queues[q-1], at)
		}
	}
	return nil
}

// note adds a call's scanned and quarantined entries to stats.
func (s *Store) note(stats *claimStats, rep claimReply) {
	stats.Scanned += int(rep.scanned)
	stats.Quarantined += int(rep.quarantined)
	if rep.quarantined > 0 {
		s.log.Warn("store: quarantined stored stubs that no longer parse", "count", rep.quarantined)
	}
}

// claimShards makes a claim's first call on every shard of order at once,
// one section a shard (a server that is not a cluster: no slot to keep),
// which grants what one call a shard in order would have, in one script
// call instead of one a shard. It answers the grants, the latest
// deadline on each shard that granted, where in order the claim goes on
// shard by shard (claimShard): at the section the call stopped in when
// that one has more to do (more due than the settle budget, the scan
// budget spent with grants still wanted), answered too, to go on with
// where the call left it; else after it.
func (s *Store) claimShards(ctx context.Context, in ClaimInput, u *UnansweredClaim, order []int, byShard map[int][]Route, kinds []string, device []byte, stats *claimStats) ([]ClaimedStub, map[int]int64, int, *claimSection, error) {
	secs := make([]*claimSection, len(order))
	for i, sh := range order {
		var err error
		if secs[i], err = s.newClaimSection(in, u, sh, byShard[sh], kinds, in.Max); err != nil {
			return nil, nil, 0, nil, err
		}
	}
	stats.Attempts++
	scan := max(1, min(s.limits.claimScan, s.opts.ClaimScanBudget))
	rep, err := s.runClaim(ctx, in, u, kinds, device, in.Max, scan, s.opts.ClaimSettleBudget, secs, nil)
	if err != nil {
		return nil, nil, 0, nil, fmt.Errorf("claim: %w", err)
	}
	if rep.status == "revoked" {
		return nil, nil, 0, nil, fmt.Errorf("claim: %w", errClaimRevoked)
	}
	s.note(stats, rep)
	out := []ClaimedStub{}
	deadlines := map[int]int64{}
	for i, grants := range rep.grants {
		out = append(out, grants...)
		if len(grants) > 0 {
			deadlines[order[i]] = rep.deadlines[i]
		}
	}
	last := len(rep.grants) - 1
	switch {
	case rep.status == "sweep":
		return out, deadlines, last, secs[last], nil // it changed nothing: from its queues' heads
	case rep.truncated == 1 && len(out) < in.Max:
		secs[last].granted(len(rep.grants[last]), rep.cursors)
		return out, deadlines, last, secs[last], nil
	}
	return out, deadlines, last + 1, nil, nil
}

// claimShard runs the claim script on one shard (sec, as built or as a
// call left it) until it has granted remaining, exhausted its queues or
// spent the scan budget. It returns the grants and the latest deadline
// among them.
func (s *Store) claimShard(ctx context.Context, in ClaimInput, u *UnansweredClaim, sec *claimSection, kinds []string, device []byte, remaining int, stats *claimStats) ([]ClaimedStub, int64, error) {
	sh := sec.sh
	// Each script examines at most claimScan queue entries; a claim that
	// needs more continues where the last call stopped, until it has Max
	// grants, the queues are exhausted, or ClaimScanBudget entries were
	// examined in all. Every grant is still chosen and made in one script.
	out := []ClaimedStub{}
	var latest int64
	sweeps := 0
	for {
		stats.Attempts++
		settle := s.opts.ClaimSettleBudget
		if sweeps >= claimAttemptsBeforeForce {
			settle = -1
		}
		scan := max(1, min(s.limits.claimScan, s.opts.ClaimScanBudget-stats.Scanned))
		rep, err := s.runClaim(ctx, in, u, kinds, device, remaining, scan, settle, []*claimSection{sec}, nil)
		if err != nil {
			return out, latest, fmt.Errorf("claim: %w", err)
		}
		if rep.status == "revoked" {
			return out, latest, fmt.Errorf("claim: %w", errClaimRevoked)
		}
		if rep.status == "sweep" {
			sweeps++
			if _, err := s.sweepShards(ctx, []int{sh}); err != nil {
				return out, latest, fmt.Errorf("claim: %w", err)
			}
			continue
		}
		s.note(stats, rep)
		grants := rep.grants[0]
		latest = max(latest, rep.deadlines[0])
		out = append(out, grants...)
		remaining -= len(grants)
		if rep.truncated != 1 || remaining <= 0 {
			return out, latest, nil
		}
		if stats.Scanned >= s.opts.ClaimScanBudget {
			stats.Truncated = true
			s.log.Warn("store: claim stopped at its scan budget", "runner", in.RunnerID, "budget", s.opts.ClaimScanBudget)
			return out, latest, nil
		}
		sec.granted(len(grants), rep.cursors)
	}
}

// parseGrants reads a claim script's grants, and the latest deadline among
// them.
func parseGrants(m valkey.ValkeyMessage, runner string) ([]ClaimedStub, int64, error) {
	a, err := m.ToArray()
	if err != nil {
		return nil, 0, fmt.Errorf("grants: %w", err)
	}
	out := make([]ClaimedStub, 0, len(a))
	var latest int64
	for _, g := range a {
		f, err := g.AsStrSlice()
		if err != nil || len(f) != 6 {
			return nil, 0, fmt.Errorf("grant: %v (%d fields)", err, len(f))
		}
		exp, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			return nil, 0, fmt.Errorf("grant expiry: %w", err)
		}
		dl, err := strconv.ParseInt(f[4], 10, 64)
		if err != nil {
			return nil, 0, fmt.Errorf("grant deadline: %w", err)
		}
		latest = max(latest, dl)
		seq, err := strconv.ParseInt(f[5], 10, 64)
		if err != nil {
			return nil, 0, fmt.Errorf("grant seq: %w", err)
		}
		site, err := dec("grant site", f[0])
		if err != nil {
			return nil, 0, err
		}
		out = append(out, ClaimedStub{
			SiteID: site,
			Stub:   json.RawMessage(f[1]),
			Lease:  protocol.Lease{ID: f[2], RunnerID: runner, ExpiresAt: exp},
			seq:    seq,
		})
	}
	return out, latest, nil
}

func (s *Store) checkClaim(in ClaimInput) error {
	if err := s.checkID("runner id", in.RunnerID); err != nil {
		return err
	}
	if err := s.checkID("owner", in.Owner); err != nil {
		return err
	}
	if in.LeaseMs < 0 || in.LeaseMs > maxLeaseMs {
		return fmt.Errorf("%w: leaseMs %d out of range", ErrInvalidInput, in.LeaseMs)
	}
	for _, r := range in.Routes {
		if err := s.checkID("route site id", r.SiteID); err != nil {
			return err
		}
		if err := s.checkID("route owner", r.Owner); err != nil {
			return err
		}
	}
	for _, k := range in.Kinds {
		if err := s.checkID("kind", k); err != nil {
			return err
		}
	}
	return nil
}

// dedupeRoutes keeps the first of each (site, owner): a pair is one cap.
func dedupeRoutes(in []Route) []Route {
	seen := make(map[Route]bool, len(in))
	out := make([]Route, 0, len(in))
	for _, r := range in {
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	return out
}

func dedupe(in []string) []string {
	seen := make(map[string]bool, len(in))
	out := make([]string, 0, len(in))
	for _, v := range in {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
