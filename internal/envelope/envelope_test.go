package envelope

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/nacl/box"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/test/reference"
)

// vectors mirrors testdata/envelope-vectors.json (a copy of
// shared/spec/envelope-vectors.json, recorded from @byollm/protocol 0.1.1).
type vectors struct {
	Keys struct {
		Device StoredKeys `json:"device"`
		Site   StoredKeys `json:"site"`
	} `json:"keys"`
	KeyIDs struct {
		Device string `json:"device"`
		Site   string `json:"site"`
	} `json:"keyIds"`
	JobID   string `json:"jobId"`
	Payload struct {
		Context             vectorContext           `json:"context"`
		Plaintext           string                  `json:"plaintext"`
		SignedBodyUTF8      string                  `json:"signedBodyUtf8"`
		SignedBodyHex       string                  `json:"signedBodyHex"`
		SignedBodyBase64url string                  `json:"signedBodyBase64url"`
		Signature           string                  `json:"signature"`
		InnerJSON           string                  `json:"innerJson"`
		Envelope            protocol.SealedEnvelope `json:"envelope"`
		EnvelopeBytes       int                     `json:"envelopeBytes"`
		CiphertextBytes     int                     `json:"ciphertextBytes"`
		SizeClass           string                  `json:"sizeClass"`
		PayloadTextLength   int                     `json:"payloadTextLength"`
	} `json:"payload"`
	Result struct {
		Context       vectorContext           `json:"context"`
		Plaintext     string                  `json:"plaintext"`
		SignedBodyHex string                  `json:"signedBodyHex"`
		Envelope      protocol.SealedEnvelope `json:"envelope"`
		EnvelopeBytes int                     `json:"envelopeBytes"`
	} `json:"result"`
}

type vectorContext struct {
	JobID          string `json:"jobId"`
	SenderKeyID    string `json:"senderKeyId"`
	RecipientKeyID string `json:"recipientKeyId"`
	DeadlineAt     int64  `json:"deadlineAt"`
	Direction      string `json:"direction"`
}

func (c vectorContext) seal() Context {
	return Context{JobID: c.JobID, SenderKeyID: c.SenderKeyID, RecipientKeyID: c.RecipientKeyID, DeadlineAt: c.DeadlineAt, Direction: c.Direction}
}

func (c vectorContext) expected() Expected {
	return Expected{JobID: c.JobID, SenderKeyID: c.SenderKeyID, RecipientKeyID: c.RecipientKeyID, Direction: c.Direction}
}

func loadVectors(t *testing.T) (vectors, *Identity, *Identity) {
	t.Helper()
	raw, err := os.ReadFile("testdata/envelope-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v vectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	device, err := FromRaw(bytes.Repeat([]byte{0x01}, 32), bytes.Repeat([]byte{0x11}, 32), 1767225600000)
	if err != nil {
		t.Fatal(err)
	}
	site, err := FromRaw(bytes.Repeat([]byte{0x02}, 32), bytes.Repeat([]byte{0x12}, 32), 1767225600000)
	if err != nil {
		t.Fatal(err)
	}
	return v, device, site
}

func TestKeysMatchVectors(t *testing.T) {
	t.Parallel()
	v, device, site := loadVectors(t)
	for _, tc := range []struct {
		name  string
		got   *Identity
		want  StoredKeys
		keyID string
	}{
		{"device", device, v.Keys.Device, v.KeyIDs.Device},
		{"site", site, v.Keys.Site, v.KeyIDs.Site},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got.Stored != tc.want {
				t.Fatalf("derived keys\n got %+v\nwant %+v", tc.got.Stored, tc.want)
			}
			if tc.got.KeyID() != tc.keyID || KeyID(tc.want.IdentityPublic) != tc.keyID {
				t.Fatalf("keyId %s, want %s", tc.got.KeyID(), tc.keyID)
			}
			if !VerifyPublicIdentity(tc.got.Public()) {
				t.Fatal("own public identity does not verify")
			}
			// Round trip through the stored JSON form, field order included.
			b, err := tc.got.MarshalStoredKeys()
			if err != nil {
				t.Fatal(err)
			}
			wantJSON, _ := json.Marshal(tc.want)
			if !bytes.Equal(b, wantJSON) {
				t.Fatalf("stored keys JSON %s, want %s", b, wantJSON)
			}
			parsed, err := ParseStoredKeys(b)
			if err != nil {
				t.Fatal(err)
			}
			if parsed.Stored != tc.want || parsed.KeyID() != tc.keyID {
				t.Fatal("parsed stored keys differ")
			}
		})
	}
}

