// Package grantengine is the built-in grant authority for self-hosters: a Go
// port of @byollm/control-plane@0.1.1's ControlPlane (authorGrant and
// satisfiable, wire.md §14.1 and §14.2). It decides from a policy it reads
// (consents with their mappings, pauses, team membership, declared purposes)
// and from what devices advertise (the relay's presence records), and signs
// through a Signer whose key it never needs to hold.
//
// The order of checks, the decline reasons and which of them are permanent
// are the reference's, and test/grants proves it: the same generated cases run
// through this engine and through the published ControlPlane give identical
// decisions, and every grant signed here verifies with @byollm/protocol's
// verifyGrant.
package grantengine

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/byollm/relay-go/internal/grant"
	"github.com/byollm/relay-go/internal/protocol"
)

// ReservedPurpose is the purpose of a job whose stub names none
// (RESERVED_PURPOSE of @byollm/protocol).
const ReservedPurpose = "default"

// Decline reasons (DeclineReason of @byollm/control-plane). Only
// ReasonNotAMember and ReasonNotConsented are permanent.
const (
	ReasonNotAMember        = "not-a-member"
	ReasonNotConsented      = "not-consented"
	ReasonConsentPaused     = "consent-paused"
	ReasonUnmapped          = "unmapped"
	ReasonResolvedElsewhere = "resolved-elsewhere"
	ReasonStoreUnavailable  = "store-unavailable"
)

// permanent are the two facts a queued job cannot outlive: removal from a
// team and withdrawn consent. Everything else is a state its owner can change
// (or a fault of ours), so it is retried.
var permanent = map[string]bool{ReasonNotAMember: true, ReasonNotConsented: true}

// widens lists the offer scopes that reach somebody other than the device
// owner (WIDENING_SCOPES). An allowlist: a scope this build does not know
// stays narrow.
var widens = map[string]bool{"team": true}

// Widens reports whether a capability offered at scope reaches teammates.
func Widens(scope string) bool { return widens[scope] }

// Consent states of a Snapshot.
const (
	ConsentYes    = "yes"
	ConsentPaused = "paused"
	ConsentNo     = "no"
)

// Mapping is one slot a user filled: this site's purpose, for this kind, runs
// on service. Owner is whose service it is; "" (JSON null) means the mapper's
// own.
type Mapping struct {
	Purpose string  `json:"purpose"`
	Kind    string  `json:"kind"`
	Service string  `json:"service"`
	Owner   *string `json:"owner"`
}

// OwnerOr is the mapping's owner, or user when the mapping names none.
func (m Mapping) OwnerOr(user string) string {
	if m.Owner == nil {
		return user
	}
	return *m.Owner
}

// Snapshot is what the policy says about one (site, user, owner) question:
// the PolicySnapshot of @byollm/control-plane.
type Snapshot struct {
	Consented string // ConsentYes, ConsentPaused or ConsentNo
	Member    bool   // may user's work run on owner's devices
	Mappings  []Mapping
	// Declares is the site's declared purposes; nil means the store cannot
	// say (a site with no manifest declares everything).
	Declares map[string]bool
	// Now is the store's clock at the read (ms, Valkey TIME), 0 when unknown.
	Now int64
}

// PolicyReader is the read side of the policy store (PolicyStore.read).
// An error means the store could not answer; it is never a refusal.
type PolicyReader interface {
	Read(ctx context.Context, siteID, user, owner string) (Snapshot, error)
}

// Advertiser says what an owner's devices advertise right now: the
// capabilities of every presence record of that owner.
type Advertiser interface {
	Advertised(ctx context.Context, owner string) ([]protocol.Capability, error)
}

// Engine authors grants and answers satisfiable. Safe for concurrent use.
type Engine struct {
	policy     PolicyReader
	advertised Advertiser
	signer     Signer
	now        func() int64
	newID      func() string
}

// New builds an engine. advertised may be nil: satisfiable then never answers
// "waiting" (the reference's "cannot say"). now may be nil: issuedAt is then
// the store clock returned by the policy read (the relay's Valkey TIME), so a
// grant costs no extra round trip.
func New(policy PolicyReader, advertised Advertiser, signer Signer, now func() int64) (*Engine, error) {
	if policy == nil || signer == nil {
		return nil, errors.New("grantengine: a policy store and a signer are required")
	}
	return &Engine{policy: policy, advertised: advertised, signer: signer, now: now, newID: newGrantID}, nil
}

// WithGrantIDs replaces the grant id source (tests that compare documents).
func (e *Engine) WithGrantIDs(newID func() string) *Engine {
	c := *e
	c.newID = newID
	return &c
}

