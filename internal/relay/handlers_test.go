package relay

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/byollm/relay-go/internal/projection"
	"github.com/byollm/relay-go/internal/protocol"
)

const (
	unknownJobBody      = `{"error":"not-found","message":"unknown job"}`
	notHolderBody       = `{"error":"forbidden","message":"this runner does not hold the job"}`
	staleLeaseBody      = `{"error":"forbidden","message":"that lease is no longer current"}`
	stubMismatch        = `{"error":"forbidden","message":"that stub does not name the site that signed it"}`
	stubNotAcceptedBody = `{"error":"bad-request","message":"that stub was not accepted"}`
)

// enqueueAndClaim puts one job of owner on site_a and has runner claim it.
func (e *env) enqueueAndClaim(t *testing.T, w *world, id, owner string, k keys, runner string) protocol.Lease {
	t.Helper()
	expect(t, e.sitePost(w.siteA, "site_a", "enqueue", enqueueJSON(t, "site_a", e.stub(id, owner, w.siteA))), 200,
		`{"jobId":"`+id+`","state":"queued"}`)
	jobs := e.claim(t, k, runner, 1)
	if len(jobs) != 1 || jobs[0].ID != id {
		t.Fatalf("claim of %s: %+v", id, jobs)
	}
	return jobs[0].Lease
}

// TestHolderRefusals covers rows 19-23 on fetch and result: the holder is
// the signer, never the body.
func TestHolderRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := newWorld(t)
	w.install(e)
	lease := e.enqueueAndClaim(t, w, "h1", "bob", w.bob, "runner_bob")

	cases := []struct {
		name      string
		k         keys
		runner    string
		job, ls   string
		status    int
		want      string
		endpoints []string
	}{
		{"unknown job", w.bob, "runner_bob", "nope", lease.ID, 404, unknownJobBody, []string{"fetch", "result"}},
		{"another runner's exact lease", w.alice, "runner_alice", "h1", lease.ID, 403, notHolderBody, []string{"fetch", "result"}},
		{"another runner's job id, own invented lease", w.alice, "runner_alice", "h1", "x", 404, unknownJobBody, []string{"fetch", "result"}},
		{"holder with a stale lease id", w.bob, "runner_bob", "h1", "00000000-0000-4000-8000-000000000000", 403, staleLeaseBody, []string{"fetch", "result"}},
		{"body runnerId is ignored", w.alice, "runner_alice", "h1", lease.ID, 403, notHolderBody, []string{"fetch"}},
	}
	for _, tc := range cases {
		for _, ep := range tc.endpoints {
			t.Run(ep+": "+tc.name, func(t *testing.T) {
				var body []byte
				bodyRunner := tc.runner
				if tc.name == "body runnerId is ignored" {
					bodyRunner = "runner_bob"
				}
				if ep == "fetch" {
					body = fetchJSON(t, bodyRunner, tc.job, tc.ls)
				} else {
					body = resultJSON(t, bodyRunner, tc.job, tc.ls, envelope("result"))
				}
				expect(t, e.daemonPost(tc.k, tc.runner, ep, body), tc.status, tc.want)
			})
		}
	}
	t.Run("result without a seal is accepted", func(t *testing.T) {
		expect(t, e.daemonPost(w.bob, "runner_bob", "result", resultJSON(t, "runner_bob", "h1", lease.ID, envelope("result"))), 200,
			`{"accepted":true,"state":"done"}`)
		// Completed straight from awaiting-payload: no payload, so not-ready.
		expect(t, e.daemonPost(w.bob, "runner_bob", "fetch", fetchJSON(t, "runner_bob", "h1", lease.ID)), 409,
			`{"error":"not-ready","message":"the site has not sealed this job yet"}`)
	})
}

// ciphertextFor makes an envelope whose envelopeBytes is exactly n.
func ciphertextFor(n int, direction string) protocol.SealedEnvelope {
	env := envelope(direction)
	env.Ciphertext = "A"
	base := protocol.EnvelopeBytes(env)
	env.Ciphertext = strings.Repeat("A", 1+n-base)
	return env
}

