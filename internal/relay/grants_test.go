package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/grant"
	"github.com/byollm/relay-go/internal/grantremote"
	"github.com/byollm/relay-go/internal/projection"
	"github.com/byollm/relay-go/internal/protocol"
)

// fakeAuthority stands in for a control plane at the seam (the built-in
// engine and the remote one have their own tests): it answers per job id
// and records every call in order.
type fakeAuthority struct {
	mu       sync.Mutex
	calls    []grant.Request
	sat      []grant.SatisfiableRequest
	decide   func(ctx context.Context, jobID, runnerID string) (grant.Decision, error)
	verdict  func(ctx context.Context) (grant.Verdict, error)
	released chan struct{} // closed at test end: lets hanging calls return
}

func newFakeAuthority(t *testing.T) *fakeAuthority {
	a := &fakeAuthority{released: make(chan struct{})}
	a.verdict = func(context.Context) (grant.Verdict, error) { return grant.VerdictOK, nil }
	t.Cleanup(func() { close(a.released) })
	return a
}

func (a *fakeAuthority) AuthorGrant(ctx context.Context, req grant.Request) (grant.Decision, error) {
	a.mu.Lock()
	a.calls = append(a.calls, req)
	decide := a.decide
	a.mu.Unlock()
	var job struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(req.Job, &job); err != nil {
		return grant.Decision{}, err
	}
	return decide(ctx, job.ID, req.RunnerID)
}

func (a *fakeAuthority) Satisfiable(ctx context.Context, req grant.SatisfiableRequest) (grant.Verdict, error) {
	a.mu.Lock()
	a.sat = append(a.sat, req)
	verdict := a.verdict
	a.mu.Unlock()
	return verdict(ctx)
}

func (a *fakeAuthority) jobsAsked() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, c := range a.calls {
		var job struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(c.Job, &job)
		out = append(out, job.ID)
	}
	return out
}

func (a *fakeAuthority) lastLease(t *testing.T, e *env, id string) string {
	t.Helper()
	j, err := e.st.Job(t.Context(), "site_a", id)
	if err != nil || j == nil || j.ClaimedBy == nil {
		t.Fatalf("%s is not claimed: %+v %v", id, j, err)
	}
	return j.ClaimedBy.LeaseID
}

// hang blocks, ignoring ctx, until the test ends: an authority that never
// answers and does not honour cancellation either.
func (a *fakeAuthority) hang() (grant.Decision, error) {
	<-a.released
	return grant.Decision{}, errors.New("released")
}

type grantCount struct {
	mu  sync.Mutex
	got map[string]int
}

func (g *grantCount) RecordGrantCall(_ context.Context, op, outcome string, _ time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.got == nil {
		g.got = map[string]int{}
	}
	g.got[op+"/"+outcome]++
}

func (g *grantCount) n(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.got[key]
}

// syncBuffer is a log sink safe for the relay's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const testControlPlanePublic = "Z3JhbnQtc2lnbmluZy1wdWJsaWMta2V5LWZvci10ZXN0" // verbatim, never parsed

func withGrants(a GrantAuthority, obs GrantObserver, log io.Writer) envOption {
	return func(c *Config) {
		c.Grants = a
		c.ControlPlanePublic = testControlPlanePublic
		c.GrantObserver = obs
		if log != nil {
			c.Logger = slog.New(slog.NewTextHandler(log, nil))
		}
	}
}

// grantFor is a stand-in signed grant: the relay carries it verbatim, so
// its bytes (odd spacing and key order included) must come out unchanged.
func grantFor(jobID string) json.RawMessage {
	return json.RawMessage(`{"grantId":"g-` + jobID + `", "jobId":"` + jobID + `","signature":"sig"}`)
}

// teamWorld: alice runs bob's team jobs on site_a (bob is on alice's roster).
func teamWorld(t *testing.T, e *env) *world {
	w := newWorld(t)
	w.fx.Rosters = []projection.RosterRecord{{ID: "team", Owner: "alice", Members: []string{"bob"}}}
	w.install(e)
	return w
}

