package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/valkeyconn"
)

// Holder operations name a grant, never a site (§5): the lease index
// resolves the exact job, and the runner's bare-id index answers the
// fallback question of §2.0. Each settles the grant it touches first (§9.8).

// GrantChunk is the most grants one renew or release script call walks. A
// longer list is split into several calls, so a call's cost is bounded
// whatever a client sends. 32 is the most a real daemon holds (its
// concurrency is at most 32 slots), so a real daemon's heartbeat or release
// is always one call; 32 renewals measured about 0.5 ms of Valkey time on
// a loaded 2-core machine (64 took about 0.85-1 ms).
const GrantChunk = 32

func (s *Store) checkHolder(jobID, runnerID, leaseID string) error {
	if err := s.checkID("job id", jobID); err != nil {
		return err
	}
	if err := s.checkID("runner id", runnerID); err != nil {
		return err
	}
	return s.checkID("lease id", leaseID)
}

// TakePayload hands the sealed payload to the holder and marks the job
// running (§2.8); a repeated fetch while running returns it again.
func (s *Store) TakePayload(ctx context.Context, in HolderInput) (TakeResult, error) {
	if err := s.checkHolder(in.JobID, in.RunnerID, in.LeaseID); err != nil {
		return TakeResult{}, fmt.Errorf("take payload: %w", err)
	}
	sh, ok := s.k.leaseShard(in.LeaseID)
	if !ok {
		return TakeResult{Refused: s.missRefusal(ctx, in.JobID, in.RunnerID, -1)}, nil
	}
	msg, err := s.run(ctx, scTake, []string{s.k.lease(sh)},
		encJob(in.JobID), in.RunnerID, enc(in.RunnerID), in.LeaseID)
	if err != nil {
		return TakeResult{}, fmt.Errorf("take payload: %w", err)
	}
	parts, err := elems(msg, 3)
	if err != nil {
		return TakeResult{}, fmt.Errorf("take payload: %w", err)
	}
	status, err1 := str(parts[0])
	value, err2 := str(parts[1])
	reports, err3 := parseReports(parts[2])
	if err1 != nil || err2 != nil || err3 != nil {
		return TakeResult{}, fmt.Errorf("take payload: reply: %v %v %v", err1, err2, err3)
	}
	s.fireChurn(reports)
	if status == "ok" {
		return TakeResult{Envelope: []byte(value)}, nil
	}
	if value == RefusedNotFound {
		value = s.missRefusal(ctx, in.JobID, in.RunnerID, sh)
	}
	return TakeResult{Refused: value}, nil
}

// opPayloadPeek names GrantAwaitsPayload's read in the store's call
// metrics.
const opPayloadPeek = "payload_peek"

// GrantAwaitsPayload reports whether TakePayload would now answer in's
// grant not-ready, read with plain commands in one round trip (the job's
// record and the server's clock), no script: the record holds this grant
// for this runner, awaiting its payload and not cancelled, and the clock
// is before its deadline and the end of its awaiting window, so that
// settling (§9.8) would leave it as it is and take.lua would find no
// payload. A fetch that reaches a replica other than the one that granted
// it has no note of the grant (PayloadUnsealed); it asks this first and
// waits for the seal without running take.lua for a refusal. False
// whenever it cannot tell: a lease id that does not carry its site (the
// record is then found only through the lease index), a record that
// disagrees, or a read that failed; TakePayload then answers.
func (s *Store) GrantAwaitsPayload(ctx context.Context, in HolderInput) bool {
	if s.checkHolder(in.JobID, in.RunnerID, in.LeaseID) != nil {
		return false
	}
	sh, ok := s.k.leaseShard(in.LeaseID)
	if !ok {
		return false
	}
	eS, ok := leaseSite(in.LeaseID)
	if !ok {
		return false
	}
	job := s.k.shards[sh] + "j:" + eS + ":" + encJob(in.JobID)
	res := s.doMulti(ctx, opPayloadPeek,
		s.c.B().Hmget().Key(job).Field("state", "cl", "cr", "cx", "au", "dl").Build(),
		s.c.B().Time().Build().SetSlot(job)) // the clock of the node that holds the record
	v, err := res[0].ToArray()
	if err != nil {
		return false
	}
	f, err := optionalStrings(v)
	if err != nil || len(f) != 6 {
		return false
	}
	if f[0] != StateAwaitingPayload || f[1] != in.LeaseID || f[2] != in.RunnerID || f[3] != "" {
		return false
	}
	now, err := s.timeReply(res[1])
	if err != nil {
		return false
	}
	au, err1 := strconv.ParseInt(f[4], 10, 64)
	dl, err2 := strconv.ParseInt(f[5], 10, 64)
	return err1 == nil && err2 == nil && now < au && now < dl
}

