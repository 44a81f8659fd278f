package store

import (
	"context"
	"fmt"
	"strings"
)

// Testing returns this Store's test-only hooks. Production code must not
// call it: the relay never moves the store clock or runs an operation that
// lua/ does not ship. Only _test.go files and the tools under test/ (the
// store contract's bridge and hooks, storebench) do, and
// TestTestingOnlyFromTests fails when any other file calls a Testing().
func (s *Store) Testing() TestHooks { return TestHooks{s} }

// TestHooks reach past the store's production API, for tests.
type TestHooks struct{ s *Store }

// SetClockOffset shifts the Store's clock by ms: Now and every script read
// Valkey TIME plus the offset (0 in production). The store contract is run
// from outside this package: the reference suite's "advance" step reaches
// it through test/contract/bridge, and storebench ages leases without
// waiting; both need minutes to pass at once on a shared real server whose
// TIME they cannot move.
func (h TestHooks) SetClockOffset(ms int64) { h.s.offset.Store(ms) }

// AdvanceClock moves the Store's clock forward by ms (SetClockOffset).
func (h TestHooks) AdvanceClock(ms int64) { h.s.offset.Add(ms) }

// RunJobScript runs op, one operation in the form of lua/'s (a header
// naming its libraries, KEYS[1] its slot), on the job (siteID, jobID):
// KEYS[1] is the job's hash, ARGV[4] its member, ARGV[5...] args. It is the
// seam through which the store contract's hooks (test/storehooks: stub
// bytes as an older version wrote them) reach a stored job without the
// store shipping test-only scripts. Like any write it may requeue, so this
// Store's work view forgets the job's shard.
func (h TestHooks) RunJobScript(ctx context.Context, op, siteID, jobID string, args ...string) (int64, error) {
	s := h.s
	name, _, _ := strings.Cut(strings.TrimPrefix(op, "-- "), ":")
	if err := s.checkID("site id", siteID); err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	if err := s.checkID("job id", jobID); err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	for _, a := range args {
		if len(a) > s.opts.MaxBlobBytes {
			return 0, fmt.Errorf("%s: %w: %d bytes", name, ErrInvalidInput, len(a))
		}
	}
	k, err := s.siteKeys(ctx, siteID)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	sc, err := s.jobScripts.get(name, op)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	msg, err := s.exec(ctx, Script{Name: name, Work: true}, sc, []string{k.job(siteID, jobID)}, append([]string{member(siteID, jobID)}, args...)...)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return num(msg)
}

// PayloadWaits is how many grants have a fetch waiting for their payload
// (AwaitPayload), so a test can seal once a fetch is known to wait.
func (h TestHooks) PayloadWaits() int { return h.s.payloads.Len() }

// PayloadNotes is how many grant notes the Store keeps (PayloadUnsealed).
func (h TestHooks) PayloadNotes() int { return h.s.payloads.Notes() }
