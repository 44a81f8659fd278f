package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/protocol"
)

// pendingOf is what PendingJobs must say about the jobs Awaiting lists.
func pendingOf(t *testing.T, jobs []Job) []PendingJob {
	t.Helper()
	out := []PendingJob{}
	for _, j := range jobs {
		p := PendingJob{JobID: j.ID, AwaitingUntil: j.AwaitingUntil}
		if c := j.ClaimedBy; c != nil {
			p.Claimed, p.RunnerID, p.LeaseID, p.LeaseExpiresAt = true, c.RunnerID, c.LeaseID, c.LeaseExpiresAt
			p.Device = protocol.MustMarshal(c.Device)
		}
		out = append(out, p)
	}
	return out
}

// resultsOf is what ResultJobs must say about the jobs Finished lists.
func resultsOf(t *testing.T, jobs []Job) []*ResultJob {
	t.Helper()
	out := []*ResultJob{}
	for _, j := range jobs {
		r := &ResultJob{JobID: j.ID, Result: j.Result, Disposition: j.Disposition}
		if c := j.ClaimedBy; c != nil {
			r.Claimed, r.RunnerID, r.LeaseID, r.RunnerOwner = true, c.RunnerID, c.LeaseID, c.Owner
			r.Device = protocol.MustMarshal(c.Device)
		}
		out = append(out, r)
	}
	return out
}

func sameJSON(t *testing.T, what string, got, want any) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		t.Fatalf("%s:\n got %s\nwant %s", what, g, w)
	}
}

// checkSitePlane compares the lean listings with the full ones, twice (the
// second results read is served from the cache).
func (h *storeFixture) checkSitePlane(siteID string, wantPending, wantResults []string) {
	h.t.Helper()
	aw, err := h.s.Awaiting(h.ctx, siteID)
	if err != nil {
		h.t.Fatal(err)
	}
	equalStrings(h.t, "awaiting", jobIDs(aw), wantPending)
	pending, err := h.s.PendingJobs(h.ctx, siteID)
	if err != nil {
		h.t.Fatal(err)
	}
	sameJSON(h.t, "pending jobs", pending, pendingOf(h.t, aw))
	fin, err := h.s.Finished(h.ctx, siteID)
	if err != nil {
		h.t.Fatal(err)
	}
	equalStrings(h.t, "finished", jobIDs(fin), wantResults)
	for round := range 2 {
		res, err := h.s.ResultJobs(h.ctx, siteID)
		if err != nil {
			h.t.Fatal(err)
		}
		sameJSON(h.t, fmt.Sprint("result jobs, read ", round+1), res, resultsOf(h.t, fin))
	}
}

