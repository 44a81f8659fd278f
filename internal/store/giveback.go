package store

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// A claim's answer can be lost after its script ran: the caller's deadline
// (the relay's store timeout) passes while the reply is on its way or the
// script is still queued in Valkey, and the runner is told to retry. Its
// grants would then sit leased to a runner that never saw them until the
// lease lapses (60 s by default). Claim reports such a claim as an
// *UnansweredClaim, and GiveBack hands its grants back.
//
// Exactness does not depend on ordering or clocks: every Claim call has a
// random token that each of its claim scripts carries, and GiveBack first
// revokes the token on the shard (a claim script of that token that runs
// later grants nothing, lua/claim.lua), then requeues each of the claim's
// lease ids that is still exactly that grant. Lease ids are random and
// minted per call, so a grant a later claim made (another lease id) is never
// touched.

// GiveBackRevokeMs is how long a revoked claim token is remembered (one
// small key per shard of a lost claim): far longer than a claim script can
// wait in a connection's queue behind the give-back.
const GiveBackRevokeMs = 600_000

// errClaimRevoked: a claim script found its own token revoked, which only a
// GiveBack of this very claim does; Claim never gives its own calls back
// while it runs, so this is a broken invariant if ever seen.
var errClaimRevoked = errors.New("claim token revoked while the claim ran")

// UnansweredClaim is Claim's error when the claim failed after at least one
// of its claim scripts may have run (the call timed out or was cancelled,
// or a later step failed): some of Leases may be granted to RunnerID, and
// the caller never got them. Hand them back with GiveBack. It unwraps to
// the failure (context.DeadlineExceeded, a store error class).
type UnansweredClaim struct {
	RunnerID string
	Token    string   // the Claim call's token (lua/claim.lua ARGV[13])
	Leases   []string // every lease id minted for a claim script of the call
	// Sites are, per shard a claim script was sent to, the encoded sites
	// of its routes: a grant's lease id is a minted one, or one with the
	// job's site appended (lua/claim.lua), and GiveBack tries both.
	Sites map[int][]string
	Err   error
}

func (u *UnansweredClaim) Error() string {
	return fmt.Sprintf("%v (a claim of %d possible grants left unanswered)", u.Err, len(u.Leases))
}

func (u *UnansweredClaim) Unwrap() error { return u.Err }

func newClaimToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// giveBackSites is give_back.lua's count and list of the sites a grant of
// these minted ids can carry: those the claim script could append within
// MaxIDBytes (a form that cannot exist costs a lookup, no more).
func (s *Store) giveBackSites(sites, minted []string) []string {
	shortest := len(minted[0])
	for _, id := range minted {
		shortest = min(shortest, len(id))
	}
	out := []string{""}
	for _, eS := range sites {
		if shortest+1+len(eS) <= s.opts.MaxIDBytes {
			out = append(out, eS)
		}
	}
	out[0] = strconv.Itoa(len(out) - 1)
	return out
}

// GiveBack revokes u's claim and requeues those of its leases that are
// still granted to u.RunnerID as u made them (awaiting its payload or
// ready; never one that is running or done, whose runner knew the lease).
// It returns the lease ids it requeued, as granted (a minted id with the
// job's site appended, lua/claim.lua). It is idempotent: a second call
// finds nothing left and returns none. An error leaves some shards undone;
// calling again finishes them.
func (s *Store) GiveBack(ctx context.Context, u UnansweredClaim) ([]string, error) {
	if err := s.checkID("runner id", u.RunnerID); err != nil {
		return nil, fmt.Errorf("give back: %w", err)
	}
	if u.Token == "" {
		return nil, fmt.Errorf("give back: %w: no claim token", ErrInvalidInput)
	}
	if err := s.checkID("claim token", u.Token); err != nil {
		return nil, fmt.Errorf("give back: %w", err)
	}
	byShard := map[int][]string{}
	for _, id := range u.Leases {
		if err := s.checkID("lease id", id); err != nil {
			return nil, fmt.Errorf("give back: %w", err)
		}
		// Every shard the claim called has at least one lease id minted
		// for it, so revoking on the shards of the ids covers them all.
		if sh, ok := s.k.leaseShard(id); ok {
			byShard[sh] = append(byShard[sh], id)
		}
	}
	shards := make([]int, 0, len(byShard))
	for sh := range byShard {
		shards = append(shards, sh)
	}
	slices.Sort(shards)
	given := []string{}
	for _, sh := range shards {
		for chunk := range slices.Chunk(byShard[sh], GrantChunk) {
			args := append([]string{u.RunnerID, u.Token, strconv.Itoa(GiveBackRevokeMs), strconv.Itoa(len(chunk))}, chunk...)
			args = append(args, s.giveBackSites(u.Sites[sh], chunk)...)
			msg, err := s.run(ctx, scGiveBack, []string{s.k.lease(sh)}, args...)
			if err != nil {
				return given, fmt.Errorf("give back: %w", err)
			}
			parts, err := elems(msg, 2)
			if err != nil {
				return given, fmt.Errorf("give back: %w", err)
			}
			got, err := parts[0].AsStrSlice()
			if err != nil {
				return given, fmt.Errorf("give back: %w", err)
			}
			reports, err := parseReports(parts[1])
			if err != nil {
				return given, fmt.Errorf("give back: %w", err)
			}
			s.fireChurn(reports)
			given = append(given, got...)
		}
	}
	return given, nil
}
