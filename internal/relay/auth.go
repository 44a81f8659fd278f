package relay

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
)

// verify checks one key: stale is decided first (wire.md §5.4), then the
// Ed25519 signature over the canonical request.
func verify(identity, endpoint string, sig protocol.RequestSignature, rawBody []byte, now int64) (stale, good bool) {
	good, stale = protocol.VerifyRequest(identity, endpoint, sig.RunnerID, sig.IssuedAt, rawBody, sig.Signature, now)
	return stale, good && !stale
}

// device is an authenticated runner.
type device struct {
	runnerID string
	owner    string
	identity protocol.PublicIdentity // the key set sites seal to (presence's)
	// projected is the projection's key set for the runner; remembered says
	// identity came from this replica's memory of the presence record, not
	// from reading it (see presenceUse).
	projected  protocol.PublicIdentity
	remembered bool
}

// presenceUse says what a daemon handler needs of the presence record.
type presenceUse int

const (
	// presenceRemembered: the device's key set is needed, but a remembered
	// one will do if the handler's store call verifies it atomically
	// (claim: store.ClaimInput.RequirePresence; heartbeat:
	// store.HeartbeatInput.RequirePresence) and reconciles on
	// store.ErrPresenceChanged.
	presenceRemembered presenceUse = iota
	// presenceUnused: the key set is not used (fetch, result, release);
	// within presenceCheckTTL of the last reconciliation nothing is read.
	presenceUnused
)

// presenceCheckTTL is how long a reconciled presence record (right owner,
// right identity key) is taken to still be so by the requests that do not
// use the device's key set (fetch, result, release): within it they skip
// the presence lookup, one Valkey round trip per poll. A heartbeat or a
// claim whose store call verified the remembered record counts as a
// reconciliation, so a busy device is rarely looked up at all: its fetches
// and results follow the claim that granted them. Presence only changes
// owner or keys by being dropped and rebuilt (re-keying, re-pairing, TTL),
// and a rebuild that a skipped lookup would have done is done by the
// runner's next claim or heartbeat instead; no answer depends on it.
const presenceCheckTTL = time.Second

type presenceCheck struct {
	owner, identity string
	device          protocol.PublicIdentity // the record's key set
	until           int64                   // local ms
}

// presenceChecks remembers, per runner, the last reconciled presence.
type presenceChecks struct {
	mu  sync.Mutex
	m   map[string]presenceCheck
	ttl time.Duration // presenceCheckTTL; tests lengthen it
}

// get returns the remembered record of runnerID for this owner and identity
// key, and whether it was reconciled within the TTL.
func (p *presenceChecks) get(runnerID, owner, identity string, now int64) (c presenceCheck, found, fresh bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.m[runnerID]
	if !ok || c.owner != owner || c.identity != identity {
		return presenceCheck{}, false, false
	}
	return c, true, now < c.until
}

func (p *presenceChecks) note(runnerID, owner string, device protocol.PublicIdentity, identity string, now int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil || len(p.m) >= 100_000 { // runners the projection dropped linger; bound them
		p.m = map[string]presenceCheck{}
	}
	ttl := p.ttl
	if ttl == 0 {
		ttl = presenceCheckTTL
	}
	p.m[runnerID] = presenceCheck{owner: owner, identity: identity, device: device, until: now + ttl.Milliseconds()}
}

func (p *presenceChecks) forget(runnerID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.m, runnerID)
}