// Public is the key devices pin at pairing (controlPlanePublic): the signer's.
func (e *Engine) Public() string { return e.signer.Public() }

func newGrantID() string { return "grant_" + uuid.NewString() }

// claimedJob is the part of a ClaimedStub the engine reads.
type claimedJob struct {
	ID    string `json:"id"`
	Owner string `json:"owner"`
	Kind  string `json:"kind"`
}

// AuthorGrant decides one claimed job (ControlPlane.authorGrant). The checks
// run in the reference's order, the first failing one naming the decline:
// consent (not-consented, consent-paused), membership for somebody else's job
// (not-a-member), a mapping for (purpose, kind) (unmapped), the mapped
// service's owner being this device's owner, then this device offering that
// service for that kind at a scope reaching the job's owner
// (resolved-elsewhere). A policy read that fails is a transient
// store-unavailable decline. The error return is for a request the engine
// cannot read (a malformed job or capability matrix) or a signer failure;
// callers treat it as a transient decline.
func (e *Engine) AuthorGrant(ctx context.Context, req grant.Request) (grant.Decision, error) {
	job, err := readJob(req.Job)
	if err != nil {
		return grant.Decision{}, fmt.Errorf("author grant: job: %w", err)
	}
	caps, err := readCapabilities(req.Capabilities)
	if err != nil {
		return grant.Decision{}, fmt.Errorf("author grant: capabilities: %w", err)
	}
	purpose := ReservedPurpose
	if req.HasPurpose {
		purpose = req.Purpose
	}
	owner := req.Owner

	snap, err := e.policy.Read(ctx, req.SiteID, job.Owner, owner)
	if err != nil {
		// Failing closed, transiently: a store blip must not permanently
		// unpick a job from a device.
		return decline(ReasonStoreUnavailable), nil
	}
	switch snap.Consented {
	case ConsentNo:
		return decline(ReasonNotConsented), nil
	case ConsentPaused:
		return decline(ReasonConsentPaused), nil
	}
	// A device always runs its own owner's work; membership is only asked
	// about other people.
	if job.Owner != owner && !snap.Member {
		return decline(ReasonNotAMember), nil
	}
	var mapped *Mapping
	for i := range snap.Mappings {
		if snap.Mappings[i].Purpose == purpose && snap.Mappings[i].Kind == job.Kind {
			mapped = &snap.Mappings[i]
			break
		}
	}
	if mapped == nil {
		return decline(ReasonUnmapped), nil
	}
	// Whose machine before which service: a teammate's "qwen" is not this
	// owner's "qwen".
	if mapped.OwnerOr(job.Owner) != owner {
		return decline(ReasonResolvedElsewhere), nil
	}
	// Offered to this person, not merely present: the owner's own work is
	// exempt by structure, anybody else's needs a widening scope.
	offered := false
	for _, c := range caps {
		if c.Kind == job.Kind && c.Service == mapped.Service && (job.Owner == owner || Widens(c.OfferScope)) {
			offered = true
			break
		}
	}
	if !offered {
		return decline(ReasonResolvedElsewhere), nil
	}

	issuedAt := snap.Now
	if e.now != nil {
		issuedAt = e.now()
	}
	if issuedAt <= 0 {
		return grant.Decision{}, errors.New("author grant: no clock (the policy store returned none and no now was given)")
	}
	claims := Claims{
		GrantID:  e.newID(),
		JobID:    job.ID,
		Site:     req.SiteKey,
		User:     job.Owner,
		Owner:    owner,
		Purpose:  purpose,
		Kind:     job.Kind,
		Service:  mapped.Service,
		IssuedAt: issuedAt,
	}
	doc, err := SignGrant(ctx, e.signer, claims)
	if err != nil {
		return grant.Decision{}, fmt.Errorf("author grant: %w", err)
	}
	return grant.Decision{Granted: doc}, nil
}

func decline(reason string) grant.Decision {
	return grant.Decision{Permanent: permanent[reason], Reason: reason}
}