func TestParseStoredKeysRefuses(t *testing.T) {
	t.Parallel()
	v, _, _ := loadVectors(t)
	good, _ := json.Marshal(v.Keys.Device)
	for _, tc := range []struct {
		name string
		edit func(m map[string]any)
	}{
		{"extra field", func(m map[string]any) { m["extra"] = 1 }},
		{"version 2", func(m map[string]any) { m["version"] = 2 }},
		{"public key of another party", func(m map[string]any) { m["identityPublic"] = v.Keys.Site.IdentityPublic }},
		{"x25519 key in ed25519 slot", func(m map[string]any) { m["identityPrivate"] = v.Keys.Device.EncryptionPrivate }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m map[string]any
			_ = json.Unmarshal(good, &m)
			tc.edit(m)
			b, _ := json.Marshal(m)
			if _, err := ParseStoredKeys(b); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestVerifyPublicIdentityRefuses(t *testing.T) {
	t.Parallel()
	_, device, site := loadVectors(t)
	for _, tc := range []struct {
		name string
		p    protocol.PublicIdentity
	}{
		{"swapped encryption key", protocol.PublicIdentity{Identity: device.Stored.IdentityPublic, Encryption: site.Stored.EncryptionPublic, EncryptionSig: device.Stored.EncryptionSig}},
		{"other party's signature", protocol.PublicIdentity{Identity: device.Stored.IdentityPublic, Encryption: device.Stored.EncryptionPublic, EncryptionSig: site.Stored.EncryptionSig}},
		{"short identity", protocol.PublicIdentity{Identity: "AAAA", Encryption: device.Stored.EncryptionPublic, EncryptionSig: device.Stored.EncryptionSig}},
		{"garbage signature", protocol.PublicIdentity{Identity: device.Stored.IdentityPublic, Encryption: device.Stored.EncryptionPublic, EncryptionSig: "!!"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if VerifyPublicIdentity(tc.p) {
				t.Fatal("verified")
			}
		})
	}
}

func TestSignedBodyMatchesVectors(t *testing.T) {
	t.Parallel()
	v, _, site := loadVectors(t)
	for _, tc := range []struct {
		name      string
		plaintext string
		ctx       vectorContext
		wantHex   string
	}{
		{"payload", v.Payload.Plaintext, v.Payload.Context, v.Payload.SignedBodyHex},
		{"result", v.Result.Plaintext, v.Result.Context, v.Result.SignedBodyHex},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := SignedBody(tc.plaintext, tc.ctx.seal())
			if hex.EncodeToString(got) != tc.wantHex {
				t.Fatalf("signed body\n got %x\nwant %s", got, tc.wantHex)
			}
		})
	}
	if string(SignedBody(v.Payload.Plaintext, v.Payload.Context.seal())) != v.Payload.SignedBodyUTF8 {
		t.Fatal("payload signed body differs from signedBodyUtf8")
	}
	body := SignedBody(v.Payload.Plaintext, v.Payload.Context.seal())
	if base64.RawURLEncoding.EncodeToString(body) != v.Payload.SignedBodyBase64url {
		t.Fatal("payload signed body base64url differs")
	}
	inner := InnerJSON(site, v.Payload.Plaintext, v.Payload.Context.seal())
	if string(inner) != v.Payload.InnerJSON {
		t.Fatalf("inner JSON\n got %s\nwant %s", inner, v.Payload.InnerJSON)
	}
	if !strings.Contains(string(inner), `"signature":"`+v.Payload.Signature+`"`) {
		t.Fatal("signature differs")
	}
	if JSLength(v.Payload.Plaintext) != 88 || len(v.Payload.Plaintext) != 97 {
		t.Fatalf("plaintext lengths %d/%d", JSLength(v.Payload.Plaintext), len(v.Payload.Plaintext))
	}
}

func TestOpenRecordedEnvelopes(t *testing.T) {
	t.Parallel()
	v, device, site := loadVectors(t)
	for _, tc := range []struct {
		name      string
		env       protocol.SealedEnvelope
		recipient *Identity
		sender    *Identity
		ctx       vectorContext
		plaintext string
		bytes     int
	}{
		{"payload as device", v.Payload.Envelope, device, site, v.Payload.Context, v.Payload.Plaintext, v.Payload.EnvelopeBytes},
		{"result as site", v.Result.Envelope, site, device, v.Result.Context, v.Result.Plaintext, v.Result.EnvelopeBytes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Open(tc.env, tc.recipient, tc.sender.Stored.IdentityPublic, tc.ctx.expected())
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.plaintext {
				t.Fatalf("plaintext %q, want %q", got, tc.plaintext)
			}
			if Bytes(tc.env) != tc.bytes {
				t.Fatalf("envelope bytes %d, want %d", Bytes(tc.env), tc.bytes)
			}
		})
	}
	ct, _ := base64.RawURLEncoding.DecodeString(v.Payload.Envelope.Ciphertext)
	if len(ct) != v.Payload.CiphertextBytes {
		t.Fatalf("ciphertext %d bytes, want %d", len(ct), v.Payload.CiphertextBytes)
	}
	if SizeClassOf(v.Payload.PayloadTextLength) != v.Payload.SizeClass {
		t.Fatal("size class")
	}
}