// TestEnvelopeSize covers row 24 on payload and result, measured as the
// reference does, rounded up in the message.
func TestEnvelopeSize(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := newWorld(t)
	w.install(e)
	lease := e.enqueueAndClaim(t, w, "big", "alice", w.alice, "runner_alice")
	over := ciphertextFor(protocol.MaxEnvelopeBytes+1, "payload")
	at := ciphertextFor(protocol.MaxEnvelopeBytes, "payload")
	if protocol.EnvelopeBytes(over) != protocol.MaxEnvelopeBytes+1 {
		t.Fatal("size helper is off")
	}
	tooBig := `{"error":"bad-request","message":"this message is 6.1 MB and the limit is 6.0 MB — it is a limit on one message rather than on how many you send. Split the work into smaller jobs and send them separately. Every plan has the same ceiling."}`
	expect(t, e.sitePost(w.siteA, "site_a", "payload", payloadJSON(t, "site_a", "big", over)), 400, tooBig)
	expect(t, e.sitePost(w.siteA, "site_a", "payload", payloadJSON(t, "site_a", "big", at)), 200, `{"jobId":"big","state":"ready"}`)
	overResult := ciphertextFor(protocol.MaxEnvelopeBytes+1, "result")
	expect(t, e.daemonPost(w.alice, "runner_alice", "result", resultJSON(t, "runner_alice", "big", lease.ID, overResult)), 400, tooBig)
	if s := e.jobState(t, "site_a", "big"); s != "ready" {
		t.Fatalf("oversized result changed state to %s", s)
	}
	// The payload came back byte for byte, all 6 MiB of it.
	got := e.daemonPost(w.alice, "runner_alice", "fetch", fetchJSON(t, "runner_alice", "big", lease.ID))
	if got.status != 200 || string(got.body) != `{"envelope":`+string(mustJSON(t, at))+`}` {
		t.Fatalf("fetch of a 6 MiB envelope: %d (%d bytes)", got.status, len(got.body))
	}
}

