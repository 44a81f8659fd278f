package relay

import (
	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
)

// reply is one HTTP answer: JSON unless html is set.
type reply struct {
	status int
	body   []byte
	html   bool
	// recheck marks an answer decided by the projection that a newer one
	// could reverse (an unknown runner or site, a key that does not
	// verify, no consent, not approved, revoked): before it goes out the
	// planes make sure it was decided on the latest version (see
	// Relay.decide).
	recheck bool
}

// onProjection marks r as decided by the projection.
func onProjection(r reply) reply {
	r.recheck = true
	return r
}

func refused(r *protocol.Refusal) reply { return reply{status: r.Status, body: r.JSON()} }

func fail(status int, code, message string) reply {
	return refused(&protocol.Refusal{Status: status, Body: protocol.RefusalBody{Error: code, Message: message}})
}

// Refusal catalogue (wire.md §7.1), built once from the protocol package.
var (
	notFoundBare     = refused(protocol.NotFound())
	debugBadRequest  = refused(protocol.DebugBadRequest())
	notSigned        = refused(protocol.NotSigned())
	runnerUnknown    = onProjection(refused(protocol.RunnerNotRecognised()))
	siteUnknown      = onProjection(refused(protocol.SiteNotRegistered()))
	badSignature     = onProjection(refused(protocol.BadSignature()))
	revokedRunner    = onProjection(refused(protocol.Revoked()))
	schemaFailed     = refused(protocol.SchemaFailed())
	pairSchemaFailed = refused(protocol.PairSchemaFailed())
	identityBroken   = refused(protocol.IdentityInconsistent())
	noConsent        = onProjection(refused(protocol.NoConsent()))
	notApproved      = onProjection(refused(protocol.DeviceNotApproved()))
	otherOwner       = onProjection(refused(protocol.DeviceOfAnotherOwner()))
	noDeviceCodes    = refused(protocol.PairingNotOffered())
	pairingBusy      = refused(protocol.PairingBusy())
	runnerMismatch   = refused(protocol.RunnerMismatch())
	notYourSite      = refused(protocol.NotYourSite())
	stubNotYours     = onProjection(refused(protocol.StubSiteMismatch()))
	unknownSiteJob   = refused(protocol.UnknownJob())
	stubNotAccepted  = refused(protocol.StubNotAccepted())

	// Not in 0.1.1, which has no request cap and no shared store. Both use
	// the protocol's own error shape and codes the clients already handle:
	// a 400 bad-request is a hard refusal, and 503 with server-error or
	// not-ready is retryable on both planes (wire.md §7.1, §17.40).
	bodyTooLarge  = fail(400, protocol.CodeBadRequest, "this request is too large for the relay to read")
	bodyUnread    = fail(400, protocol.CodeBadRequest, "the request body could not be read")
	bodyTooSlow   = fail(400, protocol.CodeBadRequest, "the request body did not arrive in time")
	bodiesBusy    = fail(503, protocol.CodeServerError, "the relay is reading as many request bodies as it can hold — try again shortly")
	storeDown     = fail(503, protocol.CodeServerError, "the relay cannot reach its routing store just now — try again shortly")
	notReady      = fail(503, protocol.CodeNotReady, "the relay has not loaded its routing projection yet — try again shortly")
	serverFailure = refused(protocol.ServerError("the relay failed to handle this request"))
	// The per-address pairing limit: the shape and code of the reference's
	// own pairing-busy refusal (429 rate-limited), which the daemon reports
	// to the person pairing; the message says it is this address.
	pairingSourceBusy = fail(429, protocol.CodeRateLimited, "too many pairings are in progress from this address — finish or let one expire (codes last 10 minutes), then try again")
	// The same for the address's network (its /24, or /48 for IPv6).
	pairingNetworkBusy = fail(429, protocol.CodeRateLimited, "too many pairings are in progress from this network — finish or let one expire (codes last 10 minutes), then try again")
)

// Per-site limits (not in 0.1.1): 429 rate-limited, the protocol's own
// retryable refusal. The cloud lane of @byollm/server treats any 429 as
// retryable (RelayUnavailable, retryable): a refused payload ends the pump
// cycle quietly and is sealed again on a later one while the job still
// awaits it; a refused enqueue reaches the caller of app.enqueue as a
// retryable error with the job kept at the site.
var siteLimitReplies = map[string]reply{
	store.LimitJobs:  fail(429, protocol.CodeRateLimited, "this site has too many unfinished jobs at the relay — try again once some have finished"),
	store.LimitBytes: fail(429, protocol.CodeRateLimited, "this site has too much stored at the relay — try again once some jobs have finished or passed their deadline"),
	store.LimitRate:  fail(429, protocol.CodeRateLimited, "this site is enqueueing faster than the relay allows — slow down and try again"),
}

func siteLimited(limit string) reply {
	if r, ok := siteLimitReplies[limit]; ok {
		return r
	}
	return siteLimitReplies[store.LimitRate]
}

func clockSkew(now int64) reply { return refused(protocol.ClockSkew(now)) }

func holderRefusal(code string) reply {
	if r := protocol.HolderRefusal(code); r != nil {
		return refused(r)
	}
	panic("relay: unknown holder refusal " + code)
}
