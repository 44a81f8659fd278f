package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/payloadwait"
	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/workview"
)

// claimStats describes one claim call; tests use it to show that a claim's
// cost does not depend on jobs outside its routes.
type claimStats struct {
	Scanned     int  // queue entries examined
	Truncated   bool // stopped by ClaimScanBudget
	Quarantined int  // stubs that failed strict validation
	Attempts    int  // claim scripts run (more than 1 when a sweep came first or the scan continued)
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
	runnerRead := []valkey.Completed{
		s.c.B().Hmget().Key(s.k.presence(in.RunnerID)).Field("owner", "device", "ld").Build(),
		s.c.B().Zrange().Key(s.k.runnerShards(in.RunnerID)).Min("0").Max("-1").Withscores().Build(),
	}
	order, runnerRecs, err := s.claimOrder(ctx, in, byShard, kinds, runnerRead)
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
	}
	out := []ClaimedStub{}
	deadlines := map[int]int64{}
	for _, sh := range order {
		if len(out) >= in.Max {
			break
		}
		got, dl, err := s.claimShard(ctx, in, u, sh, byShard[sh], kinds, device, in.Max-len(out), &stats)
		if err != nil {
			return out, stats, err
		}
		out = append(out, got...)
		if len(got) > 0 {
			deadlines[sh] = dl
		}
	}
	// One answer in first-enqueue order, whichever shard granted what.
	slices.SortStableFunc(out, func(a, b ClaimedStub) int { return cmp.Compare(a.seq, b.seq) })
	if len(deadlines) > 0 && !shardsRecorded(runnerRecs, deadlines) {
		// The runner-side record of the shards to visit for the bare-id
		// probe and cancel requests: written before the reply, so it exists
		// before the daemon can present any lease (store.md trap 36); the
		// same call tells the runner's heartbeats to read it again
		// (lua/presence_beat.lua).
		args := make([]string, 0, 2*len(deadlines))
		for sh, dl := range deadlines {
			args = append(args, strconv.Itoa(sh), strconv.FormatInt(recordedDeadline(dl), 10))
		}
		if _, err := s.run(ctx, scRunnerShardsAdd, []string{s.k.runnerShards(in.RunnerID), s.k.presence(in.RunnerID)}, args...); err != nil {
			return out, stats, fmt.Errorf("claim: runner shards: %w", err)
		}
	}
	return out, stats, nil
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