func (e *env) enqueue(t *testing.T, w *world, id, owner, purpose string) {
	t.Helper()
	s := e.stub(id, owner, w.siteA)
	s.Purpose = purpose
	expect(t, e.sitePost(w.siteA, "site_a", "enqueue", enqueueJSON(t, "site_a", s)), 200, `{"jobId":"`+id+`","state":"queued"}`)
}

// TestClaimWithGrants is wire.md §8.2 steps 4-7: every claimed job goes to
// the authority in order with the §14.1 input; a granted job goes out with
// "grant" after "lease"; a permanent decline is released as refused and
// never offered to that runner again; a transient one comes back after
// 30 s.
func TestClaimWithGrants(t *testing.T) {
	t.Parallel()
	a := newFakeAuthority(t)
	a.decide = func(_ context.Context, id, runner string) (grant.Decision, error) {
		switch {
		case runner != "runner_alice":
		case id == "perm":
			return grant.Decision{Permanent: true, Reason: "not-a-member"}, nil
		case id == "trans":
			return grant.Decision{Reason: "consent-paused"}, nil
		}
		return grant.Decision{Granted: grantFor(id)}, nil
	}
	obs := &grantCount{}
	e := newEnv(t, withGrants(a, obs, nil))
	w := teamWorld(t, e)
	// At most two unsealed jobs per site and owner are granted at once
	// (the reference's cap), so the third is alice's own.
	e.enqueue(t, w, "granted", "bob", "summarise")
	e.enqueue(t, w, "perm", "bob", "")
	e.enqueue(t, w, "trans", "alice", "")

	before := e.now()
	got := e.daemonPost(w.alice, "runner_alice", "claim", claimJSON(t, "runner_alice", 8))
	after := e.now()
	if got.status != 200 {
		t.Fatalf("claim: %d %s", got.status, got.body)
	}
	if asked := a.jobsAsked(); strings.Join(asked, ",") != "granted,perm,trans" {
		t.Fatalf("authority asked about %v, want granted,perm,trans in order", asked)
	}

	// The exact reply: stored stub bytes, then lease, then the grant verbatim.
	var out struct {
		Jobs []claimedJob `json:"jobs"`
	}
	if err := json.Unmarshal(got.body, &out); err != nil || len(out.Jobs) != 1 {
		t.Fatalf("claim reply %s: %v", got.body, err)
	}
	lease := out.Jobs[0].Lease
	job, err := e.st.Job(t.Context(), "site_a", "granted")
	if err != nil {
		t.Fatal(err)
	}
	stub := string(job.Stub)
	claimed := stub[:len(stub)-1] + `,"lease":` + string(mustJSON(t, lease)) + `}`
	expect(t, got, 200, `{"jobs":[`+claimed[:len(claimed)-1]+`,"grant":`+string(grantFor("granted"))+`}],"leaseMs":60000}`)

	// The §14.1 input of the granted job.
	first := a.calls[0]
	if string(first.Job) != claimed {
		t.Errorf("job passed:\n got %s\nwant %s", first.Job, claimed)
	}
	if first.SiteID != "site_a" || first.SiteKey != w.siteA.keyID() || first.Owner != "alice" || first.RunnerID != "runner_alice" ||
		!first.HasPurpose || first.Purpose != "summarise" {
		t.Errorf("request: %+v", first)
	}
	if string(first.Capabilities) != string(mustJSON(t, []protocol.Capability{chatCapability})) {
		t.Errorf("capabilities %s", first.Capabilities)
	}
	if a.calls[1].HasPurpose || a.calls[1].Purpose != "" {
		t.Errorf("a stub without purpose passed one: %+v", a.calls[1])
	}

	// Store state: perm refused by alice, trans back in the queue with a
	// retry-after 30 s from the claim.
	perm, _ := e.st.Job(t.Context(), "site_a", "perm")
	if perm.State != "queued" || perm.ClaimedBy != nil || len(perm.RefusedBy) != 1 || perm.RefusedBy[0] != "runner_alice" {
		t.Fatalf("permanently declined job: %+v", perm)
	}
	trans, _ := e.st.Job(t.Context(), "site_a", "trans")
	ra := trans.RetryAfter["runner_alice"]
	if trans.State != "queued" || trans.ClaimedBy != nil || len(trans.RefusedBy) != 0 || ra < before+30_000 || ra > after+30_000 {
		t.Fatalf("transiently declined job (claim between %d and %d): %+v", before, after, trans)
	}
	if obs.n("author/granted") != 1 || obs.n("author/declined-permanent") != 1 || obs.n("author/declined-transient") != 1 {
		t.Fatalf("metric: %+v", obs.got)
	}

	// Before the retry-after nothing comes back, and the authority is not asked.
	if jobs := e.claim(t, w.alice, "runner_alice", 8); len(jobs) != 0 {
		t.Fatalf("re-offered before retry-after: %+v", jobs)
	}
	if n := len(a.jobsAsked()); n != 3 {
		t.Fatalf("authority asked %d times", n)
	}
	// Another runner whose owner may still run it gets the refused job.
	if jobs := e.claim(t, w.bob, "runner_bob", 8); len(jobs) != 1 || jobs[0].ID != "perm" {
		t.Fatalf("bob's claim: %+v", jobs)
	}
	expect(t, e.daemonPost(w.bob, "runner_bob", "release", releaseJSON(t, "runner_bob", "shutdown", protocol.GrantRef{JobID: "perm", LeaseID: a.lastLease(t, e, "perm")})), 200, `{"released":["perm"]}`)
	// The site seals the granted job, so it is not swept back meanwhile.
	expect(t, e.sitePost(w.siteA, "site_a", "payload", payloadJSON(t, "site_a", "granted", envelope("payload"))), 200, `{"jobId":"granted","state":"ready"}`)
	// 30 s later the transient one is alice's again; the refused one never is.
	e.st.Testing().AdvanceClock(30_001)
	jobs := e.claim(t, w.alice, "runner_alice", 8)
	if len(jobs) != 0 {
		t.Fatalf("after retry-after (trans declined again): %+v", jobs)
	}
	// (asked[3] is bob's claim of perm.)
	if asked := a.jobsAsked(); strings.Join(asked[3:], ",") != "perm,trans" || a.calls[3].RunnerID != "runner_bob" {
		t.Fatalf("after retry-after the authority was asked about %v, want bob's perm then alice's trans only", asked[3:])
	}
}

