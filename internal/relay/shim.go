package relay

// TEMPORARY stand-in for internal/projection,
// that had not landed when this package was written. Each is replaced by the
// real package's type and this file is deleted.

import (
	"sort"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
)

// ---- projection stand-in ----

// Fixture is the RelayFixture.
type Fixture struct {
	Sites    []SiteRecord    `json:"sites"`
	Consents []ConsentRecord `json:"consents"`
	Devices  []DeviceRecord  `json:"devices"`
	Rosters  []RosterRecord  `json:"rosters"`
	Revoked  []RevokedRecord `json:"revoked"`
}

type SiteRecord struct {
	SiteID        string                  `json:"siteId"`
	Site          protocol.PublicIdentity `json:"site"`
	Succeeds      []protocol.Succession   `json:"succeeds,omitempty"`
	RetiringUntil int64                   `json:"retiringUntil,omitempty"`
}
type ConsentRecord struct {
	Owner  string `json:"owner"`
	SiteID string `json:"siteId"`
	Paused bool   `json:"paused"`
}
type DeviceRecord struct {
	Owner    string                  `json:"owner"`
	RunnerID string                  `json:"runnerId"`
	Device   protocol.PublicIdentity `json:"device"`
	Revoked  bool                    `json:"revoked,omitempty"`
}
type RosterRecord struct {
	ID      string   `json:"id"`
	Owner   string   `json:"owner"`
	Members []string `json:"members"`
}
type RevokedRecord struct {
	Owner  string `json:"owner"`
	SiteID string `json:"siteId"`
}

type Projection struct{ fx Fixture }

func NewProjection(fx Fixture) *Projection { return &Projection{fx: fx} }

func (p *Projection) SiteFor(id string) *SiteRecord {
	for i := range p.fx.Sites {
		if p.fx.Sites[i].SiteID == id {
			return &p.fx.Sites[i]
		}
	}
	return nil
}
func (p *Projection) DeviceFor(runnerID string) *DeviceRecord {
	for i := range p.fx.Devices {
		if p.fx.Devices[i].RunnerID == runnerID {
			return &p.fx.Devices[i]
		}
	}
	return nil
}
func (p *Projection) DeviceByFingerprint(identity string) *DeviceRecord {
	for i := range p.fx.Devices {
		if p.fx.Devices[i].Device.Identity == identity {
			return &p.fx.Devices[i]
		}
	}
	return nil
}
func (p *Projection) SiteIDForKey(k string) (string, bool) {
	for _, s := range p.fx.Sites {
		if protocol.KeyID(s.Site.Identity) == k {
			return s.SiteID, true
		}
	}
	return "", false
}
func (p *Projection) RevokedDevice(runnerID string) bool {
	d := p.DeviceFor(runnerID)
	return d != nil && d.Revoked
}
func (p *Projection) ConsentFor(owner, siteID string) *ConsentRecord {
	for _, r := range p.fx.Revoked {
		if r.Owner == owner && r.SiteID == siteID {
			return nil
		}
	}
	for i := range p.fx.Consents {
		if p.fx.Consents[i].Owner == owner && p.fx.Consents[i].SiteID == siteID {
			return &p.fx.Consents[i]
		}
	}
	return nil
}
func (p *Projection) MayRouteFor(owner, siteID string) bool {
	c := p.ConsentFor(owner, siteID)
	return c != nil && !c.Paused
}
func (p *Projection) SitesFor(owner string) []SiteRecord {
	var out []SiteRecord
	for _, s := range p.fx.Sites {
		if p.ConsentFor(owner, s.SiteID) != nil {
			out = append(out, s)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return protocol.LessUTF16(out[i].SiteID, out[j].SiteID) })
	return out
}
func (p *Projection) OwnersRunnableBy(owner string) []string {
	out := []string{owner}
	seen := map[string]bool{owner: true}
	for _, r := range p.fx.Rosters {
		if r.Owner != owner {
			continue
		}
		for _, m := range r.Members {
			if !seen[m] {
				seen[m] = true
				out = append(out, m)
			}
		}
	}
	return out
}
func (p *Projection) RoutesFor(owner string) []storeRoute {
	var out []storeRoute
	for _, s := range p.fx.Sites {
		if !p.MayRouteFor(owner, s.SiteID) {
			continue
		}
		for _, o := range p.OwnersRunnableBy(owner) {
			if p.MayRouteFor(o, s.SiteID) {
				out = append(out, storeRoute{SiteID: s.SiteID, Owner: o})
			}
		}
	}
	return out
}

type storeRoute = store.Route