// leaseSite is the encoded site a site-bearing lease id carries after its
// one dot (lib/store.lua lease_site: claim.lua writes "<minted>.<eS>" when
// it fits the lease id's limit).
func leaseSite(leaseID string) (string, bool) {
	minted, eS, ok := strings.Cut(leaseID, ".")
	if !ok || minted == "" || strings.Contains(eS, ".") {
		return "", false
	}
	for i := 0; i < len(eS); i++ {
		if c := eS[i]; !isAlnum(c) && c != '-' && c != '_' {
			return "", false
		}
	}
	return eS, true
}

// missRefusal answers a grant the lease's own shard (skip; -1 for none) did
// not resolve: stale-lease when the runner holds a job with this bare id on
// another shard of its record, else not-found (§2.0 step 2). An error
// reading the record counts as not found only after it is logged: the
// answer then is the one a runner that holds nothing there gets.
func (s *Store) missRefusal(ctx context.Context, jobID, runnerID string, skip int) string {
	shards, err := s.runnerShardList(ctx, runnerID)
	if err != nil {
		s.log.Warn("store: runner shards unreadable", "runner", runnerID, "err", err)
		return RefusedNotFound
	}
	for _, sh := range shards {
		if sh == skip {
			continue
		}
		msg, err := s.run(ctx, scHolds, []string{s.k.heldIDs(sh, runnerID)}, encJob(jobID), enc(runnerID))
		if err != nil {
			s.log.Warn("store: bare-id probe failed", "runner", runnerID, "err", err)
			continue
		}
		parts, err := elems(msg, 2)
		if err != nil {
			continue
		}
		if reports, err := parseReports(parts[1]); err == nil {
			s.fireChurn(reports)
		}
		if n, _ := num(parts[0]); n == 1 {
			return RefusedStaleLease
		}
	}
	return RefusedNotFound
}

// runnerShardList is the runner's record of shards where it may hold grants.
func (s *Store) runnerShardList(ctx context.Context, runnerID string) ([]int, error) {
	members, err := s.do(ctx, "runner_shards", s.c.B().Zrange().Key(s.k.runnerShards(runnerID)).Min("0").Max("-1").Build()).AsStrSlice()
	if err != nil {
		return nil, err
	}
	return s.shardList(members), nil
}

// shardList is the valid shard indexes among members (rsh:⟨R⟩'s).
func (s *Store) shardList(members []string) []int {
	out := make([]int, 0, len(members))
	for _, m := range members {
		if n, err := strconv.Atoi(m); err == nil && n >= 0 && n < len(s.k.shards) {
			out = append(out, n)
		}
	}
	return out
}

// Complete records the first result under the current grant (§2.9). A
// repeat under the same lease answers Duplicate; the first result stays.
func (s *Store) Complete(ctx context.Context, in CompleteInput) (CompleteResult, error) {
	if err := s.checkHolder(in.JobID, in.RunnerID, in.LeaseID); err != nil {
		return CompleteResult{}, fmt.Errorf("complete: %w", err)
	}
	if err := s.checkID("disposition", in.Disposition); err != nil {
		return CompleteResult{}, fmt.Errorf("complete: %w", err)
	}
	if err := s.checkBlob("envelope", in.Envelope); err != nil {
		return CompleteResult{}, fmt.Errorf("complete: %w", err)
	}
	sh, ok := s.k.leaseShard(in.LeaseID)
	if !ok {
		return CompleteResult{Refused: s.missRefusal(ctx, in.JobID, in.RunnerID, -1)}, nil
	}
	msg, err := s.run(ctx, scComplete, []string{s.k.lease(sh)},
		encJob(in.JobID), in.RunnerID, enc(in.RunnerID), in.LeaseID, string(in.Envelope), in.Disposition)
	if err != nil {
		return CompleteResult{}, fmt.Errorf("complete: %w", err)
	}
	parts, err := elems(msg, 2)
	if err != nil {
		return CompleteResult{}, fmt.Errorf("complete: %w", err)
	}
	status, err := str(parts[0])
	if err != nil {
		return CompleteResult{}, fmt.Errorf("complete: %w", err)
	}
	reports, err := parseReports(parts[len(parts)-1])
	if err != nil {
		return CompleteResult{}, fmt.Errorf("complete: %w", err)
	}
	s.fireChurn(reports)
	switch status {
	case "accepted":
		return CompleteResult{Accepted: true, State: StateDone}, nil
	case "duplicate":
		return CompleteResult{Duplicate: true, State: StateDone}, nil
	case "refused":
		reason, err := str(parts[1])
		if err != nil {
			return CompleteResult{}, fmt.Errorf("complete: %w", err)
		}
		if reason == RefusedNotFound {
			reason = s.missRefusal(ctx, in.JobID, in.RunnerID, sh)
		}
		return CompleteResult{Refused: reason}, nil
	}
	return CompleteResult{}, fmt.Errorf("complete: unexpected status %q", status)
}

