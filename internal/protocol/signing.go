package protocol

// Request signatures (wire.md §5), key ids (§5.5) and public identity
// consistency (§5.6), matching @byollm/protocol@0.1.1 on Node.

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Signature constants.
const (
	MaxClockSkewMs       = 120_000
	RequestContext       = "byollm/v1/request"
	EncryptionKeyContext = "byollm/v1/encryption-key"
	SiteEndpointPrefix   = "site/"

	HeaderRunner    = "x-byollm-runner"
	HeaderSite      = "x-byollm-site"
	HeaderIssuedAt  = "x-byollm-issued-at"
	HeaderSignature = "x-byollm-signature"
)

// RequestSignature is the signed material a request carries. RunnerID holds
// the caller id: a runner id on the daemon plane, a site id on the site plane.
type RequestSignature struct {
	RunnerID  string `json:"runnerId"`
	IssuedAt  int64  `json:"issuedAt"`
	Signature string `json:"signature"`
}

// SignatureFromHeaders builds the signature object from request headers with
// callerHeader (HeaderRunner or HeaderSite) as the caller. ok is false when
// the request counts as unsigned (refusal row 4): a header missing, an empty
// caller or signature, or an issued-at that JS Number() does not turn into a
// safe positive integer. Repeated headers are joined with ", " as Fetch does.
func SignatureFromHeaders(h http.Header, callerHeader string) (RequestSignature, bool) {
	// Node's HTTP server hands header bytes over as latin1 characters, and
	// the reference works on those strings (lookups, canonical UTF-8).
	caller, ok1 := headerValue(h, callerHeader)
	issued, ok2 := headerValue(h, HeaderIssuedAt)
	sig, ok3 := headerValue(h, HeaderSignature)
	if !ok1 || !ok2 || !ok3 {
		return RequestSignature{}, false
	}
	n, ok := IssuedAtFromHeader(issued)
	if !ok || CodePoints(caller) < 1 || CodePoints(sig) < 1 {
		return RequestSignature{}, false
	}
	return RequestSignature{RunnerID: caller, IssuedAt: n, Signature: sig}, true
}

func headerValue(h http.Header, name string) (string, bool) {
	vals := h.Values(name)
	if len(vals) == 0 {
		return "", false
	}
	return latin1ToUTF8(strings.Join(vals, ", ")), true
}

func latin1ToUTF8(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			ascii = false
			break
		}
	}
	if ascii {
		return s
	}
	r := make([]rune, len(s))
	for i := 0; i < len(s); i++ {
		r[i] = rune(s[i])
	}
	return string(r)
}

// jsUTF8 is Buffer.from(str, "utf8") for a WTF-8 string: a lone surrogate
// becomes U+FFFD.
func jsUTF8(s string) []byte { return appendJSUTF8(make([]byte, 0, len(s)), s) }

// appendJSUTF8 appends jsUTF8(s) to out.
func appendJSUTF8(out []byte, s string) []byte {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			ascii = false
			break
		}
	}
	if ascii {
		return append(out, s...)
	}
	for i := 0; i < len(s); {
		r, w := decodeWTF8(s[i:])
		if r >= 0xd800 && r <= 0xdfff || (w == 1 && s[i] >= 0x80) {
			out = append(out, "\uFFFD"...)
		} else {
			out = append(out, s[i:i+w]...)
		}
		i += w
	}
	return out
}

// IssuedAtFromHeader applies JS Number() to the header and requires a safe
// positive integer (RequestSignature.issuedAt: int().positive()).
func IssuedAtFromHeader(s string) (int64, bool) {
	f := JSNumber(s)
	if !isSafeInteger(f) || f <= 0 {
		return 0, false
	}
	return int64(f), true
}

var decimalLiteral = regexp.MustCompile(`^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$`)

// isJSWhitespace is the WhiteSpace and LineTerminator set String→Number trims.
func isJSWhitespace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0xa0, 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000, 0xfeff:
		return true
	}
	return r >= 0x2000 && r <= 0x200a || unicode.Is(unicode.Zs, r)
}

