package projection

import (
	"slices"
	"sync"

	"github.com/byollm/relay-go/internal/protocol"
)

// Projection answers the lookups of wire.md §11.2–11.3 over one fixture.
// The first match in array order wins everywhere, as in the reference.
// Records returned by pointer belong to the Projection: callers must not
// modify them (or the slices inside them).
type Projection struct {
	f Fixture

	// First-match indexes, built once.
	siteByID     map[string]int
	siteByKeyID  map[string]int // current identity keyId -> first site
	deviceByRun  map[string]int
	deviceByID   map[string]int // device.identity string -> first device
	consentByKey map[pair]int   // (owner, siteId) -> first consent
	revoked      map[pair]bool
	rostersOf    map[string][]int // roster owner -> rosters in order

	// Derived answers per owner, memoised: a Projection never changes.
	sitesCache  sync.Map // owner -> []SiteRecord
	routesCache sync.Map // owner -> []protocol.Route
}

// pair is an (owner, siteId) key. A struct, not a joined string: any
// separator can also occur inside an id, and then two pairs would collide.
type pair struct{ owner, siteID string }

func pairKey(owner, siteID string) pair { return pair{owner, siteID} }

// New builds a Projection over f. f should come from Parse (or pass
// Validate); New does not check it. The fixture is copied, so later changes
// to f do not reach the Projection.
func New(f Fixture) *Projection {
	f = Fixture{
		Sites:    slices.Clone(f.Sites),
		Consents: slices.Clone(f.Consents),
		Devices:  slices.Clone(f.Devices),
		Rosters:  slices.Clone(f.Rosters),
		Revoked:  slices.Clone(f.Revoked),
	}
	for i := range f.Rosters {
		f.Rosters[i].Members = slices.Clone(f.Rosters[i].Members)
	}
	for i := range f.Sites {
		f.Sites[i].Succeeds = slices.Clone(f.Sites[i].Succeeds)
	}
	p := &Projection{
		f:            f,
		siteByID:     map[string]int{},
		siteByKeyID:  map[string]int{},
		deviceByRun:  map[string]int{},
		deviceByID:   map[string]int{},
		consentByKey: map[pair]int{},
		revoked:      map[pair]bool{},
		rostersOf:    map[string][]int{},
	}
	for i, s := range f.Sites {
		first(p.siteByID, s.SiteID, i)
		first(p.siteByKeyID, s.KeyID(), i)
	}
	for i, d := range f.Devices {
		first(p.deviceByRun, d.RunnerID, i)
		first(p.deviceByID, d.Device.Identity, i)
	}
	for i, c := range f.Consents {
		first(p.consentByKey, pairKey(c.Owner, c.SiteID), i)
	}
	for _, r := range f.Revoked {
		p.revoked[pairKey(r.Owner, r.SiteID)] = true
	}
	for i, r := range f.Rosters {
		p.rostersOf[r.Owner] = append(p.rostersOf[r.Owner], i)
	}
	return p
}

// first records i under k unless an earlier index is there already.
func first[K comparable](m map[K]int, k K, i int) {
	if _, ok := m[k]; !ok {
		m[k] = i
	}
}

// Build parses a document and builds its Projection.
func Build(data []byte) (*Projection, error) {
	f, err := Parse(data)
	if err != nil {
		return nil, err
	}
	return New(f), nil
}

// Empty is the empty projection: all five arrays empty.
func Empty() *Projection { return New(Fixture{}) }

// Fixture returns a copy of the fixture the Projection was built from.
func (p *Projection) Fixture() Fixture {
	return Fixture{
		Sites:    slices.Clone(p.f.Sites),
		Consents: slices.Clone(p.f.Consents),
		Devices:  slices.Clone(p.f.Devices),
		Rosters:  slices.Clone(p.f.Rosters),
		Revoked:  slices.Clone(p.f.Revoked),
	}
}

// JSON is the canonical encoding of the fixture.
func (p *Projection) JSON() []byte { return p.f.JSON() }

// SiteFor is the first site with that id, or nil.
func (p *Projection) SiteFor(siteID string) *SiteRecord {
	if i, ok := p.siteByID[siteID]; ok {
		return &p.f.Sites[i]
	}
	return nil
}

// DeviceFor is the first device with that runner id, or nil.
func (p *Projection) DeviceFor(runnerID string) *DeviceRecord {
	if i, ok := p.deviceByRun[runnerID]; ok {
		return &p.f.Devices[i]
	}
	return nil
}

