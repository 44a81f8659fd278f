package relay

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/byollm/relay-go/internal/projection"
	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/test/relaytest"
)

type pairStart struct {
	ProtocolVersion string                  `json:"protocolVersion"`
	Action          string                  `json:"action"`
	Daemon          protocol.DaemonInfo     `json:"daemon"`
	Device          protocol.PublicIdentity `json:"device"`
	Capabilities    []protocol.Capability   `json:"capabilities"`
}

func startJSON(t *testing.T, id protocol.PublicIdentity) []byte {
	return mustJSON(t, pairStart{"2", "start", protocol.DaemonInfo{Version: "0.1.1", Label: "laptop", Platform: "linux"}, id,
		[]protocol.Capability{chatCapability}})
}

func pollJSON(code string) []byte {
	return []byte(`{"protocolVersion":"2","action":"poll","deviceCode":"` + code + `"}`)
}

type startResponse struct {
	DeviceCode, UserCode, VerificationURL string
	ExpiresAt, PollIntervalMs             int64
}

func (e *env) start(t *testing.T, id protocol.PublicIdentity) startResponse {
	t.Helper()
	got := e.do("POST", "/byollm/pair", nil, startJSON(t, id))
	var s startResponse
	if got.status != 200 || json.Unmarshal(got.body, &s) != nil {
		t.Fatalf("start: %d %s", got.status, got.body)
	}
	want := `{"deviceCode":"` + s.DeviceCode + `","userCode":"` + s.UserCode + `","verificationUrl":"https://example.test/device","expiresAt":` +
		itoa(s.ExpiresAt) + `,"pollIntervalMs":2000}`
	expect(t, got, 200, want)
	if len(s.DeviceCode) != 43 || len(s.UserCode) != 9 || s.UserCode[4] != '-' ||
		strings.Trim(strings.Replace(s.UserCode, "-", "", 1), userCodeAlphabet) != "" {
		t.Fatalf("codes %q %q", s.DeviceCode, s.UserCode)
	}
	if now := e.now(); s.ExpiresAt < now+590_000 || s.ExpiresAt > now+600_000 {
		t.Fatalf("expiresAt %d vs now %d", s.ExpiresAt, now)
	}
	return s
}

// TestPairingAcrossReplicas: a code minted through one relay is polled
// through another sharing the store, and is approved by a projection change
// made on the polling replica only.
func TestPairingAcrossReplicas(t *testing.T) {
	t.Parallel()
	a := newEnv(t)
	b := newEnvOn(t, a.st)
	w := newWorld(t)
	dave := newKeys(t)
	w.install(a)
	w.install(b)

	s := a.start(t, dave.id)
	expect(t, b.do("POST", "/byollm/pair", nil, pollJSON(s.DeviceCode)), 200, `{"status":"pending"}`)
	expect(t, a.do("POST", "/byollm/pair", nil, pollJSON(s.DeviceCode)), 200, `{"status":"pending"}`)

	// The control plane approves: only replica B has heard so far.
	w.fx.Devices = append(w.fx.Devices, projection.DeviceRecord{Owner: "bob", RunnerID: "runner_dave", Device: dave.id})
	w.install(b)
	expect(t, a.do("POST", "/byollm/pair", nil, pollJSON(s.DeviceCode)), 200, `{"status":"pending"}`)
	sites := `{"` + w.siteA.keyID() + `":` + string(mustJSON(t, w.siteA.id)) + `,"` + w.siteB.keyID() + `":` + string(mustJSON(t, w.siteB.id)) + `}`
	expect(t, b.do("POST", "/byollm/pair", nil, pollJSON(s.DeviceCode)), 200,
		`{"status":"approved","runnerId":"runner_dave","owner":"bob","sites":`+sites+`}`)
	// Single use, on every replica.
	expect(t, b.do("POST", "/byollm/pair", nil, pollJSON(s.DeviceCode)), 200, `{"status":"expired"}`)
	w.install(a)
	expect(t, a.do("POST", "/byollm/pair", nil, pollJSON(s.DeviceCode)), 200, `{"status":"expired"}`)

	// Presence holds the presented keys and the matrix from start, so the
	// new device authenticates through the other replica at once.
	p, err := a.st.Presence(t.Context(), "runner_dave")
	if err != nil || p == nil || p.Device != dave.id || string(p.Capabilities) != string(mustJSON(t, []protocol.Capability{chatCapability})) {
		t.Fatalf("presence after approval: %+v %v", p, err)
	}
	if got := a.daemonPost(dave, "runner_dave", "heartbeat", heartbeatJSON(t, "runner_dave", "0.1.1")); got.status != 200 {
		t.Fatalf("heartbeat after pairing: %d %s", got.status, got.body)
	}
	t.Run("unknown code is expired", func(t *testing.T) {
		expect(t, a.do("POST", "/byollm/pair", nil, pollJSON(strings.Repeat("x", 43))), 200, `{"status":"expired"}`)
	})
	// Codes the store cannot hold were never minted either: unknown, so
	// expired, as the reference answers any code it does not know.
	for name, code := range map[string]string{
		"a code over the store's id limit": strings.Repeat("x", 4097),
		"a code holding NUL":               strings.Repeat("x", 30) + `\u0000`,
		"a code holding a lone surrogate":  strings.Repeat("x", 30) + `\ud800`,
	} {
		t.Run(name+" is expired", func(t *testing.T) {
			expect(t, a.do("POST", "/byollm/pair", nil, pollJSON(code)), 200, `{"status":"expired"}`)
		})
	}
	t.Run("a code past its ttl is expired", func(t *testing.T) {
		eve := newKeys(t)
		s := a.start(t, eve.id)
		a.st.Testing().SetClockOffset(600_001)
		defer a.st.Testing().SetClockOffset(0)
		expect(t, b.do("POST", "/byollm/pair", nil, pollJSON(s.DeviceCode)), 200, `{"status":"expired"}`)
	})
}

