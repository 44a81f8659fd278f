package relay

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/projection"
	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
)

// TestClaimRouting: claim takes its routes from the projection (consent on
// both sides, rosters, pauses) and its kinds from the capability matrix.
func TestClaimRouting(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := newWorld(t)
	w.fx.Rosters = []projection.RosterRecord{{ID: "team", Owner: "alice", Members: []string{"bob"}}}
	w.install(e)
	expect(t, e.sitePost(w.siteA, "site_a", "enqueue", enqueueJSON(t, "site_a", e.stub("for-bob", "bob", w.siteA))), 200, `{"jobId":"for-bob","state":"queued"}`)
	private := e.stub("bob-private", "bob", w.siteA)
	private.Audience = protocol.AudiencePrivate
	expect(t, e.sitePost(w.siteA, "site_a", "enqueue", enqueueJSON(t, "site_a", private)), 200, `{"jobId":"bob-private","state":"queued"}`)

	t.Run("no capabilities, no kinds, no jobs", func(t *testing.T) {
		body := []byte(`{"protocolVersion":"2","runnerId":"runner_alice","capabilities":[],"max":4}`)
		expect(t, e.daemonPost(w.alice, "runner_alice", "claim", body), 200, `{"jobs":[],"leaseMs":60000}`)
	})
	t.Run("paused consent routes nothing", func(t *testing.T) {
		w.fx.Consents[0].Paused = true
		w.install(e)
		defer func() { w.fx.Consents[0].Paused = false; w.install(e) }()
		if jobs := e.claim(t, w.alice, "runner_alice", 4); len(jobs) != 0 {
			t.Fatalf("claimed while paused: %+v", jobs)
		}
	})
	t.Run("max out of range is a schema failure", func(t *testing.T) {
		expect(t, e.daemonPost(w.alice, "runner_alice", "claim", claimJSON(t, "runner_alice", 65)), 400, schemaBody)
		expect(t, e.daemonPost(w.alice, "runner_alice", "claim", claimJSON(t, "runner_alice", 0)), 400, schemaBody)
	})
	t.Run("a roster lets alice run bob's team job, never his private one", func(t *testing.T) {
		jobs := e.claim(t, w.alice, "runner_alice", 4)
		if len(jobs) != 1 || jobs[0].ID != "for-bob" || jobs[0].Lease.RunnerID != "runner_alice" {
			t.Fatalf("claim: %+v", jobs)
		}
		if jobs := e.claim(t, w.bob, "runner_bob", 4); len(jobs) != 1 || jobs[0].ID != "bob-private" {
			t.Fatalf("bob's own claim: %+v", jobs)
		}
	})
}

// TestTwoReplicasOneJob: two relays over one store, two devices claiming the
// same job at once through different replicas: exactly one wins.
func TestTwoReplicasOneJob(t *testing.T) {
	t.Parallel()
	a := newEnv(t)
	b := newEnvOn(t, a.st)
	w := newWorld(t)
	w.fx.Rosters = []projection.RosterRecord{{ID: "team", Owner: "alice", Members: []string{"bob"}}}
	w.install(a)
	w.install(b)
	for round := 0; round < 10; round++ {
		id := "race-" + randomHex(4)
		expect(t, a.sitePost(w.siteA, "site_a", "enqueue", enqueueJSON(t, "site_a", a.stub(id, "bob", w.siteA))), 200, `{"jobId":"`+id+`","state":"queued"}`)
		var wg sync.WaitGroup
		got := make([][]claimedJob, 2)
		for i, c := range []struct {
			e      *env
			k      keys
			runner string
		}{{a, w.alice, "runner_alice"}, {b, w.bob, "runner_bob"}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := c.e.daemonPost(c.k, c.runner, "claim", claimJSON(t, c.runner, 1))
				var out struct {
					Jobs []claimedJob `json:"jobs"`
				}
				if r.status != 200 || json.Unmarshal(r.body, &out) != nil {
					t.Errorf("claim: %d %s", r.status, r.body)
				}
				got[i] = out.Jobs
			}()
		}
		wg.Wait()
		if n := len(got[0]) + len(got[1]); n != 1 {
			t.Fatalf("round %d: %d devices won the job: %+v", round, n, got)
		}
		// Release it so the next round starts clean.
		winner := got[0]
		k, runner, e := w.alice, "runner_alice", a
		if len(winner) == 0 {
			winner, k, runner, e = got[1], w.bob, "runner_bob", b
		}
		expect(t, e.daemonPost(k, runner, "result", resultJSON(t, runner, id, winner[0].Lease.ID, envelope("result"))), 200, `{"accepted":true,"state":"done"}`)
	}
	// Presence recorded through one replica is seen through the other.
	everyone, err := b.st.Everyone(t.Context())
	if err != nil || len(everyone) != 2 {
		t.Fatalf("presence across replicas: %+v %v", everyone, err)
	}
}