// The lean site-plane listings list exactly the jobs, in the order and with
// the values, of Awaiting and Finished, across page boundaries, whatever
// state the other jobs are in, and the results cache never serves a result
// the store no longer holds.
func TestSitePlaneListingsMatchSnapshots(t *testing.T) {
	t.Parallel()
	limits := []struct {
		name string
		l    pageLimits
	}{
		{"default pages", defaultPageLimits},
		{"one entry per call", pageLimits{snapshotEntries: 1, snapshotBytes: 1, leanEntries: 1, resultsEntries: 1, getJobs: 1, getBytes: 1, claimScan: 1}},
		{"two per call, byte-bounded", pageLimits{snapshotEntries: 2, snapshotBytes: 300, leanEntries: 2, resultsEntries: 2, getJobs: 3, getBytes: 150, claimScan: 2}},
	}
	for _, tc := range limits {
		t.Run(tc.name, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, b backend) {
				h := newFixture(t, b, Options{})
				h.s.limits = tc.l
				h.checkSitePlane(site, nil, nil)
				// Nine jobs over five owners (the unsealed cap is two per pair).
				owners := []string{"alice", "alice", "bob", "bob", "carol", "carol", "dave", "dave", "erin"}
				for i, o := range owners {
					h.enqueue(fmt.Sprint("j", i), o)
				}
				grants := map[string]ClaimedStub{}
				for _, o := range []string{"alice", "bob", "carol", "dave", "erin"} {
					for _, g := range h.claim(maxJobs(20), deviceOwner(o), runner("runner_"+o), func(in *ClaimInput) {
						in.Routes = []Route{{SiteID: site, Owner: o}}
					}) {
						grants[stubID(g)] = g
					}
				}
				if len(grants) != 9 {
					t.Fatalf("granted %d", len(grants))
				}
				h.checkSitePlane(site, []string{"j0", "j1", "j2", "j3", "j4", "j5", "j6", "j7", "j8"}, nil)

				done := func(id, disp string, env json.RawMessage) {
					g := grants[id]
					if r := h.seal(id); r.State != StateReady {
						t.Fatalf("seal %s: %+v", id, r)
					}
					r, err := h.s.Complete(h.ctx, CompleteInput{JobID: id, RunnerID: g.Lease.RunnerID, LeaseID: g.Lease.ID, Envelope: env, Disposition: disp})
					if err != nil || !r.Accepted {
						t.Fatalf("complete %s: %+v %v", id, r, err)
					}
				}
				done("j1", "ok", envelope)
				done("j3", "error", json.RawMessage(`{"ciphertext":"BBBB","deadlineAt":1}`))
				done("j4", "", envelope)                                 // empty disposition: omitted by the plane, listed here
				h.seal("j6")                                             // ready: in neither listing
				if _, err := h.s.Cancel(h.ctx, site, "j3"); err != nil { // cancelled after done: still a result
					t.Fatal(err)
				}
				h.checkSitePlane(site, []string{"j0", "j2", "j5", "j7", "j8"}, []string{"j1", "j3", "j4"})

				// A second result under the same lease changes nothing.
				g := grants["j1"]
				if r, _ := h.s.Complete(h.ctx, CompleteInput{JobID: "j1", RunnerID: "runner_alice", LeaseID: g.Lease.ID, Envelope: json.RawMessage(`{"other":1}`), Disposition: "error"}); !r.Duplicate {
					t.Fatalf("second complete: %+v", r)
				}
				h.checkSitePlane(site, []string{"j0", "j2", "j5", "j7", "j8"}, []string{"j1", "j3", "j4"})

				// j1 passes its deadline and is removed, then a new j1 (new seq,
				// new lease) finishes with another result: the cache must not
				// answer with the old one.
				h.s.Testing().AdvanceClock(farDeadline) // everything is due
				if swept := h.sweep(); len(swept) != 9 {
					t.Fatalf("swept %d", len(swept))
				}
				h.s.Testing().SetClockOffset(0)
				h.enqueue("j1", "alice")
				ng := h.claim()
				if len(ng) != 1 || stubID(ng[0]) != "j1" || ng[0].Lease.ID == g.Lease.ID {
					t.Fatalf("re-claim: %q", ids(ng))
				}
				h.seal("j1")
				if r := h.complete("j1", "runner_1", ng[0].Lease.ID, "canceled"); !r.Accepted {
					t.Fatalf("complete: %+v", r)
				}
				res, _ := h.s.ResultJobs(h.ctx, site)
				if res[0].Disposition != "canceled" || res[0].LeaseID != ng[0].Lease.ID {
					t.Fatalf("served %+v", res[0])
				}
				h.checkSitePlane(site, nil, []string{"j1"})
			})
		})
	}
}

