package protocol

// The refusal catalogue (wire.md §7, §7.1): every error body the relay sends,
// with its status. Row numbers refer to §7.1.

import (
	"math"
	"strconv"
)

// Error codes of the protocol enumeration, plus the enqueue-only codes.
const (
	CodeBadRequest                 = "bad-request"
	CodeUnsupportedProtocolVersion = "unsupported-protocol-version"
	CodeDaemonBelowFloor           = "daemon-below-floor"
	CodeUnauthorized               = "unauthorized"
	CodeForbidden                  = "forbidden"
	CodeRevoked                    = "revoked"
	CodeNotFound                   = "not-found"
	CodeNotReady                   = "not-ready"
	CodeTooLate                    = "too-late"
	CodeClockSkew                  = "clock-skew"
	CodeRateLimited                = "rate-limited"
	CodeServerError                = "server-error"

	CodePurposeNotDeclared = "purpose-not-declared"
	CodeSlotUnsatisfiable  = "slot-unsatisfiable"
	CodeSlotWaiting        = "slot-waiting"
)

// ErrorStatus is ERROR_STATUS: the status of each enumerated code.
var ErrorStatus = map[string]int{
	CodeBadRequest:                 400,
	CodeUnsupportedProtocolVersion: 400,
	CodeDaemonBelowFloor:           426,
	CodeUnauthorized:               401,
	CodeForbidden:                  403,
	CodeRevoked:                    403,
	CodeNotFound:                   404,
	CodeNotReady:                   409,
	CodeTooLate:                    409,
	CodeClockSkew:                  401,
	CodeRateLimited:                429,
	CodeServerError:                500,
}

// RefusalBody is an error body. Key order is the reference's: error, message,
// then serverTime/maxSkewMs (clock-skew), floor (below floor) or
// supported/minimum (version). Empty extras are omitted; Message is empty
// only for the two bare bodies (rows 1/35 and 36).
type RefusalBody struct {
	Error      string   `json:"error"`
	Message    string   `json:"message,omitempty"`
	ServerTime *int64   `json:"serverTime,omitempty"`
	MaxSkewMs  *int64   `json:"maxSkewMs,omitempty"`
	Floor      string   `json:"floor,omitempty"`
	Supported  []string `json:"supported,omitempty"`
	Minimum    string   `json:"minimum,omitempty"`
}

// Refusal is an error response: status plus body.
type Refusal struct {
	Status int
	Body   RefusalBody
}

// Error makes a Refusal usable as an error value.
func (r *Refusal) Error() string {
	if r.Body.Message == "" {
		return strconv.Itoa(r.Status) + " " + r.Body.Error
	}
	return strconv.Itoa(r.Status) + " " + r.Body.Error + ": " + r.Body.Message
}

// JSON is the exact response body bytes.
func (r *Refusal) JSON() []byte {
	return MustMarshal(r.Body)
}

func refusal(status int, code, message string) *Refusal {
	return &Refusal{Status: status, Body: RefusalBody{Error: code, Message: message}}
}

// NotFound is row 1 (and 35, debug off): 404 {"error":"not-found"}.
func NotFound() *Refusal { return refusal(404, CodeNotFound, "") }

// Rows 2 and 3 come from CheckProtocolVersion.

// NotSigned is row 4.
func NotSigned() *Refusal { return refusal(401, CodeUnauthorized, "this request is not signed") }

// RunnerNotRecognised is row 5.
func RunnerNotRecognised() *Refusal {
	return refusal(401, CodeUnauthorized, "this runner is not recognised")
}

// SiteNotRegistered is row 6.
func SiteNotRegistered() *Refusal {
	return refusal(401, CodeUnauthorized, "this site is not registered")
}

// ClockSkew is row 7, carrying the relay's clock.
func ClockSkew(now int64) *Refusal {
	r := refusal(401, CodeClockSkew, "this request's timestamp is too far from the server's clock; check the machine's time and try again")
	skew := int64(MaxClockSkewMs)
	r.Body.ServerTime = &now
	r.Body.MaxSkewMs = &skew
	return r
}