// JSNumber is JavaScript's Number(string): whitespace-trimmed, "" → 0, hex,
// octal and binary prefixes, Infinity, decimal with exponent; NaN otherwise.
func JSNumber(s string) float64 {
	// Fast path for what clients send (an issued-at in ms): at most 15
	// decimal digits are exactly representable, whatever leading zeros.
	if len(s) > 0 && len(s) <= 15 {
		var n int64
		digits := true
		for i := 0; i < len(s); i++ {
			c := s[i]
			if c < '0' || c > '9' {
				digits = false
				break
			}
			n = n*10 + int64(c-'0')
		}
		if digits {
			return float64(n)
		}
	}
	s = strings.TrimFunc(s, isJSWhitespace)
	if s == "" {
		return 0
	}
	switch s {
	case "Infinity", "+Infinity":
		return math.Inf(1)
	case "-Infinity":
		return math.Inf(-1)
	}
	if len(s) > 2 && s[0] == '0' {
		base := 0
		switch s[1] {
		case 'x', 'X':
			base = 16
		case 'o', 'O':
			base = 8
		case 'b', 'B':
			base = 2
		}
		if base != 0 {
			return radixNumber(s[2:], base)
		}
	}
	if !decimalLiteral.MatchString(s) {
		return math.NaN()
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !strings.Contains(err.Error(), "range") {
		return math.NaN()
	}
	return f
}

// radixNumber parses digits in base with the rounding JS applies: exact while
// it fits, and beyond 2^53 the result is unsafe anyway, so any close double
// serves the callers here (they only accept safe integers).
func radixNumber(digits string, base int) float64 {
	var f float64
	for _, c := range digits {
		var d int
		switch {
		case c >= '0' && c <= '9':
			d = int(c - '0')
		case c >= 'a' && c <= 'z':
			d = int(c-'a') + 10
		case c >= 'A' && c <= 'Z':
			d = int(c-'A') + 10
		default:
			return math.NaN()
		}
		if d >= base {
			return math.NaN()
		}
		f = f*float64(base) + float64(d)
	}
	return f
}

// CanonicalRequest is the exact byte string both sides sign (§5.2). For the
// site plane pass endpoint with its "site/" prefix.
func CanonicalRequest(endpoint, caller string, issuedAt int64, rawBody []byte) []byte {
	sum := sha256.Sum256(rawBody)
	b := make([]byte, 0, len(RequestContext)+len(endpoint)+len(caller)+2*sha256.Size+24)
	b = append(b, RequestContext...)
	b = append(b, '\n')
	b = appendJSUTF8(b, endpoint)
	b = append(b, '\n')
	b = appendJSUTF8(b, caller)
	b = append(b, '\n')
	b = strconv.AppendInt(b, issuedAt, 10)
	b = append(b, '\n')
	b = hex.AppendEncode(b, sum[:])
	return b
}

// SignRequest signs the canonical request and returns unpadded base64url.
func SignRequest(priv ed25519.PrivateKey, endpoint, caller string, issuedAt int64, rawBody []byte) string {
	return base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, CanonicalRequest(endpoint, caller, issuedAt, rawBody)))
}

// Stale is the freshness rule (§5.4): |now − issuedAt| > 120000.
func Stale(now, issuedAt int64) bool {
	d := now - issuedAt
	if d < 0 {
		d = -d
	}
	return d > MaxClockSkewMs
}

// VerifyRequest checks a signed request against an identity key. Freshness
// is checked first: stale requests report (false, true) without any
// cryptography. A malformed key or signature is (false, false).
func VerifyRequest(identityB64, endpoint, caller string, issuedAt int64, rawBody []byte, sig string, now int64) (ok bool, stale bool) {
	if Stale(now, issuedAt) {
		return false, true
	}
	return VerifyWith(identityB64, CanonicalRequest(endpoint, caller, issuedAt, rawBody), sig), false
}

// VerifyWith verifies sig (base64url, Node-lenient) over msg with a raw
// Ed25519 public key (base64url, Node-lenient). Never panics.
func VerifyWith(identityB64 string, msg []byte, sig string) bool {
	var pubBuf, sigBuf [96]byte // decoded in place: no allocation per request
	pub := appendBase64URL(pubBuf[:0], identityB64)
	s := appendBase64URL(sigBuf[:0], sig)
	if len(pub) != ed25519.PublicKeySize || len(s) != ed25519.SignatureSize {
		return false
	}
	return ed25519.Verify(ed25519.PublicKey(pub), msg, s)
}

// DecodeBase64URL decodes like Node's Buffer.from(s, "base64url"): both
// alphabets accepted, other characters skipped, decoding stops at the first
// "=", trailing partial bits dropped.
func DecodeBase64URL(s string) []byte { return appendBase64URL(make([]byte, 0, len(s)*3/4), s) }

// appendBase64URL appends DecodeBase64URL(s) to out.
func appendBase64URL(out []byte, s string) []byte {
	var acc uint32
	bits := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		var v uint32
		switch {
		case c >= 'A' && c <= 'Z':
			v = uint32(c - 'A')
		case c >= 'a' && c <= 'z':
			v = uint32(c-'a') + 26
		case c >= '0' && c <= '9':
			v = uint32(c-'0') + 52
		case c == '+' || c == '-':
			v = 62
		case c == '/' || c == '_':
			v = 63
		case c == '=':
			return out
		default:
			continue
		}
		acc = acc<<6 | v
		bits += 6
		if bits >= 8 {
			bits -= 8
			out = append(out, byte(acc>>bits))
			acc &= 1<<bits - 1
		}
	}
	return out
}

const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// KeyID is the fingerprint of an identity key (§5.5), e.g.
// BYOLLM-6HTG-Z65X-B7YF-S53D-MHDA-NFMK.
func KeyID(identityB64 string) string {
	sum := sha256.Sum256(DecodeBase64URL(identityB64))
	var sym []byte
	var value uint32
	bits := 0
	for _, by := range sum[:15] {
		value = value<<8 | uint32(by)
		bits += 8
		for bits >= 5 {
			sym = append(sym, crockford[(value>>(bits-5))&31])
			bits -= 5
		}
		value &= 1<<bits - 1
	}
	var b strings.Builder
	b.WriteString("BYOLLM")
	for i := 0; i < len(sym); i += 4 {
		b.WriteByte('-')
		b.Write(sym[i:min(i+4, len(sym))])
	}
	return b.String()
}

// EncryptionSigMessage is what an identity key signs to vouch for an
// encryption key: "byollm/v1/encryption-key:" + encryption, as sent.
func EncryptionSigMessage(encryption string) []byte {
	return jsUTF8(EncryptionKeyContext + ":" + encryption)
}

// VerifyPublicIdentity reports whether encryptionSig is the identity key's
// signature over EncryptionSigMessage(encryption) (§5.6).
func VerifyPublicIdentity(id PublicIdentity) bool {
	return VerifyWith(id.Identity, EncryptionSigMessage(id.Encryption), id.EncryptionSig)
}