func TestOpenRefusals(t *testing.T) {
	t.Parallel()
	v, device, site := loadVectors(t)
	env := v.Payload.Envelope
	exp := v.Payload.Context.expected()
	sealedInner := func(inner string) protocol.SealedEnvelope {
		t.Helper()
		// Seal arbitrary inner text to the device, keeping the addressing.
		e, err := sealRaw([]byte(inner), device.Stored.EncryptionPublic, env)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	signedInner := func(body string) string {
		sig := base64.RawURLEncoding.EncodeToString(signWith(site, []byte(body)))
		return `{"body":"` + base64.RawURLEncoding.EncodeToString([]byte(body)) + `","signature":"` + sig + `"}`
	}
	for _, tc := range []struct {
		name      string
		env       protocol.SealedEnvelope
		recipient *Identity
		sender    string
		edit      func(e *Expected)
		reason    string
	}{
		// The five failure cases recorded from the reference (envelope.md §7.2).
		{"expected jobId changed", env, device, site.Stored.IdentityPublic, func(e *Expected) { e.JobID = "other" }, ReasonContextMismatch},
		{"expected direction result", env, device, site.Stored.IdentityPublic, func(e *Expected) { e.Direction = DirectionResult }, ReasonNotForUs},
		{"outer deadlineAt+1", withDeadline(env, env.DeadlineAt+1), device, site.Stored.IdentityPublic, nil, ReasonContextMismatch},
		{"opened with the site's keys", env, site, site.Stored.IdentityPublic, nil, ReasonUnopenable},
		{"pinned sender is the device", env, device, device.Stored.IdentityPublic, nil, ReasonBadSignature},
		// Further rows of the §3 table.
		{"outer recipient edited", withRecipient(env, "BYOLLM-X"), device, site.Stored.IdentityPublic, nil, ReasonNotForUs},
		{"truncated ciphertext", withCiphertext(env, env.Ciphertext[:40]), device, site.Stored.IdentityPublic, nil, ReasonUnopenable},
		{"inner null", sealedInner("null"), device, site.Stored.IdentityPublic, nil, ReasonMalformed},
		{"inner body not a string", sealedInner(`{"body":1,"signature":"x"}`), device, site.Stored.IdentityPublic, nil, ReasonMalformed},
		{"inner body padded", sealedInner(`{"body":"AAAA==","signature":"x"}`), device, site.Stored.IdentityPublic, nil, ReasonMalformed},
		{"signed body not JSON", sealedInner(signedInner("nope")), device, site.Stored.IdentityPublic, nil, ReasonMalformed},
		{"signed body null", sealedInner(signedInner("null")), device, site.Stored.IdentityPublic, nil, ReasonContextMismatch},
		{"deadline as string", sealedInner(signedInner(`{"jobId":"` + exp.JobID + `","senderKeyId":"` + exp.SenderKeyID + `","recipientKeyId":"` + exp.RecipientKeyID + `","direction":"payload","deadlineAt":"1767312000000","plaintext":"x"}`)), device, site.Stored.IdentityPublic, nil, ReasonContextMismatch},
		{"plaintext not a string", sealedInner(signedInner(`{"jobId":"` + exp.JobID + `","senderKeyId":"` + exp.SenderKeyID + `","recipientKeyId":"` + exp.RecipientKeyID + `","direction":"payload","deadlineAt":1.767312e12,"plaintext":1}`)), device, site.Stored.IdentityPublic, nil, ReasonMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := exp
			if tc.edit != nil {
				tc.edit(&e)
			}
			_, err := Open(tc.env, tc.recipient, tc.sender, e)
			if !IsReason(err, tc.reason) {
				t.Fatalf("got %v, want %s", err, tc.reason)
			}
		})
	}
	// Exponent form of the deadline and extra claims are accepted (§3 facts).
	ok := sealedInner(signedInner(`{"extra":1,"jobId":"` + exp.JobID + `","senderKeyId":"` + exp.SenderKeyID + `","recipientKeyId":"` + exp.RecipientKeyID + `","direction":"payload","deadlineAt":1.767312e12,"plaintext":"fine"}`))
	if got, err := Open(ok, device, site.Stored.IdentityPublic, exp); err != nil || got != "fine" {
		t.Fatalf("exponent deadline: %q %v", got, err)
	}
}

