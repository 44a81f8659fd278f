package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/valkey-io/valkey-go"
)

// The site plane polls two listings many times a second (pending, results),
// and the results listing carries every finished job's envelope until its
// deadline. These reads return only the fields those answers show, in
// bounded pages, and results come from a per-store cache wherever the
// stored result cannot have changed. They are plain commands (pendingPage,
// resultsGet, and on one node finishedPage), not scripts: each tolerates
// reading one key after another, and a script costs the server more for
// the same reads. A cluster reads the finished page with a script, which
// must run on the node of the site's slot (finishedPage says why).

// PendingJob is one awaiting-payload job as the site plane's pending answer
// shows it. Device is the claiming device's identity JSON exactly as stored
// (as protocol.Marshal wrote it). Claimed is false only for a record without
// a grant, which no awaiting-payload job has.
type PendingJob struct {
	JobID          string
	Claimed        bool
	Device         json.RawMessage
	RunnerID       string
	LeaseID        string
	AwaitingUntil  int64 // 0 when absent
	LeaseExpiresAt int64
}

// ResultJob is one finished job as the site plane's results answer shows it.
// Device is the claiming device's identity JSON exactly as stored. Values
// may be shared with the store's cache: callers must not modify them.
type ResultJob struct {
	JobID       string
	Result      json.RawMessage
	Disposition string
	Claimed     bool
	RunnerID    string
	LeaseID     string
	Device      json.RawMessage
	RunnerOwner string

	// Encoded holds what a caller derived from the fields above, once, for
	// every later read of the same cached job: the relay keeps the job's
	// entry of a results answer here, which is re-sent on every poll until
	// the deadline. Safe for concurrent readers; never read by the store.
	Encoded atomic.Pointer[[]byte]
}

// PendingJobs lists the site's awaiting-payload jobs in insertion order with
// the fields of the pending answer: the same jobs Awaiting lists. A pure
// read, in pages.
func (s *Store) PendingJobs(ctx context.Context, siteID string) ([]PendingJob, error) {
	if err := s.checkID("site id", siteID); err != nil {
		return nil, fmt.Errorf("pending jobs: %w", err)
	}
	k, err := s.siteKeys(ctx, siteID)
	if err != nil {
		return nil, fmt.Errorf("pending jobs: %w", err)
	}
	out := []PendingJob{}
	for exclusive := "-inf"; ; {
		cursor, rows, err := s.pendingPage(ctx, k, siteID, exclusive, s.limits.leanEntries)
		if err != nil {
			return nil, fmt.Errorf("pending jobs: %w", err)
		}
		for _, f := range rows {
			p, err := pendingJob(f)
			if err != nil {
				return nil, fmt.Errorf("pending jobs: %w", err)
			}
			out = append(out, p)
		}
		if cursor == "" {
			return out, nil
		}
		exclusive = "(" + cursor
	}
}

// pendingJob is one row of a pending page (pendingPage) as the answer
// shows it.
func pendingJob(f [6]string) (PendingJob, error) {
	id, err := decJob(f[0])
	if err != nil {
		return PendingJob{}, err
	}
	p := PendingJob{JobID: id}
	if f[3] != "" {
		p.Claimed, p.Device, p.RunnerID, p.LeaseID = true, json.RawMessage(f[1]), f[2], f[3]
		if p.LeaseExpiresAt, err = atoi("ce", f[5]); err != nil {
			return PendingJob{}, err
		}
	}
	if f[4] != "" {
		if p.AwaitingUntil, err = atoi("au", f[4]); err != nil {
			return PendingJob{}, err
		}
	}
	return p, nil
}

// DefaultResultCacheBytes bounds the results cache of one Store.
const DefaultResultCacheBytes = 64 << 20

// resultCache holds, per site, the results listed by the site's last
// results read, in that listing's order (seq, then job). A done job's
// result, disposition and grant never change while it exists (complete
// keeps the first result, a done job is never requeued or re-granted),
// and seq is never reused while Valkey keeps its data, so the entry of a
// seq the listing names is the stored result. Valkey can lose its data
// (restart without persistence, FLUSHALL, failover to a replica that
// missed writes), and then seq is handed out again; the entries are
// therefore filed under the data generation (the epoch of the site's
// shard, a random id the first enqueue after a loss writes there, plus the
// server's replication id, which a failover changes) and served only to a
// read whose own listing named the same generation. The generation is kept
// per site: sites on different shards (on a cluster, on different nodes)
// name different generations, and one site's read must not empty the cache
// of the others.
type resultCache struct {
	mu    sync.Mutex
	limit int
	bytes int
	sites map[string]siteResults // site id -> its entries and their generation
}