// TestSitePlaneRefusals covers rows 27, 32, 33, 34 and enqueue idempotency.
func TestSitePlaneRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := newWorld(t)
	w.install(e)
	t.Run("stub names another site's key", func(t *testing.T) {
		expect(t, e.sitePost(w.siteA, "site_a", "enqueue", enqueueJSON(t, "site_a", e.stub("x", "alice", w.siteB))), 403, stubMismatch)
	})
	t.Run("stub names an unknown key", func(t *testing.T) {
		expect(t, e.sitePost(w.siteA, "site_a", "enqueue", enqueueJSON(t, "site_a", e.stub("x", "alice", newKeys(t)))), 403, stubMismatch)
	})
	t.Run("enqueue into another site", func(t *testing.T) {
		expect(t, e.sitePost(w.siteA, "site_a", "enqueue", enqueueJSON(t, "site_b", e.stub("x", "alice", w.siteB))), 403, notYourSiteBody)
	})
	t.Run("store refuses the stub", func(t *testing.T) {
		expect(t, e.sitePost(w.siteA, "site_a", "enqueue", enqueueJSON(t, "site_a", e.stub("nul\u0000id", "alice", w.siteA))), 400, stubNotAcceptedBody)
	})
	t.Run("a job id holding a lone surrogate is refused", func(t *testing.T) {
		// Documented in README "Beyond the reference": Valkey's Lua cjson
		// cannot decode a lone surrogate escape, so such a stub could never
		// be checked at claim; it is refused whole instead.
		body := bytes.Replace(enqueueJSON(t, "site_a", e.stub("lsx", "alice", w.siteA)), []byte(`"id":"lsx"`), []byte(`"id":"ls\ud800"`), 1)
		expect(t, e.sitePost(w.siteA, "site_a", "enqueue", body), 400, stubNotAcceptedBody)
		cancel := bytes.Replace(cancelJSON(t, "site_a", "lsx"), []byte(`"jobId":"lsx"`), []byte(`"jobId":"ls\udc00"`), 1)
		expect(t, e.sitePost(w.siteA, "site_a", "cancel", cancel), 400, schemaBody)
		jobs, err := e.st.Jobs(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			if strings.HasPrefix(j.ID, "ls") {
				t.Fatalf("a refused stub was stored: %q", j.ID)
			}
		}
	})
	t.Run("strict stub schema", func(t *testing.T) {
		body := []byte(`{"protocolVersion":"2","siteId":"site_a","stub":{"id":"x","kind":"llm.chat","owner":"alice","site":"` + w.siteA.keyID() +
			`","audience":"team","sizeClass":"small","streaming":false,"deadlineAt":1800000000000,"extra":1}}`)
		expect(t, e.sitePost(w.siteA, "site_a", "enqueue", body), 400, schemaBody)
	})
	t.Run("payload for an unknown job", func(t *testing.T) {
		expect(t, e.sitePost(w.siteA, "site_a", "payload", payloadJSON(t, "site_a", "nope", envelope("payload"))), 404, unknownJobBody)
	})
	t.Run("payload for a queued job, and another site's job", func(t *testing.T) {
		expect(t, e.sitePost(w.siteA, "site_a", "enqueue", enqueueJSON(t, "site_a", e.stub("q1", "carol", w.siteA))), 200, `{"jobId":"q1","state":"queued"}`)
		expect(t, e.sitePost(w.siteA, "site_a", "payload", payloadJSON(t, "site_a", "q1", envelope("payload"))), 409,
			`{"error":"too-late","message":"job is queued, not awaiting payload"}`)
		expect(t, e.sitePost(w.siteB, "site_b", "payload", payloadJSON(t, "site_b", "q1", envelope("payload"))), 404, unknownJobBody)
		expect(t, e.sitePost(w.siteB, "site_b", "cancel", cancelJSON(t, "site_b", "q1")), 200, `{"cancelled":false}`)
	})
	t.Run("replayed enqueue keeps the claim", func(t *testing.T) {
		req := e.siteReq(w.siteA, "site_a", "enqueue", enqueueJSON(t, "site_a", e.stub("r1", "alice", w.siteA)))
		expect(t, e.send(req), 200, `{"jobId":"r1","state":"queued"}`)
		jobs := e.claim(t, w.alice, "runner_alice", 1)
		if len(jobs) != 1 || jobs[0].ID != "r1" {
			t.Fatalf("claim: %+v", jobs)
		}
		expect(t, e.send(req), 200, `{"jobId":"r1","state":"awaiting-payload"}`)
		if s := e.jobState(t, "site_a", "r1"); s != "awaiting-payload" {
			t.Fatalf("state %s", s)
		}
	})
}

type hbResponse struct {
	Sites           map[string]protocol.PublicIdentity `json:"sites"`
	AwaitingConsent []string                           `json:"awaitingConsent"`
	Cancel          []protocol.GrantRef                `json:"cancel"`
	Lost            []protocol.GrantRef                `json:"lost"`
	ServerTime      int64                              `json:"serverTime"`
}

