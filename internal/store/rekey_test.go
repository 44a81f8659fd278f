package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/byollm/relay-go/internal/protocol"
)

// A job id's key part: a UUID in canonical lowercase form is compact, any
// other id is base64url; either way it decodes to the id byte for byte,
// no two ids share one, and none holds a character keys split on.
func TestJobKeyPartIsCompactForUUIDsAndReversible(t *testing.T) {
	t.Parallel()
	u := uuid.NewString()
	ids := []string{u, strings.ToUpper(u), "{" + u + "}", strings.ReplaceAll(u, "-", ""), u + " ", u[:35] + "g",
		"00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff",
		"x", "job-1", "~AAAAAAAAAAAAAAAAAAAAAA", "~", "é", "a:b{c}d;e.f", strings.Repeat("z", 200)}
	for range 200 {
		ids = append(ids, uuid.NewString())
	}
	seen := map[string]string{}
	for _, id := range ids {
		e := encJob(id)
		if strings.ContainsAny(e, ":{};.") {
			t.Errorf("encJob(%q) = %q holds a separator", id, e)
		}
		if other, ok := seen[e]; ok && other != id {
			t.Errorf("encJob(%q) = encJob(%q) = %q", id, other, e)
		}
		seen[e] = id
		back, err := decJob(e)
		if err != nil || back != id {
			t.Errorf("decJob(encJob(%q)) = %q, %v", id, back, err)
		}
		_, isUUID := uuidBytes(id)
		if compact := strings.HasPrefix(e, compactMark); compact != isUUID || (compact && len(e) != 23) {
			t.Errorf("encJob(%q) = %q (%d characters): compact %v, canonical UUID %v", id, e, len(e), compact, isUUID)
		}
	}
	if _, ok := uuidBytes(u); !ok {
		t.Fatalf("%q is not taken for a UUID", u)
	}
	for _, bad := range []string{"~", "~AAAA", "~!!!!!!!!!!!!!!!!!!!!!!", "not base64!"} {
		if id, err := decJob(bad); err == nil {
			t.Errorf("decJob(%q) = %q, want an error", bad, id)
		}
	}
}