// ReleaseLeases hands grants back (§2.10) and returns the released bare job
// ids in input order. Reason "refused" adds the runner to refusedBy; a
// RetryAfter sets the runner's not-before. A done job is never reopened.
func (s *Store) ReleaseLeases(ctx context.Context, in ReleaseInput) ([]string, error) {
	if err := s.checkID("runner id", in.RunnerID); err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	if err := s.checkID("reason", in.Reason); err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	retry := ""
	if in.RetryAfter != nil {
		retry = strconv.FormatInt(*in.RetryAfter, 10)
	}
	for _, g := range in.Leases {
		if err := s.checkHolder(g.JobID, in.RunnerID, g.LeaseID); err != nil {
			return nil, fmt.Errorf("release: %w", err)
		}
	}
	// By the shard each lease names, each shard's pairs in input order; a
	// lease naming no shard of this store resolves nothing and is skipped.
	// Per shard in chunks, so no one script call walks more than GrantChunk
	// grants. Each grant is released at most once whatever the chunking: a
	// released grant no longer resolves, so a repeat in a later chunk (or
	// later in the same one) is a silent skip.
	done := make([]bool, len(in.Leases))
	for sh, idx := range s.byLeaseShard(in.Leases) {
		for chunk := range slices.Chunk(idx, GrantChunk) {
			args := []string{in.RunnerID, in.Reason, retry, strconv.Itoa(len(chunk))}
			for _, i := range chunk {
				args = append(args, encJob(in.Leases[i].JobID), in.Leases[i].LeaseID)
			}
			msg, err := s.run(ctx, scRelease, []string{s.k.lease(sh)}, args...)
			if err != nil {
				return nil, fmt.Errorf("release: %w", err)
			}
			parts, err := elems(msg, 2)
			if err != nil {
				return nil, fmt.Errorf("release: %w", err)
			}
			got, err := parts[0].AsStrSlice()
			if err != nil || len(got) != len(chunk) {
				return nil, fmt.Errorf("release: %d outcomes for %d grants (%v)", len(got), len(chunk), err)
			}
			reports, err := parseReports(parts[1])
			if err != nil {
				return nil, fmt.Errorf("release: %w", err)
			}
			s.fireChurn(reports)
			for k, i := range chunk {
				done[i] = got[k] == "1"
			}
		}
	}
	released := []string{}
	for i, g := range in.Leases {
		if done[i] {
			released = append(released, g.JobID)
		}
	}
	return released, nil
}

// byLeaseShard groups grant positions by the shard their lease id names, in
// input order within each shard; grants naming no shard are left out.
func (s *Store) byLeaseShard(leases []protocol.GrantRef) map[int][]int {
	out := map[int][]int{}
	for i, g := range leases {
		if sh, ok := s.k.leaseShard(g.LeaseID); ok {
			out[sh] = append(out[sh], i)
		}
	}
	return out
}

// RenewLeases sets each held grant's expiry to now+LeaseMs (§2.14); grants
// the runner no longer holds come back in Lost, echoed exactly.
func (s *Store) RenewLeases(ctx context.Context, in RenewInput) (RenewResult, error) {
	if err := s.checkRenew(in); err != nil {
		return RenewResult{Renewed: []Renewed{}, Lost: []protocol.GrantRef{}}, fmt.Errorf("renew: %w", err)
	}
	return s.renewLeases(ctx, in)
}

