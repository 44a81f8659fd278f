// Package envelope seals and opens BYOLLM job envelopes byte-compatibly with
// @byollm/protocol@0.1.1 (shared/spec/envelope.md), and generates the key sets
// sites and daemons hold.
//
// The relay never uses this package: it carries envelopes it cannot open.
// Load generators, peers in tests and example sites do.
package envelope

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"

	"golang.org/x/crypto/curve25519"

	"github.com/byollm/relay-go/internal/protocol"
)

// PKCS#8 v1 DER prefixes for a raw 32-byte key; Node emits exactly these.
var (
	ed25519PKCS8Prefix = []byte{0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20}
	x25519PKCS8Prefix  = []byte{0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x6e, 0x04, 0x22, 0x04, 0x20}
)

// StoredKeys is the private key record a daemon writes to its key file and a
// site reads from BYOLLM_SITE_KEYS. Field order is the reference's.
type StoredKeys struct {
	Version           int    `json:"version"`
	IdentityPublic    string `json:"identityPublic"`
	IdentityPrivate   string `json:"identityPrivate"`
	EncryptionPublic  string `json:"encryptionPublic"`
	EncryptionPrivate string `json:"encryptionPrivate"`
	EncryptionSig     string `json:"encryptionSig"`
	CreatedAt         int64  `json:"createdAt"`
}

// Identity is a party's parsed key material: what a site or a daemon needs to
// sign requests, seal and open.
type Identity struct {
	Stored     StoredKeys
	signing    ed25519.PrivateKey
	encPrivate [32]byte
	encPublic  [32]byte // derived from encPrivate here, never read from Stored
	keyID      string
}

// Generate makes a fresh key set, as generateKeys(now) does.
func Generate(createdAt int64, random io.Reader) (*Identity, error) {
	if random == nil {
		random = rand.Reader
	}
	var seed, enc [32]byte
	if _, err := io.ReadFull(random, seed[:]); err != nil {
		return nil, fmt.Errorf("generate identity seed: %w", err)
	}
	if _, err := io.ReadFull(random, enc[:]); err != nil {
		return nil, fmt.Errorf("generate encryption key: %w", err)
	}
	return FromRaw(seed[:], enc[:], createdAt)
}

// FromRaw builds a key set from a 32-byte Ed25519 seed and a 32-byte X25519
// private scalar. The scalar is kept as given (not clamped), as Node does.
func FromRaw(ed25519Seed, x25519Private []byte, createdAt int64) (*Identity, error) {
	if len(ed25519Seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("ed25519 seed is %d bytes, want %d", len(ed25519Seed), ed25519.SeedSize)
	}
	if len(x25519Private) != 32 {
		return nil, fmt.Errorf("x25519 private key is %d bytes, want 32", len(x25519Private))
	}
	if createdAt <= 0 || createdAt > maxSafeInteger {
		return nil, fmt.Errorf("createdAt %d is not a positive safe integer", createdAt)
	}
	signing := ed25519.NewKeyFromSeed(ed25519Seed)
	encPublic, err := curve25519.X25519(x25519Private, curve25519.Basepoint)
	if err != nil {
		return nil, fmt.Errorf("derive x25519 public key: %w", err)
	}
	identityPublic := base64.RawURLEncoding.EncodeToString(signing.Public().(ed25519.PublicKey))
	encryptionPublic := base64.RawURLEncoding.EncodeToString(encPublic)
	id := &Identity{
		Stored: StoredKeys{
			Version:           1,
			IdentityPublic:    identityPublic,
			IdentityPrivate:   base64.StdEncoding.EncodeToString(append(bytes.Clone(ed25519PKCS8Prefix), ed25519Seed...)),
			EncryptionPublic:  encryptionPublic,
			EncryptionPrivate: base64.StdEncoding.EncodeToString(append(bytes.Clone(x25519PKCS8Prefix), x25519Private...)),
			EncryptionSig:     base64.RawURLEncoding.EncodeToString(ed25519.Sign(signing, EncryptionSigMessage(encryptionPublic))),
			CreatedAt:         createdAt,
		},
		signing: signing,
		keyID:   KeyID(identityPublic),
	}
	copy(id.encPrivate[:], x25519Private)
	copy(id.encPublic[:], encPublic)
	return id, nil
}

