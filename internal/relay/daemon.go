package relay

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/byollm/relay-go/internal/projection"
	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
)

// Daemon plane constants (wire.md §16).
const (
	pairingTTLMs     = 600_000
	pollIntervalMs   = 2_000
	userCodeAlphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
)

// sitesJSON is {keyId(site): site identity} in SitesFor order.
func sitesJSON(sites []projection.SiteRecord) []byte {
	var m orderedObj
	for _, s := range sites {
		m.set(protocol.KeyID(s.Site.Identity), protocol.MustMarshal(s.Site))
	}
	return m.bytes()
}

// recordPresence is seen(), except that a record left over from other keys
// or another owner is replaced rather than kept (seen never rewrites them).
// The unsigned pairing paths call it with the projection's key set, never
// the presented one: a pair request proves only that its sender has seen a
// validly signed key set of the device, which may be an old one, and the
// record's key set is what sites seal to. Only the projection (here, and in
// reconcilePresence) or a signed request may change it.
func (r *Relay) recordPresence(ctx context.Context, p store.Presence) error {
	known, err := r.store.PresenceHead(ctx, p.RunnerID)
	if err != nil {
		return fmt.Errorf("presence: %w", err)
	}
	if known != nil && (known.Owner != p.Owner || known.Device != p.Device) {
		if err := r.store.DropPresence(ctx, p.RunnerID); err != nil {
			return fmt.Errorf("drop presence: %w", err)
		}
	}
	if _, err := r.store.Seen(ctx, p); err != nil {
		return fmt.Errorf("seen: %w", err)
	}
	return nil
}

// pair is wire.md §8.1: device-code start, poll, or fixture pairing, tried
// in that order. It is unauthenticated.
func (r *Relay) pair(req *request) (reply, error) {
	shape, matched := protocol.DecodePairRequest(req.body)
	switch {
	case !matched:
		return pairSchemaFailed, nil
	case shape.Start != nil:
		return r.pairStart(req, shape.Start)
	case shape.Poll != nil:
		return r.pairPoll(req, shape.Poll)
	}
	owner := shape.Fixture.Owner
	presented := shape.Fixture.Device
	if !protocol.VerifyPublicIdentity(presented) {
		return identityBroken, nil
	}
	sites := req.proj.SitesFor(owner)
	if len(sites) == 0 {
		return noConsent, nil
	}
	approved := req.proj.DeviceByFingerprint(presented.Identity)
	if approved == nil {
		return notApproved, nil
	}
	if approved.Owner != owner {
		return otherOwner, nil
	}
	// The presented key set is vouched for (VerifyPublicIdentity) but may
	// be an older one of this identity; what sites seal to is the
	// projection's (a departure: the reference stores the presented one).
	if err := r.recordPresence(req.ctx, store.Presence{
		RunnerID: approved.RunnerID, Owner: owner, Device: approved.Device,
		Capabilities: emptyArray, Withheld: emptyArray,
	}); err != nil {
		return reply{}, fmt.Errorf("pair: %w", err)
	}
	return ok200(r.withControlPlane(newObj().
		val("protocolVersion", protocol.ProtocolVersion).
		val("runnerId", approved.RunnerID).
		raw("sites", sitesJSON(sites)))), nil
}

// withControlPlane appends controlPlanePublic, verbatim, when one is
// configured: the key every later grant is checked against, handed over at
// pairing only (wire.md §8.1, §14.1).
func (r *Relay) withControlPlane(o *jsonObj) *jsonObj {
	if r.controlPlanePublic != "" {
		o.val("controlPlanePublic", r.controlPlanePublic)
	}
	return o
}

func ok200(o *jsonObj) reply { return reply{status: 200, body: o.bytes()} }

func (r *Relay) pairStart(req *request, start *protocol.PairStartRequest) (reply, error) {
	if r.verifyURL == "" {
		return noDeviceCodes, nil
	}
	if !protocol.VerifyPublicIdentity(start.Device) {
		return identityBroken, nil
	}
	p := store.PendingPairing{
		DeviceCode:   newDeviceCode(),
		UserCode:     newUserCode(),
		Device:       start.Device,
		Label:        start.Daemon.Label,
		Platform:     start.Daemon.Platform,
		Capabilities: capabilitiesJSON(start.Capabilities),
		ExpiresAt:    r.now() + pairingTTLMs,
		Source:       clientAddress(req.hr, r.proxies), // only a pairing start needs it
	}
	outcome, err := r.store.PutPairing(req.ctx, p)
	if err != nil {
		return reply{}, fmt.Errorf("pair start: %w", err)
	}
	switch outcome {
	case store.PairingAtCapacity:
		return pairingBusy, nil
	case store.PairingSourceBusy:
		return pairingSourceBusy, nil
	case store.PairingNetworkBusy:
		return pairingNetworkBusy, nil
	}
	return ok200(newObj().
		val("deviceCode", p.DeviceCode).
		val("userCode", p.UserCode).
		val("verificationUrl", r.verifyURL).
		val("expiresAt", p.ExpiresAt).
		val("pollIntervalMs", pollIntervalMs)), nil
}