// Satisfiable answers at enqueue whether this purpose can be served for this
// person (ControlPlane.satisfiable). The relay's "owner" (the job's owner) is
// the engine's "user"; no device is involved yet, so the reader is the person
// themselves (owner = user). Pauses are not looked at (a paused user's job is
// accepted and declined transiently at claim). An error is a store that
// could not answer (the relay answers 503).
func (e *Engine) Satisfiable(ctx context.Context, req grant.SatisfiableRequest) (grant.Verdict, error) {
	user := req.Owner
	snap, err := e.policy.Read(ctx, req.SiteID, user, user)
	if err != nil {
		return "", fmt.Errorf("satisfiable: %w", err)
	}
	purpose := ReservedPurpose
	if req.HasPurpose {
		purpose = req.Purpose
	}
	if snap.Declares != nil && !snap.Declares[purpose] {
		return grant.VerdictNotDeclared, nil
	}
	var forSlot []Mapping
	for _, m := range snap.Mappings {
		if m.Purpose == purpose && m.Kind == req.Kind {
			forSlot = append(forSlot, m)
		}
	}
	if len(forSlot) == 0 {
		return grant.VerdictUnmapped, nil
	}
	if e.advertised == nil {
		// Cannot say, and unknown is not a refusal.
		return grant.VerdictOK, nil
	}
	set, err := e.advertisedSet(ctx, user, forSlot)
	if err != nil {
		return "", fmt.Errorf("satisfiable: advertised: %w", err)
	}
	for _, m := range forSlot {
		if set[AdvertisedKey(m.OwnerOr(user), m.Service)] {
			return grant.VerdictOK, nil
		}
	}
	return grant.VerdictWaiting, nil
}

// AdvertisedKey is the reference's key of an advertised service:
// owner U+0000 service.
func AdvertisedKey(owner, service string) string { return owner + "\x00" + service }

// advertisedSet builds the snapshot's "advertised" set for user, reading only
// the owners the slot's mappings name. A service counts when some device of
// its owner advertises it at a scope that reaches user: any scope for the
// user's own devices, a widening one for a teammate's (a teammate's private
// service would only ever be declined resolved-elsewhere at claim, so the job
// is waiting, not servable).
func (e *Engine) advertisedSet(ctx context.Context, user string, forSlot []Mapping) (map[string]bool, error) {
	set := map[string]bool{}
	seen := map[string]bool{}
	for _, m := range forSlot {
		o := m.OwnerOr(user)
		if seen[o] {
			continue
		}
		seen[o] = true
		caps, err := e.advertised.Advertised(ctx, o)
		if err != nil {
			return nil, err
		}
		for _, c := range AdvertisedServices(o, user, caps) {
			set[AdvertisedKey(o, c)] = true
		}
	}
	return set, nil
}

// AdvertisedServices lists the services of owner's capabilities that reach
// user: all of them when owner is user, those offered at a widening scope
// otherwise.
func AdvertisedServices(owner, user string, caps []protocol.Capability) []string {
	var out []string
	for _, c := range caps {
		if owner == user || Widens(c.OfferScope) {
			out = append(out, c.Service)
		}
	}
	return out
}

// readJob reads the fields the engine needs from a ClaimedStub with
// JSON.parse semantics (WTF-8 strings), so an id holding a lone surrogate is
// signed exactly as the daemon's JSON.stringify will rebuild it.
func readJob(data []byte) (claimedJob, error) {
	v, err := protocol.ParseJSON(data)
	if err != nil {
		return claimedJob{}, err
	}
	o, ok := v.(*protocol.Object)
	if !ok {
		return claimedJob{}, errors.New("not an object")
	}
	var j claimedJob
	for key, dst := range map[string]*string{"id": &j.ID, "owner": &j.Owner, "kind": &j.Kind} {
		if *dst, ok = stringField(o, key); !ok || *dst == "" {
			return claimedJob{}, fmt.Errorf("%s: expected a non-empty string", key)
		}
	}
	return j, nil
}

// readCapabilities reads kind, service and offerScope of each row of a
// capability matrix (absent or null: none).
func readCapabilities(data []byte) ([]protocol.Capability, error) {
	if len(data) == 0 {
		return nil, nil
	}
	v, err := protocol.ParseJSON(data)
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, nil
	}
	rows, ok := v.([]any)
	if !ok {
		return nil, errors.New("not an array")
	}
	out := make([]protocol.Capability, 0, len(rows))
	for i, r := range rows {
		o, ok := r.(*protocol.Object)
		if !ok {
			return nil, fmt.Errorf("[%d]: not an object", i)
		}
		var c protocol.Capability
		c.Kind, _ = stringField(o, "kind")
		c.Service, _ = stringField(o, "service")
		c.OfferScope, _ = stringField(o, "offerScope")
		out = append(out, c)
	}
	return out, nil
}

func stringField(o *protocol.Object, key string) (string, bool) {
	v, ok := o.Get(key)
	if !ok {
		return "", false
	}
	s, ok := v.(string)
	return s, ok
}