// DeviceByFingerprint is the first device whose device.identity string
// equals identity exactly (no key decoding), or nil.
func (p *Projection) DeviceByFingerprint(identity string) *DeviceRecord {
	if i, ok := p.deviceByID[identity]; ok {
		return &p.f.Devices[i]
	}
	return nil
}

// SiteIDForKey is the site id of the first site whose current identity has
// that keyId.
func (p *Projection) SiteIDForKey(keyID string) (string, bool) {
	if i, ok := p.siteByKeyID[keyID]; ok {
		return p.f.Sites[i].SiteID, true
	}
	return "", false
}

// RevokedDevice is true iff the first device with that runner id is revoked.
func (p *Projection) RevokedDevice(runnerID string) bool {
	d := p.DeviceFor(runnerID)
	return d != nil && d.Revoked
}

// ConsentFor is nil when a revocation names (owner, siteID), which beats any
// consent; otherwise the first matching consent, paused ones included.
func (p *Projection) ConsentFor(owner, siteID string) *ConsentRecord {
	k := pairKey(owner, siteID)
	if p.revoked[k] {
		return nil
	}
	if i, ok := p.consentByKey[k]; ok {
		return &p.f.Consents[i]
	}
	return nil
}

// MayRouteFor is a live consent: present, not revoked, not paused.
func (p *Projection) MayRouteFor(owner, siteID string) bool {
	c := p.ConsentFor(owner, siteID)
	return c != nil && !c.Paused
}

// PausedFor is a present but paused consent.
func (p *Projection) PausedFor(owner, siteID string) bool {
	c := p.ConsentFor(owner, siteID)
	return c != nil && c.Paused
}

// SitesFor is the pairing set: every site the owner has a consent for,
// paused included, sorted by siteId in JS (UTF-16) order. Sites sharing a
// siteId keep their fixture order. The slice is the caller's.
func (p *Projection) SitesFor(owner string) []SiteRecord {
	if v, ok := p.sitesCache.Load(owner); ok {
		return slices.Clone(v.([]SiteRecord))
	}
	out := []SiteRecord{}
	for _, s := range p.f.Sites {
		if p.ConsentFor(owner, s.SiteID) != nil {
			out = append(out, s)
		}
	}
	slices.SortStableFunc(out, func(a, b SiteRecord) int { return protocol.CompareUTF16(a.SiteID, b.SiteID) })
	p.sitesCache.Store(owner, out)
	return slices.Clone(out)
}

// OwnersRunnableBy is the device owner followed by every member of every
// roster that owner holds, without duplicates, in first-seen order.
func (p *Projection) OwnersRunnableBy(deviceOwner string) []string {
	out := []string{deviceOwner}
	seen := map[string]bool{deviceOwner: true}
	for _, i := range p.rostersOf[deviceOwner] {
		for _, m := range p.f.Rosters[i].Members {
			if !seen[m] {
				seen[m] = true
				out = append(out, m)
			}
		}
	}
	return out
}

// MayRunFor: the same owner, or jobOwner is in a roster deviceOwner holds.
func (p *Projection) MayRunFor(deviceOwner, jobOwner string) bool {
	if deviceOwner == jobOwner {
		return true
	}
	for _, i := range p.rostersOf[deviceOwner] {
		if slices.Contains(p.f.Rosters[i].Members, jobOwner) {
			return true
		}
	}
	return false
}

// RoutesFor is the routing set used by claim: (site, owner) for every site S
// and every owner O runnable by deviceOwner such that both deviceOwner and O
// may route for S. No duplicates; sites in fixture order, then owners in
// OwnersRunnableBy order. The slice is the caller's.
func (p *Projection) RoutesFor(deviceOwner string) []protocol.Route {
	if v, ok := p.routesCache.Load(deviceOwner); ok {
		return slices.Clone(v.([]protocol.Route))
	}
	out := []protocol.Route{}
	seen := map[protocol.Route]bool{}
	owners := p.OwnersRunnableBy(deviceOwner)
	for _, s := range p.f.Sites {
		if !p.MayRouteFor(deviceOwner, s.SiteID) {
			continue
		}
		for _, o := range owners {
			r := protocol.Route{SiteID: s.SiteID, Owner: o}
			if seen[r] || !p.MayRouteFor(o, s.SiteID) {
				continue
			}
			seen[r] = true
			out = append(out, r)
		}
	}
	p.routesCache.Store(deviceOwner, out)
	return slices.Clone(out)
}