// TestClaimUnknownSite: a job whose site key the projection cannot place is
// a transient decline made without asking the authority.
func TestClaimUnknownSite(t *testing.T) {
	t.Parallel()
	a := newFakeAuthority(t)
	a.decide = func(_ context.Context, id, _ string) (grant.Decision, error) {
		return grant.Decision{Granted: grantFor(id)}, nil
	}
	obs := &grantCount{}
	e := newEnv(t, withGrants(a, obs, nil))
	w := teamWorld(t, e)
	e.enqueue(t, w, "old-key", "bob", "")
	// site_a rotates to a new key: routes still include site_a, but the
	// stub names a key the projection no longer has.
	w.fx.Sites[0].Site = newKeys(t).id
	w.install(e)
	if jobs := e.claim(t, w.alice, "runner_alice", 8); len(jobs) != 0 {
		t.Fatalf("claimed a job of an unknown site: %+v", jobs)
	}
	if n := len(a.jobsAsked()); n != 0 {
		t.Fatalf("authority asked %d times about an unknown site", n)
	}
	j, _ := e.st.Job(t.Context(), "site_a", "old-key")
	if j.State != "queued" || j.ClaimedBy != nil || len(j.RefusedBy) != 0 || j.RetryAfter["runner_alice"] == 0 {
		t.Fatalf("job after unknown-site decline: %+v", j)
	}
	if obs.n("author/skipped") != 1 {
		t.Fatalf("metric: %+v", obs.got)
	}
}

