package store

import (
	"slices"
	"strings"
	"testing"

	"github.com/byollm/relay-go/internal/protocol"
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
