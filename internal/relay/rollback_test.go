package relay

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/byollm/relay-go/internal/protocol"
)

// olderKeySet is a key set of k's identity with another encryption key,
// validly vouched for by the identity key: what a device presented before
// it rotated its encryption key.
func olderKeySet(t *testing.T, k keys) protocol.PublicIdentity {
	t.Helper()
	enc := newKeys(t).id.Encryption
	return protocol.PublicIdentity{
		Identity:      k.id.Identity,
		Encryption:    enc,
		EncryptionSig: base64.RawURLEncoding.EncodeToString(ed25519.Sign(k.priv, protocol.EncryptionSigMessage(enc))),
	}
}

// pendingDevice is the key set pending tells site_a to seal job id to.
func (e *env) pendingDevice(t *testing.T, w *world, id string) protocol.PublicIdentity {
	t.Helper()
	got := e.siteGet(w.siteA, "site_a", "pending", "site_a")
	var out struct {
		Jobs []struct {
			JobID  string                   `json:"jobId"`
			Device *protocol.PublicIdentity `json:"device"`
		} `json:"jobs"`
	}
	if got.status != 200 || json.Unmarshal(got.body, &out) != nil {
		t.Fatalf("pending: %d %s", got.status, got.body)
	}
	for _, j := range out.Jobs {
		if j.JobID == id && j.Device != nil {
			return *j.Device
		}
	}
	t.Fatalf("pending: no claimed job %s in %s", id, got.body)
	return protocol.PublicIdentity{}
}

// An unsigned pair request presenting an older, validly signed key set of
// an approved identity does not move the key sites seal to: neither the
// fixture exchange nor a device-code start and poll. The projection holds
// the current key set (alice's, after a rotation).
func TestUnsignedPairingNeverRollsBackTheSealingKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := newWorld(t)
	w.install(e)
	old := olderKeySet(t, w.alice)
	if !protocol.VerifyPublicIdentity(old) {
		t.Fatal("the older key set must be validly self-signed")
	}
	fixture := mustJSON(t, struct {
		ProtocolVersion string                  `json:"protocolVersion"`
		Owner           string                  `json:"owner"`
		Device          protocol.PublicIdentity `json:"device"`
	}{"2", "alice", old})

	e.enqueueAndClaim(t, w, "r1", "alice", w.alice, "runner_alice")
	if got := e.pendingDevice(t, w, "r1"); got != w.alice.id {
		t.Fatalf("before: sites seal to %+v, want the projection's %+v", got, w.alice.id)
	}

	// The fixture exchange answers as the reference does...
	sitesAlice := `{"` + w.siteA.keyID() + `":` + string(mustJSON(t, w.siteA.id)) + `}`
	expect(t, e.do("POST", "/byollm/pair", nil, fixture), 200,
		`{"protocolVersion":"2","runnerId":"runner_alice","sites":`+sitesAlice+`}`)
	// ...but the next grant is still sealed to the current key.
	e.enqueueAndClaim(t, w, "r2", "alice", w.alice, "runner_alice")
	if got := e.pendingDevice(t, w, "r2"); got != w.alice.id {
		t.Fatalf("after a fixture pair with the older key set, sites seal to encryption %q, want %q", got.Encryption, w.alice.id.Encryption)
	}

	// Seal both: two unsealed grants are all a site and owner may have.
	for _, id := range []string{"r1", "r2"} {
		if got := e.sitePost(w.siteA, "site_a", "payload", payloadJSON(t, "site_a", id, envelope("payload"))); got.status != 200 {
			t.Fatalf("payload %s: %d %s", id, got.status, got.body)
		}
	}

	// The same through device-code pairing: start presents the older key
	// set, the identity is already approved, the poll approves it.
	s := e.start(t, old)
	got := e.do("POST", "/byollm/pair", nil, pollJSON(s.DeviceCode))
	if got.status != 200 || got.json(t)["status"] != "approved" {
		t.Fatalf("poll: %d %s", got.status, got.body)
	}
	p, err := e.st.Presence(t.Context(), "runner_alice")
	if err != nil || p == nil || p.Device != w.alice.id {
		t.Fatalf("after a device-code pairing with the older key set, presence holds %+v (%v), want the projection's key set", p, err)
	}
	e.enqueueAndClaim(t, w, "r3", "alice", w.alice, "runner_alice")
	if got := e.pendingDevice(t, w, "r3"); got != w.alice.id {
		t.Fatalf("after a device-code pairing with the older key set, sites seal to encryption %q, want %q", got.Encryption, w.alice.id.Encryption)
	}
}
