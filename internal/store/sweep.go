package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"
)

// SweepBatch settles at most limit due jobs in one script (§4, §9.7) and
// reports whether more are due. Requeued snapshots (taken after the requeue)
// come first, then removed ones (taken before the forget, SweptAway set).
// Snapshots carry no payload or result ciphertext.
func (s *Store) SweepBatch(ctx context.Context, limit int) (jobs []Job, more bool, err error) {
	requeued, removed, more, err := s.sweepBatch(ctx, limit)
	if err != nil {
		return nil, false, err
	}
	return append(jobsOf(requeued), jobsOf(removed)...), more, nil
}

func (s *Store) sweepBatch(ctx context.Context, limit int) (requeued, removed []snapshot, more bool, err error) {
	if limit <= 0 {
		limit = s.opts.SweepBatch
	}
	msg, err := s.run(ctx, "sweep", []string{s.k.due()}, strconv.Itoa(limit))
	if err != nil {
		return nil, nil, false, fmt.Errorf("sweep: %w", err)
	}
	parts, err := elems(msg, 4)
	if err != nil {
		return nil, nil, false, fmt.Errorf("sweep: %w", err)
	}
	if requeued, err = parseSnapshots(parts[0]); err != nil {
		return nil, nil, false, fmt.Errorf("sweep: requeued: %w", err)
	}
	if removed, err = parseSnapshots(parts[1]); err != nil {
		return nil, nil, false, fmt.Errorf("sweep: removed: %w", err)
	}
	for i := range removed {
		removed[i].SweptAway = true
	}
	reports, err := parseReports(parts[2])
	if err != nil {
		return nil, nil, false, fmt.Errorf("sweep: %w", err)
	}
	s.fireChurn(reports)
	flag, err := num(parts[3])
	if err != nil {
		return nil, nil, false, fmt.Errorf("sweep: more: %w", err)
	}
	return requeued, removed, flag == 1, nil
}

// Sweep settles everything due now, in bounded batches, and returns the
// requeued jobs then the removed ones (B096: removed jobs are included and
// marked SweptAway), each list in insertion order, each job once.
func (s *Store) Sweep(ctx context.Context) ([]Job, error) {
	var requeued, removed []snapshot
	for range maxSweepBatchesPerCall {
		rq, rm, more, err := s.sweepBatch(ctx, s.opts.SweepBatch)
		if err != nil {
			return nil, err
		}
		requeued = append(requeued, rq...)
		removed = append(removed, rm...)
		if !more {
			break
		}
	}
	// A job requeued by one batch can be removed by a later one (its deadline
	// passed in between); report it once, as removed.
	gone := make(map[[2]string]bool, len(removed))
	for _, r := range removed {
		gone[[2]string{r.SiteID, r.ID}] = true
	}
	requeued = slices.DeleteFunc(requeued, func(r snapshot) bool { return gone[[2]string{r.SiteID, r.ID}] })
	bySeq := func(a, b snapshot) int { return int(a.seq - b.seq) }
	slices.SortStableFunc(requeued, bySeq)
	slices.SortStableFunc(removed, bySeq)
	return append(jobsOf(requeued), jobsOf(removed)...), nil
}
