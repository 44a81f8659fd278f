package store

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"sync"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/scriptrun"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/lua"
)

// EnqueueInput is a site's new job. ID keys the job within SiteID (normally
// Stub.ID); Stub is stored as the exact bytes protocol.Marshal produces.
type EnqueueInput struct {
	ID     string
	SiteID string
	Stub   protocol.JobStub
}

// Enqueue stores a new queued job, or returns the job already stored under
// (SiteID, ID) exactly as it is, whatever the new stub says (§2.2). It never
// reads the clock or validates the stub.
func (s *Store) Enqueue(ctx context.Context, in EnqueueInput) (Job, error) {
	for _, f := range []struct{ name, v string }{
		{"site id", in.SiteID}, {"job id", in.ID}, {"owner", in.Stub.Owner},
		{"kind", in.Stub.Kind}, {"audience", in.Stub.Audience},
	} {
		if err := s.checkID(f.name, f.v); err != nil {
			return Job{}, fmt.Errorf("enqueue: %w", err)
		}
	}
	// The purpose is no key part, so any text is fine, but it rides in the
	// stored stub to every claimer: bounded like an identifier (a real
	// site's purpose is a manifest purpose key of at most 64 characters).
	if len(in.Stub.Purpose) > s.opts.MaxIDBytes {
		return Job{}, fmt.Errorf("enqueue: %w: purpose is %d bytes, the limit is %d",
			ErrInvalidInput, len(in.Stub.Purpose), s.opts.MaxIDBytes)
	}
	stub, err := protocol.Marshal(in.Stub)
	if err != nil {
		return Job{}, fmt.Errorf("enqueue: %w", err)
	}
	if err := s.checkBlob("stub", stub); err != nil {
		return Job{}, fmt.Errorf("enqueue: %w", err)
	}
	if err := s.placeSites(ctx, in.SiteID); err != nil {
		return Job{}, fmt.Errorf("enqueue: %w", err)
	}
	keys, args := s.enqueueCall(in.SiteID, in.Stub, stub)
	msg, err := s.run(ctx, scEnqueue, keys, args...)
	if err != nil {
		return Job{}, fmt.Errorf("enqueue: %w", err)
	}
	parts, err := elems(msg, 2)
	if err != nil {
		return Job{}, fmt.Errorf("enqueue: %w", err)
	}
	if created, _ := parts[0].AsInt64(); created == -1 {
		limit, err := str(parts[1])
		if err != nil {
			return Job{}, fmt.Errorf("enqueue: %w", err)
		}
		return Job{}, fmt.Errorf("enqueue: %w", &SiteLimitError{SiteID: in.SiteID, Limit: limit})
	}
	snap, err := parseSnapshot(parts[1])
	if err != nil || snap == nil {
		return Job{}, fmt.Errorf("enqueue: snapshot: %v", err)
	}
	return snap.Job, nil
}

// enqueueCall is the keys and op-specific arguments of the enqueue script.
func (s *Store) enqueueCall(siteID string, st protocol.JobStub, stub []byte) (keys, args []string) {
	sh := s.k.siteShard(siteID)
	keys = []string{s.k.job(siteID, st.ID), s.k.seq(sh),
		s.k.readyQueue(siteID, st.Owner, st.Kind, st.Audience), s.k.due(sh), s.k.epoch(sh),
		s.k.siteLive(siteID), s.k.siteBytes(siteID), s.k.siteRate(siteID)}
	args = []string{member(siteID, st.ID), string(stub), strconv.FormatInt(st.DeadlineAt, 10),
		enc(siteID), encJob(st.ID), enc(st.Owner), enc(st.Kind), enc(st.Audience), s.epochCandidate()}
	return keys, append(args, limitArgs(s.opts.SiteLimits.For(siteID))...)
}