type siteResults struct {
	epoch   string
	entries []cachedResult // in the order of the listing that named them
	size    int            // what the entry counts against the bound
}

// cachedResult is one result of a listing, with what it counts against
// the cache's bound, computed once when it was read.
type cachedResult struct {
	l    listed
	r    *ResultJob
	cost int
}

// get returns the site's entries filed under epoch, in listing order;
// none when they were filed under another epoch or epoch is "" (no epoch
// stored: trust nothing). The slice is shared: read it, never change it.
func (c *resultCache) get(siteID, epoch string) []cachedResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	sr, ok := c.sites[siteID]
	if epoch == "" || !ok || sr.epoch != epoch {
		return nil
	}
	return sr.entries
}

// put replaces the site's entries with the ones its latest listing named,
// filed under that listing's epoch, or forgets every site when the cache
// would grow past its bound.
func (c *resultCache) put(siteID, epoch string, entries []cachedResult) {
	size := resultSiteSize(siteID, entries)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sites == nil {
		c.sites = map[string]siteResults{}
	}
	if old, ok := c.sites[siteID]; ok {
		c.bytes -= old.size
	}
	delete(c.sites, siteID)
	if epoch == "" || size > c.limit {
		return
	}
	if c.bytes+size > c.limit {
		c.sites = map[string]siteResults{}
		c.bytes = 0
	}
	c.sites[siteID] = siteResults{epoch: epoch, entries: entries, size: size}
	c.bytes += size
}

// resultSiteSize is what a site's entry costs the cache's bound: its
// results and the entry itself, so that sites with no results (a hub's
// sites come and go) count too.
func resultSiteSize(siteID string, entries []cachedResult) int {
	n := 256 + len(siteID)
	for _, e := range entries {
		n += e.cost
	}
	return n
}

// resultSize counts a cached result twice: its fields as read, and the
// entry a caller may derive from them and keep beside them (Encoded: the
// relay's answer entry, about as large again).
func resultSize(r *ResultJob) int {
	return 2 * (len(r.Result) + len(r.Device) + len(r.JobID) + len(r.RunnerID) + len(r.LeaseID) + len(r.RunnerOwner) + len(r.Disposition) + 128)
}

// listedBefore orders index entries as the finished index lists them: by
// seq (decimal text without leading zeros, so shorter is smaller), then by
// member.
func listedBefore(a, b listed) bool {
	if len(a.seq) != len(b.seq) {
		return len(a.seq) < len(b.seq)
	}
	if a.seq != b.seq {
		return a.seq < b.seq
	}
	return a.eJ < b.eJ
}

// ResultJobs lists the site's done jobs that carry a result, in insertion
// order, with the fields of the results answer: the same jobs Finished
// lists. A pure read, in pages: the site's finished index (member, seq),
// then only the results this Store has not already read.
func (s *Store) ResultJobs(ctx context.Context, siteID string) ([]*ResultJob, error) {
	if err := s.checkID("site id", siteID); err != nil {
		return nil, fmt.Errorf("result jobs: %w", err)
	}
	k, err := s.siteKeys(ctx, siteID)
	if err != nil {
		return nil, fmt.Errorf("result jobs: %w", err)
	}
	list, epoch, err := s.finishedIndex(ctx, k, siteID)
	if err != nil {
		return nil, fmt.Errorf("result jobs: %w", err)
	}

	found, missing := matchCached(list, s.results.get(siteID, epoch))
	for len(missing) > 0 {
		batch := make([]listed, min(len(missing), s.limits.getJobs))
		for j := range batch {
			batch[j] = list[missing[j]]
		}
		consumed, rows, err := s.resultsGet(ctx, k, siteID, batch, s.limits.getBytes)
		if err != nil {
			return nil, fmt.Errorf("result jobs: %w", err)
		}
		for _, row := range rows {
			f := row.f
			id, err := decJob(f[0])
			if err != nil {
				return nil, fmt.Errorf("result jobs: %w", err)
			}
			r := &ResultJob{JobID: id, Result: json.RawMessage(f[1]), Disposition: f[2]}
			if f[4] != "" {
				r.Claimed, r.RunnerID, r.LeaseID, r.Device, r.RunnerOwner = true, f[3], f[4], json.RawMessage(f[5]), f[6]
			}
			i := missing[row.pos]
			found[i] = cachedResult{l: list[i], r: r, cost: resultSize(r)}
		}
		missing = missing[consumed:]
	}

	// A job listed but gone by the time it was read has no result: it
	// is neither answered nor kept.
	out := make([]*ResultJob, 0, len(list))
	keep := found[:0]
	for _, e := range found {
		if e.r != nil {
			out = append(out, e.r)
			keep = append(keep, e)
		}
	}
	s.results.put(siteID, epoch, keep)
	return out, nil
}