// TestClaimAuthorityFailures: an authority that errors, answers garbage,
// panics, or never answers (ignoring its context) is a transient decline:
// the claim answers, the jobs are back in their queue at once with the
// retry-after, one metric and one log line per failure. The budget stops
// asking once a claim has spent it.
func TestClaimAuthorityFailures(t *testing.T) {
	t.Parallel()
	a := newFakeAuthority(t)
	a.decide = func(_ context.Context, id, _ string) (grant.Decision, error) {
		switch {
		case strings.HasPrefix(id, "err"):
			return grant.Decision{}, errors.New("policy store unreachable")
		case strings.HasPrefix(id, "garbage"):
			return grant.Decision{Granted: json.RawMessage(`{"grantId":`)}, nil
		case strings.HasPrefix(id, "panic"):
			panic("authority bug")
		case strings.HasPrefix(id, "hang"):
			return a.hang()
		}
		return grant.Decision{Granted: grantFor(id)}, nil
	}
	obs := &grantCount{}
	logs := &syncBuffer{}
	e := newEnv(t, withGrants(a, obs, logs), func(c *Config) {
		// The budget leaves hang2 half a timeout after hang1: 300 ms of
		// slack for a slow scheduler (this package's tests run in
		// parallel on two cores) before hang2 would not be asked at all.
		c.GrantTimeout = 600 * time.Millisecond
		c.GrantBudget = 900 * time.Millisecond
	})
	w := teamWorld(t, e)
	// Two unsealed jobs per site and owner at most: alice's claims take
	// two of bob's and two of her own.
	for _, j := range []struct{ id, owner string }{
		{"err", "bob"}, {"garbage", "bob"}, {"panic", "alice"}, {"ok", "alice"},
		{"hang1", "bob"}, {"hang2", "bob"}, {"hang3", "alice"},
	} {
		e.enqueue(t, w, j.id, j.owner, "")
	}
	got := e.claim(t, w.alice, "runner_alice", 8)
	if len(got) != 1 || got[0].ID != "ok" {
		t.Fatalf("claim: %+v", got)
	}
	// hang1 takes the whole 600 ms timeout, hang2 the 300 ms left of the
	// budget, and hang3 is never asked.
	if got := e.claim(t, w.alice, "runner_alice", 8); len(got) != 0 {
		t.Fatalf("second claim: %+v", got)
	}
	if asked := a.jobsAsked(); strings.Join(asked, ",") != "err,garbage,panic,ok,hang1,hang2" {
		t.Fatalf("asked %v", asked)
	}
	for _, id := range []string{"err", "garbage", "panic", "hang1", "hang2", "hang3"} {
		j, _ := e.st.Job(t.Context(), "site_a", id)
		if j.State != "queued" || j.ClaimedBy != nil || len(j.RefusedBy) != 0 || j.RetryAfter["runner_alice"] == 0 {
			t.Fatalf("%s after a failed authority: %+v", id, j)
		}
	}
	if obs.n("author/failed") != 5 || obs.n("author/skipped") != 1 || obs.n("author/granted") != 1 {
		t.Fatalf("metric: %+v", obs.got)
	}
	if n := strings.Count(logs.String(), "grant authority failed"); n != 5 {
		t.Fatalf("%d failure log lines, want 5:\n%s", n, logs.String())
	}
}

// TestControlPlanePublicAtPairing: the fixture pair response and a
// device-code approval carry controlPlanePublic verbatim, last.
func TestControlPlanePublicAtPairing(t *testing.T) {
	t.Parallel()
	a := newFakeAuthority(t)
	e := newEnv(t, withGrants(a, nil, nil))
	w := newWorld(t)
	dave := newKeys(t)
	w.fx.Devices = append(w.fx.Devices, projection.DeviceRecord{Owner: "bob", RunnerID: "runner_dave", Device: dave.id})
	w.install(e)
	sites := `{"` + w.siteA.keyID() + `":` + string(mustJSON(t, w.siteA.id)) + `,"` + w.siteB.keyID() + `":` + string(mustJSON(t, w.siteB.id)) + `}`

	fixture := []byte(`{"protocolVersion":"2","owner":"bob","device":` + string(mustJSON(t, w.bob.id)) + `}`)
	expect(t, e.do("POST", "/byollm/pair", nil, fixture), 200,
		`{"protocolVersion":"2","runnerId":"runner_bob","sites":`+sites+`,"controlPlanePublic":"`+testControlPlanePublic+`"}`)

	s := e.start(t, dave.id)
	expect(t, e.do("POST", "/byollm/pair", nil, pollJSON(s.DeviceCode)), 200,
		`{"status":"approved","runnerId":"runner_dave","owner":"bob","sites":`+sites+`,"controlPlanePublic":"`+testControlPlanePublic+`"}`)

	t.Run("a key without an authority is refused with the reference's message", func(t *testing.T) {
		_, err := New(Config{Store: e.st, Projection: e.proj, ControlPlanePublic: testControlPlanePublic})
		want := "controlPlanePublic is set but authorGrant is not: devices would be told to expect signed grants that nothing here can produce, and would refuse every job"
		if err == nil || err.Error() != want {
			t.Fatalf("New: %v", err)
		}
	})
}