// Job reads one job by (siteID, jobID); nil, nil when absent. A pure read:
// an overdue job shows until something settles it (trap 21).
func (s *Store) Job(ctx context.Context, siteID, jobID string) (*Job, error) {
	if err := s.checkID("site id", siteID); err != nil {
		return nil, fmt.Errorf("job: %w", err)
	}
	if err := s.checkID("job id", jobID); err != nil {
		return nil, fmt.Errorf("job: %w", err)
	}
	k, err := s.siteKeys(ctx, siteID)
	if err != nil {
		return nil, fmt.Errorf("job: %w", err)
	}
	msg, err := s.run(ctx, scJob, []string{k.job(siteID, jobID)}, member(siteID, jobID))
	if err != nil {
		return nil, fmt.Errorf("job: %w", err)
	}
	snap, err := parseSnapshot(msg)
	if err != nil {
		return nil, fmt.Errorf("job: %w", err)
	}
	if snap == nil {
		return nil, nil
	}
	return &snap.Job, nil
}

// Paged reads. Each page is one script call bounded by entries examined
// and, for full snapshots, by bytes, so no call holds the server for long
// however many jobs the index holds (BenchmarkScriptTime measures them).
// Pages follow the index by seq, so a listing is not one atomic snapshot of
// a store under writes: a job that changes while the listing runs shows as
// it was when its page was read, or not at all.
type pageLimits struct {
	snapshotEntries int // full snapshots: entries examined per call
	snapshotBytes   int // ... ending early once this many bytes are read
	leanEntries     int // pendingPage: index entries per page
	resultsEntries  int // results_page: index entries per call
	getJobs         int // resultsGet: jobs per read
	getBytes        int // ... ending early once this many bytes are read
	claimScan       int // claim: queue entries examined per call
	presenceEntries int // presence_all: records per call
	presenceBytes   int // ... ending early once this many bytes are read
	cancelEntries   int // cancel_requests: index entries per call
}

// defaultPageLimits keep each call near or under 1 ms on a 2-core machine
// (BenchmarkScriptTime); tests shrink them to cross page boundaries.
var defaultPageLimits = pageLimits{
	snapshotEntries: 24,
	snapshotBytes:   64 << 10,
	leanEntries:     64,
	resultsEntries:  512,
	getJobs:         128,
	getBytes:        128 << 10,
	claimScan:       16,
	presenceEntries: 128,
	presenceBytes:   64 << 10,
	cancelEntries:   64,
}

// pages runs a paged script from the start of its index to its end. args
// are the script's leading ARGV; the cursor and limits follow them. each
// receives a page's items (the reply after its cursor).
func (s *Store) pages(ctx context.Context, op Script, key string, args []string, limits []string, each func([]valkey.ValkeyMessage) error) error {
	all := make([]string, 0, len(args)+1+len(limits))
	all = append(all, args...)
	at := len(all)
	all = append(all, "-inf")
	all = append(all, limits...)
	for {
		msg, err := s.run(ctx, op, []string{key}, all...)
		if err != nil {
			return err
		}
		parts, err := elems(msg, 1)
		if err != nil {
			return err
		}
		cursor, err := str(parts[0])
		if err != nil {
			return err
		}
		if err := each(parts[1:]); err != nil {
			return err
		}
		if cursor == "" {
			return nil
		}
		all[at] = "(" + cursor
	}
}

// snapshotPages collects the snapshots of a paged full-snapshot script.
func (s *Store) snapshotPages(ctx context.Context, op Script, key string, args ...string) ([]Job, error) {
	out := []Job{}
	limits := []string{strconv.Itoa(s.limits.snapshotEntries), strconv.Itoa(s.limits.snapshotBytes)}
	err := s.pages(ctx, op, key, args, limits, func(items []valkey.ValkeyMessage) error {
		for _, e := range items {
			snap, err := parseSnapshot(e)
			if err != nil {
				return err
			}
			if snap != nil {
				out = append(out, snap.Job)
			}
		}
		return nil
	})
	return out, err
}