// TestHeartbeat covers §8.5: sites, successions, awaitingConsent, cancel,
// lost, serverTime, floor and the update offer (never a downgrade).
func TestHeartbeat(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.UpdateOffer = "0.2.0"; c.DaemonFloor = "0.0.5" })
	w := newWorld(t)
	carol := newKeys(t)
	w.fx.Devices = append(w.fx.Devices, projection.DeviceRecord{Owner: "carol", RunnerID: "runner_carol", Device: carol.id})
	w.fx.Consents[0].Paused = true // alice on site_a: paused
	w.fx.Sites[1].Succeeds = []protocol.Succession{{Identity: newKeys(t).id, Signature: "link"}}
	w.fx.Sites[1].RetiringUntil = 5 // in the past: still sent
	w.install(e)
	sitesA := `{"` + w.siteA.keyID() + `":` + string(mustJSON(t, w.siteA.id)) + `}`

	t.Run("no pinned sites: everything lost, nothing renewed", func(t *testing.T) {
		leases := []protocol.GrantRef{{JobID: "a", LeaseID: "l1"}, {JobID: "a", LeaseID: "l1"}}
		got := e.daemonPost(carol, "runner_carol", "heartbeat", heartbeatJSON(t, "runner_carol", "0.1.1", leases...))
		var hb hbResponse
		if err := json.Unmarshal(got.body, &hb); err != nil {
			t.Fatal(err)
		}
		want := `{"sites":{},"updateTo":"0.2.0","awaitingConsent":[],"cancel":[],"lost":[{"jobId":"a","leaseId":"l1"},{"jobId":"a","leaseId":"l1"}],"serverTime":` + itoa(hb.ServerTime) + `}`
		expect(t, got, 200, want)
	})
	t.Run("paused consent: pinned but awaiting", func(t *testing.T) {
		got := e.daemonPost(w.alice, "runner_alice", "heartbeat", heartbeatJSON(t, "runner_alice", "0.2.0"))
		var hb hbResponse
		_ = json.Unmarshal(got.body, &hb)
		want := `{"sites":` + sitesA + `,"awaitingConsent":["` + w.siteA.keyID() + `"],"cancel":[],"lost":[],"serverTime":` + itoa(hb.ServerTime) + `}`
		expect(t, got, 200, want)
		if now := e.now(); hb.ServerTime > now || hb.ServerTime < now-5000 {
			t.Fatalf("serverTime %d vs now %d", hb.ServerTime, now)
		}
	})
	t.Run("successions for rotated sites, in siteId order", func(t *testing.T) {
		got := e.daemonPost(w.bob, "runner_bob", "heartbeat", heartbeatJSON(t, "runner_bob", "0.1.1"))
		var hb hbResponse
		_ = json.Unmarshal(got.body, &hb)
		sites := `{"` + w.siteA.keyID() + `":` + string(mustJSON(t, w.siteA.id)) + `,"` + w.siteB.keyID() + `":` + string(mustJSON(t, w.siteB.id)) + `}`
		succ := `{"` + w.siteB.keyID() + `":{"succeeds":` + string(mustJSON(t, w.fx.Sites[1].Succeeds)) + `,"retiringUntil":5}}`
		want := `{"sites":` + sites + `,"successions":` + succ + `,"updateTo":"0.2.0","awaitingConsent":[],"cancel":[],"lost":[],"serverTime":` + itoa(hb.ServerTime) + `}`
		expect(t, got, 200, want)
	})
	offers := []struct {
		daemon string
		offer  bool
	}{
		{"0.1.1", true},
		{"0.1.0-alpha.83", true},
		{"0.2.0", false},         // already there
		{"0.3.0", false},         // the offer would be a downgrade (fixed)
		{"0.2.0+build.7", false}, // same version
		{"0.1.0-alpha.82", false},
		{"banana", false}, // unparsable: no offer, and not below the floor
	}
	for _, tc := range offers {
		t.Run("offer to "+tc.daemon, func(t *testing.T) {
			got := e.daemonPost(w.bob, "runner_bob", "heartbeat", heartbeatJSON(t, "runner_bob", tc.daemon))
			if got.status != 200 {
				t.Fatalf("%d %s", got.status, got.body)
			}
			if has := strings.Contains(string(got.body), `"updateTo":"0.2.0"`); has != tc.offer {
				t.Fatalf("updateTo present=%v, want %v: %s", has, tc.offer, got.body)
			}
		})
	}
	t.Run("below the floor", func(t *testing.T) {
		expect(t, e.daemonPost(w.bob, "runner_bob", "heartbeat", heartbeatJSON(t, "runner_bob", "0.0.4")), 426,
			"{\"error\":\"daemon-below-floor\",\"message\":\"byollm 0.0.4 is below the supported floor (0.0.5). Run `npm i -g byollm@latest`, then `byollm start`.\",\"floor\":\"0.0.5\"}")
	})
	t.Run("schema: withheld needs two claimants", func(t *testing.T) {
		body := []byte(`{"protocolVersion":"2","runnerId":"runner_bob","daemonVersion":"0.1.1","capabilities":[],"withheld":[{"kind":"llm.chat","claimants":[{"service":"a","offer":"team"}]}],"activeLeases":[]}`)
		expect(t, e.daemonPost(w.bob, "runner_bob", "heartbeat", body), 400, schemaBody)
	})
}

