package store

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/byollm/relay-go/internal/protocol"
)

// Stored stubs that fail the strict 0.1.1 schema (§3.5) are never granted,
// stay queued and readable byte for byte, and do not block good jobs.
func TestMalformedStubsAreQuarantined(t *testing.T) {
	t.Parallel()
	const good = `{"id":"old","kind":"llm.generate","owner":"alice","site":"K","audience":"private","sizeClass":"small","streaming":false,"deadlineAt":4102444800000}`
	bad := map[string]string{
		"not json":          `{"id":"old",`,
		"plain garbage":     `garbage`,
		"array":             `[]`,
		"null":              `null`,
		"missing site":      strings.Replace(good, `"site":"K",`, ``, 1),
		"extra key":         strings.Replace(good, `}`, `,"extra":1}`, 1),
		"extra null key":    strings.Replace(good, `}`, `,"extra":null}`, 1),
		"purpose null":      strings.Replace(good, `}`, `,"purpose":null}`, 1),
		"purpose empty":     strings.Replace(good, `}`, `,"purpose":""}`, 1),
		"empty id":          strings.Replace(good, `"id":"old"`, `"id":""`, 1),
		"owner number":      strings.Replace(good, `"owner":"alice"`, `"owner":7`, 1),
		"unknown kind":      strings.Replace(good, `llm.generate`, `llm.embed`, 1),
		"old audience":      strings.Replace(good, `"private"`, `"self"`, 1),
		"unknown size":      strings.Replace(good, `"small"`, `"huge"`, 1),
		"streaming string":  strings.Replace(good, `false`, `"false"`, 1),
		"deadline fraction": strings.Replace(good, `4102444800000`, `4102444800000.5`, 1),
		"deadline zero":     strings.Replace(good, `4102444800000`, `0`, 1),
		"deadline negative": strings.Replace(good, `4102444800000`, `-5`, 1),
		"deadline unsafe":   strings.Replace(good, `4102444800000`, `9007199254740993`, 1),
		"deadline string":   strings.Replace(good, `4102444800000`, `"4102444800000"`, 1),
		"deadline infinite": strings.Replace(good, `4102444800000`, `1e400`, 1),
	}
	accepted := map[string]string{
		"as written":            good,
		"with purpose":          strings.Replace(good, `}`, `,"purpose":"summarise"}`, 1),
		"team audience":         strings.Replace(good, `"private"`, `"team"`, 1),
		"null inside a string":  strings.Replace(good, `"alice"`, `"null \"n\\\" alice"`, 1),
		"exponent deadline":     strings.Replace(good, `4102444800000`, `4.1024448e12`, 1),
		"largest safe deadline": strings.Replace(good, `4102444800000`, `9007199254740991`, 1),
	}
	eachBackend(t, func(t *testing.T, b backend) {
		check := func(t *testing.T, raw string, wantGranted bool) {
			h := newFixture(t, b, Options{})
			h.enqueue("good", "alice")
			h.enqueue("old", "alice")
			if err := h.writeRawStub(site, "old", raw); err != nil {
				t.Fatal(err)
			}
			got := ids(h.claim())
			if wantGranted {
				if len(got) != 2 {
					t.Fatalf("granted %q, want both", got)
				}
				return
			}
			equalStrings(t, "granted", got, []string{"good"})
			j := h.job(site, "old")
			if j == nil || j.State != StateQueued || string(j.Stub) != raw {
				t.Fatalf("quarantined job %+v", j)
			}
			// Quarantine is sticky: another runner is not offered it either,
			// and a deadline sweep still removes it.
			if got := h.claim(runner("runner_2")); len(got) != 0 {
				t.Fatalf("runner_2 got %q", ids(got))
			}
			// A good stub written back makes it claimable again.
			if err := h.writeRawStub(site, "old", good); err != nil {
				t.Fatal(err)
			}
			if got := h.claim(runner("runner_3")); len(got) != 1 {
				t.Fatalf("restored stub not granted: %q", ids(got))
			}
		}
		for name, raw := range bad {
			t.Run("refuses "+name, func(t *testing.T) { check(t, raw, false) })
		}
		for name, raw := range accepted {
			t.Run("accepts "+name, func(t *testing.T) { check(t, raw, true) })
		}
	})
}

