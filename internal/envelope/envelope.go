package envelope

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"

	"golang.org/x/crypto/nacl/box"

	"github.com/byollm/relay-go/internal/protocol"
)

// Directions an envelope travels in.
const (
	DirectionPayload = "payload"
	DirectionResult  = "result"
)

// Limits of protocol 0.1.1 (envelope.md §2.1, §5).
const (
	MaxAgeMs         = 86_400_000
	MaxEnvelopeBytes = 6_291_456
	maxSafeInteger   = 1<<53 - 1
	signedBodyPrefix = `{"v":"byollm/v1/envelope","jobId":`
)

// Context is what seal() binds into the signature.
type Context struct {
	JobID          string
	SenderKeyID    string
	RecipientKeyID string
	DeadlineAt     int64
	Direction      string
}

// Expected is what open() insists the envelope and its signed claims say.
type Expected struct {
	JobID          string
	SenderKeyID    string
	RecipientKeyID string
	Direction      string
}

// Reasons open() refuses an envelope, in the reference's vocabulary.
const (
	ReasonNotForUs        = "not-for-us"
	ReasonUnopenable      = "unopenable"
	ReasonMalformed       = "malformed"
	ReasonBadSignature    = "bad-signature"
	ReasonContextMismatch = "context-mismatch"
)

// OpenError is an envelope open() refused; Reason is one of the Reason*
// constants.
type OpenError struct{ Reason string }

func (e *OpenError) Error() string { return "envelope refused: " + e.Reason }

// IsReason reports whether err is an OpenError with that reason.
func IsReason(err error, reason string) bool {
	var oe *OpenError
	return errors.As(err, &oe) && oe.Reason == reason
}

// SignedBody is the exact byte string seal() signs (envelope.md §2 step 1).
func SignedBody(plaintext string, c Context) []byte {
	b := make([]byte, 0, 160+len(plaintext)*11/10)
	b = append(b, signedBodyPrefix...)
	b = appendJSString(b, c.JobID)
	b = append(b, `,"senderKeyId":`...)
	b = appendJSString(b, c.SenderKeyID)
	b = append(b, `,"recipientKeyId":`...)
	b = appendJSString(b, c.RecipientKeyID)
	b = append(b, `,"deadlineAt":`...)
	b = strconv.AppendInt(b, c.DeadlineAt, 10)
	b = append(b, `,"direction":`...)
	b = appendJSString(b, c.Direction)
	b = append(b, `,"plaintext":`...)
	b = appendJSString(b, plaintext)
	b = append(b, '}')
	return b
}

// InnerJSON is the text sealed into the box: the base64url body and its
// signature by the sender's identity key.
func InnerJSON(sender *Identity, plaintext string, c Context) []byte {
	body := SignedBody(plaintext, c)
	sig := ed25519.Sign(sender.signing, body)
	inner := make([]byte, 0, 112+base64.RawURLEncoding.EncodedLen(len(body)))
	inner = append(inner, `{"body":"`...)
	inner = base64.RawURLEncoding.AppendEncode(inner, body)
	inner = append(inner, `","signature":"`...)
	inner = base64.RawURLEncoding.AppendEncode(inner, sig)
	inner = append(inner, `"}`...)
	return inner
}

// Seal signs plaintext with the sender's identity and seals it to the
// recipient's X25519 key (base64url), as @byollm/protocol's seal() does.
// random may be nil (crypto/rand).
func Seal(plaintext string, sender *Identity, recipientEncryptionPublic string, c Context, random io.Reader) (protocol.SealedEnvelope, error) {
	if random == nil {
		random = rand.Reader
	}
	if c.Direction != DirectionPayload && c.Direction != DirectionResult {
		return protocol.SealedEnvelope{}, fmt.Errorf("seal: direction %q is not payload or result", c.Direction)
	}
	if c.DeadlineAt <= 0 || c.DeadlineAt > maxSafeInteger {
		return protocol.SealedEnvelope{}, fmt.Errorf("seal: deadlineAt %d is not a positive safe integer", c.DeadlineAt)
	}
	for _, s := range []string{plaintext, c.JobID, c.SenderKeyID, c.RecipientKeyID} {
		if !utf8.ValidString(s) {
			return protocol.SealedEnvelope{}, fmt.Errorf("seal: text is not valid UTF-8")
		}
	}
	rpk := decodeLenient(recipientEncryptionPublic)
	if len(rpk) != 32 {
		return protocol.SealedEnvelope{}, fmt.Errorf("seal: recipient encryption key is %d bytes, want 32", len(rpk))
	}
	var recipient [32]byte
	copy(recipient[:], rpk)
	sealed, err := box.SealAnonymous(nil, InnerJSON(sender, plaintext, c), &recipient, random)
	if err != nil {
		return protocol.SealedEnvelope{}, fmt.Errorf("seal: %w", err)
	}
	return protocol.SealedEnvelope{
		Ciphertext:     base64.RawURLEncoding.EncodeToString(sealed),
		RecipientKeyID: c.RecipientKeyID,
		SenderKeyID:    c.SenderKeyID,
		Direction:      c.Direction,
		DeadlineAt:     c.DeadlineAt,
	}, nil
}