// Other sites' jobs never show, and a cache too small for a site's results
// still answers correctly (from Valkey every time).
func TestResultJobsSitesAndCacheBound(t *testing.T) {
	t.Parallel()
	for _, cacheBytes := range []int{-1, 1, 0} {
		t.Run(fmt.Sprint("cache=", cacheBytes), func(t *testing.T) {
			eachBackend(t, func(t *testing.T, b backend) {
				h := newFixture(t, b, Options{ResultCacheBytes: cacheBytes})
				for _, siteID := range []string{site, "site_other"} {
					h.enqueueStub(siteID, stub("x", "alice"))
					g := h.claim(func(in *ClaimInput) { in.Routes = []Route{{SiteID: siteID, Owner: "alice"}} })
					if len(g) != 1 {
						t.Fatalf("claim at %s: %d", siteID, len(g))
					}
					if r, _ := h.s.Seal(h.ctx, siteID, "x", envelope); r.State != StateReady {
						t.Fatalf("seal %+v", r)
					}
					env := json.RawMessage(`{"site":` + string(protocol.MustMarshal(siteID)) + `}`)
					if r, _ := h.s.Complete(h.ctx, CompleteInput{JobID: "x", RunnerID: "runner_1", LeaseID: g[0].Lease.ID, Envelope: env, Disposition: "ok"}); !r.Accepted {
						t.Fatalf("complete %+v", r)
					}
				}
				for range 3 {
					for _, siteID := range []string{site, "site_other", "site_none"} {
						res, err := h.s.ResultJobs(h.ctx, siteID)
						if err != nil {
							t.Fatal(err)
						}
						fin, _ := h.s.Finished(h.ctx, siteID)
						sameJSON(t, siteID, res, resultsOf(t, fin))
						if siteID != "site_none" && string(res[0].Result) != `{"site":"`+siteID+`"}` {
							t.Fatalf("%s: %s", siteID, res[0].Result)
						}
					}
				}
			})
		})
	}
}

// A page of the finished index answers the generation first (the epoch,
// with the replication id of the server holding the site's slot where the
// server has one; "" with no epoch), then member and seq of each entry, as
// the index holds them, for every bound and page size.
func TestFinishedPageReadsTheIndexAndItsGeneration(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		completeJobs(t, h.s, "fin-", 5, freshDevice(), json.RawMessage(`{"r":1}`))
		k, err := h.s.siteKeys(h.ctx, site)
		if err != nil {
			t.Fatal(err)
		}
		fin, epochKey := k.finished(site), k.epoch(k.siteShard(site))
		c := b.client
		index, err := c.Do(h.ctx, c.B().Zrange().Key(fin).Min("0").Max("-1").Withscores().Build()).AsZScores()
		if err != nil || len(index) != 5 {
			t.Fatalf("the index: %v %v", index, err)
		}
		replID := holderReplicationID(t, c, fin)
		compare := func(after string, limit int, want []valkey.ZScore, generation string) []string {
			t.Helper()
			got, err := h.s.finishedPage(h.ctx, k, site, after, limit)
			if err != nil {
				t.Fatalf("page after %s: %v", after, err)
			}
			flat := []string{generation}
			for _, z := range want {
				flat = append(flat, z.Member, strconv.FormatInt(int64(z.Score), 10))
			}
			if !slices.Equal(got, flat) {
				t.Fatalf("page after %s, at most %d:\n got %q\nwant %q", after, limit, got, flat)
			}
			return got
		}
		epoch, err := c.Do(h.ctx, c.B().Get().Key(epochKey).Build()).ToString()
		if err != nil || epoch == "" {
			t.Fatalf("no epoch stored: %q %v", epoch, err)
		}
		generation := epoch
		if replID != "" {
			generation += "/" + replID
		}
		first := compare("-inf", 2, index[:2], generation)
		compare("("+first[len(first)-1], 2, index[2:4], generation)
		all := compare("-inf", 100, index, generation)
		compare("("+all[len(all)-1], 100, nil, generation)

		if err := c.Do(h.ctx, c.B().Del().Key(epochKey).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		compare("-inf", 100, index, "")
	})
}