var (
	statusExpired = reply{status: 200, body: []byte(`{"status":"expired"}`)}
	// Pending until the projection approves the device: a newer one may.
	statusPending = onProjection(reply{status: 200, body: []byte(`{"status":"pending"}`)})
)

// pairPoll answers from the shared code store, so a code minted through one
// replica is polled through any other; approval is the projection's.
func (r *Relay) pairPoll(req *request, poll *protocol.PairPollRequest) (reply, error) {
	p, err := r.store.PairingByDeviceCode(req.ctx, poll.DeviceCode)
	if errors.Is(err, store.ErrInvalidInput) {
		// A code the store cannot hold (over its id limit, U+0000, a lone
		// surrogate) was never minted: unknown, which is expired (§8.1).
		return statusExpired, nil
	}
	if err != nil {
		return reply{}, fmt.Errorf("pair poll: %w", err)
	}
	if p == nil || p.ExpiresAt <= r.now() {
		return statusExpired, nil
	}
	approved := req.proj.DeviceByFingerprint(p.Device.Identity)
	if approved == nil {
		return statusPending, nil
	}
	sites := req.proj.SitesFor(approved.Owner)
	caps := p.Capabilities
	if len(caps) == 0 {
		caps = emptyArray
	}
	if err := r.recordPresence(req.ctx, store.Presence{
		// The projection's key set, not the one presented at start (see
		// recordPresence); they are the same unless start presented an
		// older key set of the approved identity.
		RunnerID: approved.RunnerID, Owner: approved.Owner, Device: approved.Device,
		Capabilities: caps, Withheld: emptyArray,
	}); err != nil {
		return reply{}, fmt.Errorf("pair poll: %w", err)
	}
	if err := r.store.DropPairing(req.ctx, p.DeviceCode); err != nil {
		return reply{}, fmt.Errorf("pair poll: drop code: %w", err)
	}
	return ok200(r.withControlPlane(newObj().
		val("status", "approved").
		val("runnerId", approved.RunnerID).
		val("owner", approved.Owner).
		raw("sites", sitesJSON(sites)))), nil
}

func newDeviceCode() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("relay: crypto/rand: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func newUserCode() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("relay: crypto/rand: " + err.Error())
	}
	out := make([]byte, 0, 9)
	for i, x := range b {
		if i == 4 {
			out = append(out, '-')
		}
		out = append(out, userCodeAlphabet[x%32])
	}
	return string(out)
}

// authed runs the daemon auth sequence and the schema check (wire.md §5.7)
// and returns the device and the decoded body. use says what the handler
// needs of the presence record. A request turned away is an *authRefusal
// carrying its reply; any other error is the server's (see refusalReply).
func authed[T any](r *Relay, req *request, use presenceUse, decode func(any) (T, error)) (device, T, error) {
	var zero T
	dev, refusal, ok, err := r.daemonAuth(req, use)
	if err != nil {
		return device{}, zero, err
	}
	if !ok {
		return device{}, zero, &authRefusal{reply: refusal}
	}
	in, err := decode(req.body)
	if err != nil {
		return device{}, zero, &authRefusal{reply: schemaFailed}
	}
	return dev, in, nil
}

// authRefusal is a daemon request authed turned away: an answer to send,
// not a failure of the relay.
type authRefusal struct{ reply reply }

func (e *authRefusal) Error() string {
	return fmt.Sprintf("daemon request refused (%d)", e.reply.status)
}

// refusalReply is a handler's answer to an error from authed: the refusal's
// reply, or the server error as it is.
func refusalReply(err error) (reply, error) {
	if refusal := (*authRefusal)(nil); errors.As(err, &refusal) {
		return refusal.reply, nil
	}
	return reply{}, err
}

// capabilitiesJSON is the matrix as the reference re-emits it (schema key
// order), never null.
func capabilitiesJSON(caps []protocol.Capability) []byte {
	if caps == nil {
		caps = []protocol.Capability{}
	}
	return protocol.MustMarshal(caps)
}