// TestSatisfiableAtEnqueue is wire.md §9.1 step 2: the three refusal
// verdicts with their catalogue bodies (rows 29-31), a failure as row 28,
// consulted even for a job id that already exists, and a refused enqueue
// stores nothing.
func TestSatisfiableAtEnqueue(t *testing.T) {
	t.Parallel()
	a := newFakeAuthority(t)
	// A call cut short by the grant timeout may still be running when the
	// next case sets its answer, so the answer is read under a lock.
	var mu sync.Mutex
	var verdict grant.Verdict
	var failWith error
	answer := func(v grant.Verdict, err error) {
		mu.Lock()
		verdict, failWith = v, err
		mu.Unlock()
	}
	a.verdict = func(ctx context.Context) (grant.Verdict, error) {
		mu.Lock()
		verdict, failWith := verdict, failWith
		mu.Unlock()
		if failWith != nil {
			return "", failWith
		}
		if verdict == "hang" {
			_, err := a.hang()
			return "", err
		}
		return verdict, nil
	}
	obs := &grantCount{}
	e := newEnv(t, withGrants(a, obs, nil), func(c *Config) { c.GrantTimeout = 100 * time.Millisecond })
	w := newWorld(t)
	w.install(e)
	enqueue := func(id, purpose string) resp {
		s := e.stub(id, "bob", w.siteA)
		s.Purpose = purpose
		return e.sitePost(w.siteA, "site_a", "enqueue", enqueueJSON(t, "site_a", s))
	}

	cases := []struct {
		name    string
		verdict grant.Verdict
		fail    error
		purpose string
		status  int
		body    string
	}{
		{"not-declared names the purpose", grant.VerdictNotDeclared, nil, "summarise", 409,
			`{"error":"purpose-not-declared","message":"this site does not declare summarise — declare it on Developer Sites, and the people who have already connected will each map the new slot before it routes"}`},
		{"not-declared without a purpose", grant.VerdictNotDeclared, nil, "", 409,
			`{"error":"purpose-not-declared","message":"this site does not declare that purpose — declare it on Developer Sites, and the people who have already connected will each map the new slot before it routes"}`},
		{"unmapped", grant.VerdictUnmapped, nil, "", 409, `{"error":"slot-unsatisfiable","message":"nobody has chosen what answers this yet"}`},
		{"waiting", grant.VerdictWaiting, nil, "", 409, `{"error":"slot-waiting","message":"nothing can answer this right now — try again later"}`},
		{"a failure", "", errors.New("policy store down"), "", 503, `{"error":"server-error","message":"we could not check this just now — try again shortly"}`},
		{"no answer in time", "hang", nil, "", 503, `{"error":"server-error","message":"we could not check this just now — try again shortly"}`},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			answer(c.verdict, c.fail)
			id := "refused-" + string(rune('a'+i))
			expect(t, enqueue(id, c.purpose), c.status, c.body)
			if j, err := e.st.Job(t.Context(), "site_a", id); err != nil || j != nil {
				t.Fatalf("a refused enqueue stored %+v (%v)", j, err)
			}
		})
	}
	answer(grant.VerdictOK, nil)
	expect(t, enqueue("kept", "summarise"), 200, `{"jobId":"kept","state":"queued"}`)
	last := a.sat[len(a.sat)-1]
	if last != (grant.SatisfiableRequest{SiteID: "site_a", Owner: "bob", Purpose: "summarise", HasPurpose: true, Kind: protocol.KindChat}) {
		t.Fatalf("satisfiable asked %+v", last)
	}
	t.Run("an unknown verdict lets the enqueue through, as the reference does", func(t *testing.T) {
		answer("maybe", nil)
		expect(t, enqueue("odd-verdict", ""), 200, `{"jobId":"odd-verdict","state":"queued"}`)
	})
	t.Run("an existing job id is still checked", func(t *testing.T) {
		answer(grant.VerdictUnmapped, nil)
		n := len(a.sat)
		expect(t, enqueue("kept", "summarise"), 409, `{"error":"slot-unsatisfiable","message":"nobody has chosen what answers this yet"}`)
		if len(a.sat) != n+1 {
			t.Fatal("satisfiable not consulted for an existing job id")
		}
		if j, _ := e.st.Job(t.Context(), "site_a", "kept"); j == nil || j.State != "queued" {
			t.Fatalf("existing job changed: %+v", j)
		}
	})
	if obs.n("satisfiable/failed") != 2 || obs.n("satisfiable/unmapped") != 2 {
		t.Fatalf("metric: %+v", obs.got)
	}
}