// Refused input changes nothing: the namespace dumps equal before and after.
func TestBadInputLeavesStoreUnchanged(t *testing.T) {
	t.Parallel()
	nul := "bad\x00id"
	long := strings.Repeat("x", 1025)
	cases := []struct {
		name    string
		call    func(h *storeFixture) error
		invalid bool // want ErrInvalidInput; otherwise a refusal answer
	}{
		{"enqueue with NUL in the job id", func(h *storeFixture) error {
			_, err := h.s.Enqueue(h.ctx, EnqueueInput{ID: nul, SiteID: site, Stub: stub(nul, "alice")})
			return err
		}, true},
		{"enqueue with NUL in the site id", func(h *storeFixture) error {
			_, err := h.s.Enqueue(h.ctx, EnqueueInput{ID: "n", SiteID: nul, Stub: stub("n", "alice")})
			return err
		}, true},
		{"enqueue with NUL in the owner", func(h *storeFixture) error {
			_, err := h.s.Enqueue(h.ctx, EnqueueInput{ID: "n", SiteID: site, Stub: stub("n", nul)})
			return err
		}, true},
		{"enqueue with an oversized job id", func(h *storeFixture) error {
			_, err := h.s.Enqueue(h.ctx, EnqueueInput{ID: long, SiteID: site, Stub: stub(long, "alice")})
			return err
		}, true},
		{"enqueue with an oversized purpose", func(h *storeFixture) error {
			st := stub("p", "alice")
			st.Purpose = long
			_, err := h.s.Enqueue(h.ctx, EnqueueInput{ID: "p", SiteID: site, Stub: st})
			return err
		}, true},
		{"seal with an oversized envelope", func(h *storeFixture) error {
			_, err := h.s.Seal(h.ctx, site, "a", json.RawMessage(`"`+strings.Repeat("A", 5000)+`"`))
			return err
		}, true},
		{"seal with an envelope that is not JSON", func(h *storeFixture) error {
			_, err := h.s.Seal(h.ctx, site, "a", json.RawMessage(`{"ciphertext":`))
			return err
		}, true},
		{"complete with an oversized envelope", func(h *storeFixture) error {
			_, err := h.s.Complete(h.ctx, CompleteInput{JobID: "a", RunnerID: "runner_1", LeaseID: "x",
				Envelope: json.RawMessage(`"` + strings.Repeat("A", 5000) + `"`), Disposition: "ok"})
			return err
		}, true},
		{"claim with NUL in a route", func(h *storeFixture) error {
			_, err := h.s.Claim(h.ctx, claimArgs(routes([]string{nul}, []string{"alice"})))
			return err
		}, true},
		{"claim with a negative lease", func(h *storeFixture) error {
			_, err := h.s.Claim(h.ctx, claimArgs(leaseMs(-1)))
			return err
		}, true},
		{"take with an unknown lease for a job the runner holds", func(h *storeFixture) error {
			if r := h.take("a", "runner_1", "no-such-lease"); r.Refused != RefusedStaleLease {
				h.t.Fatalf("take = %+v", r)
			}
			return nil
		}, false},
		{"take with an unknown lease for a job the runner does not hold", func(h *storeFixture) error {
			if r := h.take("b", "runner_1", "no-such-lease"); r.Refused != RefusedNotFound {
				h.t.Fatalf("take = %+v", r)
			}
			return nil
		}, false},
		{"complete with an unknown lease", func(h *storeFixture) error {
			if r := h.complete("a", "runner_1", "no-such-lease", "ok"); r.Refused != RefusedStaleLease {
				h.t.Fatalf("complete = %+v", r)
			}
			return nil
		}, false},
		{"a stranger completing with the holder's lease", func(h *storeFixture) error {
			if r := h.complete("a", "runner_2", h.job(site, "a").ClaimedBy.LeaseID, "ok"); r.Refused != RefusedNotHolder {
				h.t.Fatalf("complete = %+v", r)
			}
			return nil
		}, false},
		{"release of an unknown lease", func(h *storeFixture) error {
			if got := h.release("runner_1", []protocol.GrantRef{{JobID: "a", LeaseID: "no-such-lease"}}, ReasonRefused, nil); len(got) != 0 {
				h.t.Fatalf("released %q", got)
			}
			return nil
		}, false},
		{"renew of an unknown lease", func(h *storeFixture) error {
			r, err := h.s.RenewLeases(h.ctx, RenewInput{RunnerID: "runner_1", Leases: []protocol.GrantRef{{JobID: "a", LeaseID: "no-such-lease"}}, LeaseMs: 1})
			if len(r.Lost) != 1 || len(r.Renewed) != 0 {
				h.t.Fatalf("renew = %+v", r)
			}
			return err
		}, false},
		{"seal of another site's job", func(h *storeFixture) error {
			if r, _ := h.s.Seal(h.ctx, "site_other", "a", envelope); r.Refused != RefusedNotFound {
				h.t.Fatalf("seal = %+v", r)
			}
			return nil
		}, false},
		{"cancel of another site's job", func(h *storeFixture) error {
			if ok, _ := h.s.Cancel(h.ctx, "site_other", "a"); ok {
				h.t.Fatal("cancel answered true")
			}
			return nil
		}, false},
	}
	eachBackend(t, func(t *testing.T, b backend) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				h := newFixture(t, b, Options{MaxIDBytes: 1024, MaxBlobBytes: 4096})
				h.enqueue("a", "alice")
				h.enqueue("b", "alice")
				h.claim(maxJobs(1))
				before := dump(t, b, h.s)
				err := c.call(h)
				if c.invalid != errors.Is(err, ErrInvalidInput) {
					t.Fatalf("err = %v, want invalid input: %v", err, c.invalid)
				}
				if !c.invalid && err != nil {
					t.Fatal(err)
				}
				if after := dump(t, b, h.s); !reflect.DeepEqual(before, after) {
					t.Fatalf("store changed:\nbefore %v\nafter  %v", before, after)
				}
			})
		}
	})
}