// TestReadPathsSweep: heartbeat and pending sweep before answering, so a
// lapsed grant is reported lost and an unsealed claim goes back to the queue.
func TestReadPathsSweep(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := newWorld(t)
	w.install(e)

	lease := e.enqueueAndClaim(t, w, "lapse", "alice", w.alice, "runner_alice")
	expect(t, e.sitePost(w.siteA, "site_a", "payload", payloadJSON(t, "site_a", "lapse", envelope("payload"))), 200, `{"jobId":"lapse","state":"ready"}`)
	e.st.Testing().SetClockOffset(61_000) // past the 60 s lease
	held := protocol.GrantRef{JobID: "lapse", LeaseID: lease.ID}
	got := e.daemonPost(w.alice, "runner_alice", "heartbeat", heartbeatJSON(t, "runner_alice", "0.1.1", held))
	var hb hbResponse
	if got.status != 200 || json.Unmarshal(got.body, &hb) != nil || len(hb.Lost) != 1 || hb.Lost[0] != held {
		t.Fatalf("heartbeat after lapse: %d %s", got.status, got.body)
	}
	if s := e.jobState(t, "site_a", "lapse"); s != "queued" {
		t.Fatalf("lapsed job is %s", s)
	}

	// Unsealed: pending sweeps it back to queued after 10 s.
	jobs := e.claim(t, w.alice, "runner_alice", 1)
	if len(jobs) != 1 {
		t.Fatalf("reclaim: %+v", jobs)
	}
	if got := e.siteGet(w.siteA, "site_a", "pending", "site_a"); len(got.json(t)["jobs"].([]any)) != 1 {
		t.Fatalf("pending before the seal window closes: %s", got.body)
	}
	e.st.Testing().SetClockOffset(61_000 + 10_001)
	expect(t, e.siteGet(w.siteA, "site_a", "pending", "site_a"), 200, `{"jobs":[]}`)
	if s := e.jobState(t, "site_a", "lapse"); s != "queued" {
		t.Fatalf("unsealed job is %s", s)
	}
}

// TestDefaultClockFollowsStore: without Config.Clock the plane clock is the
// store's (Valkey TIME), so a request signed on the store clock is fresh
// even when the store clock is far from this host's.
func TestDefaultClockFollowsStore(t *testing.T) {
	t.Parallel()
	base := newEnv(t)
	base.st.Testing().SetClockOffset(3_600_000)
	e := newEnvOn(t, base.st, func(c *Config) { c.Clock = nil })
	w := newWorld(t)
	w.install(e)
	body := claimJSON(t, "runner_alice", 1)
	expect(t, e.daemonPost(w.alice, "runner_alice", "claim", body), 200, `{"jobs":[],"leaseMs":60000}`)
	local := time.Now().UnixMilli()
	h := signed(protocol.HeaderRunner, w.alice, "runner_alice", "claim", local, body)
	expectClockSkew(t, e, e.do("POST", "/byollm/claim", h, body))
	if d := e.relay.now() - e.now(); d > 1000 || d < -1000 {
		t.Fatalf("plane clock is %d ms off the store clock", d)
	}
}

// A claim through a replica that remembers the runner's presence records
// the key set the presence record holds at the claim: a re-pairing through
// another replica (same identity key, new encryption key) shows at once,
// and so does a record lost since.
func TestClaimRecordsCurrentPresenceDevice(t *testing.T) {
	t.Parallel()
	a := newEnv(t)
	b := newEnvOn(t, a.st)
	w := newWorld(t)
	w.install(a)
	w.install(b)
	hb := heartbeatJSON(t, "runner_alice", "0.1.1")
	if got := a.daemonPost(w.alice, "runner_alice", "heartbeat", hb); got.status != 200 {
		t.Fatalf("heartbeat: %d %s", got.status, got.body)
	}
	claimOne := func(id string) store.Job {
		t.Helper()
		expect(t, a.sitePost(w.siteA, "site_a", "enqueue", enqueueJSON(t, "site_a", a.stub(id, "alice", w.siteA))), 200, `{"jobId":"`+id+`","state":"queued"}`)
		if jobs := a.claim(t, w.alice, "runner_alice", 1); len(jobs) != 1 || jobs[0].ID != id {
			t.Fatalf("claim: %+v", jobs)
		}
		j, err := a.st.Job(t.Context(), "site_a", id)
		if err != nil || j == nil || j.ClaimedBy == nil {
			t.Fatalf("job %s: %+v %v", id, j, err)
		}
		// Sealed, so the pair's two unsealed slots never run out.
		if r, err := a.st.Seal(t.Context(), "site_a", id, []byte(`{"ciphertext":"x"}`)); err != nil || r.State != store.StateReady {
			t.Fatalf("seal %s: %+v %v", id, r, err)
		}
		return *j
	}
	if j := claimOne("j1"); j.ClaimedBy.Device != w.alice.id {
		t.Fatalf("first claim recorded %+v", j.ClaimedBy.Device)
	}

	// Re-paired elsewhere: same identity key, another encryption key.
	repaired := w.alice.id
	repaired.Encryption, repaired.EncryptionSig = "other-encryption-key", "other-signature"
	if err := a.st.DropPresence(t.Context(), "runner_alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.st.Seen(t.Context(), store.Presence{RunnerID: "runner_alice", Owner: "alice", Device: repaired,
		Capabilities: emptyArray, Withheld: emptyArray}); err != nil {
		t.Fatal(err)
	}
	if j := claimOne("j2"); j.ClaimedBy.Device != repaired {
		t.Fatalf("claim after re-pairing recorded %+v, want %+v", j.ClaimedBy.Device, repaired)
	}

	// Record lost: rebuilt from the projection, and the claim records that.
	if err := a.st.DropPresence(t.Context(), "runner_alice"); err != nil {
		t.Fatal(err)
	}
	if j := claimOne("j3"); j.ClaimedBy.Device != w.alice.id {
		t.Fatalf("claim after loss recorded %+v", j.ClaimedBy.Device)
	}
	if p, err := a.st.Presence(t.Context(), "runner_alice"); err != nil || p == nil || p.Device != w.alice.id {
		t.Fatalf("presence after claim: %+v %v", p, err)
	}
}
