package store

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/byollm/relay-go/internal/protocol"
)

// The 38 cases of @byollm/relay@0.1.1's store contract (store.md §7.2), with
// the contract's own hooks: advance (AdvanceClock), serialising and
// writeRawStub (test/storehooks through RunJobScript). Numbers match the table.

var contractCases = []struct {
	name string
	run  func(h *storeFixture)
}{
	{"01 is idempotent by job id", func(h *storeFixture) {
		h.enqueue("a", "alice")
		h.claim()
		h.enqueue("a", "alice")
		h.mustState("a", StateAwaitingPayload)
	}},
	{"02 hands one pair at most two unsealed grants at a time", func(h *storeFixture) {
		for _, id := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"} {
			h.enqueue(id, "alice")
		}
		if got := h.claim(maxJobs(10)); len(got) != 2 {
			h.t.Fatalf("grants = %d, want 2", len(got))
		}
	}},
	{"03 counts the cap per owner, not per site", func(h *storeFixture) {
		for _, id := range []string{"a1", "a2", "a3"} {
			h.enqueue(id, "alice")
		}
		for _, id := range []string{"b1", "b2", "b3"} {
			h.enqueue(id, "bob")
		}
		first := h.claim()
		second := h.claim(runner("runner_2"), deviceOwner("bob"), routes([]string{site}, []string{"bob"}))
		if len(first) != 2 || len(second) != 2 {
			h.t.Fatalf("grants = %d and %d, want 2 and 2", len(first), len(second))
		}
	}},
	{"04 re-offers an abandoned grant only to the device that abandoned it", func(h *storeFixture) {
		h.enqueue("a", "alice")
		if got := h.claim(); len(got) != 1 {
			h.t.Fatalf("first claim = %d", len(got))
		}
		h.s.Testing().AdvanceClock(AwaitingPayloadMs + 1000)
		if got := h.claim(runner("runner_2")); len(got) != 0 {
			h.t.Fatalf("runner_2 got %q", ids(got))
		}
		if got := h.claim(runner("runner_1")); len(got) != 1 {
			h.t.Fatalf("runner_1 got %d", len(got))
		}
	}},
	{"05 leaves an unabandoned job free for whoever asks", func(h *storeFixture) {
		h.enqueue("a", "alice")
		if got := h.claim(runner("runner_9")); len(got) != 1 {
			h.t.Fatalf("grants = %d", len(got))
		}
	}},
	{"06 lets a sealing site keep working, which is every honest one", func(h *storeFixture) {
		for _, id := range []string{"a", "b", "c", "d"} {
			h.enqueue(id, "alice")
		}
		first := h.claim()
		if len(first) != 2 {
			h.t.Fatalf("first = %d", len(first))
		}
		for _, c := range first {
			if r := h.seal(stubID(c)); r.State != StateReady {
				h.t.Fatalf("seal %s: %+v", stubID(c), r)
			}
		}
		if got := h.claim(); len(got) != 2 {
			h.t.Fatalf("second = %d", len(got))
		}
	}},
	{"07 gives two sites the same id without either seeing the other", func(h *storeFixture) {
		h.enqueueStub(site, stub("shared", "alice"))
		h.enqueueStub("site_other", stub("shared", "bob"))
		got := h.claim()
		equalStrings(h.t, "claim ids", ids(got), []string{"shared"})
		if stubOwner(got[0]) != "alice" {
			h.t.Fatalf("owner = %s", stubOwner(got[0]))
		}
		again := h.enqueueStub(site, stub("shared", "alice"))
		if j := h.job(site, "shared"); j.Stub == nil || !reflect.DeepEqual(*j, again) {
			h.t.Fatalf("re-enqueue %+v != job %+v", again, j)
		}
		var a, b protocol.JobStub
		_ = json.Unmarshal(h.job(site, "shared").Stub, &a)
		_ = json.Unmarshal(h.job("site_other", "shared").Stub, &b)
		if a.Owner != "alice" || b.Owner != "bob" {
			h.t.Fatalf("owners %s %s", a.Owner, b.Owner)
		}
		if again.State != StateAwaitingPayload || again.ClaimedBy == nil {
			h.t.Fatalf("re-enqueue should show the claimed job: %+v", again)
		}
	}},
	{"08 grants only what the owners set allows", func(h *storeFixture) {
		h.enqueue("mine", "alice")
		h.enqueue("theirs", "mallory")
		equalStrings(h.t, "ids", ids(h.claim()), []string{"mine"})
	}},
	{"09 refuses a stale lease and honours the current one", func(h *storeFixture) {
		h.enqueue("a", "alice")
		g := h.claim()[0]
		h.seal("a")
		if r := h.take("a", "runner_1", "an-older-grant"); r.Refused != RefusedStaleLease {
			h.t.Fatalf("stale take = %+v", r)
		}
		if r := h.take("a", "runner_1", g.Lease.ID); string(r.Envelope) != string(envelope) || r.Refused != "" {
			h.t.Fatalf("take = %+v", r)
		}
	}},
	{"10 will not answer for one job with another job's lease", func(h *storeFixture) {
		h.enqueue("mine", "alice")
		h.enqueue("other", "alice")
		got := h.claim()
		lease := map[string]string{}
		for _, c := range got {
			lease[stubID(c)] = c.Lease.ID
		}
		h.seal("other")
		if r := h.take("other", "runner_1", lease["mine"]); r.Refused != RefusedStaleLease {
			h.t.Fatalf("cross-lease take = %+v", r)
		}
		if r := h.take("other", "runner_1", lease["other"]); r.Envelope == nil {
			h.t.Fatalf("own take = %+v", r)
		}
	}},
	{"11 renews a grant it still holds, and extends the sweep with it", func(h *storeFixture) {
		h.enqueue("a", "alice")
		g := h.claim(leaseMs(1000))[0]
		r, err := h.s.RenewLeases(h.ctx, RenewInput{RunnerID: "runner_1", Leases: []protocol.GrantRef{grant(g)}, LeaseMs: 60000})
		if err != nil {
			h.t.Fatal(err)
		}
		if len(r.Lost) != 0 || len(r.Renewed) != 1 || r.Renewed[0].JobID != "a" {
			h.t.Fatalf("renew = %+v", r)
		}
		if r.Renewed[0].ExpiresAt <= g.Lease.ExpiresAt {
			h.t.Fatalf("expiry %d not after %d", r.Renewed[0].ExpiresAt, g.Lease.ExpiresAt)
		}
		if got := h.job(site, "a").ClaimedBy.LeaseExpiresAt; got != r.Renewed[0].ExpiresAt {
			h.t.Fatalf("stored expiry %d != %d", got, r.Renewed[0].ExpiresAt)
		}
	}},
	{"12 reports a lease the runner no longer holds as lost, and renews nothing", func(h *storeFixture) {
		h.enqueue("a", "alice")
		g := h.claim(leaseMs(1000))[0]
		r, err := h.s.RenewLeases(h.ctx, RenewInput{RunnerID: "runner_1",
			Leases: []protocol.GrantRef{{JobID: "a", LeaseID: "a-grant-that-ended"}}, LeaseMs: 60000})
		if err != nil {
			h.t.Fatal(err)
		}
		if len(r.Renewed) != 0 || !reflect.DeepEqual(r.Lost, []protocol.GrantRef{{JobID: "a", LeaseID: "a-grant-that-ended"}}) {
			h.t.Fatalf("renew = %+v", r)
		}
		cb := h.job(site, "a").ClaimedBy
		if cb.LeaseExpiresAt != g.Lease.ExpiresAt || cb.LeaseID != g.Lease.ID {
			h.t.Fatalf("claimedBy changed: %+v", cb)
		}
	}},
	{"13 does not hand out a stub it cannot parse", func(h *storeFixture) {
		h.enqueue("good", "alice")
		h.enqueue("old", "alice")
		raw := `{"id":"old","kind":"llm.generate","owner":"alice","audience":"private","sizeClass":"small","streaming":false,"deadlineAt":4102444800000}`
		if err := h.writeRawStub(site, "old", raw); err != nil {
			h.t.Fatal(err)
		}
		equalStrings(h.t, "ids", ids(h.claim(maxJobs(10))), []string{"good"})
		h.mustState("old", StateQueued)
	}},
	{"14 honours a self job's audience", func(h *storeFixture) {
		h.enqueue("private", "alice")
		got := h.claim(deviceOwner("owner"), routes([]string{site}, []string{"owner", "alice"}))
		if len(got) != 0 {
			h.t.Fatalf("got %q", ids(got))
		}
		h.mustState("private", StateQueued)
	}},
	{"15 still offers that job to its owner's own machine", func(h *storeFixture) {
		h.enqueue("private", "alice")
		equalStrings(h.t, "ids", ids(h.claim(deviceOwner("alice"), routes([]string{site}, []string{"alice"}))), []string{"private"})
	}},
	{"16 does not offer a job back to the runner that refused it", func(h *storeFixture) {
		h.enqueue("a", "alice")
		g := h.claim()[0]
		h.release("runner_1", []protocol.GrantRef{grant(g)}, ReasonRefused, nil)
		if got := h.claim(); len(got) != 0 {
			h.t.Fatalf("runner_1 got %q", ids(got))
		}
		h.mustState("a", StateQueued)
		equalStrings(h.t, "runner_2", ids(h.claim(runner("runner_2"))), []string{"a"})
	}},
	{"17 does not offer a job back to a runner before its not-before", func(h *storeFixture) {
		h.enqueue("a", "alice")
		g := h.claim()[0]
		ra := hostNow() + 600000
		h.release("runner_1", []protocol.GrantRef{grant(g)}, "", &ra)
		if got := h.claim(); len(got) != 0 {
			h.t.Fatalf("runner_1 got %q", ids(got))
		}
		h.mustState("a", StateQueued)
		equalStrings(h.t, "runner_2", ids(h.claim(runner("runner_2"))), []string{"a"})
	}},
	{"18 offers it again once the not-before has passed", func(h *storeFixture) {
		h.enqueue("a", "alice")
		g := h.claim()[0]
		ra := hostNow() - 1000
		h.release("runner_1", []protocol.GrantRef{grant(g)}, "", &ra)
		equalStrings(h.t, "runner_1", ids(h.claim()), []string{"a"})
	}},
	{"19 will not un-finish a job that is already done", func(h *storeFixture) {
		h.enqueue("a", "alice")
		g := h.claim()[0]
		h.take("a", "runner_1", g.Lease.ID)
		h.complete("a", "runner_1", g.Lease.ID, "ok")
		if got := h.release("runner_1", []protocol.GrantRef{grant(g)}, ReasonShutdown, nil); len(got) != 0 {
			h.t.Fatalf("released %q", got)
		}
		h.mustState("a", StateDone)
		fin, err := h.s.Finished(h.ctx, site)
		if err != nil {
			h.t.Fatal(err)
		}
		equalStrings(h.t, "finished", jobIDs(fin), []string{"a"})
		if got := h.claim(runner("runner_2")); len(got) != 0 {
			h.t.Fatalf("runner_2 got %q", ids(got))
		}
	}},
	{"20 keeps a job claimable by a runner that only went away", func(h *storeFixture) {
		h.enqueue("a", "alice")
		g := h.claim()[0]
		h.release("runner_1", []protocol.GrantRef{grant(g)}, ReasonShutdown, nil)
		equalStrings(h.t, "runner_1", ids(h.claim()), []string{"a"})
	}},
	{"21 stops offering a job past its deadline, and drops the ciphertext", func(h *storeFixture) {
		st := stub("late", "alice")
		st.DeadlineAt = hostNow() - 1000
		h.enqueueStub(site, st)
		if got := h.claim(); len(got) != 0 {
			h.t.Fatalf("got %q", ids(got))
		}
		if j := h.job(site, "late"); j != nil {
			h.t.Fatalf("late job still there: %+v", j)
		}
	}},
	{"22 reports what a sweep removed, not only what it requeued (B096)", func(h *storeFixture) {
		st := stub("expired", "alice")
		st.DeadlineAt = hostNow() - 1000
		h.enqueueStub(site, st)
		h.enqueue("alive", "alice")
		got := jobIDs(h.sweep())
		if !slices.Contains(got, "expired") || slices.Contains(got, "alive") {
			h.t.Fatalf("sweep ids %q", got)
		}
		if h.job(site, "alive") == nil {
			h.t.Fatal("alive job gone")
		}
	}},
	{"23 names a cancelled job to the device holding it, and offers it to nobody", func(h *storeFixture) {
		h.enqueue("a", "alice")
		g := h.claim()[0]
		ok, err := h.s.Cancel(h.ctx, site, "a")
		if err != nil || !ok {
			h.t.Fatalf("cancel = %v %v", ok, err)
		}
		reqs, err := h.s.CancelRequests(h.ctx, "runner_1")
		if err != nil {
			h.t.Fatal(err)
		}
		if !reflect.DeepEqual(reqs, []protocol.GrantRef{{JobID: "a", LeaseID: g.Lease.ID}}) {
			h.t.Fatalf("cancel requests %+v", reqs)
		}
		if ok, _ := h.s.Cancel(h.ctx, "someone_else", "a"); ok {
			h.t.Fatal("foreign cancel answered true")
		}
	}},
	{"24 records a result once", func(h *storeFixture) {
		h.enqueue("a", "alice")
		g := h.claim()[0]
		if r := h.complete("a", "runner_1", g.Lease.ID, "ok"); r != (CompleteResult{Accepted: true, State: StateDone}) {
			h.t.Fatalf("first = %+v", r)
		}
		r, err := h.s.Complete(h.ctx, CompleteInput{JobID: "a", RunnerID: "runner_1", LeaseID: g.Lease.ID,
			Envelope: json.RawMessage(`{"ciphertext":"BBBB","recipientKeyId":"r","senderKeyId":"s","direction":"result","deadlineAt":1}`), Disposition: "error"})
		if err != nil || r != (CompleteResult{Duplicate: true, State: StateDone}) {
			h.t.Fatalf("second = %+v %v", r, err)
		}
		if j := h.job(site, "a"); j.Disposition != "ok" || string(j.Result) != string(envelope) {
			h.t.Fatalf("job %+v", j)
		}
	}},
	{"25 answers the device that finished it with duplicate", func(h *storeFixture) {
		h.enqueue("a", "alice")
		g := h.claim()[0]
		h.complete("a", "runner_1", g.Lease.ID, "ok")
		if r := h.complete("a", "runner_1", g.Lease.ID, "error"); !r.Duplicate {
			h.t.Fatalf("second = %+v", r)
		}
		if r := h.complete("a", "runner_2", g.Lease.ID, "error"); r.Refused != RefusedNotHolder {
			h.t.Fatalf("stranger = %+v", r)
		}
		if j := h.job(site, "a"); j.Disposition != "ok" {
			h.t.Fatalf("disposition %s", j.Disposition)
		}
	}},
	{"26 refuses a result produced under a grant that ended", func(h *storeFixture) {
		h.enqueue("a", "alice")
		h.claim()
		if r := h.complete("a", "runner_1", "a-grant-that-ended", "ok"); r.Refused != RefusedStaleLease {
			h.t.Fatalf("complete = %+v", r)
		}
		j := h.job(site, "a")
		if j.State != StateAwaitingPayload || j.Result != nil {
			h.t.Fatalf("job %+v", j)
		}
	}},
	{"27 refuses a payload for a job that already finished (V1-6)", func(h *storeFixture) {
		h.enqueue("a", "alice")
		g := h.claim()[0]
		h.seal("a")
		h.take("a", "runner_1", g.Lease.ID)
		h.complete("a", "runner_1", g.Lease.ID, "ok")
		if r := h.take("a", "runner_1", g.Lease.ID); r.Refused != RefusedTerminal {
			h.t.Fatalf("take = %+v", r)
		}
		h.mustState("a", StateDone)
	}},
	{"28 tells a runner nothing about another site's job id (V1-8)", func(h *storeFixture) {
		h.enqueueStub("site_somebody_else", stub("secret", "alice"))
		h.enqueue("mine", "alice")
		g := h.claim()[0]
		a := h.take("secret", "runner_1", g.Lease.ID)
		b := h.take("no-such-job-anywhere", "runner_1", g.Lease.ID)
		if !reflect.DeepEqual(a, b) || a.Refused != RefusedNotFound {
			h.t.Fatalf("answers %+v and %+v", a, b)
		}
	}},
	{"29 offers a job to any device that serves its kind", func(h *storeFixture) {
		h.enqueue("a", "alice")
		equalStrings(h.t, "ids", ids(h.claim(runner("runner_any"), kinds(protocol.KindGenerate))), []string{"a"})
	}},
	{"30 does not offer a job to a device that serves a different kind", func(h *storeFixture) {
		h.enqueue("a", "alice")
		if got := h.claim(kinds(protocol.KindChat)); len(got) != 0 {
			h.t.Fatalf("got %q", ids(got))
		}
	}},
	{"31 remembers a device, and what it says it can run", func(h *storeFixture) {
		dev := freshDevice()
		h.seen("runner_1", "alice", dev, caps("llama3"), "[]")
		p := h.presence("runner_1")
		if p.Owner != "alice" || p.Device.Identity != dev.Identity {
			h.t.Fatalf("presence %+v", p)
		}
		equalStrings(h.t, "models", models(h.t, p), []string{"llama3"})
	}},
	{"32 replaces the matrix rather than merging it", func(h *storeFixture) {
		dev := freshDevice()
		h.seen("runner_1", "alice", dev, caps("llama3"), "[]")
		h.seen("runner_1", "alice", dev, caps("mistral"), "[]")
		equalStrings(h.t, "models", models(h.t, h.presence("runner_1")), []string{"mistral"})
	}},
	{"33 keeps an empty matrix, because empty is an answer", func(h *storeFixture) {
		dev := freshDevice()
		h.seen("runner_1", "alice", dev, caps("llama3"), "[]")
		h.seen("runner_1", "alice", dev, "[]", "[]")
		if got := string(h.presence("runner_1").Capabilities); got != "[]" {
			h.t.Fatalf("capabilities %s", got)
		}
	}},
	{"34 remembers which kinds are withheld, and drops them when resolved", func(h *storeFixture) {
		dev := freshDevice()
		withheld := `[{"kind":"llm.generate","claimants":[{"service":"ollama","offer":"team"},{"service":"mlx","offer":"private"}]}]`
		h.seen("runner_1", "alice", dev, "[]", withheld)
		var w []protocol.WithheldKind
		if err := json.Unmarshal(h.presence("runner_1").Withheld, &w); err != nil {
			h.t.Fatal(err)
		}
		if len(w) != 1 || w[0].Kind != "llm.generate" || len(w[0].Claimants) != 2 ||
			w[0].Claimants[0].Service != "ollama" || w[0].Claimants[1].Service != "mlx" {
			h.t.Fatalf("withheld %+v", w)
		}
		h.seen("runner_1", "alice", dev, "[]", "[]")
		if got := string(h.presence("runner_1").Withheld); got != "[]" {
			h.t.Fatalf("withheld %s", got)
		}
	}},
	{"35 stamps presence from its own clock, and moves it on the next beat", func(h *storeFixture) {
		before := h.now()
		dev := freshDevice()
		first := h.seen("runner_1", "alice", dev, "[]", "[]")
		later := h.seen("runner_1", "alice", dev, "[]", "[]")
		if first.LastSeenAt < before || later.LastSeenAt < first.LastSeenAt {
			h.t.Fatalf("before %d first %d later %d", before, first.LastSeenAt, later.LastSeenAt)
		}
	}},
	{"36 lists everyone it has seen", func(h *storeFixture) {
		h.seen("runner_5", "alice", freshDevice(), "[]", "[]")
		h.seen("runner_6", "bob", freshDevice(), "[]", "[]")
		all, err := h.s.Everyone(h.ctx)
		if err != nil {
			h.t.Fatal(err)
		}
		var got []string
		for _, p := range all {
			got = append(got, p.RunnerID)
		}
		equalStrings(h.t, "everyone", got, []string{"runner_5", "runner_6"})
	}},
	{"37 does not know a runner it has never seen", func(h *storeFixture) {
		p, err := h.s.Presence(h.ctx, "runner_never")
		if err != nil || p != nil {
			h.t.Fatalf("presence = %+v %v", p, err)
		}
	}},
	{"38 stamps deadlines from its own clock", func(h *storeFixture) {
		h.enqueue("a", "alice")
		before := h.now()
		g := h.claim(leaseMs(45000))[0]
		after := h.now()
		if g.Lease.ExpiresAt < before+45000 || g.Lease.ExpiresAt > after+45000 {
			h.t.Fatalf("expiresAt %d outside [%d, %d]", g.Lease.ExpiresAt, before+45000, after+45000)
		}
	}},
}