func TestSealRoundTrip(t *testing.T) {
	t.Parallel()
	v, device, site := loadVectors(t)
	for _, tc := range []struct {
		name      string
		sender    *Identity
		recipient *Identity
		ctx       vectorContext
		plaintext string
	}{
		{"payload site to device", site, device, v.Payload.Context, v.Payload.Plaintext},
		{"result device to site", device, site, v.Result.Context, v.Result.Plaintext},
		{"at rest site to site", site, site, vectorContext{JobID: "j", SenderKeyID: site.KeyID(), RecipientKeyID: site.KeyID(), DeadlineAt: 1767312000000, Direction: DirectionPayload}, `{"prompt":"x"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, err := Seal(tc.plaintext, tc.sender, tc.recipient.Stored.EncryptionPublic, tc.ctx.seal(), nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Open(env, tc.recipient, tc.sender.Stored.IdentityPublic, tc.ctx.expected())
			if err != nil || got != tc.plaintext {
				t.Fatalf("open: %q %v", got, err)
			}
		})
	}
	// Same size as the recorded envelopes: the construction is the same.
	env, _ := Seal(v.Payload.Plaintext, site, device.Stored.EncryptionPublic, v.Payload.Context.seal(), nil)
	if Bytes(env) != v.Payload.EnvelopeBytes {
		t.Fatalf("go-sealed payload is %d bytes, reference %d", Bytes(env), v.Payload.EnvelopeBytes)
	}
}

func TestBytesAndQuoting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  protocol.SealedEnvelope
		want int
	}{
		// wire.md Appendix A.
		{protocol.SealedEnvelope{Ciphertext: "AAAA", RecipientKeyID: "r", SenderKeyID: "s", Direction: "payload", DeadlineAt: 1800003600000}, 109},
		{protocol.SealedEnvelope{Ciphertext: "é😀\"\n\u0001", RecipientKeyID: "r", SenderKeyID: "s", Direction: "payload", DeadlineAt: 1}, 106},
	} {
		if got := Bytes(tc.env); got != tc.want {
			t.Errorf("Bytes(%q) = %d, want %d", tc.env.Ciphertext, got, tc.want)
		}
	}
	for in, want := range map[string]string{
		"<>&\u2028\u2029/\u007f": "\"<>&\u2028\u2029/\u007f\"",
		"\b\t\n\f\r\x01\x1f":     `"\b\t\n\f\r\u0001\u001f"`,
		`"\`:                     `"\"\\"`,
	} {
		if got := JSString(in); got != want {
			t.Errorf("JSString(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestNodeInterop seals in Go and opens with the real @byollm/protocol, and
// the other way round.
func TestNodeInterop(t *testing.T) {
	t.Parallel()
	_, device, site := loadVectors(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	plaintext := `{"prompt":"héllo <&> \u2028 😀 \"q\""}`
	c := Context{JobID: "interop-1", SenderKeyID: site.KeyID(), RecipientKeyID: device.KeyID(), DeadlineAt: 1767312000000, Direction: DirectionPayload}
	env, err := Seal(plaintext, site, device.Stored.EncryptionPublic, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	deviceKeys, _ := device.MarshalStoredKeys()
	siteKeys, _ := site.MarshalStoredKeys()
	in, _ := json.Marshal(map[string]any{"envelope": env, "device": json.RawMessage(deviceKeys), "site": json.RawMessage(siteKeys), "plaintext": plaintext, "ctx": map[string]any{
		"jobId": c.JobID, "senderKeyId": c.SenderKeyID, "recipientKeyId": c.RecipientKeyID, "deadlineAt": c.DeadlineAt, "direction": c.Direction,
	}})
	const script = `
import { open, seal, envelopeBytes, keyId } from "@byollm/protocol";
let raw = ""; for await (const c of process.stdin) raw += c;
const x = JSON.parse(raw);
const opened = await open({ envelope: x.envelope, recipientKeys: x.device, senderIdentityPublic: x.site.identityPublic,
  expected: { jobId: x.ctx.jobId, senderKeyId: x.ctx.senderKeyId, recipientKeyId: x.ctx.recipientKeyId, direction: "payload" } });
const back = await seal({ plaintext: x.plaintext, senderKeys: x.device, recipientEncryptionPublic: x.site.encryptionPublic,
  context: { jobId: x.ctx.jobId, senderKeyId: keyId(x.device.identityPublic), recipientKeyId: keyId(x.site.identityPublic), deadlineAt: x.ctx.deadlineAt, direction: "result" } });
process.stdout.write(JSON.stringify({ opened, bytes: envelopeBytes(x.envelope), back }));`
	out, err := reference.RunNode(ctx, script, in)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Opened struct {
			OK        bool   `json:"ok"`
			Plaintext string `json:"plaintext"`
			Reason    string `json:"reason"`
		} `json:"opened"`
		Bytes int                     `json:"bytes"`
		Back  protocol.SealedEnvelope `json:"back"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !res.Opened.OK || res.Opened.Plaintext != plaintext {
		t.Fatalf("node could not open the go envelope: %+v", res.Opened)
	}
	if res.Bytes != Bytes(env) {
		t.Fatalf("node envelopeBytes %d, go %d", res.Bytes, Bytes(env))
	}
	got, err := Open(res.Back, site, device.Stored.IdentityPublic, Expected{JobID: c.JobID, SenderKeyID: device.KeyID(), RecipientKeyID: site.KeyID(), Direction: DirectionResult})
	if err != nil || got != plaintext {
		t.Fatalf("go could not open the node envelope: %q %v", got, err)
	}
}

func withDeadline(e protocol.SealedEnvelope, d int64) protocol.SealedEnvelope {
	e.DeadlineAt = d
	return e
}

func withRecipient(e protocol.SealedEnvelope, r string) protocol.SealedEnvelope {
	e.RecipientKeyID = r
	return e
}

func withCiphertext(e protocol.SealedEnvelope, c string) protocol.SealedEnvelope {
	e.Ciphertext = c
	return e
}

// sealRaw seals arbitrary inner text under env's addressing, to build
// envelopes seal() itself would never produce.
func sealRaw(inner []byte, recipientEncryptionPublic string, env protocol.SealedEnvelope) (protocol.SealedEnvelope, error) {
	var pk [32]byte
	copy(pk[:], decodeLenient(recipientEncryptionPublic))
	ct, err := box.SealAnonymous(nil, inner, &pk, rand.Reader)
	if err != nil {
		return env, err
	}
	env.Ciphertext = base64.RawURLEncoding.EncodeToString(ct)
	return env, nil
}

func signWith(id *Identity, body []byte) []byte { return ed25519.Sign(id.signing, body) }