// ParseStoredKeys reads a StoredKeys JSON record (strict: exactly the seven
// fields) and checks that the public halves match the private ones.
func ParseStoredKeys(data []byte) (*Identity, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var sk StoredKeys
	if err := dec.Decode(&sk); err != nil {
		return nil, fmt.Errorf("parse stored keys: %w", err)
	}
	if sk.Version != 1 {
		return nil, fmt.Errorf("stored keys version %d, want 1", sk.Version)
	}
	seed, err := pkcs8Raw(sk.IdentityPrivate, ed25519PKCS8Prefix)
	if err != nil {
		return nil, fmt.Errorf("identityPrivate: %w", err)
	}
	enc, err := pkcs8Raw(sk.EncryptionPrivate, x25519PKCS8Prefix)
	if err != nil {
		return nil, fmt.Errorf("encryptionPrivate: %w", err)
	}
	id, err := FromRaw(seed, enc, sk.CreatedAt)
	if err != nil {
		return nil, err
	}
	if id.Stored.IdentityPublic != sk.IdentityPublic || id.Stored.EncryptionPublic != sk.EncryptionPublic {
		return nil, fmt.Errorf("stored public keys do not match the private keys")
	}
	// Keep the record as stored: encryptionSig is deterministic, so a valid one
	// equals ours, and an invalid one should surface where it is checked.
	id.Stored.EncryptionSig = sk.EncryptionSig
	return id, nil
}

func pkcs8Raw(b64 string, prefix []byte) ([]byte, error) {
	der, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("decode base64: %w", err)
	}
	if len(der) != len(prefix)+32 || !bytes.Equal(der[:len(prefix)], prefix) {
		return nil, fmt.Errorf("not a PKCS#8 v1 key of the expected algorithm")
	}
	return der[len(prefix):], nil
}

// Public is the identity as it travels: what a projection lists and what
// peers pin.
func (id *Identity) Public() protocol.PublicIdentity {
	return protocol.PublicIdentity{
		Identity:      id.Stored.IdentityPublic,
		Encryption:    id.Stored.EncryptionPublic,
		EncryptionSig: id.Stored.EncryptionSig,
	}
}

// KeyID is this party's fingerprint, as put in envelopes and stub.site.
func (id *Identity) KeyID() string { return id.keyID }

// SigningKey is the Ed25519 identity key, for request signatures.
func (id *Identity) SigningKey() ed25519.PrivateKey { return id.signing }

// MarshalStoredKeys renders the record as JSON.stringify(keys) does (every
// value is ASCII base64 or a number, so encoding/json's bytes are identical).
func (id *Identity) MarshalStoredKeys() ([]byte, error) {
	b, err := json.Marshal(id.Stored)
	if err != nil {
		return nil, fmt.Errorf("marshal stored keys: %w", err)
	}
	return b, nil
}

// EncryptionSigMessage is the byte string an identity key signs over its
// base64url encryption key text.
func EncryptionSigMessage(encryptionPublic string) []byte {
	return protocol.EncryptionSigMessage(encryptionPublic)
}

// VerifyPublicIdentity reports whether encryptionSig is the identity key's
// signature over the encryption key text; false on any malformed input.
func VerifyPublicIdentity(p protocol.PublicIdentity) bool {
	pub := decodeLenient(p.Identity)
	sig := decodeLenient(p.EncryptionSig)
	if len(pub) != ed25519.PublicKeySize || len(sig) != ed25519.SignatureSize {
		return false
	}
	return ed25519.Verify(pub, EncryptionSigMessage(p.Encryption), sig)
}

// KeyID is the fingerprint of a base64url identity key (envelope.md §1.5),
// e.g. BYOLLM-6HTG-Z65X-B7YF-S53D-MHDA-NFMK.
func KeyID(identityPublic string) string { return protocol.KeyID(identityPublic) }

// decodeLenient decodes base64/base64url the way Node's Buffer does.
func decodeLenient(s string) []byte { return protocol.DecodeBase64URL(s) }