// daemonAuth is wire.md §5.7 with one deliberate change: the projection, not
// a cached presence record, decides which key a runner signs with and
// whether it exists at all. A device deleted from the projection is not
// recognised, and a re-keyed device must sign with its new key (§17.10 is
// a trap no client depends on). Presence is reconciled after verification,
// as use allows (see presenceUse).
// It returns a refusal, or the device and ok=true.
func (r *Relay) daemonAuth(req *request, use presenceUse) (device, reply, bool, error) {
	sig, signed := protocol.SignatureFromHeaders(req.header, protocol.HeaderRunner)
	if !signed {
		return device{}, notSigned, false, nil
	}
	rec := req.proj.DeviceFor(sig.RunnerID)
	if rec == nil {
		return device{}, runnerUnknown, false, nil
	}
	now := r.now()
	stale, good := verify(rec.Device.Identity, req.endpoint, sig, req.rawBody, now)
	if stale {
		return device{}, clockSkew(now), false, nil
	}
	if !good {
		return device{}, badSignature, false, nil
	}
	dev := device{runnerID: rec.RunnerID, owner: rec.Owner, identity: rec.Device, projected: rec.Device}
	c, found, fresh := r.presence.get(rec.RunnerID, rec.Owner, rec.Device.Identity, time.Now().UnixMilli())
	switch {
	case use == presenceUnused && fresh:
	case use == presenceRemembered && found:
		dev.identity, dev.remembered = c.device, true
	default:
		id, err := r.reconcilePresence(req.ctx, dev)
		if err != nil {
			return device{}, reply{}, false, fmt.Errorf("daemon auth: %w", err)
		}
		dev.identity = id
	}
	if req.proj.RevokedDevice(rec.RunnerID) {
		return device{}, revokedRunner, false, nil
	}
	return dev, reply{}, true, nil
}

// reconcilePresence reads the runner's presence record and returns the key
// set sites seal to: the record's when it holds the projection's owner and
// identity key, else the projection's, after starting the record over.
func (r *Relay) reconcilePresence(ctx context.Context, dev device) (protocol.PublicIdentity, error) {
	local := time.Now().UnixMilli()
	known, err := r.store.PresenceHead(ctx, dev.runnerID)
	if err != nil {
		return protocol.PublicIdentity{}, fmt.Errorf("presence: %w", err)
	}
	id := dev.projected
	switch {
	case known != nil && known.Owner == dev.owner && known.Device.Identity == dev.projected.Identity:
		// The key set presented at pairing (what sites seal to), as the
		// reference uses it.
		id = known.Device
	default:
		if known != nil {
			// The projection re-keyed or re-homed this runner; seen never
			// rewrites device or owner, so start the record over.
			if err := r.store.DropPresence(ctx, dev.runnerID); err != nil {
				return protocol.PublicIdentity{}, fmt.Errorf("drop stale presence: %w", err)
			}
		}
		if _, err := r.store.Seen(ctx, store.Presence{
			RunnerID:     dev.runnerID,
			Owner:        dev.owner,
			Device:       id,
			Capabilities: emptyArray,
			Withheld:     emptyArray,
		}); err != nil {
			return protocol.PublicIdentity{}, fmt.Errorf("rebuild presence: %w", err)
		}
	}
	r.presence.note(dev.runnerID, dev.owner, id, dev.projected.Identity, local)
	return id, nil
}

var emptyArray = []byte("[]")

// siteAuth is wire.md §5.8 up to (not including) the schema: it returns the
// signer's site id.
func (r *Relay) siteAuth(req *request) (string, reply, bool) {
	sig, signed := protocol.SignatureFromHeaders(req.header, protocol.HeaderSite)
	if !signed {
		return "", notSigned, false
	}
	site := req.proj.SiteFor(sig.RunnerID)
	if site == nil {
		return "", siteUnknown, false
	}
	now := r.now()
	keys := []string{site.Site.Identity}
	if site.RetiringUntil != 0 && now < site.RetiringUntil {
		for _, link := range site.Succeeds {
			keys = append(keys, link.Identity.Identity)
		}
	}
	for _, k := range keys {
		stale, good := verify(k, protocol.SiteEndpointPrefix+req.endpoint, sig, req.rawBody, now)
		if stale {
			return "", clockSkew(now), false
		}
		if good {
			return sig.RunnerID, reply{}, true
		}
	}
	return "", badSignature, false
}