// Ids holding the key separators and hash-tag braces are ordinary ids: they
// never collide, never leave the namespace's slot, and round-trip exactly.
func TestHostileIdentifiers(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		pairs := [][2]string{{"x:y", "z"}, {"x", "y:z"}, {"{x}", "}y{"}, {"x;", ":"}, {"", "empty site"}, {"ü{;}", "é:"}}
		for _, p := range pairs {
			h.enqueueStub(p[0], stub(p[1], "o:{w}n"))
		}
		var all []ClaimedStub
		for _, p := range pairs {
			c, err := h.s.Claim(h.ctx, claimArgs(deviceOwner("o:{w}n"), runner("r:{1}"), routes([]string{p[0]}, []string{"o:{w}n"})))
			if err != nil || len(c) != 1 || c[0].SiteID != p[0] || stubID(c[0]) != p[1] {
				t.Fatalf("claim %q: %+v %v", p, c, err)
			}
			all = append(all, c...)
		}
		for i, p := range pairs {
			if r := h.seal2(p[0], p[1]); r.State != StateReady {
				t.Fatalf("seal %q = %+v", p, r)
			}
			if r := h.take(p[1], "r:{1}", all[i].Lease.ID); r.Envelope == nil {
				t.Fatalf("take %q = %+v", p, r)
			}
			if r := h.complete(p[1], "r:{1}", all[i].Lease.ID, "ok"); !r.Accepted {
				t.Fatalf("complete %q = %+v", p, r)
			}
			j := h.job(p[0], p[1])
			if j.SiteID != p[0] || j.ID != p[1] || j.State != StateDone || j.ClaimedBy.RunnerID != "r:{1}" || j.ClaimedBy.Owner != "o:{w}n" {
				t.Fatalf("job %q = %+v", p, j)
			}
		}
		all2, _ := h.s.Jobs(h.ctx)
		if len(all2) != len(pairs) {
			t.Fatalf("jobs %d", len(all2))
		}
		// Every key carries exactly one hash tag, the namespace's fleet tag
		// or one of its shards': ids with braces pick no slot of their own.
		prefixes := append([]string{h.s.k.p}, h.s.k.shards...)
		for _, k := range scanKeys(t, b.client, h.s.KeyPattern()) {
			ok := false
			for _, p := range prefixes {
				if rest, found := strings.CutPrefix(k, p); found && !strings.ContainsAny(rest, "{}") {
					ok = true
				}
			}
			if !ok {
				t.Fatalf("key %q leaves the namespace's slots", k)
			}
		}
	})
}

func (h *storeFixture) seal2(siteID, id string) SealResult {
	h.t.Helper()
	r, err := h.s.Seal(h.ctx, siteID, id, envelope)
	if err != nil {
		h.t.Fatalf("seal: %v", err)
	}
	return r
}