// renewLeases is RenewLeases for a checked in.
func (s *Store) renewLeases(ctx context.Context, in RenewInput) (RenewResult, error) {
	// By lease shard, in chunks of GrantChunk, each its own script call, so
	// a long list costs several short calls rather than one that stalls
	// Valkey. Every grant is judged on its own, so the answer is the one a
	// single call would give (renewed and lost keep input order). A lease
	// naming no shard of this store is lost.
	expiry := make([]string, len(in.Leases))
	for sh, idx := range s.byLeaseShard(in.Leases) {
		for chunk := range slices.Chunk(idx, GrantChunk) {
			args := []string{in.RunnerID, strconv.FormatInt(in.LeaseMs, 10), strconv.Itoa(len(chunk))}
			for _, i := range chunk {
				args = append(args, encJob(in.Leases[i].JobID), in.Leases[i].LeaseID)
			}
			msg, err := s.run(ctx, scRenew, []string{s.k.lease(sh)}, args...)
			if err != nil {
				return RenewResult{}, fmt.Errorf("renew: %w", err)
			}
			parts, err := elems(msg, 2)
			if err != nil {
				return RenewResult{}, fmt.Errorf("renew: %w", err)
			}
			got, err1 := parts[0].AsStrSlice()
			reports, err2 := parseReports(parts[1])
			if err1 != nil || err2 != nil || len(got) != len(chunk) {
				return RenewResult{}, fmt.Errorf("renew: reply: %d outcomes for %d grants: %v %v", len(got), len(chunk), err1, err2)
			}
			s.fireChurn(reports)
			for k, i := range chunk {
				expiry[i] = got[k]
			}
		}
	}
	res, err := renewOutcome(in.Leases, expiry)
	if err != nil {
		return res, fmt.Errorf("renew: %w", err)
	}
	return res, nil
}

// checkRenew refuses a renewal the store would not run.
func (s *Store) checkRenew(in RenewInput) error {
	if err := s.checkID("runner id", in.RunnerID); err != nil {
		return err
	}
	if in.LeaseMs < 0 || in.LeaseMs > maxLeaseMs {
		return fmt.Errorf("%w: leaseMs %d out of range", ErrInvalidInput, in.LeaseMs)
	}
	for _, g := range in.Leases {
		if err := s.checkHolder(g.JobID, in.RunnerID, g.LeaseID); err != nil {
			return err
		}
	}
	return nil
}

// renewOutcome is RenewResult for leases given each one's new expiry as
// the scripts answer it ("" for lost).
func renewOutcome(leases []protocol.GrantRef, expiry []string) (RenewResult, error) {
	res := RenewResult{Renewed: []Renewed{}, Lost: []protocol.GrantRef{}}
	for i, g := range leases {
		if expiry[i] == "" {
			res.Lost = append(res.Lost, g)
			continue
		}
		exp, err := strconv.ParseInt(expiry[i], 10, 64)
		if err != nil {
			return res, fmt.Errorf("expiry: %w", err)
		}
		res.Renewed = append(res.Renewed, Renewed{JobID: g.JobID, ExpiresAt: exp})
	}
	return res, nil
}

// renewal is a heartbeat's renewals as presence_beat carries them (on a
// server that is not a cluster): the grants that name a shard of this
// store, each with its shard's lease index.
type renewal struct {
	runner  string
	leaseMs int64
	n       int      // grants in the heartbeat's list
	at      []int    // per grant sent: its place in that list
	keys    []string // per grant sent: its shard's lease index
	grants  []string // per grant sent: eJ, leaseId
}

// foldRenewal is in as presence_beat carries it, or nil where the
// presence write cannot carry it: on a cluster (a call stays on one
// slot), with nothing to renew, or with more than GrantChunk grants (one
// call stays short). in has been checked.
func (s *Store) foldRenewal(in RenewInput) *renewal {
	if len(in.Leases) == 0 || len(in.Leases) > GrantChunk || valkeyconn.IsCluster(s.c) {
		return nil
	}
	r := &renewal{runner: in.RunnerID, leaseMs: in.LeaseMs, n: len(in.Leases)}
	for i, g := range in.Leases {
		sh, ok := s.k.leaseShard(g.LeaseID)
		if !ok {
			continue // names no shard of this store: lost, as RenewLeases has it
		}
		r.at = append(r.at, i)
		r.keys = append(r.keys, s.k.lease(sh))
		r.grants = append(r.grants, encJob(g.JobID), g.LeaseID)
	}
	return r
}