// Open checks and opens an envelope as @byollm/protocol's open() does, in the
// same order with the same reasons (envelope.md §3). senderIdentityPublic is
// the pinned base64url Ed25519 key of the expected sender. A refusal is an
// *OpenError.
func Open(env protocol.SealedEnvelope, recipient *Identity, senderIdentityPublic string, exp Expected) (string, error) {
	// 1. Addressing, before any cryptography.
	if env.RecipientKeyID != exp.RecipientKeyID || env.SenderKeyID != exp.SenderKeyID || env.Direction != exp.Direction {
		return "", &OpenError{ReasonNotForUs}
	}
	// 2. The box. The public key is the one FromRaw derived from the
	// private key, not the record's.
	inner, ok := box.OpenAnonymous(nil, decodeLenient(env.Ciphertext), &recipient.encPublic, &recipient.encPrivate)
	if !ok {
		return "", &OpenError{ReasonUnopenable}
	}
	// 3. Inner object: body and signature strings, body strict base64url.
	var innerObj map[string]json.RawMessage
	if err := json.Unmarshal(inner, &innerObj); err != nil || innerObj == nil {
		return "", &OpenError{ReasonMalformed}
	}
	bodyText, ok1 := jsonString(innerObj["body"])
	sigText, ok2 := jsonString(innerObj["signature"])
	if !ok1 || !ok2 {
		return "", &OpenError{ReasonMalformed}
	}
	body, ok := decodeStrictBase64URL(bodyText)
	if !ok {
		return "", &OpenError{ReasonMalformed}
	}
	// 4. Signature by the pinned sender.
	senderKey := decodeLenient(senderIdentityPublic)
	sig := decodeLenient(sigText)
	if len(senderKey) != ed25519.PublicKeySize || len(sig) != ed25519.SignatureSize || !ed25519.Verify(senderKey, body, sig) {
		return "", &OpenError{ReasonBadSignature}
	}
	// 5. Claims. A body that is valid JSON but not an object reads every
	// claim as absent, which step 6 refuses.
	var decoded any
	if err := json.Unmarshal(body, &decoded); err != nil {
		return "", &OpenError{ReasonMalformed}
	}
	claims, _ := decoded.(map[string]any)
	// 6. Context.
	if !claimEquals(claims, "jobId", exp.JobID) ||
		!claimEquals(claims, "senderKeyId", exp.SenderKeyID) ||
		!claimEquals(claims, "recipientKeyId", exp.RecipientKeyID) ||
		!claimEquals(claims, "direction", exp.Direction) {
		return "", &OpenError{ReasonContextMismatch}
	}
	if d, ok := claims["deadlineAt"].(float64); !ok || d != float64(env.DeadlineAt) {
		return "", &OpenError{ReasonContextMismatch}
	}
	// 7. Plaintext.
	plaintext, ok := claims["plaintext"].(string)
	if !ok {
		return "", &OpenError{ReasonMalformed}
	}
	return plaintext, nil
}

func claimEquals(claims map[string]any, key, want string) bool {
	s, ok := claims[key].(string)
	return ok && s == want
}

func jsonString(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// decodeStrictBase64URL is the reference's fromBase64Url: only the url
// alphabet, no padding, length mod 4 != 1, trailing bits ignored.
func decodeStrictBase64URL(s string) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return nil, false
		}
	}
	if len(s)%4 == 1 {
		return nil, false
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, false
	}
	return b, true
}

// Bytes is the reference's envelopeBytes: the JS length (UTF-16 units) of
// JSON.stringify(envelope), the quantity the relay's 6 MiB cap applies to.
func Bytes(env protocol.SealedEnvelope) int {
	n := len(`{"ciphertext":,"recipientKeyId":,"senderKeyId":,"direction":,"deadlineAt":}`)
	for _, s := range []string{env.Ciphertext, env.RecipientKeyID, env.SenderKeyID, env.Direction} {
		n += jsQuotedLength(s)
	}
	return n + len(strconv.FormatInt(env.DeadlineAt, 10))
}

func jsQuotedLength(s string) int {
	n := 2
	for _, r := range s {
		switch {
		case r == '"' || r == '\\' || r == '\b' || r == '\t' || r == '\n' || r == '\f' || r == '\r':
			n += 2
		case r < 0x20:
			n += 6
		case r >= 0x10000:
			n += 2
		default:
			n++
		}
	}
	return n
}

// appendJSString appends s quoted exactly as JSON.stringify quotes it
// (envelope.md §2.2): only ", \, and controls are escaped; <, >, &, U+2028,
// U+2029 and all non-ASCII pass through as UTF-8.
func appendJSString(b []byte, s string) []byte { return protocol.AppendJSString(b, s) }

// JSString renders s as JSON.stringify would, for callers building payload
// and outcome plaintexts.
func JSString(s string) string { return string(appendJSString(nil, s)) }

// SizeClassOf is the reference's sizeClassOf over a payload's JS text length.
func SizeClassOf(textChars int) string {
	switch {
	case textChars <= 4_000:
		return "small"
	case textChars <= 64_000:
		return "medium"
	default:
		return "large"
	}
}

// JSLength is JavaScript's String#length: UTF-16 code units.
func JSLength(s string) int {
	n := 0
	for _, r := range s {
		if r >= 0x10000 {
			n += 2
		} else {
			n++
		}
	}
	return n
}