// BadSignature is row 8.
func BadSignature() *Refusal { return refusal(401, CodeUnauthorized, "signature check failed") }

// Revoked is row 9.
func Revoked() *Refusal {
	return refusal(403, CodeRevoked, "routing for this runner has been revoked")
}

// SchemaFailed is row 10.
func SchemaFailed() *Refusal {
	return refusal(400, CodeBadRequest, "request failed schema validation")
}

// PairSchemaFailed is row 11.
func PairSchemaFailed() *Refusal {
	return refusal(400, CodeBadRequest, "pair request failed schema validation")
}

// IdentityInconsistent is row 12.
func IdentityInconsistent() *Refusal {
	return refusal(400, CodeBadRequest, "the device identity is not consistent")
}

// NoConsent is row 13.
func NoConsent() *Refusal { return refusal(403, CodeForbidden, "no consent record for this user") }

// DeviceNotApproved is row 14.
func DeviceNotApproved() *Refusal {
	return refusal(403, CodeForbidden, "this device has not been approved by its owner")
}

// DeviceOfAnotherOwner is row 15.
func DeviceOfAnotherOwner() *Refusal {
	return refusal(403, CodeForbidden, "this device belongs to another owner")
}

// PairingNotOffered is row 16 (501 with code bad-request).
func PairingNotOffered() *Refusal {
	return refusal(501, CodeBadRequest, "this relay does not offer device-code pairing")
}

// PairingBusyMessage is PAIRING_BUSY_MESSAGE.
const PairingBusyMessage = "too many pairings are in progress right now — try again in a few minutes"

// PairingBusy is row 17.
func PairingBusy() *Refusal { return refusal(429, CodeRateLimited, PairingBusyMessage) }

// RunnerMismatch is row 18.
func RunnerMismatch() *Refusal {
	return refusal(403, CodeForbidden, "runner id does not match the key")
}

// UnknownJob is rows 19 and 33.
func UnknownJob() *Refusal { return refusal(404, CodeNotFound, "unknown job") }

// NotHolder is row 20.
func NotHolder() *Refusal { return refusal(403, CodeForbidden, "this runner does not hold the job") }

// StaleLease is row 21.
func StaleLease() *Refusal { return refusal(403, CodeForbidden, "that lease is no longer current") }

// NotSealedYet is row 22.
func NotSealedYet() *Refusal {
	return refusal(409, CodeNotReady, "the site has not sealed this job yet")
}

// AlreadyFinished is row 23.
func AlreadyFinished() *Refusal { return refusal(409, CodeTooLate, "this job has already finished") }

// HolderRefusal maps a store holder refusal (not-found, not-holder,
// stale-lease, not-ready, terminal) to rows 19–23; nil for anything else.
func HolderRefusal(reason string) *Refusal {
	switch reason {
	case "not-found":
		return UnknownJob()
	case "not-holder":
		return NotHolder()
	case "stale-lease":
		return StaleLease()
	case "not-ready":
		return NotSealedYet()
	case "terminal":
		return AlreadyFinished()
	}
	return nil
}

// EnvelopeTooLarge is row 24 for an envelope of the given size (EnvelopeBytes).
func EnvelopeTooLarge(bytes int) *Refusal {
	return refusal(400, CodeBadRequest, "this message is "+DescribeBytes(bytes)+" and the limit is "+
		DescribeBytes(MaxEnvelopeBytes)+" — it is a limit on one message rather than on how many you send. "+
		"Split the work into smaller jobs and send them separately. Every plan has the same ceiling.")
}

// BelowFloor is row 25 (426), carrying the floor.
func BelowFloor(daemonVersion, floor string) *Refusal {
	r := refusal(426, CodeDaemonBelowFloor, "byollm "+daemonVersion+" is below the supported floor ("+floor+
		"). Run `"+UpgradeCommand+"`, then `byollm start`.")
	r.Body.Floor = floor
	return r
}