// TestPairRefusals covers rows 11-17 and the fixture exchange.
func TestPairRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := newWorld(t)
	w.install(e)
	carol := newKeys(t)
	broken := w.alice.id
	broken.Encryption = newKeys(t).id.Encryption // encryptionSig no longer vouches for it
	fixture := func(owner string, id protocol.PublicIdentity) []byte {
		return mustJSON(t, struct {
			ProtocolVersion string                  `json:"protocolVersion"`
			Owner           string                  `json:"owner"`
			Device          protocol.PublicIdentity `json:"device"`
		}{"2", owner, id})
	}
	sitesAlice := `{"` + w.siteA.keyID() + `":` + string(mustJSON(t, w.siteA.id)) + `}`
	longLabel := strings.Replace(string(startJSON(t, carol.id)), `"label":"laptop"`, `"label":"`+strings.Repeat("é", 121)+`"`, 1)
	cases := []struct {
		name   string
		body   string
		status int
		want   string
	}{
		{"empty body", ``, 400, noVersionBody},
		{"no shape", `{"protocolVersion":"2"}`, 400, `{"error":"bad-request","message":"pair request failed schema validation"}`},
		{"unknown action", `{"protocolVersion":"2","action":"stop","deviceCode":"` + strings.Repeat("x", 43) + `"}`, 400, `{"error":"bad-request","message":"pair request failed schema validation"}`},
		{"short device code", `{"protocolVersion":"2","action":"poll","deviceCode":"short"}`, 400, `{"error":"bad-request","message":"pair request failed schema validation"}`},
		{"label over 120 code points", longLabel, 400, `{"error":"bad-request","message":"pair request failed schema validation"}`},
		{"start with an inconsistent identity", string(startJSON(t, broken)), 400, `{"error":"bad-request","message":"the device identity is not consistent"}`},
		{"fixture with an inconsistent identity", string(fixture("alice", broken)), 400, `{"error":"bad-request","message":"the device identity is not consistent"}`},
		{"fixture: no consent", string(fixture("carol", carol.id)), 403, `{"error":"forbidden","message":"no consent record for this user"}`},
		{"fixture: not approved", string(fixture("alice", carol.id)), 403, `{"error":"forbidden","message":"this device has not been approved by its owner"}`},
		{"fixture: another owner's device", string(fixture("alice", w.bob.id)), 403, `{"error":"forbidden","message":"this device belongs to another owner"}`},
		{"fixture: approved", string(fixture("alice", w.alice.id)), 200, `{"protocolVersion":"2","runnerId":"runner_alice","sites":` + sitesAlice + `}`},
		{"signature headers are ignored", string(fixture("alice", w.alice.id)), 200, `{"protocolVersion":"2","runnerId":"runner_alice","sites":` + sitesAlice + `}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := signed(protocol.HeaderRunner, w.bob, "runner_bob", "pair", 1, []byte("x"))
			if tc.name != "signature headers are ignored" {
				h = nil
			}
			expect(t, e.do("POST", "/byollm/pair", h, []byte(tc.body)), tc.status, tc.want)
		})
	}

	t.Run("device-code pairing needs a verification URL", func(t *testing.T) {
		off := newEnvOn(t, e.st, func(c *Config) { c.VerificationURL = "" })
		w.install(off)
		expect(t, off.do("POST", "/byollm/pair", nil, startJSON(t, carol.id)), 501,
			`{"error":"bad-request","message":"this relay does not offer device-code pairing"}`)
		expect(t, off.do("POST", "/byollm/pair", nil, pollJSON(strings.Repeat("y", 43))), 200, `{"status":"expired"}`)
	})
}

// TestPairingCapacity: row 17 when the shared code store is full; a keypair
// restarting its own pairing replaces its code instead of taking a slot.
func TestPairingCapacity(t *testing.T) {
	t.Parallel()
	c := relaytest.Client(t)
	st := newStore(t, c, store.Options{PairingCapacity: 1})
	e := newEnvOn(t, st)
	newWorld(t).install(e)
	first := newKeys(t)
	s1 := e.start(t, first.id)
	expect(t, e.do("POST", "/byollm/pair", nil, startJSON(t, newKeys(t).id)), 429,
		`{"error":"rate-limited","message":"too many pairings are in progress right now — try again in a few minutes"}`)
	s2 := e.start(t, first.id) // same keypair: replaces its own code
	if s2.DeviceCode == s1.DeviceCode {
		t.Fatal("restart reused the device code")
	}
	expect(t, e.do("POST", "/byollm/pair", nil, pollJSON(s1.DeviceCode)), 200, `{"status":"expired"}`)
	expect(t, e.do("POST", "/byollm/pair", nil, pollJSON(s2.DeviceCode)), 200, `{"status":"pending"}`)
}