// relay migrate's step from layout 4 to 5 (compactJobIDs) on jobs in every
// state and index: each job is moved back to its v4 key part (the same
// script, the other way), which leaves no compact part anywhere; the
// namespace is then refused at start, `relay migrate` moves it, and the
// data is exactly what a v5 relay wrote, before and after a second run.
func TestMigrationCompactsJobIDs(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		h := newFixture(t, b, Options{})
		u := make([]string, 8)
		for i := range u {
			u[i] = uuid.NewString()
		}
		one := maxJobs(1)

		// Sticky: its first grant ran out awaiting the payload, so it is
		// queued again for that runner only (sq, ro).
		h.enqueue(u[6], "alice")
		if got := h.claim(one, runner("runner_s")); len(got) != 1 || stubID(got[0]) != u[6] {
			t.Fatalf("claim the sticky job: %v", ids(got))
		}
		h.s.Testing().AdvanceClock(11_000)
		h.sweep()
		// Awaiting its payload (aw, uns, lease, hid).
		h.enqueue(u[1], "alice")
		awaiting := h.claim(one)
		// Running, and done (fin).
		h.enqueue(u[2], "alice")
		running := h.claim(one)
		h.seal(u[2])
		h.take(u[2], "runner_1", running[0].Lease.ID)
		h.enqueue(u[3], "alice")
		done := h.claim(one)
		h.seal(u[3])
		h.take(u[3], "runner_1", done[0].Lease.ID)
		if r := h.complete(u[3], "runner_1", done[0].Lease.ID, "ok"); !r.Accepted {
			t.Fatalf("complete: %+v", r)
		}
		// Cancelled while held (cxl), sealed first: a pair has at most two
		// jobs awaiting their payload.
		h.enqueue(u[4], "alice")
		h.claim(one)
		h.seal(u[4])
		if ok, err := h.s.Cancel(ctx, site, u[4]); err != nil || !ok {
			t.Fatalf("cancel: %v %v", ok, err)
		}
		// Quarantined (bad).
		h.enqueue(u[7], "alice")
		if err := h.writeRawStub(site, u[7], `{"bad":1}`); err != nil {
			t.Fatal(err)
		}
		h.claim(one)
		// Refused with a retry hint (ref, ra), queued again.
		h.enqueue(u[5], "alice")
		refused := h.claim(one, runner("runner_2"))
		retry := int64(60_000)
		h.release("runner_2", []protocol.GrantRef{grant(refused[0])}, ReasonRefused, &retry)
		// Queued, and ids that stay as they are.
		for _, id := range []string{u[0], strings.ToUpper(uuid.NewString()), "plain-job"} {
			h.enqueue(id, "alice")
		}
		for id, want := range map[string]string{u[0]: "queued", u[1]: "awaiting-payload", u[2]: "running", u[3]: "done", u[5]: "queued", u[6]: "queued"} {
			h.mustState(id, want)
		}
		if len(awaiting) != 1 || stubID(awaiting[0]) != u[1] {
			t.Fatalf("awaiting: %v", ids(awaiting))
		}

		v5 := dump(t, b, h.s)
		if n := compactParts(v5); n < 8*2 {
			t.Fatalf("%d compact key parts in the v5 data, want at least two per UUID job", n)
		}

		// Back to v4: every job under its id's base64url.
		for sh, prefix := range h.s.k.shards {
			members, err := b.client.Do(ctx, b.client.B().Zrange().Key(h.s.k.due(sh)).Min("0").Max("-1").Build()).AsStrSlice()
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range members {
				eS, eJ, _ := strings.Cut(m, ":")
				id, err := decJob(eJ)
				if err != nil {
					t.Fatal(err)
				}
				if eJ == enc(id) {
					continue
				}
				if n, err := h.s.runInt(ctx, scJobRekey, []string{prefix + "j:" + m, prefix + "j:" + eS + ":" + enc(id)}, m, enc(id)); err != nil || n != 1 {
					t.Fatalf("move %s back: %d %v", m, n, err)
				}
			}
		}
		if n := compactParts(dump(t, b, h.s)); n != 0 {
			t.Fatalf("%d compact key parts left after moving every job back to v4", n)
		}
		layoutKey := h.s.k.layout()
		if err := b.client.Do(ctx, b.client.B().Hset().Key(layoutKey).FieldValue().FieldValue("version", "4").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if _, err := New(ctx, b.client, Options{Namespace: h.s.Namespace(), Logger: h.s.log}); !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), "relay migrate") {
			t.Fatalf("New on the v4 data: %v", err)
		}

		rep, err := Migrate(ctx, b.client, h.s.Namespace(), nil)
		if err != nil || rep.From != 4 || rep.To != LayoutVersion || !slices.Equal(rep.Steps, []int{4}) {
			t.Fatalf("migrate: %+v %v", rep, err)
		}
		if got := dump(t, b, h.s); !maps.Equal(got, v5) {
			t.Fatalf("after relay migrate the data differs from what v5 wrote:\n%s", dumpDiff(v5, got))
		}
		// Again, directly: nothing left to move.
		if err := compactJobIDs(ctx, h.s); err != nil {
			t.Fatal(err)
		}
		if got := dump(t, b, h.s); !maps.Equal(got, v5) {
			t.Fatalf("a second run changed the data:\n%s", dumpDiff(v5, got))
		}
		// And the moved jobs carry on: the running one completes.
		if r := h.complete(u[2], "runner_1", running[0].Lease.ID, "ok"); !r.Accepted {
			t.Fatalf("complete after the migration: %+v", r)
		}
		h.mustState(u[2], "done")
	})
}

// compactParts counts the compact key parts in a dump's key names and values.
func compactParts(d map[string]string) int {
	n := 0
	for k, v := range d {
		n += strings.Count(k, compactMark) + strings.Count(v, compactMark)
	}
	return n
}

func dumpDiff(want, got map[string]string) string {
	var out []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			out = append(out, fmt.Sprintf("- %s %s", k, v))
		} else if g != v {
			out = append(out, fmt.Sprintf("~ %s\n    want %s\n    got  %s", k, v, g))
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			out = append(out, fmt.Sprintf("+ %s %s", k, v))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}