// NotYourSite is row 26.
func NotYourSite() *Refusal { return refusal(403, CodeForbidden, "that is not your site") }

// StubSiteMismatch is row 27.
func StubSiteMismatch() *Refusal {
	return refusal(403, CodeForbidden, "that stub does not name the site that signed it")
}

// SatisfiableFailed is row 28 (503 with code server-error).
func SatisfiableFailed() *Refusal {
	return refusal(503, CodeServerError, "we could not check this just now — try again shortly")
}

// PurposeNotDeclared is row 29; purpose "" means the stub had none.
func PurposeNotDeclared(purpose string) *Refusal {
	if purpose == "" {
		purpose = "that purpose"
	}
	return refusal(409, CodePurposeNotDeclared, "this site does not declare "+purpose+
		" — declare it on Developer Sites, and the people who have already connected will each map the new slot before it routes")
}

// SlotUnsatisfiable is row 30.
func SlotUnsatisfiable() *Refusal {
	return refusal(409, CodeSlotUnsatisfiable, "nobody has chosen what answers this yet")
}

// SlotWaiting is row 31.
func SlotWaiting() *Refusal {
	return refusal(409, CodeSlotWaiting, "nothing can answer this right now — try again later")
}

// StubNotAccepted is row 32.
func StubNotAccepted() *Refusal { return refusal(400, CodeBadRequest, "that stub was not accepted") }

// NotAwaitingPayload is row 34; was "" renders as "gone".
func NotAwaitingPayload(was string) *Refusal {
	if was == "" {
		was = "gone"
	}
	return refusal(409, CodeTooLate, "job is "+was+", not awaiting payload")
}

// DebugBadRequest is row 36: 400 {"error":"bad-request"}.
func DebugBadRequest() *Refusal { return refusal(400, CodeBadRequest, "") }

// ServerError is what a Go port answers when a handler fails (§1.1); 0.1.1
// leaves this to the host.
func ServerError(message string) *Refusal { return refusal(500, CodeServerError, message) }

// Draining is the closed hub's 503 {"error":"not-ready"} (§17.40), which both
// clients retry. 0.1.1 never sends it.
func Draining() *Refusal { return refusal(503, CodeNotReady, "") }

// MaxEnvelopeBytes is MAX_ENVELOPE_BYTES (6 MiB), in UTF-16 units.
const MaxEnvelopeBytes = 6_291_456

// DescribeBytes is describeBytes: MB rounded up to one decimal.
func DescribeBytes(bytes int) string {
	v := math.Ceil(float64(bytes)/(1024*1024)*10) / 10
	return strconv.FormatFloat(v, 'f', 1, 64) + " MB"
}

// EnvelopeBytes is the envelope's size as the reference measures it: the
// UTF-16 length of JSON.stringify of the parsed envelope. It is counted, not
// built, so a 6 MiB envelope is not copied to be measured.
func EnvelopeBytes(env SealedEnvelope) int {
	// {"ciphertext":,"recipientKeyId":,"senderKeyId":,"direction":,"deadlineAt":}
	const fixed = 75
	return fixed + JSONStringLen(env.Ciphertext) + JSONStringLen(env.RecipientKeyID) +
		JSONStringLen(env.SenderKeyID) + JSONStringLen(env.Direction) +
		len(JSNumberString(float64(env.DeadlineAt)))
}

// JSONStringLen is the UTF-16 length of JSON.stringify(s), quotes included.
func JSONStringLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		c := s[i]
		if c < 0x80 {
			i++
			switch {
			case c == '"' || c == '\\' || c == '\b' || c == '\t' || c == '\n' || c == '\f' || c == '\r':
				n += 2
			case c < 0x20:
				n += 6
			default:
				n++
			}
			continue
		}
		r, w := decodeWTF8(s[i:])
		i += w
		switch {
		case r >= 0xd800 && r <= 0xdfff:
			n += 6 // a lone surrogate is escaped
		case r > 0xffff:
			n += 2
		default:
			n++ // includes U+FFFD written for an invalid byte
		}
	}
	return n
}