// holderReplicationID is INFO replication's master_replid on the server
// that holds key's slot ("" where the server answers no such section): the
// node that answers EXISTS key instead of redirecting it.
func holderReplicationID(t *testing.T, c valkey.Client, key string) string {
	t.Helper()
	ctx := context.Background()
	for addr, n := range c.Nodes() {
		rs := n.DoMulti(ctx, n.B().Exists().Key(key).Build(), n.B().Info().Section("replication").Build())
		if rs[0].Error() != nil {
			continue // another node's slot
		}
		info, err := rs[1].ToString()
		if _, refused := valkey.IsValkeyErr(err); refused {
			return ""
		} else if err != nil {
			t.Fatalf("INFO replication on %s: %v", addr, err)
		}
		id := replicationID(info)
		if id == "" {
			t.Fatalf("INFO replication on %s names no master_replid", addr)
		}
		return id
	}
	t.Fatalf("no node holds %s", key)
	return ""
}

// A pending page is read with plain commands; each row must say what the
// job's whole record says (Job, a script's read), for a device stored
// whole (short or long) or in slices (within the first read's guess, and
// beyond it), for a page cut by its limit, and with an entry whose record
// no longer awaits its payload left out.
func TestPendingPageRowsMatchTheRecords(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		// Device JSON lengths either side of each boundary of lib/blob.lua:
		// whole up to 64 bytes, sliced up to 4096 (4 slices in the first
		// read), whole beyond.
		sizes := []int{0, 64, 65, 256, 257, 4096, 4097}
		for i, n := range sizes {
			// An owner each: a site and owner pair may hold only so many
			// unsealed jobs.
			id, owner := fmt.Sprint("pend-", i), fmt.Sprint("owner", i)
			h.enqueue(id, owner)
			dev := deviceOfSize(t, n)
			g := h.claim(deviceOwner(owner), routes([]string{site}, []string{owner}), func(in *ClaimInput) { in.Device = dev })
			if len(g) != 1 {
				t.Fatalf("claim %s: %q", id, ids(g))
			}
		}
		// One entry whose record no longer awaits (the script skips it):
		// sealed, with its index entry put back by hand.
		h.enqueue("pend-sealed", "alice")
		if g := h.claim(); len(g) != 1 {
			t.Fatalf("claim pend-sealed: %q", ids(g))
		}
		k, err := h.s.siteKeys(h.ctx, site)
		if err != nil {
			t.Fatal(err)
		}
		seq, err := b.client.Do(h.ctx, b.client.B().Zscore().Key(k.awaiting(site)).Member(encJob("pend-sealed")).Build()).AsFloat64()
		if err != nil {
			t.Fatal(err)
		}
		h.seal("pend-sealed")
		if err := b.client.Do(h.ctx, b.client.B().Zadd().Key(k.awaiting(site)).ScoreMember().ScoreMember(seq, encJob("pend-sealed")).Build()).Error(); err != nil {
			t.Fatal(err)
		}

		// The row the job's whole record gives.
		want := func(eJ string) [6]string {
			t.Helper()
			j, dev := h.grantedRecord(eJ)
			c := j.ClaimedBy
			return [6]string{eJ, dev, c.RunnerID, c.LeaseID, strconv.FormatInt(j.AwaitingUntil, 10), strconv.FormatInt(c.LeaseExpiresAt, 10)}
		}
		compare := func(exclusive string, limit, rows int) (string, [][6]string) {
			t.Helper()
			cursor, got, err := h.s.pendingPage(h.ctx, k, site, exclusive, limit)
			if err != nil {
				t.Fatalf("page after %s: %v", exclusive, err)
			}
			if len(got) != rows {
				t.Fatalf("page after %s, at most %d: %d rows, want %d", exclusive, limit, len(got), rows)
			}
			for _, row := range got {
				if w := want(row[0]); row != w {
					t.Fatalf("page after %s, at most %d:\n got %q\nwant %q", exclusive, limit, row, w)
				}
			}
			return cursor, got
		}
		_, all := compare("-inf", 100, len(sizes))
		for i, row := range all {
			if n := sizes[i]; n > 0 && len(row[1]) != n {
				t.Fatalf("row %d: device of %d bytes, want %d", i, len(row[1]), n)
			}
		}
		cursor, _ := compare("-inf", 3, 3)
		if cursor == "" {
			t.Fatal("a full page answered no cursor")
		}
		cursor, _ = compare("("+cursor, 3, 3)
		cursor, _ = compare("("+cursor, 3, 1) // the last device, then the sealed entry skipped
		if cursor != "" {
			t.Fatalf("cursor %q after the last page", cursor)
		}
		if jobs, err := h.s.PendingJobs(h.ctx, site); err != nil || len(jobs) != len(sizes) {
			t.Fatalf("PendingJobs: %d jobs, %v", len(jobs), err)
		}
	})
}

