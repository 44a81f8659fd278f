package store

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/protocol"
)

// leaseEntry is what the lease index of the lease's shard holds for it:
// "" when nothing.
func (h *storeFixture) leaseEntry(lease string) string {
	h.t.Helper()
	sh, ok := h.s.k.leaseShard(lease)
	if !ok {
		h.t.Fatalf("lease %q names no shard", lease)
	}
	v, err := h.b.client.Do(context.Background(), h.b.client.B().Hget().Key(h.s.k.lease(sh)).Field(lease).Build()).ToString()
	if err != nil && !valkey.IsValkeyNil(err) {
		h.t.Fatalf("hget lease: %v", err)
	}
	return v
}

// A lease id is a minted UUID with the job's site appended when that fits
// the id limit, else the UUID alone. Both forms must answer every holder
// call alike; the site-bearing form keeps no lease-index entry once its
// job is done (the memory a finished job costs).
func TestLeaseFormsAnswerAlike(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		// 50 bytes: the site's ids fit, a UUID with ".c2l0ZV9zdG9yZQ" (51) does not.
		forms := map[string]Options{"site-bearing": {}, "bare": {MaxIDBytes: 50}}
		answers := map[string][]string{}
		for name, opts := range forms {
			h := newFixture(t, b, opts)
			answers[name] = leaseScript(h, name == "site-bearing")
		}
		if !reflect.DeepEqual(answers["site-bearing"], answers["bare"]) {
			t.Fatalf("the two lease forms answer differently:\nsite-bearing %q\nbare         %q", answers["site-bearing"], answers["bare"])
		}
	})
}

// leaseScript drives one grant through every holder call, asserting what
// both forms share, and returns the answers for comparison.
func leaseScript(h *storeFixture, siteBearing bool) []string {
	t := h.t
	var out []string
	note := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }

	h.enqueue("j1", "alice")
	h.enqueue("j2", "alice")
	got := h.claim(maxJobs(2))
	if len(got) != 2 {
		t.Fatalf("claimed %d, want 2", len(got))
	}
	lease, other := got[0].Lease.ID, got[1].Lease.ID
	minted, eS, hasSite := strings.Cut(lease, ".")
	if _, err := uuid.Parse(minted); err != nil {
		t.Fatalf("minted part of %q: %v", lease, err)
	}
	if hasSite != siteBearing || (hasSite && eS != enc(site)) {
		t.Fatalf("lease %q: site appended %v (want %v), site %q", lease, hasSite, siteBearing, eS)
	}
	// While the grant is open the index maps it as granted: a relay of the
	// release before site-bearing ids resolves it only that way.
	if e := h.leaseEntry(lease); e != member(site, "j1") {
		t.Fatalf("an awaiting grant's index entry = %q, want %q", e, member(site, "j1"))
	}

	h.seal("j1")
	note("take %v", h.take("j1", "runner_1", lease).Refused)
	r := h.complete("j1", "runner_1", lease, "ok")
	note("complete %v %v", r.Accepted, r.Refused)
	if e := h.leaseEntry(lease); (e == "") != siteBearing {
		t.Fatalf("a done job's index entry = %q (site-bearing lease: %v)", e, siteBearing)
	}

	// The done job, reached through its lease by every holder call.
	r = h.complete("j1", "runner_1", lease, "ok")
	note("again %v %v %v", r.Accepted, r.Duplicate, r.Refused)
	r = h.complete("j1", "runner_2", lease, "ok")
	note("other runner %v", r.Refused)
	note("take done %v", h.take("j1", "runner_1", lease).Refused)
	rn, err := h.s.RenewLeases(h.ctx, RenewInput{RunnerID: "runner_1", LeaseMs: 60000,
		Leases: []protocol.GrantRef{{JobID: "j1", LeaseID: lease}, {JobID: "j2", LeaseID: lease}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rn.Lost) != 1 || rn.Lost[0].LeaseID != lease {
		t.Fatalf("renew lost %v, want j2 with the lease as sent", rn.Lost)
	}
	note("renew %d lost %s", len(rn.Renewed), rn.Lost[0].JobID)
	note("release done %v", h.release("runner_1", []protocol.GrantRef{{JobID: "j1", LeaseID: lease}}, "", nil))

	// Forged ids: another job's id with this lease, the minted part alone,
	// a site suffix naming another site or holding characters base64url
	// lacks. Each is an unknown lease to the holder and changes nothing.
	before := dump(t, h.b, h.s)
	forged := []struct{ job, lease string }{
		{"j2", lease}, {"j1", other},
		{"j1", minted + "." + enc("elsewhere")}, {"j1", minted + ".a:b"}, {"j1", minted + ".."}, {"j1", "." + eS},
	}
	if siteBearing {
		forged = append(forged, struct{ job, lease string }{"j1", minted})
	}
	for _, f := range forged {
		r := h.complete(f.job, "runner_1", f.lease, "ok")
		if r.Accepted || r.Duplicate || r.Refused != "stale-lease" {
			t.Fatalf("complete %s with %q = %+v, want stale-lease", f.job, f.lease, r)
		}
	}
	if after := dump(t, h.b, h.s); !reflect.DeepEqual(before, after) {
		t.Fatalf("forged lease ids changed the store:\nbefore %v\nafter  %v", before, after)
	}

	// The other grant ends by release: its index entry goes with it.
	note("release %v", h.release("runner_1", []protocol.GrantRef{{JobID: "j2", LeaseID: other}}, "", nil))
	if e := h.leaseEntry(other); e != "" {
		t.Fatalf("a released grant left its index entry %q", e)
	}
	return out
}
