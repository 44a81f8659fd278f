package store

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/test/relaytest"
)

// recordFields is the job record's field names.
func recordFields(t *testing.T, h *storeFixture, siteID, jobID string) []string {
	t.Helper()
	f, err := h.b.client.Do(h.ctx, h.b.client.B().Hkeys().Key(h.s.k.job(siteID, jobID)).Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(f)
	return f
}

// rawFields are the fields records before layout v4 held and v4 drops.
var rawFields = []string{"id", "site", "owner", "kind", "aud"}

// v3Slices: field names only layout v3 gives a sliced blob.
func v3Slices(fields []string) []string {
	var out []string
	for _, f := range fields {
		if strings.HasSuffix(f, "#") || strings.Contains(f, ".") {
			out = append(out, f)
		}
	}
	return out
}

// A namespace of layout v4 (every new one) writes compact records: no raw
// id, site, owner, kind or audience, blob slices under numbered fields;
// and every read that shows ids gives back the raw ones, odd Unicode and
// key-syntax characters included, because Go decodes what the scripts
// answer from the member and the encoded fields.
func TestCompactRecordsAnswerRawIDs(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		if h.s.Layout() != LayoutVersion {
			t.Fatalf("a new namespace is layout %d", h.s.Layout())
		}
		siteX, owner := "sïte:{東京}/x", "ålice:{o}"
		ids := []string{"jöb:{1} ✓", "j2", "ǆ\u0301-3"}
		for _, id := range ids {
			h.enqueueStub(siteX, stub(id, owner))
		}
		f := recordFields(t, h, siteX, ids[0])
		for _, raw := range rawFields {
			if slices.Contains(f, raw) {
				t.Errorf("a v4 record holds %q: %v", raw, f)
			}
		}
		if s := v3Slices(f); len(s) > 0 || !slices.Contains(f, "100") || !slices.Contains(f, "101") {
			t.Errorf("stub not sliced under numbered fields: %v", f)
		}
		j := h.job(siteX, ids[0])
		if j.ID != ids[0] || j.SiteID != siteX {
			t.Fatalf("Job: id %q site %q", j.ID, j.SiteID)
		}
		if all, err := h.s.Jobs(h.ctx); err != nil || len(all) != 3 || !slices.ContainsFunc(all, func(j Job) bool { return j.ID == ids[2] && j.SiteID == siteX }) {
			t.Fatalf("Jobs: %d %v", len(all), err)
		}
		ops, err := h.s.OpsSiteStates(h.ctx, siteX, 10, 2)
		if err != nil || ops.OldestQueuedID != ids[0] || ops.Queued != 3 {
			t.Fatalf("ops site: %+v %v", ops, err)
		}

		g := h.claim(routes([]string{siteX}, []string{owner}), deviceOwner(owner), maxJobs(2))
		if len(g) != 2 || g[0].SiteID != siteX || stubID(g[0]) != ids[0] || stubID(g[1]) != ids[1] {
			t.Fatalf("claim: %+v", g)
		}
		if s := v3Slices(recordFields(t, h, siteX, ids[0])); len(s) > 0 {
			t.Errorf("device stored in v3's form: %v", s)
		}
		pend, err := h.s.PendingJobs(h.ctx, siteX)
		if err != nil || len(pend) != 2 || pend[0].JobID != ids[0] || pend[1].JobID != ids[1] {
			t.Fatalf("pending: %+v %v", pend, err)
		}
		dev, err := h.s.OpsDeviceLeases(h.ctx, "runner_1", 10)
		if err != nil || len(dev.Active) != 2 || dev.Active[0].SiteID != siteX || !slices.ContainsFunc(dev.Active, func(hj HeldJob) bool { return hj.JobID == ids[0] }) {
			t.Fatalf("ops device: %+v %v", dev, err)
		}
		payload, result := blobOf(300), blobOf(700)
		if r, err := h.s.Seal(h.ctx, siteX, ids[0], payload); err != nil || r.State != StateReady {
			t.Fatalf("seal: %+v %v", r, err)
		}
		if r := h.take(ids[0], "runner_1", g[0].Lease.ID); string(r.Envelope) != string(payload) {
			t.Fatalf("take: %s", r.Envelope)
		}
		if r, err := h.s.Complete(h.ctx, CompleteInput{JobID: ids[0], RunnerID: "runner_1", LeaseID: g[0].Lease.ID, Envelope: result, Disposition: "ok"}); err != nil || !r.Accepted {
			t.Fatalf("complete: %+v %v", r, err)
		}
		if s := v3Slices(recordFields(t, h, siteX, ids[0])); len(s) > 0 {
			t.Errorf("payload or result stored in v3's form: %v", s)
		}
		rs, err := h.s.ResultJobs(h.ctx, siteX)
		if err != nil || len(rs) != 1 || rs[0].JobID != ids[0] || string(rs[0].Result) != string(result) {
			t.Fatalf("results: %+v %v", rs, err)
		}
		fin, err := h.s.Finished(h.ctx, siteX)
		if err != nil || len(fin) != 1 || fin[0].ID != ids[0] || fin[0].SiteID != siteX {
			t.Fatalf("finished: %+v %v", fin, err)
		}
		if ok, err := h.s.Cancel(h.ctx, siteX, ids[1]); err != nil || !ok {
			t.Fatalf("cancel: %v %v", ok, err)
		}
		cx, err := h.s.CancelRequests(h.ctx, "runner_1")
		if err != nil || len(cx) != 1 || cx[0].JobID != ids[1] || cx[0].LeaseID != g[1].Lease.ID {
			t.Fatalf("cancel requests: %+v %v", cx, err)
		}
		// A renewal and a release name the job by its raw id; the scripts
		// match it encoded.
		if res, err := h.s.RenewLeases(h.ctx, RenewInput{RunnerID: "runner_1", LeaseMs: 60_000, Leases: []protocol.GrantRef{grant(g[1])}}); err != nil || len(res.Renewed) != 1 {
			t.Fatalf("renew: %+v %v", res, err)
		}
		if rel := h.release("runner_1", []protocol.GrantRef{grant(g[1])}, ReasonShutdown, nil); len(rel) != 1 {
			t.Fatalf("release: %v", rel)
		}
	})
}

