package grantremote

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
)

// Signer signs grant statements through an HTTP endpoint, for operators who
// keep the control-plane key in a KMS or HSM: the built-in engine decides,
// this signs, and the relay never holds the private key. Its method set is
// the engine's Signer interface.
//
// Every signature is verified against the configured public key before it
// is used: a signer answering with another key (a rotated KMS key, the wrong
// key alias) would otherwise have every grant refused at every device, with
// nothing on the relay's side saying why.
type Signer struct {
	url    string
	token  string
	public string
	pub    ed25519.PublicKey
	client *http.Client
}

// NewSigner checks u and public (the base64url Ed25519 public key devices
// pin, RELAY_CONTROL_PLANE_PUBLIC) and returns a Signer posting to u.
func NewSigner(u, public string, opt Options) (*Signer, error) {
	b, err := checkURL(u)
	if err != nil {
		return nil, err
	}
	pub, err := base64.RawURLEncoding.DecodeString(public)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("the public key %q is not a base64url Ed25519 public key (32 bytes, no padding)", public)
	}
	return &Signer{url: b, token: opt.Token, public: public, pub: pub, client: clientOf(opt)}, nil
}

// Public is the public key devices pin, as configured.
func (s *Signer) Public() string { return s.public }

type signInput struct {
	Message string `json:"message"`
}

// Sign posts {"message": base64url(msg)} and reads {"signature":
// base64url(64 bytes)}, which must verify against the public key.
func (s *Signer) Sign(ctx context.Context, msg []byte) ([]byte, error) {
	body, err := post(ctx, s.client, s.url, s.token, signInput{Message: base64.RawURLEncoding.EncodeToString(msg)})
	if err != nil {
		return nil, fmt.Errorf("grant signer: %w", err)
	}
	var out struct {
		Signature *string `json:"signature"`
	}
	if err := strictDecode(body, &out); err != nil {
		return nil, fmt.Errorf("grant signer: malformed reply: %w", err)
	}
	if out.Signature == nil {
		return nil, errors.New(`grant signer: malformed reply: no "signature"`)
	}
	sig, err := base64.RawURLEncoding.DecodeString(*out.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return nil, errors.New("grant signer: malformed reply: the signature is not 64 bytes of base64url without padding")
	}
	if !ed25519.Verify(s.pub, msg, sig) {
		return nil, errors.New("grant signer: the signature does not verify against RELAY_CONTROL_PLANE_PUBLIC; is the signer using another key?")
	}
	return sig, nil
}