// A results read is plain commands; each row must say what the job's
// whole record says (Job, a script's read), for results stored whole
// (short, and past 4 KiB) or sliced (within the 32 slices and beyond),
// devices within the first read's slices and beyond, with the budget
// cutting the batch, and asked jobs that are not done, not there, or there
// under another seq left out.
func TestResultsGetRowsMatchTheRecords(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		type job struct{ result, device int }
		jobs := []job{{40, 0}, {64, 220}, {65, 300}, {2048, 220}, {2049, 257}, {4096, 64}, {4097, 65}, {20_000, 220}}
		for i, j := range jobs {
			id := fmt.Sprint("res-", i)
			h.enqueue(id, "alice")
			dev := deviceOfSize(t, j.device)
			g := h.claim(func(in *ClaimInput) { in.Device = dev })
			if len(g) != 1 {
				t.Fatalf("claim %s: %q", id, ids(g))
			}
			h.seal(id)
			result := json.RawMessage(`{"r":"` + strings.Repeat("x", j.result-8) + `"}`)
			if r, err := h.s.Complete(h.ctx, CompleteInput{JobID: id, RunnerID: "runner_1", LeaseID: g[0].Lease.ID, Envelope: result, Disposition: "ok"}); err != nil || !r.Accepted {
				t.Fatalf("complete %s: %+v %v", id, r, err)
			}
		}
		h.enqueue("res-awaiting", "alice")
		if g := h.claim(); len(g) != 1 {
			t.Fatalf("claim res-awaiting: %q", ids(g))
		}
		k, err := h.s.siteKeys(h.ctx, site)
		if err != nil {
			t.Fatal(err)
		}
		list, _, err := h.s.finishedIndex(h.ctx, k, site)
		if err != nil || len(list) != len(jobs) {
			t.Fatalf("finished index: %d entries, %v", len(list), err)
		}
		asked := append([]listed{}, list[:3]...)
		asked = append(asked,
			listed{list[3].eJ, "1"},             // another seq
			listed{encJob("res-awaiting"), "1"}, // not done
			listed{encJob("res-none"), "1"})     // not there
		asked = append(asked, list[3:]...)

		// The row the job's whole record gives.
		want := func(eJ string) [7]string {
			t.Helper()
			j, dev := h.grantedRecord(eJ)
			c := j.ClaimedBy
			return [7]string{eJ, string(j.Result), j.Disposition, c.RunnerID, c.LeaseID, dev, c.Owner}
		}
		compare := func(asked []listed, budget, wantConsumed, wantRows int) {
			t.Helper()
			consumed, got, err := h.s.resultsGet(h.ctx, k, site, asked, budget)
			if err != nil {
				t.Fatalf("budget %d: %v", budget, err)
			}
			if consumed != wantConsumed || len(got) != wantRows {
				t.Fatalf("budget %d: consumed %d, %d rows; want %d, %d", budget, consumed, len(got), wantConsumed, wantRows)
			}
			for _, row := range got {
				if row.pos >= consumed || row.f[0] != asked[row.pos].eJ {
					t.Fatalf("budget %d: row for %q at %d of %d asked", budget, row.f[0], row.pos, consumed)
				}
				if w := want(row.f[0]); row.f != w {
					t.Fatalf("budget %d:\n got %q\nwant %q", budget, row.f, w)
				}
			}
		}
		compare(asked, 1<<20, len(asked), len(jobs))
		compare(asked, 1, 1, 1)             // the first result fills it
		compare(asked, 40+64+65+2048, 7, 4) // reached on res-3, after the three asked that are not answered
		compare(asked[3:6], 1<<20, 3, 0)    // nothing to answer
		for i, j := range jobs {
			_, rows, err := h.s.resultsGet(h.ctx, k, site, list[i:i+1], 1<<20)
			if err != nil || len(rows) != 1 || len(rows[0].f[1]) != j.result || (j.device > 0 && len(rows[0].f[5]) != j.device) {
				t.Fatalf("job %d: %d rows, %v", i, len(rows), err)
			}
		}
	})
}