// TestRemoteAuthorityOverHTTP wires the planes to grantremote.Authority and
// a control plane served over real HTTP: a granted reply reaches the daemon
// byte for byte, and a malformed one is a transient decline, logged.
func TestRemoteAuthorityOverHTTP(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	replies := map[string]string{}
	cp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Job struct {
				ID string `json:"id"`
			} `json:"job"`
		}
		if r.URL.Path == "/cp/satisfiable" {
			io.WriteString(w, `{"verdict":"ok"}`)
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || r.URL.Path != "/cp/author-grant" {
			http.Error(w, "bad request", 400)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		io.WriteString(w, replies[in.Job.ID])
	}))
	defer cp.Close()
	remote, err := grantremote.NewAuthority(cp.URL+"/cp", grantremote.Options{})
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	e := newEnv(t, withGrants(remote, nil, logs))
	w := teamWorld(t, e)
	replies["good"] = `{"granted":` + string(grantFor("good")) + `}`
	replies["bad"] = `{"granted":` + string(grantFor("good")) + `}` // names another job
	e.enqueue(t, w, "good", "bob", "")
	e.enqueue(t, w, "bad", "bob", "")

	got := e.daemonPost(w.alice, "runner_alice", "claim", claimJSON(t, "runner_alice", 8))
	if got.status != 200 || !bytes.Contains(got.body, []byte(`"grant":`+string(grantFor("good"))+`}],"leaseMs"`)) {
		t.Fatalf("claim: %d %s", got.status, got.body)
	}
	var out struct {
		Jobs []claimedJob `json:"jobs"`
	}
	if err := json.Unmarshal(got.body, &out); err != nil || len(out.Jobs) != 1 || out.Jobs[0].ID != "good" {
		t.Fatalf("claim: %s", got.body)
	}
	bad, _ := e.st.Job(t.Context(), "site_a", "bad")
	if bad.State != "queued" || bad.ClaimedBy != nil || len(bad.RefusedBy) != 0 || bad.RetryAfter["runner_alice"] == 0 {
		t.Fatalf("job after a malformed reply: %+v", bad)
	}
	if l := logs.String(); strings.Count(l, "grant authority failed") != 1 || !strings.Contains(l, "malformed reply") {
		t.Fatalf("log:\n%s", l)
	}
}

// A configured GrantRetryAfter replaces the reference's 30 s for a
// transient decline, and only for the runner it was declined for.
func TestGrantRetryAfterConfigured(t *testing.T) {
	t.Parallel()
	a := newFakeAuthority(t)
	a.decide = func(_ context.Context, id, runner string) (grant.Decision, error) {
		return grant.Decision{Reason: "consent-paused"}, nil
	}
	e := newEnv(t, withGrants(a, nil, nil), func(c *Config) { c.GrantRetryAfter = 7 * time.Second })
	w := teamWorld(t, e)
	e.enqueue(t, w, "trans", "alice", "")
	before := e.now()
	if got := e.daemonPost(w.alice, "runner_alice", "claim", claimJSON(t, "runner_alice", 8)); got.status != 200 {
		t.Fatalf("claim: %d %s", got.status, got.body)
	}
	after := e.now()
	j, err := e.st.Job(t.Context(), "site_a", "trans")
	if err != nil {
		t.Fatal(err)
	}
	if ra := j.RetryAfter["runner_alice"]; j.State != "queued" || ra < before+7_000 || ra > after+7_000 {
		t.Fatalf("retry-after %d, want 7 s after the claim (between %d and %d): %+v", ra, before+7_000, after+7_000, j)
	}
}
