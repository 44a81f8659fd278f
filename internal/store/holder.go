package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/protocol"
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
	msg, err := s.run(ctx, "take", []string{s.k.lease(), s.k.heldIDs(in.RunnerID)},
		in.JobID, enc(in.JobID), in.RunnerID, enc(in.RunnerID), in.LeaseID)
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
	return TakeResult{Refused: value}, nil
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
	msg, err := s.run(ctx, "complete", []string{s.k.lease(), s.k.heldIDs(in.RunnerID)},
		in.JobID, enc(in.JobID), in.RunnerID, enc(in.RunnerID), in.LeaseID, string(in.Envelope), in.Disposition)
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
	released := []string{}
	// In chunks, so no one script call walks more than GrantChunk grants.
	// Each grant is released at most once whatever the chunking: a
	// released grant no longer resolves, so a repeat in a later chunk is a
	// silent skip, as it is within one call.
	for chunk := range slices.Chunk(in.Leases, GrantChunk) {
		args := []string{in.RunnerID, in.Reason, retry, strconv.Itoa(len(chunk))}
		for _, g := range chunk {
			args = append(args, g.JobID, g.LeaseID)
		}
		msg, err := s.run(ctx, "release", []string{s.k.lease(), s.k.held(in.RunnerID)}, args...)
		if err != nil {
			return nil, fmt.Errorf("release: %w", err)
		}
		parts, err := elems(msg, 2)
		if err != nil {
			return nil, fmt.Errorf("release: %w", err)
		}
		got, err := parts[0].AsStrSlice()
		if err != nil {
			return nil, fmt.Errorf("release: %w", err)
		}
		reports, err := parseReports(parts[1])
		if err != nil {
			return nil, fmt.Errorf("release: %w", err)
		}
		s.fireChurn(reports)
		released = append(released, got...)
	}
	return released, nil
}

// RenewLeases sets each held grant's expiry to now+LeaseMs (§2.14); grants
// the runner no longer holds come back in Lost, echoed exactly.
func (s *Store) RenewLeases(ctx context.Context, in RenewInput) (RenewResult, error) {
	res := RenewResult{Renewed: []Renewed{}, Lost: []protocol.GrantRef{}}
	if err := s.checkID("runner id", in.RunnerID); err != nil {
		return res, fmt.Errorf("renew: %w", err)
	}
	if in.LeaseMs < 0 || in.LeaseMs > maxLeaseMs {
		return res, fmt.Errorf("renew: %w: leaseMs %d out of range", ErrInvalidInput, in.LeaseMs)
	}
	for _, g := range in.Leases {
		if err := s.checkHolder(g.JobID, in.RunnerID, g.LeaseID); err != nil {
			return res, fmt.Errorf("renew: %w", err)
		}
	}
	// In chunks of GrantChunk, each its own script call, so a long list
	// costs several short calls rather than one that stalls Valkey. Every
	// grant is judged on its own, so the answer is the one a single call
	// would give (renewed and lost keep input order).
	for chunk := range slices.Chunk(in.Leases, GrantChunk) {
		args := []string{in.RunnerID, strconv.FormatInt(in.LeaseMs, 10), strconv.Itoa(len(chunk))}
		for _, g := range chunk {
			args = append(args, g.JobID, g.LeaseID)
		}
		msg, err := s.run(ctx, "renew", []string{s.k.lease(), s.k.due()}, args...)
		if err != nil {
			return res, fmt.Errorf("renew: %w", err)
		}
		parts, err := elems(msg, 3)
		if err != nil {
			return res, fmt.Errorf("renew: %w", err)
		}
		renewed, err1 := parts[0].AsStrSlice()
		lost, err2 := parts[1].AsStrSlice()
		reports, err3 := parseReports(parts[2])
		if err1 != nil || err2 != nil || err3 != nil {
			return res, fmt.Errorf("renew: reply: %v %v %v", err1, err2, err3)
		}
		s.fireChurn(reports)
		for i := 0; i+1 < len(renewed); i += 2 {
			exp, err := strconv.ParseInt(renewed[i+1], 10, 64)
			if err != nil {
				return res, fmt.Errorf("renew: expiry: %w", err)
			}
			res.Renewed = append(res.Renewed, Renewed{JobID: renewed[i], ExpiresAt: exp})
		}
		res.Lost = append(res.Lost, grantRefs(lost)...)
	}
	return res, nil
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
	out := []protocol.GrantRef{}
	err := s.pages(ctx, "cancel_requests", s.k.cancelled(runnerID), []string{runnerID},
		[]string{strconv.Itoa(s.limits.cancelEntries)}, func(items []valkey.ValkeyMessage) error {
			for _, e := range items {
				flat, err := e.AsStrSlice()
				if err != nil {
					return err
				}
				out = append(out, grantRefs(flat)...)
			}
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("cancel requests: %w", err)
	}
	return out, nil
}