// outcome splits a written record's entry of a presence_beat reply into
// its rsh entry and one expiry per grant of the heartbeat ("" for lost).
func (r *renewal) outcome(entry valkey.ValkeyMessage) (valkey.ValkeyMessage, []string, error) {
	expiry := make([]string, r.n)
	if len(r.at) == 0 {
		return entry, expiry, nil // sent as no grants: the entry is rsh's alone
	}
	parts, err := elems(entry, 2)
	if err != nil {
		return entry, nil, fmt.Errorf("renewals: %w", err)
	}
	got, err := parts[1].AsStrSlice()
	if err != nil || len(got) != len(r.at) {
		return entry, nil, fmt.Errorf("%w: renewals: %d outcomes for %d grants (%v)", ErrUnexpectedReply, len(got), len(r.at), err)
	}
	for k, i := range r.at {
		expiry[i] = got[k]
	}
	return parts[0], expiry, nil
}

// CancelRequests lists the cancelled jobs the runner holds, done ones
// included, as exact grants in insertion order (§2.13). A pure read, in
// pages of cancelEntries index entries (the index grows with what the
// runner holds), so it is not one atomic snapshot: a grant cancelled or
// released while the pages are read may be listed or not, as it would be
// had the heartbeat come a moment earlier or later.
func (s *Store) CancelRequests(ctx context.Context, runnerID string) ([]protocol.GrantRef, error) {
	if err := s.checkID("runner id", runnerID); err != nil {
		return nil, fmt.Errorf("cancel requests: %w", err)
	}
	// Every shard of the runner's record; within a shard in insertion
	// order, across shards by seq (an enqueue instant, see next_seq).
	shards, err := s.runnerShardList(ctx, runnerID)
	if err != nil {
		return nil, fmt.Errorf("cancel requests: runner shards: %w", err)
	}
	out, err := s.cancelRequests(ctx, runnerID, shards)
	if err != nil {
		return nil, fmt.Errorf("cancel requests: %w", err)
	}
	return out, nil
}

// cancelRequests is CancelRequests on shards, the runner's record of shards.
func (s *Store) cancelRequests(ctx context.Context, runnerID string, shards []int) ([]protocol.GrantRef, error) {
	type ref struct {
		g   protocol.GrantRef
		seq float64
	}
	var refs []ref
	// Only shards whose cancel index holds something get a script: a
	// heartbeat of a runner with nothing cancelled costs one pipelined
	// ZCARD per shard of its record, no Lua.
	if len(shards) > 0 {
		cmds := make([]valkey.Completed, len(shards))
		for i, sh := range shards {
			cmds[i] = s.c.B().Zcard().Key(s.k.cancelled(sh, runnerID)).Build()
		}
		kept := shards[:0]
		for i, r := range s.doMulti(ctx, "cancel_counts", cmds...) {
			n, err := r.AsInt64()
			if err != nil {
				return nil, err
			}
			if n > 0 {
				kept = append(kept, shards[i])
			}
		}
		shards = kept
	}
	for _, sh := range shards {
		err := s.pages(ctx, scCancelRequests, s.k.cancelled(sh, runnerID), []string{runnerID},
			[]string{strconv.Itoa(s.limits.cancelEntries)}, func(items []valkey.ValkeyMessage) error {
				for _, e := range items {
					flat, err := e.AsStrSlice()
					if err != nil || len(flat) != 3 {
						return fmt.Errorf("entry %v: %v", flat, err)
					}
					seq, err := strconv.ParseFloat(flat[2], 64)
					if err != nil {
						return err
					}
					id, err := decJob(flat[0])
					if err != nil {
						return err
					}
					refs = append(refs, ref{protocol.GrantRef{JobID: id, LeaseID: flat[1]}, seq})
				}
				return nil
			})
		if err != nil {
			return nil, err
		}
	}
	slices.SortStableFunc(refs, func(a, b ref) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]protocol.GrantRef, len(refs))
	for i, r := range refs {
		out[i] = r.g
	}
	return out, nil
}