func TestStoreContract(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		for _, c := range contractCases {
			t.Run(c.name, func(t *testing.T) {
				c.run(newFixture(t, b, Options{}))
			})
		}
	})
}

func caps(models ...string) string {
	var m []protocol.Capability
	for _, model := range models {
		m = append(m, protocol.Capability{Kind: protocol.KindGenerate, Service: "ollama", BackendID: "b1",
			BackendClass: "local", Model: model, OfferScope: "private"})
	}
	raw, _ := protocol.Marshal(m)
	return string(raw)
}

func models(t *testing.T, p *Presence) []string {
	t.Helper()
	var m []protocol.Capability
	if err := json.Unmarshal(p.Capabilities, &m); err != nil {
		t.Fatalf("capabilities %s: %v", p.Capabilities, err)
	}
	out := []string{}
	for _, c := range m {
		out = append(out, c.Model)
	}
	return out
}

func (h *storeFixture) seen(runnerID, owner string, dev protocol.PublicIdentity, caps, withheld string) Presence {
	h.t.Helper()
	p, err := h.s.Seen(h.ctx, Presence{RunnerID: runnerID, Owner: owner, Device: dev,
		Capabilities: json.RawMessage(caps), Withheld: json.RawMessage(withheld)})
	if err != nil {
		h.t.Fatalf("seen: %v", err)
	}
	return p
}

func (h *storeFixture) presence(runnerID string) *Presence {
	h.t.Helper()
	p, err := h.s.Presence(h.ctx, runnerID)
	if err != nil || p == nil {
		h.t.Fatalf("presence %s = %+v %v", runnerID, p, err)
	}
	return p
}