// Jobs lists every job in insertion order (debug page). O(N), read shard
// by shard: a ZSCAN of the shard's due index finds its jobs (every job has a
// deadline, so every job is in it), their snapshots are read in batches, and the whole is ordered
// by first-enqueue order (seq compares across shards: see next_seq in
// lua/lib/common.lua). Not a point-in-time view: a job present for the
// whole call is listed once, one enqueued or forgotten meanwhile may or may
// not be.
func (s *Store) Jobs(ctx context.Context) ([]Job, error) {
	var out []snapshot
	for sh := range s.k.shards {
		members, err := s.scanMembers(ctx, s.k.due(sh))
		if err != nil {
			return nil, fmt.Errorf("jobs: %w", err)
		}
		for len(members) > 0 {
			batch := members[:min(len(members), s.limits.snapshotEntries)]
			args := append([]string{strconv.Itoa(s.limits.snapshotBytes)}, batch...)
			msg, err := s.run(ctx, scJobsPage, []string{s.k.due(sh)}, args...)
			if err != nil {
				return nil, fmt.Errorf("jobs: %w", err)
			}
			parts, err := elems(msg, 1)
			if err != nil {
				return nil, fmt.Errorf("jobs: %w", err)
			}
			used, err := parts[0].AsInt64()
			if err != nil || used < 1 || used > int64(len(batch)) {
				return nil, fmt.Errorf("jobs: page consumed %d of %d members (%v)", used, len(batch), err)
			}
			for _, e := range parts[1:] {
				snap, err := parseSnapshot(e)
				if err != nil {
					return nil, fmt.Errorf("jobs: %w", err)
				}
				if snap != nil {
					out = append(out, *snap)
				}
			}
			members = members[used:]
		}
	}
	slices.SortStableFunc(out, func(a, b snapshot) int { return cmp.Compare(a.seq, b.seq) })
	return jobsOf(out), nil
}

// scanMembers is every member of the sorted set key, once each (ZSCAN may
// answer one twice). ZSCAN, not a range by rank or score: due scores move
// as jobs change, and only a scan is sure to list every member present
// from its start to its end.
func (s *Store) scanMembers(ctx context.Context, key string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	var cursor uint64
	for {
		e, err := s.do(ctx, "jobs_scan", s.c.B().Zscan().Key(key).Cursor(cursor).Count(1000).Build()).AsScanEntry()
		if err != nil {
			return nil, fmt.Errorf("zscan %s: %w", key, err)
		}
		for i := 0; i+1 < len(e.Elements); i += 2 {
			if m := e.Elements[i]; !seen[m] {
				seen[m] = true
				out = append(out, m)
			}
		}
		if e.Cursor == 0 {
			return out, nil
		}
		cursor = e.Cursor
	}
}

// Awaiting lists the site's awaiting-payload jobs in insertion order,
// cancelled ones included. A pure read, in pages.
func (s *Store) Awaiting(ctx context.Context, siteID string) ([]Job, error) {
	return s.siteList(ctx, scAwaiting, keys.awaiting, siteID)
}

// Finished lists the site's done jobs that carry a result, in insertion
// order, until their deadline removes them. A pure read, in pages.
func (s *Store) Finished(ctx context.Context, siteID string) ([]Job, error) {
	return s.siteList(ctx, scFinished, keys.finished, siteID)
}

func (s *Store) siteList(ctx context.Context, op Script, key func(keys, string) string, siteID string) ([]Job, error) {
	if err := s.checkID("site id", siteID); err != nil {
		return nil, fmt.Errorf("%s: %w", op.Name, err)
	}
	k, err := s.siteKeys(ctx, siteID)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op.Name, err)
	}
	out, err := s.snapshotPages(ctx, op, key(k, siteID), enc(siteID))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op.Name, err)
	}
	return out, nil
}