// matchCached pairs each entry of list with its cached result, and says
// which entries have none (indices into list). Both are in index order
// (listedBefore), so one walk matches them; an entry out of that order is
// only read again, never paired with another entry's result.
func matchCached(list []listed, cached []cachedResult) (found []cachedResult, missing []int) {
	found = make([]cachedResult, len(list))
	c := 0
	for i, l := range list {
		for c < len(cached) && listedBefore(cached[c].l, l) {
			c++
		}
		if c < len(cached) && cached[c].l == l {
			found[i] = cached[c]
			c++
		} else {
			missing = append(missing, i)
		}
	}
	return found, missing
}

// listed is one entry of a finished index: the job (as encoded in the
// member) and its seq.
type listed struct{ eJ, seq string }

// finishedIndex reads the site's finished index in pages, with the epoch
// every page named. A page naming another epoch than the first means Valkey
// lost its data mid-read; the read starts again, a bounded number of times.
func (s *Store) finishedIndex(ctx context.Context, k keys, siteID string) ([]listed, string, error) {
	limit := s.limits.resultsEntries
	for attempt := 0; ; attempt++ {
		var list []listed
		epoch, after, changed := "", "-inf", false
		for page := 0; ; page++ {
			flat, err := s.finishedPage(ctx, k, siteID, after, limit)
			if err != nil {
				return nil, "", err
			}
			if page == 0 {
				epoch = flat[0]
			} else if flat[0] != epoch {
				changed = true
				break
			}
			flat = flat[1:]
			for i := 0; i < len(flat); i += 2 {
				list = append(list, listed{flat[i], flat[i+1]})
			}
			if len(flat) < 2*limit {
				break
			}
			after = "(" + flat[len(flat)-1]
		}
		if !changed {
			return list, epoch, nil
		}
		if attempt == 3 {
			return nil, "", errors.New("the store's epoch kept changing while the finished index was read")
		}
	}
}

// opResultsPage names a finished-index page's reads in the store's call
// metrics.
const opResultsPage = "results_page"

// finishedPage reads one page of the site's finished index: the data
// generation, then members and seqs, flat.
//
// The generation is the namespace's epoch (written by the first enqueue;
// "" when there is none) and the replication id of the server that holds
// the index. seq restarts when Valkey loses its data: a restart without
// persistence or FLUSHALL removes the epoch key, and a failover to a
// replica that missed the latest writes (which keeps the epoch but rolls
// seq back) gives the promoted server a new replication id. The results
// cache trusts what it read under a seq only for the generation the page
// names.
//
// The page, the epoch and INFO replication are one transaction, no
// script: a script turns every entry into a Lua string and back, about
// three times the server's CPU for a page of hundreds of entries. MULTI
// keeps the three on one server: on a cluster INFO takes no key, and a
// plain INFO sent beside keyed reads that a failover or a moved slot
// redirects would still be answered by the server the client first chose,
// filing the new owner's entries under the old owner's generation. A
// keyed command queued on a server that does not own the slot aborts the
// transaction, and the client sends it whole to the new owner.
func (s *Store) finishedPage(ctx context.Context, k keys, siteID, after string, limit int) ([]string, error) {
	fin, epochKey := k.finished(siteID), k.epoch(k.siteShard(siteID))
	res := s.doMulti(ctx, opResultsPage,
		s.c.B().Multi().Build(),
		s.c.B().Zrangebyscore().Key(fin).Min(after).Max("+inf").Withscores().Limit(0, int64(limit)).Build(),
		s.c.B().Get().Key(epochKey).Build(),
		s.c.B().Info().Section("replication").Build(),
		s.c.B().Exec().Build())
	replies, err := res[len(res)-1].ToArray()
	if err != nil {
		// EXECABORT says only that a queued command was refused; that
		// refusal says why (a failover or a moving slot: unavailable).
		for _, queued := range res[1 : len(res)-1] {
			if qerr := queued.Error(); qerr != nil {
				return nil, fmt.Errorf("finished page: %w (the transaction: %v)", qerr, err)
			}
		}
		return nil, fmt.Errorf("finished page: %w", err)
	}
	if len(replies) != 3 {
		return nil, fmt.Errorf("%w: finished page: a transaction of %d replies", ErrUnexpectedReply, len(replies))
	}
	page, err := replies[0].ToArray()
	if err != nil {
		return nil, fmt.Errorf("finished page: %w", err)
	}
	epoch, err := replies[1].ToString()
	if valkey.IsValkeyNil(err) {
		epoch, err = "", nil
	}
	if err != nil {
		return nil, fmt.Errorf("finished page: epoch: %w", err)
	}
	if epoch != "" {
		info, err := replies[2].ToString()
		if _, refused := valkey.IsValkeyErr(err); refused {
			// The embedded store answers no section "replication" (and
			// cannot fail over): its generation is the epoch alone.
		} else if err != nil {
			return nil, fmt.Errorf("finished page: replication: %w", err)
		} else {
			epoch += "/" + replicationID(info)
		}
	}
	return appendZEntries([]string{epoch}, page)
}