// claim is wire.md §8.2. Without a grant authority granted stubs go out as
// the store minted them; with one, see authorGrants.
func (r *Relay) claim(req *request) (reply, error) {
	dev, in, err := authed(r, req, presenceRemembered, protocol.DecodeClaimRequest)
	if err != nil {
		return refusalReply(err)
	}
	if in.RunnerID != dev.runnerID {
		return runnerMismatch, nil
	}
	kinds := capabilityKinds(in.Capabilities)
	claim := store.ClaimInput{
		RunnerID: dev.runnerID,
		Owner:    dev.owner,
		Device:   dev.identity,
		Routes:   req.proj.RoutesFor(dev.owner),
		Kinds:    kinds,
		Max:      in.Max,
		LeaseMs:  r.leaseMs,
		// A remembered key set is checked against the presence record
		// inside the claim itself, so the claim records what a presence
		// read just before it would have found.
		RequirePresence: dev.remembered,
	}
	local := time.Now().UnixMilli()
	granted, verified, err := r.store.ClaimVerified(req.ctx, claim)
	if errors.Is(err, store.ErrPresenceChanged) {
		r.presence.forget(dev.runnerID)
		if claim.Device, err = r.reconcilePresence(req.ctx, dev); err != nil {
			return reply{}, fmt.Errorf("claim: %w", err)
		}
		claim.RequirePresence = false
		granted, verified, err = r.store.ClaimVerified(req.ctx, claim)
	}
	if verified {
		// The claim read the record and found the remembered owner and
		// key set, as a reconciliation would have: the fetch and result
		// of what it granted need not read it again (presenceCheckTTL).
		r.presence.note(dev.runnerID, dev.owner, dev.identity, dev.projected.Identity, local)
	}
	if lost := (*store.UnansweredClaim)(nil); errors.As(err, &lost) {
		// Answered 503 below; the daemon will never see these leases.
		r.returns.add(lost)
	}
	if err != nil {
		return reply{}, fmt.Errorf("claim: %w", err)
	}
	r.work.Claimed(req.ctx, len(granted))
	var jobs [][]byte
	if r.grants != nil {
		// The store's claim has committed; the authority is asked now,
		// outside any script, about jobs this runner has really won.
		jobs = r.authorGrants(req, dev, capabilitiesJSON(in.Capabilities), granted)
	} else {
		jobs = make([][]byte, 0, len(granted))
		for _, g := range granted {
			jobs = append(jobs, claimedStubJSON(g))
		}
	}
	return ok200(newObj().raw("jobs", jsonArr(jobs)).val("leaseMs", r.leaseMs)), nil
}

// capabilityKinds is the distinct kinds of a capability matrix, in order.
func capabilityKinds(m []protocol.Capability) []string {
	seen := map[string]bool{}
	kinds := []string{}
	for _, c := range m {
		if !seen[c.Kind] {
			seen[c.Kind] = true
			kinds = append(kinds, c.Kind)
		}
	}
	return kinds
}

// claimedStubJSON is the stored stub's keys followed by "lease".
func claimedStubJSON(g store.ClaimedStub) []byte {
	stub := []byte(g.Stub)
	lease := protocol.MustMarshal(g.Lease)
	if len(stub) < 2 || stub[0] != '{' || stub[len(stub)-1] != '}' {
		// The store only grants stubs that parse; this is a broken invariant.
		panic("relay: claimed stub is not a JSON object")
	}
	out := make([]byte, 0, len(stub)+len(lease)+10)
	out = append(out, stub[:len(stub)-1]...)
	if len(stub) > 2 {
		out = append(out, ',')
	}
	out = append(out, `"lease":`...)
	out = append(out, lease...)
	return append(out, '}')
}