// Seal stores the payload the site sealed to the claiming device and makes
// the job ready (§2.11). An overdue job is settled first (§9.8), so a seal
// after the window answers too-late (was queued) or not-found. When the
// holder's fetch waits on this Store (AwaitPayload), the seal also takes
// the payload for it in the same script, and the fetch gets it without a
// take of its own.
func (s *Store) Seal(ctx context.Context, siteID, jobID string, envelope json.RawMessage) (SealResult, error) {
	if err := s.checkID("site id", siteID); err != nil {
		return SealResult{}, fmt.Errorf("seal: %w", err)
	}
	if err := s.checkID("job id", jobID); err != nil {
		return SealResult{}, fmt.Errorf("seal: %w", err)
	}
	k, err := s.siteKeys(ctx, siteID)
	if err != nil {
		return SealResult{}, fmt.Errorf("seal: %w", err)
	}
	if err := s.checkBlob("envelope", envelope); err != nil {
		return SealResult{}, fmt.Errorf("seal: %w", err)
	}
	// A fetch of this job waiting here: the seal takes the payload for it
	// when the grant is still the one it waits on (seal.lua), and tells it
	// what happened whatever the answer (release).
	takeLease, takeRunner, release, _ := s.payloads.Holder(jobID)
	sealed, took := false, false
	defer func() {
		if took {
			release(envelope, true)
		} else {
			release(nil, sealed)
		}
	}()
	msg, err := s.run(ctx, scSeal, []string{k.job(siteID, jobID), k.siteBytes(siteID)}, member(siteID, jobID), string(envelope),
		strconv.FormatInt(max(s.opts.SiteLimits.For(siteID).Bytes, 0), 10), takeRunner, takeLease)
	if err != nil {
		return SealResult{}, fmt.Errorf("seal: %w", err)
	}
	parts, err := elems(msg, 2)
	if err != nil {
		return SealResult{}, fmt.Errorf("seal: %w", err)
	}
	status, err := str(parts[0])
	if err != nil {
		return SealResult{}, fmt.Errorf("seal: %w", err)
	}
	reports, err := parseReports(parts[len(parts)-1])
	if err != nil {
		return SealResult{}, fmt.Errorf("seal: %w", err)
	}
	s.fireChurn(reports)
	switch status {
	case StateReady:
		if len(parts) != 4 {
			return SealResult{}, fmt.Errorf("seal: ready reply of %d parts", len(parts))
		}
		lease, err := str(parts[1])
		if err != nil {
			return SealResult{}, fmt.Errorf("seal: %w", err)
		}
		taken, err := num(parts[2])
		if err != nil {
			return SealResult{}, fmt.Errorf("seal: %w", err)
		}
		// The site sees the seal's own answer (ready); a fetch the seal took
		// the payload for gets it as from a take right after.
		sealed, took = true, taken == 1
		s.payloads.Sealed(lease)
		return SealResult{State: StateReady, TakenForFetch: took}, nil
	case RefusedNotFound:
		return SealResult{Refused: RefusedNotFound}, nil
	case RefusedTooLate:
		was, err := str(parts[1])
		if err != nil {
			return SealResult{}, fmt.Errorf("seal: %w", err)
		}
		return SealResult{Refused: RefusedTooLate, Was: was}, nil
	case RefusedSiteLimit:
		limit, err := str(parts[1])
		if err != nil {
			return SealResult{}, fmt.Errorf("seal: %w", err)
		}
		return SealResult{Refused: RefusedSiteLimit, Limit: limit}, nil
	}
	return SealResult{}, fmt.Errorf("seal: unexpected status %q", status)
}

// Cancel flags the site's job as cancelled (§2.12): false when the site has
// no such job. Nothing else changes; a holder hears of it via CancelRequests.
func (s *Store) Cancel(ctx context.Context, siteID, jobID string) (bool, error) {
	if err := s.checkID("site id", siteID); err != nil {
		return false, fmt.Errorf("cancel: %w", err)
	}
	if err := s.checkID("job id", jobID); err != nil {
		return false, fmt.Errorf("cancel: %w", err)
	}
	k, err := s.siteKeys(ctx, siteID)
	if err != nil {
		return false, fmt.Errorf("cancel: %w", err)
	}
	n, err := s.runInt(ctx, scCancel, []string{k.job(siteID, jobID)}, member(siteID, jobID))
	if err != nil {
		return false, fmt.Errorf("cancel: %w", err)
	}
	return n == 1, nil
}

// jobScripts are RunJobScript's operations, assembled once each.
type jobScripts struct {
	mu   sync.Mutex
	byOp map[string]*scriptrun.Script
}

func (j *jobScripts) get(name, op string) (*scriptrun.Script, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if sc, ok := j.byOp[op]; ok {
		return sc, nil
	}
	common, err := fs.ReadFile(lua.FS, "lib/common.lua")
	if err != nil {
		return nil, err
	}
	src, err := assemble(lua.FS, common, op)
	if err != nil {
		return nil, err
	}
	sc, err := scriptrun.New(name, src)
	if err != nil {
		return nil, err
	}
	if j.byOp == nil {
		j.byOp = map[string]*scriptrun.Script{}
	}
	j.byOp[op] = sc
	return sc, nil
}

func (s *Store) runInt(ctx context.Context, name Script, keys []string, args ...string) (int64, error) {
	msg, err := s.run(ctx, name, keys, args...)
	if err != nil {
		return 0, err
	}
	return num(msg)
}