// appendZEntries appends a ZRANGE ... WITHSCORES reply's members and
// scores, flat, each score as seqText writes it. RESP3 answers pairs,
// RESP2 one flat list.
func appendZEntries(flat []string, page []valkey.ValkeyMessage) ([]string, error) {
	pairs := len(page) > 0 && page[0].IsArray()
	n := len(page)
	if !pairs {
		if n%2 != 0 {
			return nil, fmt.Errorf("%w: finished page of %d items", ErrUnexpectedReply, n)
		}
		n /= 2
	}
	flat = slices.Grow(flat, 2*n)
	for i := range n {
		var kv []valkey.ValkeyMessage
		if pairs {
			var err error
			if kv, err = page[i].ToArray(); err != nil || len(kv) != 2 {
				return nil, fmt.Errorf("%w: finished page: an entry of %d items (%v)", ErrUnexpectedReply, len(kv), err)
			}
		} else {
			kv = page[2*i : 2*i+2]
		}
		m, err := kv[0].ToString()
		if err != nil {
			return nil, fmt.Errorf("finished page: member: %w", err)
		}
		text, err := kv[1].ToString()
		if err != nil {
			return nil, fmt.Errorf("finished page: score of %q: %w", m, err)
		}
		// A server writes an integral score as its digits; anything else
		// (an exponent, a fraction) goes through the number.
		if !isDecimal(text) {
			f, err := kv[1].AsFloat64()
			if err != nil {
				return nil, fmt.Errorf("%w: finished page: score %q of %q", ErrUnexpectedReply, text, m)
			}
			if text, err = seqText(valkey.ZScore{Member: m, Score: f}); err != nil {
				return nil, err
			}
		}
		flat = append(flat, m, text)
	}
	return flat, nil
}

// isDecimal reports whether s is a non-negative integer as
// strconv.FormatInt writes it: digits, no sign, no leading zero, short
// enough for an int64. (A server writes a double's digits only when they
// are its exact integral value.)
func isDecimal(s string) bool {
	if s == "" || len(s) > 18 || (s[0] == '0' && len(s) > 1) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// seqText is an index entry's score, a seq, as the scripts write it: an
// integer in decimal.
func seqText(z valkey.ZScore) (string, error) {
	seq := int64(z.Score)
	if float64(seq) != z.Score {
		return "", fmt.Errorf("%w: seq %v of %q is not an integer", ErrUnexpectedReply, z.Score, z.Member)
	}
	return strconv.FormatInt(seq, 10), nil
}

// replicationID is INFO replication's master_replid: the run of letters
// and digits after the field name ("" when the field is missing).
func replicationID(info string) string {
	_, rest, ok := strings.Cut(info, "master_replid:")
	if !ok {
		return ""
	}
	end := 0
	for end < len(rest) && isAlnum(rest[end]) {
		end++
	}
	return rest[:end]
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