// fetch is wire.md §8.3; the holder is the signer, whatever the body says.
func (r *Relay) fetch(req *request) (reply, error) {
	dev, in, err := authed(r, req, presenceUnused, protocol.DecodeFetchRequest)
	if err != nil {
		return refusalReply(err)
	}
	hi := store.HolderInput{JobID: in.JobID, RunnerID: dev.runnerID, LeaseID: in.LeaseID}
	// Registered before the first read, so a seal landing between that
	// read and the wait still wakes it.
	var sealed <-chan struct{}
	var handed func() []byte
	wait := r.fetchWait > 0
	if wait {
		var done func()
		sealed, handed, done, wait = r.store.AwaitPayload(hi)
		defer done()
	}
	holdFor := func() bool {
		t := time.NewTimer(r.fetchWait)
		defer t.Stop()
		select {
		case <-sealed:
		case <-t.C: // read anyway: a seal whose news was lost
		case <-req.ctx.Done():
			return false // the daemon hung up
		}
		return true
	}
	// A grant made on this replica whose seal it has not heard would read
	// not-ready: wait first, then read once. So would a grant made on
	// another replica whose record plainly still awaits its payload, which
	// costs the server a plain read instead of take.lua's refusal. The read
	// after the wait answers whatever happened meanwhile (sealed,
	// cancelled, expired).
	waited := wait && (r.store.PayloadUnsealed(in.LeaseID) || r.store.GrantAwaitsPayload(req.ctx, hi))
	if waited && !holdFor() {
		return holderRefusal(store.RefusedNotReady), nil
	}
	// take reads the payload, unless a seal on this replica took it for
	// this fetch: the job is running then, as after a take, and there is
	// nothing left to read.
	take := func() (store.TakeResult, error) {
		if handed != nil {
			if env := handed(); env != nil {
				return store.TakeResult{Envelope: env}, nil
			}
		}
		return r.store.TakePayload(req.ctx, hi)
	}
	taken, err := take()
	if err != nil {
		return reply{}, fmt.Errorf("fetch: %w", err)
	}
	if taken.Refused == store.RefusedNotReady && wait && !waited {
		if !holdFor() {
			return holderRefusal(taken.Refused), nil
		}
		if taken, err = take(); err != nil {
			return reply{}, fmt.Errorf("fetch: %w", err)
		}
	}
	if taken.Refused != "" {
		return holderRefusal(taken.Refused), nil
	}
	return ok200(newObj().raw("envelope", taken.Envelope)), nil
}

// result is wire.md §8.4: size rule, then complete.
func (r *Relay) result(req *request) (reply, error) {
	dev, in, err := authed(r, req, presenceUnused, protocol.DecodeResultRequest)
	if err != nil {
		return refusalReply(err)
	}
	env := in.Envelope
	if n := protocol.EnvelopeBytes(env); n > protocol.MaxEnvelopeBytes {
		return refused(protocol.EnvelopeTooLarge(n)), nil
	}
	envelopeJSON := protocol.MustMarshal(env)
	done, err := r.store.Complete(req.ctx, store.CompleteInput{
		JobID:       in.JobID,
		RunnerID:    dev.runnerID,
		LeaseID:     in.LeaseID,
		Envelope:    envelopeJSON,
		Disposition: in.Disposition,
	})
	if err != nil {
		return reply{}, fmt.Errorf("result: %w", err)
	}
	if done.Accepted && !done.Duplicate {
		r.work.Completed(req.ctx, strings.TrimSpace(env.RecipientKeyID))
	}
	switch {
	case done.Refused != "":
		return holderRefusal(done.Refused), nil
	case done.Duplicate:
		return reply{status: 200, body: []byte(`{"accepted":false,"duplicate":true,"state":"done"}`)}, nil
	default:
		return reply{status: 200, body: []byte(`{"accepted":true,"state":"done"}`)}, nil
	}
}

// updateTo is updateOfferFor (wire.md §14.4) plus one fence the reference
// lacks (§17.33): an offer never names a version older than, or equal to,
// the one the daemon runs.
func (r *Relay) updateTo(daemonVersion string) (string, bool) {
	if !protocol.UpdateOfferAllowed(r.updateOffer, daemonVersion) {
		return "", false
	}
	if c, ok := protocol.CompareVersions(r.updateOffer, daemonVersion); !ok || c <= 0 {
		return "", false
	}
	return r.updateOffer, true
}

type succession struct {
	Succeeds      []protocol.Succession `json:"succeeds"`
	RetiringUntil int64                 `json:"retiringUntil,omitempty"`
}