// grantedRecord is the whole record (Job, a script's read) of the granted
// job of site encoded eJ, with its device as the store writes it.
func (h *storeFixture) grantedRecord(eJ string) (*Job, string) {
	h.t.Helper()
	id, err := decJob(eJ)
	if err != nil {
		h.t.Fatal(err)
	}
	j := h.job(site, id)
	if j == nil || j.ClaimedBy == nil {
		h.t.Fatalf("job %s: %+v", id, j)
	}
	dev, err := protocol.Marshal(j.ClaimedBy.Device)
	if err != nil {
		h.t.Fatal(err)
	}
	return j, string(dev)
}

// deviceOfSize is a device identity whose JSON, as the store keeps it, is
// n bytes long; the shortest there is when n is below that (0 included).
func deviceOfSize(t *testing.T, n int) protocol.PublicIdentity {
	t.Helper()
	dev := protocol.PublicIdentity{Identity: "i", Encryption: "e"}
	base, _ := protocol.Marshal(dev)
	if pad := n - len(base); pad > 0 {
		dev.EncryptionSig = strings.Repeat("s", pad)
	}
	if got, _ := protocol.Marshal(dev); n > len(base) && len(got) != n {
		t.Fatalf("device of %d bytes, want %d", len(got), n)
	}
	return dev
}

// The results cache is walked in the finished index's order: every read
// answers the results it has read before from the cache (the same
// *ResultJob) and reads only the new ones, when a result lands before
// older ones (a job enqueued earlier finishing later) and when an entry in
// the middle passes its deadline and is swept. (Seqs of different lengths,
// where text order and number order differ, are TestMatchCached's.)
func TestResultJobsReuseCachedResultsInIndexOrder(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		const n, swept = 12, "job-05"
		for i := range n {
			st := stub(fmt.Sprintf("job-%02d", i), "alice")
			if st.ID == swept {
				st.DeadlineAt = h.now() + 120_000
			}
			h.enqueueStub(site, st)
		}
		// A device holds few unsealed jobs at once: claim, seal, again.
		leases := map[string]string{}
		for len(leases) < n {
			got := h.claim(maxJobs(n))
			if len(got) == 0 {
				t.Fatalf("claimed %d of %d, then none", len(leases), n)
			}
			for _, g := range got {
				leases[stubID(g)] = g.Lease.ID
				if r := h.seal(stubID(g)); r.State != StateReady {
					t.Fatalf("seal %s: %+v", stubID(g), r)
				}
			}
		}
		read := func() map[string]*ResultJob {
			t.Helper()
			res, err := h.s.ResultJobs(h.ctx, site)
			if err != nil {
				t.Fatal(err)
			}
			fin, err := h.s.Finished(h.ctx, site)
			if err != nil {
				t.Fatal(err)
			}
			sameJSON(t, "results", res, resultsOf(t, fin))
			out := map[string]*ResultJob{}
			for _, r := range res {
				out[r.JobID] = r
			}
			return out
		}
		sameAsBefore := func(prev, cur map[string]*ResultJob) {
			t.Helper()
			for id, r := range cur {
				if p, ok := prev[id]; ok && p != r {
					t.Fatalf("the result of %s was read again though the cache held it", id)
				}
			}
		}
		prev := read()
		for _, i := range []int{11, 3, 9, 0, 10, 5, 1, 8, 2, 7, 4, 6} {
			id := fmt.Sprintf("job-%02d", i)
			if r := h.complete(id, "runner_1", leases[id], "ok"); !r.Accepted {
				t.Fatalf("complete %s: %+v", id, r)
			}
			cur := read()
			if _, ok := prev[id]; ok || cur[id] == nil {
				t.Fatalf("after completing %s: before %v, now %v", id, prev[id] != nil, cur[id] != nil)
			}
			sameAsBefore(prev, cur)
			prev = cur
		}

		h.s.Testing().AdvanceClock(120_001)
		h.sweep()
		cur := read()
		if len(cur) != n-1 || cur[swept] != nil {
			t.Fatalf("after %s's deadline: %d results, %s there: %v", swept, len(cur), swept, cur[swept] != nil)
		}
		sameAsBefore(prev, cur)
	})
}

