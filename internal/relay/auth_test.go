package relay

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
)

const (
	runnerUnknownBody = `{"error":"unauthorized","message":"this runner is not recognised"}`
	siteUnknownBody   = `{"error":"unauthorized","message":"this site is not registered"}`
	badSigBody        = `{"error":"unauthorized","message":"signature check failed"}`
	revokedBody       = `{"error":"revoked","message":"routing for this runner has been revoked"}`
	notYourSiteBody   = `{"error":"forbidden","message":"that is not your site"}`
	clockSkewPrefix   = `{"error":"clock-skew","message":"this request's timestamp is too far from the server's clock; check the machine's time and try again","serverTime":`
)

// expectClockSkew checks the clock-skew body, whose serverTime is the relay's.
func expectClockSkew(t *testing.T, e *env, got resp) {
	t.Helper()
	s := string(got.body)
	if got.status != 401 || !strings.HasPrefix(s, clockSkewPrefix) || !strings.HasSuffix(s, `,"maxSkewMs":120000}`) {
		t.Fatalf("got %d %s, want clock-skew", got.status, got.body)
	}
	st, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(s, clockSkewPrefix), `,"maxSkewMs":120000}`), 10, 64)
	if err != nil {
		t.Fatalf("serverTime: %v", err)
	}
	// The default plane clock estimates the store's from a round trip, so
	// it may run a millisecond or so ahead of a later store reading.
	if now := e.now(); st > now+1000 || st < now-5000 {
		t.Fatalf("serverTime %d is not the relay clock (now %d)", st, now)
	}
}

func stdBase64Padded(sig string) string {
	raw, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		panic(err)
	}
	return base64.StdEncoding.EncodeToString(raw)
}

