package grantengine

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/byollm/relay-go/internal/protocol"
)

// Signer holds the control-plane key. Sign returns the raw Ed25519 signature
// of msg (64 bytes); Public is the public half as devices pin it (the raw 32
// bytes, base64url without padding, like every identity key of the
// protocol). The built-in file key (KeySigner) is one implementation; a
// remote signer (KMS, HSM) is another, and the engine cannot tell them apart.
type Signer interface {
	Sign(ctx context.Context, msg []byte) ([]byte, error)
	Public() string
}

// GrantContext is the grant statement's domain separator.
const GrantContext = "byollm/v1/grant"

// Claims is everything a grant says before it is signed (GrantClaims).
type Claims struct {
	GrantID  string
	JobID    string
	Site     string // the site's key id, as the stub's site field
	User     string // whose job it is
	Owner    string // whose device it is for
	Purpose  string
	Kind     string
	Service  string
	IssuedAt int64 // ms, the relay's clock
}

// Statement is the exact bytes signed (wire.md §14.1): the UTF-8 of
// JSON.stringify(["byollm/v1/grant", grantId, issuedAt, jobId, kind, owner,
// purpose, service, site, user]), the fields in sorted name order.
func Statement(c Claims) []byte {
	b := make([]byte, 0, 256)
	b = append(b, '[')
	b = protocol.AppendJSString(b, GrantContext)
	b = append(b, ',')
	b = protocol.AppendJSString(b, c.GrantID)
	b = append(b, ',')
	b = strconv.AppendInt(b, c.IssuedAt, 10)
	for _, s := range []string{c.JobID, c.Kind, c.Owner, c.Purpose, c.Service, c.Site, c.User} {
		b = append(b, ',')
		b = protocol.AppendJSString(b, s)
	}
	return append(b, ']')
}

// signedGrant is the SignedGrant document in the reference's key order
// ({...claims, signature}).
type signedGrant struct {
	GrantID   string `json:"grantId"`
	JobID     string `json:"jobId"`
	Site      string `json:"site"`
	User      string `json:"user"`
	Owner     string `json:"owner"`
	Purpose   string `json:"purpose"`
	Kind      string `json:"kind"`
	Service   string `json:"service"`
	IssuedAt  int64  `json:"issuedAt"`
	Signature string `json:"signature"`
}

// SignGrant signs c with s and returns the SignedGrant document, ready to be
// carried verbatim in a claim reply.
func SignGrant(ctx context.Context, s Signer, c Claims) (json.RawMessage, error) {
	sig, err := s.Sign(ctx, Statement(c))
	if err != nil {
		return nil, fmt.Errorf("sign grant: %w", err)
	}
	if len(sig) != ed25519.SignatureSize {
		return nil, fmt.Errorf("sign grant: signer returned %d bytes, want an Ed25519 signature (%d)", len(sig), ed25519.SignatureSize)
	}
	doc, err := protocol.Marshal(signedGrant{
		GrantID: c.GrantID, JobID: c.JobID, Site: c.Site, User: c.User, Owner: c.Owner,
		Purpose: c.Purpose, Kind: c.Kind, Service: c.Service, IssuedAt: c.IssuedAt,
		Signature: base64.RawURLEncoding.EncodeToString(sig),
	})
	if err != nil {
		return nil, fmt.Errorf("sign grant: %w", err)
	}
	return doc, nil
}

// KeySigner signs with an Ed25519 key this process holds
// (RELAY_GRANT_KEY_FILE).
type KeySigner struct {
	priv   ed25519.PrivateKey
	public string
}

// NewKeySigner wraps a private key.
func NewKeySigner(priv ed25519.PrivateKey) *KeySigner {
	pub := priv.Public().(ed25519.PublicKey)
	return &KeySigner{priv: priv, public: base64.RawURLEncoding.EncodeToString(pub)}
}

// Sign implements Signer.
func (k *KeySigner) Sign(_ context.Context, msg []byte) ([]byte, error) {
	return ed25519.Sign(k.priv, msg), nil
}

// Public implements Signer.
func (k *KeySigner) Public() string { return k.public }

// LoadKeyFile reads RELAY_GRANT_KEY_FILE (format: ParseKey).
func LoadKeyFile(path string) (*KeySigner, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("grant key file: %w", err)
	}
	k, err := ParseKey(data)
	if err != nil {
		return nil, fmt.Errorf("grant key file %s: %w", path, err)
	}
	return k, nil
}

// ParseKey reads a grant key in either of two forms:
//
//   - a JSON object with identityPrivate (base64 PKCS#8 DER of an Ed25519
//     key) and identityPublic (base64url raw public key): the StoredKeys of
//     @byollm/protocol, i.e. what generateKeys() writes and what
//     keypairSigner of @byollm/control-plane takes, so one key file serves
//     both. Other StoredKeys fields are allowed and ignored; identityPublic
//     must be the private key's public half.
//   - the 32-byte Ed25519 seed alone, base64url or base64 (padding
//     optional), surrounding whitespace ignored; e.g.
//     `head -c 32 /dev/urandom | base64 > grant.key`.
func ParseKey(data []byte) (*KeySigner, error) {
	text := bytes.TrimSpace(data)
	if len(text) == 0 {
		return nil, errors.New("empty; want a base64url Ed25519 seed or a StoredKeys JSON object")
	}
	if text[0] == '{' {
		var doc struct {
			IdentityPublic  *string `json:"identityPublic"`
			IdentityPrivate *string `json:"identityPrivate"`
		}
		if err := json.Unmarshal(text, &doc); err != nil {
			return nil, fmt.Errorf("not valid JSON: %v", err)
		}
		if doc.IdentityPrivate == nil || *doc.IdentityPrivate == "" {
			return nil, errors.New("identityPrivate: expected the base64 PKCS#8 DER of an Ed25519 key")
		}
		if doc.IdentityPublic == nil || *doc.IdentityPublic == "" {
			return nil, errors.New("identityPublic: expected the base64url public key")
		}
		der, err := decodeB64(*doc.IdentityPrivate)
		if err != nil {
			return nil, fmt.Errorf("identityPrivate: %v", err)
		}
		parsed, err := x509.ParsePKCS8PrivateKey(der)
		if err != nil {
			return nil, fmt.Errorf("identityPrivate: not PKCS#8: %v", err)
		}
		priv, ok := parsed.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("identityPrivate: a %T, want Ed25519", parsed)
		}
		k := NewKeySigner(priv)
		if pub, err := decodeB64(*doc.IdentityPublic); err != nil || !bytes.Equal(pub, priv.Public().(ed25519.PublicKey)) {
			return nil, errors.New("identityPublic: is not the public half of identityPrivate")
		}
		return k, nil
	}
	seed, err := decodeB64(string(text))
	if err != nil {
		return nil, fmt.Errorf("seed: %v", err)
	}
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("seed: %d bytes, want %d (an Ed25519 seed)", len(seed), ed25519.SeedSize)
	}
	return NewKeySigner(ed25519.NewKeyFromSeed(seed)), nil
}

// SeedText is the seed form of a key file for priv (base64url, newline).
func SeedText(priv ed25519.PrivateKey) []byte {
	return []byte(base64.RawURLEncoding.EncodeToString(priv.Seed()) + "\n")
}

// decodeB64 accepts base64url or standard base64, padded or not.
func decodeB64(s string) ([]byte, error) {
	s = strings.TrimRight(strings.TrimSpace(s), "=")
	s = strings.NewReplacer("+", "-", "/", "_").Replace(s)
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, errors.New("not base64")
	}
	return b, nil
}