// heartbeat is wire.md §8.5: floor, sweep, seen, then the pinned sites and
// lease renewal.
func (r *Relay) heartbeat(req *request) (reply, error) {
	// A remembered key set is checked inside the presence write itself
	// (store.HeartbeatInput.RequirePresence), so an idle heartbeat reads
	// no presence record of its own: the write is its only Valkey call.
	dev, in, err := authed(r, req, presenceRemembered, protocol.DecodeHeartbeatRequest)
	if err != nil {
		return refusalReply(err)
	}
	daemonVersion := in.DaemonVersion
	if refusal := protocol.BelowFloorCheck(daemonVersion, r.floor); refusal != nil {
		return refused(refusal), nil
	}
	now := r.now()
	if err := r.sweep(req.ctx); err != nil {
		return reply{}, fmt.Errorf("heartbeat: sweep: %w", err)
	}
	pinned := req.proj.SitesFor(dev.owner)
	beat := store.HeartbeatInput{
		Presence: store.Presence{
			RunnerID:     dev.runnerID,
			Owner:        dev.owner,
			Device:       dev.identity,
			Capabilities: capabilitiesJSON(in.Capabilities),
			Withheld:     withheldJSON(in.Withheld),
		},
		RequirePresence: dev.remembered,
		Cancels:         len(pinned) > 0,
	}
	active := in.ActiveLeases
	if active == nil {
		active = []protocol.GrantRef{}
	}
	if len(pinned) > 0 {
		// Renewed with the presence write where the store can (one call
		// for a busy device's heartbeat); the reference renews only when
		// the owner has sites, and otherwise reports every lease lost.
		beat.Renew = &store.RenewInput{RunnerID: dev.runnerID, Leases: active, LeaseMs: r.leaseMs}
	}
	if len(in.ActiveLeases) == 0 {
		// A device running nothing: if the work view knows its next claim
		// would find nothing, its presence write may wait longer to share
		// a call (store.HeartbeatInput.Idle).
		beat.Idle = &store.IdleClaim{Routes: req.proj.RoutesFor(dev.owner), Kinds: capabilityKinds(in.Capabilities)}
	}
	local := time.Now().UnixMilli()
	hb, err := r.store.Heartbeat(req.ctx, beat)
	if errors.Is(err, store.ErrPresenceChanged) {
		// The record is gone or was re-keyed since this replica last read
		// it: read and reconcile, as a heartbeat without a memory does.
		r.presence.forget(dev.runnerID)
		if beat.Device, err = r.reconcilePresence(req.ctx, dev); err != nil {
			return reply{}, fmt.Errorf("heartbeat: %w", err)
		}
		beat.RequirePresence = false
		hb, err = r.store.Heartbeat(req.ctx, beat)
	}
	if err != nil {
		return reply{}, fmt.Errorf("heartbeat: seen: %w", err)
	}
	if beat.RequirePresence {
		// The write found the record holding exactly the remembered owner
		// and key set, which is what a reconciliation would have read:
		// the fetches and results that follow need not read it again
		// (presenceCheckTTL).
		r.presence.note(dev.runnerID, dev.owner, dev.identity, dev.projected.Identity, local)
	}

	var successions orderedObj
	awaiting := []string{}
	for _, s := range pinned {
		k := protocol.KeyID(s.Site.Identity)
		if len(s.Succeeds) > 0 {
			successions.set(k, protocol.MustMarshal(succession{Succeeds: s.Succeeds, RetiringUntil: s.RetiringUntil}))
		}
		if !req.proj.MayRouteFor(dev.owner, s.SiteID) {
			awaiting = append(awaiting, k)
		}
	}

	cancel, lost := []protocol.GrantRef{}, active
	if len(pinned) > 0 {
		cancel, lost = hb.Cancel, hb.Renew.Lost
	}
	if cancel == nil {
		cancel = []protocol.GrantRef{}
	}
	if lost == nil {
		lost = []protocol.GrantRef{}
	}

	out := newObj().raw("sites", sitesJSON(pinned))
	if len(successions.keys) > 0 {
		out.raw("successions", successions.bytes())
	}
	if offer, ok := r.updateTo(daemonVersion); ok {
		out.val("updateTo", offer)
	}
	return ok200(out.
		val("awaitingConsent", awaiting).
		val("cancel", cancel).
		val("lost", lost).
		val("serverTime", now)), nil
}

// release is wire.md §8.6.
func (r *Relay) release(req *request) (reply, error) {
	dev, in, err := authed(r, req, presenceUnused, protocol.DecodeReleaseRequest)
	if err != nil {
		return refusalReply(err)
	}
	released, err := r.store.ReleaseLeases(req.ctx, store.ReleaseInput{
		RunnerID: dev.runnerID,
		Leases:   in.Leases,
		Reason:   in.Reason,
	})
	if err != nil {
		return reply{}, fmt.Errorf("release: %w", err)
	}
	if released == nil {
		released = []string{}
	}
	return ok200(newObj().val("released", released)), nil
}

func withheldJSON(w []protocol.WithheldKind) []byte {
	if w == nil {
		w = []protocol.WithheldKind{}
	}
	return protocol.MustMarshal(w)
}