// TestDaemonAuth covers wire.md §5.1-§5.7 on claim: headers, lookup before
// freshness, freshness before signature, forged/tampered/cross-endpoint
// and cross-plane signatures, and the JS leniencies clients rely on.
func TestDaemonAuth(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := newWorld(t)
	w.install(e)
	body := claimJSON(t, "runner_alice", 1)
	empty := `{"jobs":[],"leaseMs":60000}`
	hdr := func(runner string, k keys, endpoint string, at int64, signedBody []byte) http.Header {
		return signed(protocol.HeaderRunner, k, runner, endpoint, at, signedBody)
	}
	cases := []struct {
		name   string
		header func(now int64) http.Header
		body   []byte
		status int
		want   string // "" = clock-skew
	}{
		{"valid", func(now int64) http.Header { return hdr("runner_alice", w.alice, "claim", now, body) }, body, 200, empty},
		{"unsigned", func(int64) http.Header { return nil }, body, 401, notSignedBody},
		{"missing signature header", func(now int64) http.Header {
			h := hdr("runner_alice", w.alice, "claim", now, body)
			h.Del(protocol.HeaderSignature)
			return h
		}, body, 401, notSignedBody},
		{"empty runner", func(now int64) http.Header { return hdr("", w.alice, "claim", now, body) }, body, 401, notSignedBody},
		{"non-numeric issued-at", func(now int64) http.Header {
			h := hdr("runner_alice", w.alice, "claim", now, body)
			h.Set(protocol.HeaderIssuedAt, "yesterday")
			return h
		}, body, 401, notSignedBody},
		{"zero issued-at", func(now int64) http.Header {
			h := hdr("runner_alice", w.alice, "claim", now, body)
			h.Set(protocol.HeaderIssuedAt, "0")
			return h
		}, body, 401, notSignedBody},
		{"hex issued-at verifies over its decimal", func(now int64) http.Header {
			h := hdr("runner_alice", w.alice, "claim", now, body)
			h.Set(protocol.HeaderIssuedAt, "0x"+strconv.FormatInt(now, 16))
			return h
		}, body, 200, empty},
		{"padded standard base64 signature (Node-lenient)", func(now int64) http.Header {
			h := hdr("runner_alice", w.alice, "claim", now, body)
			h.Set(protocol.HeaderSignature, stdBase64Padded(h.Get(protocol.HeaderSignature)))
			return h
		}, body, 200, empty},
		{"unknown runner", func(now int64) http.Header { return hdr("runner_zed", w.alice, "claim", now, body) }, body, 401, runnerUnknownBody},
		{"unknown runner with a stale clock is still unknown", func(now int64) http.Header {
			return hdr("runner_zed", w.alice, "claim", now-600_000, body)
		}, body, 401, runnerUnknownBody},
		{"stale past", func(now int64) http.Header { return hdr("runner_alice", w.alice, "claim", now-125_000, body) }, body, 401, ""},
		{"stale future", func(now int64) http.Header { return hdr("runner_alice", w.alice, "claim", now+125_000, body) }, body, 401, ""},
		{"inside the window", func(now int64) http.Header { return hdr("runner_alice", w.alice, "claim", now-100_000, body) }, body, 200, empty},
		{"stale forged is clock-skew (freshness first)", func(now int64) http.Header {
			return hdr("runner_alice", w.bob, "claim", now-125_000, body)
		}, body, 401, ""},
		{"forged: another device's key", func(now int64) http.Header { return hdr("runner_alice", w.bob, "claim", now, body) }, body, 401, badSigBody},
		{"forged: a site's key", func(now int64) http.Header { return hdr("runner_alice", w.siteA, "claim", now, body) }, body, 401, badSigBody},
		{"tampered body", func(now int64) http.Header { return hdr("runner_alice", w.alice, "claim", now, body) },
			claimJSON(t, "runner_alice", 2), 401, badSigBody},
		{"signed for another endpoint", func(now int64) http.Header { return hdr("runner_alice", w.alice, "fetch", now, body) }, body, 401, badSigBody},
		{"signed with the site/ prefix", func(now int64) http.Header {
			return hdr("runner_alice", w.alice, "site/claim", now, body)
		}, body, 401, badSigBody},
		{"issued-at altered after signing", func(now int64) http.Header {
			h := hdr("runner_alice", w.alice, "claim", now, body)
			h.Set(protocol.HeaderIssuedAt, strconv.FormatInt(now+1, 10))
			return h
		}, body, 401, badSigBody},
		{"cross-plane: a site signature on the daemon plane", func(now int64) http.Header {
			return signed(protocol.HeaderSite, w.siteA, "site_a", "claim", now, body)
		}, body, 401, notSignedBody},
		{"repeated runner header joins with comma", func(now int64) http.Header {
			h := hdr("runner_alice", w.alice, "claim", now, body)
			h.Add(protocol.HeaderRunner, "runner_alice")
			return h
		}, body, 401, runnerUnknownBody},
		{"body runnerId is not the signer", func(now int64) http.Header {
			return hdr("runner_alice", w.alice, "claim", now, claimJSON(t, "runner_bob", 1))
		}, claimJSON(t, "runner_bob", 1), 403, `{"error":"forbidden","message":"runner id does not match the key"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := e.do("POST", "/byollm/claim", tc.header(e.now()), tc.body)
			if tc.want == "" {
				expectClockSkew(t, e, got)
				return
			}
			expect(t, got, tc.status, tc.want)
		})
	}
}

// TestSiteAuth covers wire.md §5.8 on the site plane.
func TestSiteAuth(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := newWorld(t)
	w.install(e)
	body := cancelJSON(t, "site_a", "nothing")
	hdr := func(site string, k keys, endpoint string, at int64, b []byte) http.Header {
		return signed(protocol.HeaderSite, k, site, endpoint, at, b)
	}
	cases := []struct {
		name   string
		header func(now int64) http.Header
		body   []byte
		status int
		want   string
	}{
		{"valid", func(now int64) http.Header { return hdr("site_a", w.siteA, "site/cancel", now, body) }, body, 200, `{"cancelled":false}`},
		{"unsigned", func(int64) http.Header { return nil }, body, 401, notSignedBody},
		{"unregistered site, before any crypto or clock", func(now int64) http.Header {
			return hdr("site_zed", w.siteA, "site/cancel", now-600_000, body)
		}, body, 401, siteUnknownBody},
		{"stale", func(now int64) http.Header { return hdr("site_a", w.siteA, "site/cancel", now-125_000, body) }, body, 401, ""},
		{"another site's key", func(now int64) http.Header { return hdr("site_a", w.siteB, "site/cancel", now, body) }, body, 401, badSigBody},
		{"signed without the site/ domain separator", func(now int64) http.Header {
			return hdr("site_a", w.siteA, "cancel", now, body)
		}, body, 401, badSigBody},
		{"signed for another site endpoint", func(now int64) http.Header {
			return hdr("site_a", w.siteA, "site/enqueue", now, body)
		}, body, 401, badSigBody},
		{"tampered", func(now int64) http.Header { return hdr("site_a", w.siteA, "site/cancel", now, body) },
			cancelJSON(t, "site_a", "other"), 401, badSigBody},
		{"cross-plane: a daemon signature on the site plane", func(now int64) http.Header {
			return signed(protocol.HeaderRunner, w.alice, "runner_alice", "site/cancel", now, body)
		}, body, 401, notSignedBody},
		{"cross-plane: a device key under the site header", func(now int64) http.Header {
			return hdr("site_a", w.alice, "site/cancel", now, body)
		}, body, 401, badSigBody},
		{"schema", func(now int64) http.Header {
			return hdr("site_a", w.siteA, "site/cancel", now, []byte(`{"protocolVersion":"2","siteId":"site_a"}`))
		}, []byte(`{"protocolVersion":"2","siteId":"site_a"}`), 400, schemaBody},
		{"a site naming another site", func(now int64) http.Header {
			return hdr("site_a", w.siteA, "site/cancel", now, cancelJSON(t, "site_b", "x"))
		}, cancelJSON(t, "site_b", "x"), 403, notYourSiteBody},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := e.do("POST", "/relay/site/cancel", tc.header(e.now()), tc.body)
			if tc.want == "" {
				expectClockSkew(t, e, got)
				return
			}
			expect(t, got, tc.status, tc.want)
		})
	}

	reads := []struct {
		name, query string
		status      int
		want        string
	}{
		{"own site", "siteId=site_a&protocolVersion=2", 200, `{"jobs":[]}`},
		{"another site", "siteId=site_b&protocolVersion=2", 403, notYourSiteBody},
		{"missing siteId", "protocolVersion=2", 400, schemaBody},
		{"empty siteId", "siteId=&protocolVersion=2", 400, schemaBody},
	}
	for _, ep := range []string{"pending", "results"} {
		for _, tc := range reads {
			t.Run(ep+": "+tc.name, func(t *testing.T) {
				h := hdr("site_a", w.siteA, "site/"+ep, e.now(), nil)
				expect(t, e.do("GET", "/relay/site/"+ep+"?"+tc.query, h, nil), tc.status, tc.want)
			})
		}
	}
}

// TestSiteRotation: during a rotation window every key in succeeds
// authenticates; after it only the current key does; stub.site must always
// name the current key.
func TestSiteRotation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := newWorld(t)
	oldKey, older, stranger := newKeys(t), newKeys(t), newKeys(t)
	now := e.now()
	w.fx.Sites[0].Succeeds = []protocol.Succession{{Identity: oldKey.id, Signature: "sig1"}, {Identity: older.id, Signature: "sig2"}}
	w.fx.Sites[0].RetiringUntil = now + 3_600_000
	w.install(e)
	body := cancelJSON(t, "site_a", "j")
	for _, tc := range []struct {
		name string
		k    keys
		want int
	}{{"current", w.siteA, 200}, {"retiring", oldKey, 200}, {"oldest in chain", older, 200}, {"not in chain", stranger, 401}} {
		t.Run("inside window: "+tc.name, func(t *testing.T) {
			if got := e.sitePost(tc.k, "site_a", "cancel", body); got.status != tc.want {
				t.Fatalf("got %d %s, want %d", got.status, got.body, tc.want)
			}
		})
	}
	t.Run("stub must name the current key even when signed by the retiring one", func(t *testing.T) {
		stub := e.stub("rot1", "alice", oldKey)
		expect(t, e.sitePost(oldKey, "site_a", "enqueue", enqueueJSON(t, "site_a", stub)), 403,
			`{"error":"forbidden","message":"that stub does not name the site that signed it"}`)
		stub = e.stub("rot1", "alice", w.siteA)
		expect(t, e.sitePost(oldKey, "site_a", "enqueue", enqueueJSON(t, "site_a", stub)), 200, `{"jobId":"rot1","state":"queued"}`)
	})
	w.fx.Sites[0].RetiringUntil = now - 1
	w.install(e)
	t.Run("after the window the retiring key fails", func(t *testing.T) {
		expect(t, e.sitePost(oldKey, "site_a", "cancel", body), 401, badSigBody)
		expect(t, e.sitePost(w.siteA, "site_a", "cancel", body), 200, `{"cancelled":false}`)
	})
}

// TestProjectionDecidesDevice covers the security fix over §17.10-11: the
// projection, not cached presence, decides a runner's key and existence;
// revocation answers before schema on every endpoint.
func TestProjectionDecidesDevice(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := newWorld(t)
	w.install(e)
	hb := heartbeatJSON(t, "runner_alice", "0.1.1")
	if got := e.daemonPost(w.alice, "runner_alice", "heartbeat", hb); got.status != 200 {
		t.Fatalf("heartbeat: %d %s", got.status, got.body)
	}

	t.Run("revoked device is refused on every endpoint, before schema", func(t *testing.T) {
		w.fx.Devices[0].Revoked = true
		w.install(e)
		defer func() { w.fx.Devices[0].Revoked = false; w.install(e) }()
		for _, ep := range []string{"claim", "fetch", "result", "heartbeat", "release"} {
			expect(t, e.daemonPost(w.alice, "runner_alice", ep, []byte(`{"protocolVersion":"2","garbage":true}`)), 403, revokedBody)
		}
		expect(t, e.daemonPost(w.alice, "runner_alice", "heartbeat", hb), 403, revokedBody)
	})
	t.Run("a device removed from the projection is not recognised despite presence", func(t *testing.T) {
		if p, err := e.st.Presence(t.Context(), "runner_alice"); err != nil || p == nil {
			t.Fatalf("presence should exist: %v %v", p, err)
		}
		saved := w.fx.Devices
		w.fx.Devices = saved[1:]
		w.install(e)
		defer func() { w.fx.Devices = saved; w.install(e) }()
		expect(t, e.daemonPost(w.alice, "runner_alice", "heartbeat", hb), 401, runnerUnknownBody)
		expect(t, e.daemonPost(w.alice, "runner_alice", "claim", claimJSON(t, "runner_alice", 1)), 401, runnerUnknownBody)
	})
	t.Run("a re-keyed device must sign with its new key", func(t *testing.T) {
		fresh := newKeys(t)
		saved := w.fx.Devices[0].Device
		w.fx.Devices[0].Device = fresh.id
		w.install(e)
		defer func() { w.fx.Devices[0].Device = saved; w.install(e) }()
		expect(t, e.daemonPost(w.alice, "runner_alice", "heartbeat", hb), 401, badSigBody)
		if got := e.daemonPost(fresh, "runner_alice", "heartbeat", hb); got.status != 200 {
			t.Fatalf("new key: %d %s", got.status, got.body)
		}
		p, err := e.st.Presence(t.Context(), "runner_alice")
		if err != nil || p == nil || p.Device != fresh.id {
			t.Fatalf("presence should hold the new key set, got %+v %v", p, err)
		}
	})
}

// fetch, result and release skip the presence lookup within
// presenceCheckTTL of the last reconciliation; a heartbeat never does, nor
// does a claim that reads Valkey at all (this relay runs no work view, so
// every claim does; with one, a claim the view rules out reads nothing and
// the next heartbeat rebuilds the record: store's
// TestEmptyClaimSkipsThePresenceRead), so they rebuild a record lost in
// between, and a re-keyed device is reconciled on its first request
// whatever the endpoint.
func TestPresenceCheckSkippedOnlyWhereTheDeviceIsUnused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.relay.presence.ttl = time.Hour // no step of this test may outlive it
	w := newWorld(t)
	w.install(e)
	hb := heartbeatJSON(t, "runner_alice", "0.1.1")
	present := func() *store.Presence {
		t.Helper()
		p, err := e.st.Presence(t.Context(), "runner_alice")
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	drop := func() {
		t.Helper()
		if err := e.st.DropPresence(t.Context(), "runner_alice"); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.daemonPost(w.alice, "runner_alice", "heartbeat", hb); got.status != 200 {
		t.Fatalf("heartbeat: %d %s", got.status, got.body)
	}
	for _, tc := range []struct {
		endpoint string
		body     []byte
		rebuilds bool
	}{
		{"fetch", fetchJSON(t, "runner_alice", "nope", "6f1c2a4e-1111-4222-8333-944445555666"), false},
		{"result", resultJSON(t, "runner_alice", "nope", "6f1c2a4e-1111-4222-8333-944445555666", protocol.SealedEnvelope{Ciphertext: "x", RecipientKeyID: "r", SenderKeyID: "s", Direction: "result", DeadlineAt: e.now() + 60000}), false},
		{"release", releaseJSON(t, "runner_alice", "shutdown"), false},
		{"claim", claimJSON(t, "runner_alice", 1), true},
		{"heartbeat", hb, true},
	} {
		drop()
		got := e.daemonPost(w.alice, "runner_alice", tc.endpoint, tc.body)
		if got.status >= 500 {
			t.Fatalf("%s: %d %s", tc.endpoint, got.status, got.body)
		}
		if p := present(); (p != nil) != tc.rebuilds {
			t.Fatalf("%s: presence %+v, want rebuilt %v", tc.endpoint, p, tc.rebuilds)
		}
	}

	// A re-keyed device is looked up (and its record rebuilt) at once.
	fresh := newKeys(t)
	saved := w.fx.Devices[0].Device
	w.fx.Devices[0].Device = fresh.id
	w.install(e)
	defer func() { w.fx.Devices[0].Device = saved; w.install(e) }()
	if got := e.daemonPost(fresh, "runner_alice", "release", releaseJSON(t, "runner_alice", "shutdown")); got.status != 200 {
		t.Fatalf("release: %d %s", got.status, got.body)
	}
	if p := present(); p == nil || p.Device != fresh.id {
		t.Fatalf("presence after re-key: %+v", p)
	}
}

// A store call that checked the presence record this replica remembered
// and found the same owner and key set (a heartbeat's write, a claim's
// read) counts as a reconciliation: the fetches, results and releases
// after it skip the presence lookup for another presenceCheckTTL, even
// when the last lookup is older than that.
func TestVerifiedCallRenewsThePresenceCheck(t *testing.T) {
	t.Parallel()
	beat := func(t *testing.T, e *env, w *world) {
		t.Helper()
		if got := e.daemonPost(w.alice, "runner_alice", "heartbeat", heartbeatJSON(t, "runner_alice", "0.1.1")); got.status != 200 {
			t.Fatalf("heartbeat: %d %s", got.status, got.body)
		}
	}
	for _, c := range []struct {
		name   string
		verify func(t *testing.T, e *env, w *world)
	}{
		{"heartbeat", beat},
		{"claim", func(t *testing.T, e *env, w *world) {
			e.enqueueAndClaim(t, w, "verified-1", "alice", w.alice, "runner_alice")
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			const ttl = 2 * time.Second
			e.relay.presence.ttl = ttl
			w := newWorld(t)
			w.install(e)
			beat(t, e, w)                          // reconciles
			time.Sleep(ttl + 100*time.Millisecond) // that reconciliation is stale now
			c.verify(t, e, w)                      // remembered, so the store call checks the record
			if err := e.st.DropPresence(t.Context(), "runner_alice"); err != nil {
				t.Fatal(err)
			}
			if got := e.daemonPost(w.alice, "runner_alice", "release", releaseJSON(t, "runner_alice", "shutdown")); got.status != 200 {
				t.Fatalf("release: %d %s", got.status, got.body)
			}
			if p, err := e.st.Presence(t.Context(), "runner_alice"); err != nil || p != nil {
				t.Fatalf("the release looked the record up (and rebuilt it: %+v, %v) right after a verified %s", p, err, c.name)
			}
			// The next heartbeat finds the record gone and rebuilds it.
			beat(t, e, w)
			if p, err := e.st.Presence(t.Context(), "runner_alice"); err != nil || p == nil {
				t.Fatalf("after the next heartbeat: %+v, %v", p, err)
			}
		})
	}
}

// A heartbeat from a runner this replica reconciled lately writes its
// presence without reading it first, and checks what the write answers: a
// record that meanwhile changed owner is started over from the projection,
// one re-paired under the same identity key is kept, and a lost one is
// rebuilt from the projection.
func TestHeartbeatChecksThePresenceItWrites(t *testing.T) {
	e := newEnv(t)
	e.relay.presence.ttl = time.Hour
	w := newWorld(t)
	w.install(e)
	hb := heartbeatJSON(t, "runner_alice", "0.1.1")
	beat := func() *store.Presence {
		t.Helper()
		if got := e.daemonPost(w.alice, "runner_alice", "heartbeat", hb); got.status != 200 {
			t.Fatalf("heartbeat: %d %s", got.status, got.body)
		}
		p, err := e.st.Presence(t.Context(), "runner_alice")
		if err != nil || p == nil {
			t.Fatalf("presence: %+v %v", p, err)
		}
		return p
	}
	replace := func(owner string, dev protocol.PublicIdentity) {
		t.Helper()
		if err := e.st.DropPresence(t.Context(), "runner_alice"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.st.Seen(t.Context(), store.Presence{RunnerID: "runner_alice", Owner: owner, Device: dev,
			Capabilities: emptyArray, Withheld: emptyArray}); err != nil {
			t.Fatal(err)
		}
	}
	if p := beat(); p.Owner != "alice" || p.Device != w.alice.id {
		t.Fatalf("first heartbeat: %+v", p)
	}

	replace("mallory", w.bob.id)
	if p := beat(); p.Owner != "alice" || p.Device != w.alice.id || string(p.Capabilities) == "[]" {
		t.Fatalf("after another owner's record: %+v", p)
	}

	repaired := w.alice.id
	repaired.Encryption, repaired.EncryptionSig = "other-encryption-key", "other-signature"
	replace("alice", repaired)
	for range 2 { // the second one finds the re-paired key set remembered
		if p := beat(); p.Owner != "alice" || p.Device != repaired {
			t.Fatalf("after re-pairing: %+v", p)
		}
	}

	if err := e.st.DropPresence(t.Context(), "runner_alice"); err != nil {
		t.Fatal(err)
	}
	if p := beat(); p.Owner != "alice" || p.Device != w.alice.id {
		t.Fatalf("after loss: %+v", p)
	}
}