// A namespace of layout v3 is served as it is (relays of v3 beside these,
// a rolling upgrade): its records are written in v3's form. Once Migrate
// moves it to v4, a Store serving it notices at its next layout check and
// writes compact records, while the v3 records written before go on
// through every step, a record holding both forms (a v3 stub, a v4
// result) included; the site's byte count and the indexes end exact.
func TestLayoutV3ServedThenMovedToV4(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx, c := context.Background(), b.client
		h := newFixture(t, b, Options{})
		ns := h.s.opts.Namespace
		if err := c.Do(ctx, c.B().Hset().Key(h.s.k.layout()).FieldValue().FieldValue("version", "3").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		s3, err := New(ctx, c, Options{Namespace: ns, Logger: relaytest.Discard()})
		if err != nil || s3.Layout() != 3 {
			t.Fatalf("New on a v3 namespace: %v (layout %d)", err, s3.Layout())
		}
		h.s = s3
		old := stub("old-job", "alice")
		h.enqueueStub(site, old)
		f := recordFields(t, h, site, old.ID)
		if !slices.Contains(f, "id") || !slices.Contains(f, "stub#") || !slices.Contains(f, "stub.1") {
			t.Fatalf("a v3 namespace's record is not in v3's form: %v", f)
		}
		g := h.claim(maxJobs(1))
		if len(g) != 1 || stubID(g[0]) != old.ID {
			t.Fatalf("claim: %+v", g)
		}
		payload, result := blobOf(300), blobOf(700)
		if r, err := h.s.Seal(ctx, site, old.ID, payload); err != nil || r.State != StateReady {
			t.Fatalf("seal: %+v %v", r, err)
		}
		if f := recordFields(t, h, site, old.ID); !slices.Contains(f, "pl#") || !slices.Contains(f, "cd#") {
			t.Fatalf("payload and device not in v3's form: %v", f)
		}

		rep, err := Migrate(ctx, c, ns, false)
		if err != nil || rep.From != 3 || !rep.Upgraded || !rep.Written {
			t.Fatalf("migrate v3: %+v %v", rep, err)
		}
		if s3.Layout() == LayoutVersion {
			t.Fatal("the Store switched before its layout check")
		}
		s3.checkedAt.Store(0) // as if layoutRecheck had passed
		for i := 0; s3.Layout() != LayoutVersion; i++ {
			if i == 200 {
				t.Fatal("the Store never noticed the move to v4")
			}
			_, _ = s3.Job(ctx, site, old.ID) // any call checks, at most once per layoutRecheck
			time.Sleep(10 * time.Millisecond)
		}
		if s3.Layout() != LayoutVersion {
			t.Fatalf("layout %d after the move", s3.Layout())
		}
		fresh := stub("new-job", "alice")
		h.enqueueStub(site, fresh)
		f = recordFields(t, h, site, fresh.ID)
		if slices.Contains(f, "id") || len(v3Slices(f)) > 0 || !slices.Contains(f, "100") {
			t.Fatalf("a record written after the move is not compact: %v", f)
		}

		// The v3 record: its sliced payload read by take, its result
		// written compact beside its v3 stub.
		if r := h.take(old.ID, "runner_1", g[0].Lease.ID); string(r.Envelope) != string(payload) {
			t.Fatalf("take of a v3 payload: %d bytes", len(r.Envelope))
		}
		if r, err := h.s.Complete(ctx, CompleteInput{JobID: old.ID, RunnerID: "runner_1", LeaseID: g[0].Lease.ID, Envelope: result, Disposition: "ok"}); err != nil || !r.Accepted {
			t.Fatalf("complete: %+v %v", r, err)
		}
		if f := recordFields(t, h, site, old.ID); !slices.Contains(f, "stub#") || !slices.Contains(f, "400") {
			t.Fatalf("a v3 record completed after the move: %v", f)
		}
		g2 := h.claim(maxJobs(1))
		if len(g2) != 1 || stubID(g2[0]) != fresh.ID {
			t.Fatalf("claim of the compact record: %+v", g2)
		}
		if r, err := h.s.Seal(ctx, site, fresh.ID, payload); err != nil || r.State != StateReady {
			t.Fatalf("seal: %+v %v", r, err)
		}
		if r := h.take(fresh.ID, "runner_1", g2[0].Lease.ID); string(r.Envelope) != string(payload) {
			t.Fatalf("take: %d bytes", len(r.Envelope))
		}
		if r, err := h.s.Complete(ctx, CompleteInput{JobID: fresh.ID, RunnerID: "runner_1", LeaseID: g2[0].Lease.ID, Envelope: result, Disposition: "ok"}); err != nil || !r.Accepted {
			t.Fatalf("complete: %+v %v", r, err)
		}
		rs, err := h.s.ResultJobs(ctx, site)
		if err != nil || len(rs) != 2 {
			t.Fatalf("results: %d %v", len(rs), err)
		}
		for _, r := range rs {
			if string(r.Result) != string(result) || (r.JobID != old.ID && r.JobID != fresh.ID) {
				t.Fatalf("result %q: %d bytes", r.JobID, len(r.Result))
			}
		}
		for _, st := range []protocol.JobStub{old, fresh} {
			want, _ := protocol.Marshal(st)
			if j := h.job(site, st.ID); string(j.Stub) != string(want) || string(j.Payload) != string(payload) || string(j.Result) != string(result) || j.ID != st.ID {
				t.Fatalf("job %s read back wrong: %+v", st.ID, j)
			}
		}
		raw, _ := protocol.Marshal(old)
		used, _ := c.Do(ctx, c.B().Get().Key(h.s.k.siteBytes(site)).Build()).AsInt64()
		if want := int64(2*len(raw) + 2*len(payload) + 2*len(result)); used != want {
			t.Fatalf("site bytes %d, want %d", used, want)
		}
		h.s.AdvanceClock(old.DeadlineAt - h.now() + 1)
		h.sweep()
		if used, _ := c.Do(ctx, c.B().Get().Key(h.s.k.siteBytes(site)).Build()).AsInt64(); used != 0 {
			t.Fatalf("site bytes %d after both jobs were forgotten", used)
		}
		if n, _ := c.Do(ctx, c.B().Exists().Key(h.s.k.job(site, old.ID), h.s.k.job(site, fresh.ID)).Build()).AsInt64(); n != 0 {
			t.Fatalf("%d records left", n)
		}
		if rep, err := Migrate(ctx, c, ns, false); err != nil || rep.Upgraded || rep.From != LayoutVersion {
			t.Fatalf("second migrate: %+v %v", rep, err)
		}
	})
}