// TestLeases covers heartbeat renewal and lost leases, site cancel and the
// heartbeat cancel list, and release (refused vs shutdown), with replays.
func TestLeases(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := newWorld(t)
	w.install(e)
	lease := e.enqueueAndClaim(t, w, "c1", "bob", w.bob, "runner_bob")
	held := protocol.GrantRef{JobID: "c1", LeaseID: lease.ID}
	bogus := protocol.GrantRef{JobID: "c1", LeaseID: "not-a-lease"}

	hb := func() hbResponse {
		got := e.daemonPost(w.bob, "runner_bob", "heartbeat", heartbeatJSON(t, "runner_bob", "0.1.1", held, bogus))
		var r hbResponse
		if got.status != 200 || json.Unmarshal(got.body, &r) != nil {
			t.Fatalf("heartbeat: %d %s", got.status, got.body)
		}
		return r
	}
	// Five seconds on (inside the 10 s seal window): renewal moves the expiry.
	e.st.Testing().SetClockOffset(5_000)
	if r := hb(); len(r.Cancel) != 0 || len(r.Lost) != 1 || r.Lost[0] != bogus {
		t.Fatalf("before cancel: %+v", r)
	}
	j, _ := e.st.Job(t.Context(), "site_a", "c1")
	if j.ClaimedBy.LeaseExpiresAt < lease.ExpiresAt+5_000 {
		t.Fatalf("lease was not renewed: %d vs %d", j.ClaimedBy.LeaseExpiresAt, lease.ExpiresAt)
	}

	cancel := e.siteReq(w.siteA, "site_a", "cancel", cancelJSON(t, "site_a", "c1"))
	expect(t, e.send(cancel), 200, `{"cancelled":true}`)
	expect(t, e.send(cancel), 200, `{"cancelled":true}`) // replay: idempotent
	if s := e.jobState(t, "site_a", "c1"); s != "awaiting-payload" {
		t.Fatalf("cancel changed state to %s", s)
	}
	if r := hb(); len(r.Cancel) != 1 || r.Cancel[0] != held {
		t.Fatalf("cancel list: %+v", r)
	}

	// Release as refused: requeued, never offered to bob again; replay
	// releases nothing more.
	lease2 := e.enqueueAndClaim(t, w, "c2", "bob", w.bob, "runner_bob")
	rel := e.daemonReq(w.bob, "runner_bob", "release", releaseJSON(t, "runner_bob", "refused", protocol.GrantRef{JobID: "c2", LeaseID: lease2.ID}))
	expect(t, e.send(rel), 200, `{"released":["c2"]}`)
	expect(t, e.send(rel), 200, `{"released":[]}`)
	if s := e.jobState(t, "site_a", "c2"); s != "queued" {
		t.Fatalf("state after release %s", s)
	}
	if jobs := e.claim(t, w.bob, "runner_bob", 4); len(jobs) != 0 {
		t.Fatalf("refused job re-offered: %+v", jobs)
	}
	// Nor can alice: she has no roster holding bob.
	if jobs := e.claim(t, w.alice, "runner_alice", 4); len(jobs) != 0 {
		t.Fatalf("alice took bob's job: %+v", jobs)
	}

	// Release as shutdown: immediately claimable by the same runner.
	lease3 := e.enqueueAndClaim(t, w, "c3", "bob", w.bob, "runner_bob")
	expect(t, e.daemonPost(w.bob, "runner_bob", "release", releaseJSON(t, "runner_bob", "shutdown", protocol.GrantRef{JobID: "c3", LeaseID: lease3.ID})), 200,
		`{"released":["c3"]}`)
	if jobs := e.claim(t, w.bob, "runner_bob", 4); len(jobs) != 1 || jobs[0].ID != "c3" {
		t.Fatalf("shutdown release not re-offered: %+v", jobs)
	}
	t.Run("release needs a reason", func(t *testing.T) {
		body := []byte(`{"protocolVersion":"2","runnerId":"runner_bob","leases":[]}`)
		expect(t, e.daemonPost(w.bob, "runner_bob", "release", body), 400, schemaBody)
	})
}
