package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/google/uuid"
	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/protocol"
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
func (s *Store) Claim(ctx context.Context, in ClaimInput) ([]ClaimedStub, error) {
	out, _, err := s.claim(ctx, in)
	return out, err
}

func (s *Store) claim(ctx context.Context, in ClaimInput) ([]ClaimedStub, claimStats, error) {
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

	keys := []string{s.k.due(), s.k.lease(), s.k.held(in.RunnerID), s.k.heldIDs(in.RunnerID), s.k.presence(in.RunnerID)}
	args := []string{in.RunnerID, enc(in.RunnerID), in.Owner, string(device),
		strconv.FormatInt(in.LeaseMs, 10), "", "", "", "0"}
	// indexes in args of the per-call values: max, scan budget, settle
	// budget, presence condition
	const maxArg, scanArg, settleArg, presenceArg = 5, 6, 7, 8
	if in.RequirePresence {
		args[presenceArg] = "1"
	}
	args = append(args, strconv.Itoa(len(kinds)))
	args = append(args, kinds...)
	args = append(args, strconv.Itoa(len(routes)))
	nQueues := 0
	for _, r := range routes {
		queues := make([]string, 0, 2*len(kinds)+1)
		for _, kind := range kinds {
			if r.Owner == in.Owner {
				queues = append(queues, s.k.readyQueue(r.SiteID, r.Owner, kind, protocol.AudiencePrivate))
			}
			queues = append(queues, s.k.readyQueue(r.SiteID, r.Owner, kind, protocol.AudienceTeam))
		}
		queues = append(queues, s.k.stickyQueue(r.SiteID, r.Owner, in.RunnerID))
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
	// One lease id per possible grant: at most Max, at most 2 per pair.
	n := min(in.Max, UnsealedPerPair*len(routes))
	for range n {
		id, err := uuid.NewRandom() // crypto/rand
		if err != nil {
			return nil, stats, fmt.Errorf("claim: lease id: %w", err)
		}
		args = append(args, id.String())
	}

	// Each script examines at most claimScan queue entries; a claim that
	// needs more continues where the last call stopped, until it has Max
	// grants, the queues are exhausted, or ClaimScanBudget entries were
	// examined in all. Every grant is still chosen and made in one script.
	out := []ClaimedStub{}
	remaining := in.Max
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
		msg, err := s.run(ctx, "claim", keys, args...)
		if err != nil {
			return nil, stats, fmt.Errorf("claim: %w", err)
		}
		parts, err := elems(msg, 7)
		if err != nil {
			return nil, stats, fmt.Errorf("claim: %w", err)
		}
		status, err := str(parts[0])
		if err != nil {
			return nil, stats, fmt.Errorf("claim: %w", err)
		}
		reports, err := parseReports(parts[2])
		if err != nil {
			return nil, stats, fmt.Errorf("claim: %w", err)
		}
		s.fireChurn(reports)
		if status == "presence" {
			return nil, stats, fmt.Errorf("claim: %w", ErrPresenceChanged)
		}
		if status == "sweep" {
			sweeps++
			if _, err := s.Sweep(ctx); err != nil {
				return nil, stats, fmt.Errorf("claim: %w", err)
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
		grants, err := parseGrants(parts[1], in.RunnerID)
		if err != nil {
			return nil, stats, fmt.Errorf("claim: %w", err)
		}
		out = append(out, grants...)
		remaining -= len(grants)
		args[presenceArg] = "0" // a continuation is the same claim
		if truncated != 1 {
			return out, stats, nil
		}
		if stats.Scanned >= s.opts.ClaimScanBudget {
			stats.Truncated = true
			s.log.Warn("store: claim stopped at its scan budget", "runner", in.RunnerID, "budget", s.opts.ClaimScanBudget)
			return out, stats, nil
		}
		cursors, err := parts[6].AsStrSlice()
		if err != nil || len(cursors) != nQueues {
			return nil, stats, fmt.Errorf("claim: %d cursors for %d queues (%v)", len(cursors), nQueues, err)
		}
		copy(args[cursorAt:], cursors)
		args = append(args[:leaseAt], args[leaseAt+len(grants):]...) // those ids are granted
	}
}

func parseGrants(m valkey.ValkeyMessage, runner string) ([]ClaimedStub, error) {
	a, err := m.ToArray()
	if err != nil {
		return nil, fmt.Errorf("grants: %w", err)
	}
	out := make([]ClaimedStub, 0, len(a))
	for _, g := range a {
		f, err := g.AsStrSlice()
		if err != nil || len(f) != 4 {
			return nil, fmt.Errorf("grant: %v (%d fields)", err, len(f))
		}
		exp, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("grant expiry: %w", err)
		}
		out = append(out, ClaimedStub{
			SiteID: f[0],
			Stub:   json.RawMessage(f[1]),
			Lease:  protocol.Lease{ID: f[2], RunnerID: runner, ExpiresAt: exp},
		})
	}
	return out, nil
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
