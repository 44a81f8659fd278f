package store

import (
	"context"
	"errors"
	"fmt"
	"github.com/valkey-io/valkey-go"
	"strconv"
)

// Per-site limits (beyond the reference). With Valkey's noeviction policy a
// full store refuses every write in the hub, so one site enqueueing without
// end would stop all of them; these bound what one site can hold. They are
// checked inside the enqueue and seal scripts, against per-site use that
// every transition keeps exact (lib/store.lua: the live-jobs set and the
// stored-bytes total).

// SiteLimit bounds one site. A zero field is no limit.
type SiteLimit struct {
	// Jobs is the most jobs the site may have that are not yet done: from
	// enqueue until complete, cancel, or removal (deadline, eviction).
	Jobs int64
	// Bytes is the most bytes of stubs, payloads and results the site may
	// have stored; they stay until the job's deadline. Results count
	// against it but are never refused (the device did the work); they
	// make the site's next enqueue or seal wait instead.
	Bytes int64
	// Rate is the sustained enqueues per second, Burst how many may come
	// at once (a token bucket on the store's clock). Rate 0: no limit.
	Rate  float64
	Burst int64
}

// SiteLimits is the default limit and per-site overrides (whole limits,
// already merged with the default by whoever built them).
type SiteLimits struct {
	Default SiteLimit
	Sites   map[string]SiteLimit
}

// For is the limit of siteID.
func (l SiteLimits) For(siteID string) SiteLimit {
	if s, ok := l.Sites[siteID]; ok {
		return s
	}
	return l.Default
}

// ErrSiteLimit marks an enqueue refused because the site is at one of its
// limits (errors.As gives *SiteLimitError). Nothing was written.
var ErrSiteLimit = errors.New("site limit")

// SiteLimitError names the limit an enqueue or seal ran into.
type SiteLimitError struct {
	SiteID string
	Limit  string // "jobs", "bytes" or "rate"
}

func (e *SiteLimitError) Error() string {
	return fmt.Sprintf("site %q is at its %s limit", e.SiteID, e.Limit)
}

func (e *SiteLimitError) Unwrap() error { return ErrSiteLimit }

// Site limit names (SiteLimitError.Limit, SealResult.Limit).
const (
	LimitJobs  = "jobs"
	LimitBytes = "bytes"
	LimitRate  = "rate"
)

// RefusedSiteLimit is SealResult.Refused when the payload would take the
// site past its stored-bytes limit; the job stays awaiting its payload.
const RefusedSiteLimit = "site-limit"

// SiteUse is what a site holds now, against its limits.
type SiteUse struct {
	LiveJobs    int64
	StoredBytes int64
}

// SiteUse reads the use of each named site: an SCARD and a GET per site,
// pipelined (each on its site's shard), O(1) per site.
func (s *Store) SiteUse(ctx context.Context, siteIDs []string) (map[string]SiteUse, error) {
	out := make(map[string]SiteUse, len(siteIDs))
	cmds := make([]valkey.Completed, 0, 2*len(siteIDs))
	for _, id := range siteIDs {
		if err := s.checkID("site id", id); err != nil {
			return nil, fmt.Errorf("site use: %w", err)
		}
	}
	k, err := s.siteKeys(ctx, siteIDs...)
	if err != nil {
		return nil, fmt.Errorf("site use: %w", err)
	}
	for _, id := range siteIDs {
		cmds = append(cmds, s.c.B().Scard().Key(k.siteLive(id)).Build(), s.c.B().Get().Key(k.siteBytes(id)).Build())
	}
	if len(cmds) == 0 {
		return out, nil
	}
	res := s.doMulti(ctx, "site_use", cmds...)
	for i, id := range siteIDs {
		live, err := res[2*i].AsInt64()
		if err != nil {
			return nil, fmt.Errorf("site use: %w", err)
		}
		bytes, err := res[2*i+1].AsInt64()
		if err != nil && !valkey.IsValkeyNil(err) {
			return nil, fmt.Errorf("site use: %w", err)
		}
		out[id] = SiteUse{LiveJobs: live, StoredBytes: bytes}
	}
	return out, nil
}

func limitArgs(l SiteLimit) []string {
	return []string{
		strconv.FormatInt(max(l.Jobs, 0), 10), strconv.FormatInt(max(l.Bytes, 0), 10),
		strconv.FormatFloat(max(l.Rate, 0), 'f', -1, 64), strconv.FormatInt(max(l.Burst, 1), 10),
	}
}

// DefaultSiteLimit is every site's limit in the relay unless
// RELAY_SITE_LIMITS says otherwise (Options.SiteLimits left zero limits
// nothing). Generous on purpose: it is there to keep one site from filling
// Valkey for everyone, not to shape ordinary traffic.
//   - 10,000 unfinished jobs: about 21 MB of Valkey at the measured 2.1 KB
//     per queued job, and far more than devices drain in a lease period.
//   - 1 GiB of stubs, payloads and results: enough for thousands of
//     ordinary jobs or 80 jobs carrying two 6 MiB envelopes each; a hub
//     sizes Valkey at (sites that may fill it) x this.
//   - 200 enqueues a second with bursts of 400: close to what one 2-core
//     hub completes in all (about 250 jobs/s in the benchmarks), so only a
//     runaway loop meets it.
var DefaultSiteLimit = SiteLimit{Jobs: 10_000, Bytes: 1 << 30, Rate: 200, Burst: 400}