// matchCached pairs a listing with the cache only where entry and seq
// both match, in any mix of removed, added and reordered entries; an entry
// out of index order is read again, never paired with another's result.
func TestMatchCached(t *testing.T) {
	t.Parallel()
	l := func(eJ, seq string) listed { return listed{eJ: eJ, seq: seq} }
	cache := func(ls ...listed) []cachedResult {
		out := make([]cachedResult, len(ls))
		for i, x := range ls {
			out[i] = cachedResult{l: x, r: &ResultJob{JobID: x.eJ + "@" + x.seq}}
		}
		return out
	}
	for _, c := range []struct {
		name   string
		list   []listed
		cached []cachedResult
		hits   []string // per list entry: the cached job paired, "" for a miss
	}{
		{"empty", nil, nil, nil},
		{"nothing cached", []listed{l("a", "1")}, nil, []string{""}},
		{"all cached", []listed{l("a", "9"), l("b", "10")}, cache(l("a", "9"), l("b", "10")), []string{"a@9", "b@10"}},
		{"one removed across a digit boundary", []listed{l("b", "10")}, cache(l("a", "9"), l("b", "10")), []string{"b@10"}},
		{"removed from the middle", []listed{l("a", "2"), l("c", "100")}, cache(l("a", "2"), l("b", "30"), l("c", "100")), []string{"a@2", "c@100"}},
		{"added before and between", []listed{l("x", "1"), l("a", "9"), l("y", "50"), l("b", "100")}, cache(l("a", "9"), l("b", "100")), []string{"", "a@9", "", "b@100"}},
		{"same job, another seq (an id used again)", []listed{l("a", "12")}, cache(l("a", "11")), []string{""}},
		{"same seq, another job", []listed{l("b", "7")}, cache(l("a", "7")), []string{""}},
		{"tie on seq ordered by member", []listed{l("a", "7"), l("b", "7")}, cache(l("a", "7"), l("b", "7")), []string{"a@7", "b@7"}},
		{"listing out of order", []listed{l("b", "10"), l("a", "9")}, cache(l("a", "9"), l("b", "10")), []string{"b@10", ""}},
		{"cache out of order", []listed{l("a", "9"), l("b", "10")}, cache(l("b", "10"), l("a", "9")), []string{"", "b@10"}},
	} {
		found, missing := matchCached(c.list, c.cached)
		var got []string
		var wantMissing []int
		for i, f := range found {
			if f.r == nil {
				got = append(got, "")
			} else {
				got = append(got, f.r.JobID)
				if f.l != c.list[i] {
					t.Fatalf("%s: entry %d paired with %v", c.name, i, f.l)
				}
			}
			if c.hits[i] == "" {
				wantMissing = append(wantMissing, i)
			}
		}
		if !slices.Equal(got, c.hits) || !slices.Equal(missing, wantMissing) {
			t.Fatalf("%s: paired %q, missing %v; want %q, %v", c.name, got, missing, c.hits, wantMissing)
		}
	}
}