// claimOrder settles what is due outside the claim's shards (the reference
// sweeps everything before a claim) and chooses which of the claim's shards
// to call, in which order: by the oldest entry (lowest seq, an enqueue
// instant) at the head of any of the claim's queues there, so the oldest
// eligible job over all routes is considered first. A shard with no queued
// entry on these routes and nothing due is not called at all: it has
// nothing to grant. All of it is read with one TIME and one pipelined batch
// of ZRANGEs, no script. The commands of extra join that batch, and their
// replies are returned; when nothing is read they are not sent either (nil
// replies).
func (s *Store) claimOrder(ctx context.Context, in ClaimInput, byShard map[int][]Route, kinds []string, extra []valkey.Completed) ([]int, []valkey.ValkeyResult, error) {
	// What the work view already knows is not read: shards with nothing
	// due, queues seen empty since (see internal/workview).
	at := s.view.Now()
	offset := s.offset.Load()
	var dueRead []int
	for sh := range s.k.shards {
		if !s.view.NotDue(sh, at, offset) {
			dueRead = append(dueRead, sh)
		}
	}
	type qref struct {
		shard int
		key   string
		st    workview.Stamp
	}
	var refs []qref
	var cmds []valkey.Completed
	for sh, rs := range byShard {
		queues := s.claimQueues(in, rs, kinds)
		empty, fence := s.view.QueuesEmpty(sh, queues, at)
		if empty {
			continue
		}
		if fence != "" {
			// Sent after this Store's writes on the shard; the read
			// below answers this claim meanwhile.
			go s.view.SendFence(sh, fence)
		}
		st := s.view.Stamp(sh)
		for _, key := range queues {
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
		return nil, nil, err
	}
	var extraReplies []valkey.ValkeyResult
	if withExtra {
		extraReplies = replies[len(replies)-len(extra):]
		replies = replies[:len(replies)-len(extra)]
	}
	due := make([]bool, len(s.k.shards))
	var others []int
	for i, sh := range dueRead {
		due[sh] = heads[i] <= now
		if _, mine := byShard[sh]; due[sh] && !mine {
			others = append(others, sh)
		}
	}
	if len(others) > 0 {
		if _, err := s.sweepShards(ctx, others); err != nil {
			return nil, nil, err
		}
	}
	head := map[int]float64{}
	for i, r := range refs {
		z, err := replies[i].AsZScores()
		if err != nil {
			return nil, nil, fmt.Errorf("queue head: %w", err)
		}
		if len(z) == 0 {
			s.view.SawEmpty(r.shard, r.st, r.key, at)
			continue
		}
		if h, ok := head[r.shard]; !ok || z[0].Score < h {
			head[r.shard] = z[0].Score
		}
	}
	var order []int
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
	return order, extraReplies, nil
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

// claimShard runs the claim script on one shard until it has granted
// remaining, exhausted its queues or spent the scan budget. It returns the
// grants and the latest deadline among them.
func (s *Store) claimShard(ctx context.Context, in ClaimInput, u *UnansweredClaim, sh int, routes []Route, kinds []string, device []byte, remaining int, stats *claimStats) ([]ClaimedStub, int64, error) {
	keys := []string{s.k.due(sh), s.k.lease(sh), s.k.heldIDs(sh, in.RunnerID)}
	args := []string{in.RunnerID, enc(in.RunnerID), in.Owner, string(device),
		strconv.FormatInt(in.LeaseMs, 10), "", "", ""}
	// indexes in args of the per-call values: max, scan budget, settle budget
	const maxArg, scanArg, settleArg = 5, 6, 7
	args = append(args, enc(in.Owner), u.Token, strconv.Itoa(s.opts.MaxIDBytes), strconv.Itoa(len(kinds)))
	for _, k := range kinds {
		args = append(args, enc(k))
	}
	args = append(args, strconv.Itoa(len(routes)))
	nQueues := 0
	for _, r := range routes {
		queues := s.routeQueues(in, r, kinds)
		keys = append(keys, s.k.unsealed(r.SiteID, r.Owner), s.k.awaiting(r.SiteID))
		keys = append(keys, queues...)
		args = append(args, enc(r.SiteID), enc(r.Owner), strconv.Itoa(len(queues)))
		nQueues += len(queues)
	}
	cursorAt := len(args)
	for range nQueues {
		args = append(args, "") // every queue from its head
	}
	leaseAt := len(args)
	// Each id is noted as an unsealed grant of this replica before the
	// script is sent (a seal announced right after the grant must find
	// the note to end it), and only while every seal would be heard: a
	// fetch of a noted grant waits for the seal before it reads (Store.
	// PayloadUnsealed).
	at := s.view.Now()
	noting := !s.announce || s.view.Live()
	// One lease id per possible grant: at most remaining, at most 2 per pair.
	for range min(remaining, UnsealedPerPair*len(routes)) {
		id, err := mintLease(sh)
		if err != nil {
			return nil, 0, fmt.Errorf("claim: lease id: %w", err)
		}
		args = append(args, id)
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
		args[maxArg] = strconv.Itoa(remaining)
		args[scanArg] = strconv.Itoa(scan)
		args[settleArg] = strconv.Itoa(settle)
		msg, err := s.run(ctx, scClaim, keys, args...)
		if err != nil {
			return out, latest, fmt.Errorf("claim: %w", err)
		}
		parts, err := elems(msg, 7)
		if err != nil {
			return out, latest, fmt.Errorf("claim: %w", err)
		}
		status, err := str(parts[0])
		if err != nil {
			return out, latest, fmt.Errorf("claim: %w", err)
		}
		reports, err := parseReports(parts[2])
		if err != nil {
			return out, latest, fmt.Errorf("claim: %w", err)
		}
		s.fireChurn(reports)
		if status == "revoked" {
			return out, latest, fmt.Errorf("claim: %w", errClaimRevoked)
		}
		if status == "sweep" {
			sweeps++
			if _, err := s.sweepShards(ctx, []int{sh}); err != nil {
				return out, latest, fmt.Errorf("claim: %w", err)
			}
			continue
		}
		scanned, _ := num(parts[3])
		truncated, _ := num(parts[4])
		quarantined, _ := num(parts[5])
		stats.Scanned += int(scanned)
		stats.Quarantined += int(quarantined)
		if quarantined > 0 {
			s.log.Warn("store: quarantined stored stubs that no longer parse", "count", quarantined)
		}
		grants, dl, err := parseGrants(parts[1], in.RunnerID)
		if err != nil {
			return out, latest, fmt.Errorf("claim: %w", err)
		}
		latest = max(latest, dl)
		out = append(out, grants...)
		remaining -= len(grants)
		if truncated != 1 || remaining <= 0 {
			return out, latest, nil
		}
		if stats.Scanned >= s.opts.ClaimScanBudget {
			stats.Truncated = true
			s.log.Warn("store: claim stopped at its scan budget", "runner", in.RunnerID, "budget", s.opts.ClaimScanBudget)
			return out, latest, nil
		}
		cursors, err := parts[6].AsStrSlice()
		if err != nil || len(cursors) != nQueues {
			return out, latest, fmt.Errorf("claim: %d cursors for %d queues (%v)", len(cursors), nQueues, err)
		}
		copy(args[cursorAt:], cursors)
		args = append(args[:leaseAt], args[leaseAt+len(grants):]...) // those ids are granted
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
