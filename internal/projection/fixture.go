// Package projection is the relay's view of the control plane: the
// RelayFixture of @byollm/relay@0.1.1 (sites, consents, devices, rosters,
// revocations; wire.md §11) and the lookups the planes make against it.
//
// A Projection is immutable once built, so every replica can share one
// between goroutines without locking and swap it whole when the document
// changes.
package projection

import (
	"fmt"

	"github.com/byollm/relay-go/internal/protocol"
)

// SiteRecord is a registered site: the only home of a site's public key.
// Succeeds is the predecessor chain, oldest last (at most 64).
type SiteRecord struct {
	SiteID        string                  `json:"siteId"`
	Site          protocol.PublicIdentity `json:"site"`
	Succeeds      []protocol.Succession   `json:"succeeds,omitempty"`
	RetiringUntil int64                   `json:"retiringUntil,omitempty"` // 0: absent
}

// KeyID is the keyId of the site's current identity.
func (s SiteRecord) KeyID() string { return protocol.KeyID(s.Site.Identity) }

// ConsentRecord says an owner consented to a site. Paused defaults to false.
type ConsentRecord struct {
	Owner  string `json:"owner"`
	SiteID string `json:"siteId"`
	Paused bool   `json:"paused"`
}

// DeviceRecord is an approved device. Revoked false also stands for absent.
type DeviceRecord struct {
	Owner    string                  `json:"owner"`
	RunnerID string                  `json:"runnerId"`
	Device   protocol.PublicIdentity `json:"device"`
	Revoked  bool                    `json:"revoked,omitempty"`
}

// RosterRecord lets its owner's devices run jobs of the members. The owner
// is not implicitly a member.
type RosterRecord struct {
	ID      string   `json:"id"`
	Owner   string   `json:"owner"`
	Members []string `json:"members"`
}

// RevocationRecord is a revoked route: it beats any consent for the pair.
type RevocationRecord struct {
	Owner  string `json:"owner"`
	SiteID string `json:"siteId"`
}

// RevokedRecord is another name for RevocationRecord (the fixture key is
// "revoked").
type RevokedRecord = RevocationRecord

// Fixture is the RelayFixture document. Key order is the reference's.
type Fixture struct {
	Sites    []SiteRecord       `json:"sites"`
	Consents []ConsentRecord    `json:"consents"`
	Devices  []DeviceRecord     `json:"devices"`
	Rosters  []RosterRecord     `json:"rosters"`
	Revoked  []RevocationRecord `json:"revoked"`
}

// JSON is the fixture's canonical encoding (JSON.stringify of the parsed
// fixture: every array present, paused always written, absent optionals
// omitted). Parse(f.JSON()) gives f back.
func (f Fixture) JSON() []byte { return protocol.MustMarshal(f) }

// Parse decodes a RelayFixture document strictly (wire.md §11.1): every
// object strict, consents required, other arrays default to [], succeeds at
// most 64. The error names the first offending field, e.g.
// "devices[2].device.identity: expected string, received number".
func Parse(data []byte) (Fixture, error) { return parse(data, true) }

// ParsePatch decodes the body of a merge: a RelayFixture whose consents may
// be left out too (every absent array is empty, and merging an empty array
// changes nothing). Records are checked exactly as Parse checks them.
func ParsePatch(data []byte) (Fixture, error) { return parse(data, false) }

func parse(data []byte, requireConsents bool) (Fixture, error) {
	v, err := protocol.ParseJSON(protocol.RequestText(data))
	if err != nil {
		return Fixture{}, fmt.Errorf("projection: the document is not valid JSON")
	}
	f, err := decode(v, requireConsents)
	if err != nil {
		return Fixture{}, fmt.Errorf("projection: %w", err)
	}
	return f, nil
}

// Validate checks a fixture built in Go against the same schema as Parse.
func Validate(f Fixture) error {
	_, err := Parse(f.JSON())
	return err
}

// Decode checks a parsed value (protocol.ParseJSON) as a RelayFixture.
func Decode(v any) (Fixture, error) { return decode(v, true) }

func decode(v any, requireConsents bool) (Fixture, error) {
	var f Fixture
	o, err := protocol.StrictObject(v, "", "sites", "consents", "devices", "rosters", "revoked")
	if err != nil {
		return f, err
	}
	if f.Sites, err = optList(o, "sites", decodeSite); err != nil {
		return f, err
	}
	if requireConsents {
		items, p, err := o.Array("consents", 0, -1)
		if err != nil {
			return f, err
		}
		if f.Consents, err = protocol.Each(items, p, decodeConsent); err != nil {
			return f, err
		}
	} else if f.Consents, err = optList(o, "consents", decodeConsent); err != nil {
		return f, err
	}
	if f.Devices, err = optList(o, "devices", decodeDevice); err != nil {
		return f, err
	}
	if f.Rosters, err = optList(o, "rosters", decodeRoster); err != nil {
		return f, err
	}
	f.Revoked, err = optList(o, "revoked", decodeRevocation)
	return f, err
}

func optList[T any](o *protocol.Fields, key string, dec func(any, string) (T, error)) ([]T, error) {
	items, p, present, err := o.OptArray(key, 0, -1)
	if err != nil {
		return nil, err
	}
	if !present {
		return []T{}, nil
	}
	return protocol.Each(items, p, dec)
}

func decodeSite(v any, path string) (SiteRecord, error) {
	var s SiteRecord
	o, err := protocol.StrictObject(v, path, "siteId", "site", "succeeds", "retiringUntil")
	if err != nil {
		return s, err
	}
	if s.SiteID, err = o.String("siteId", 1, -1); err != nil {
		return s, err
	}
	idv, idp, ok := o.Raw("site")
	if !ok {
		return s, &protocol.SchemaError{Path: idp, Msg: "required"}
	}
	if s.Site, err = protocol.DecodePublicIdentity(idv, idp); err != nil {
		return s, err
	}
	items, p, present, err := o.OptArray("succeeds", 0, protocol.MaxSuccessionChain)
	if err != nil {
		return s, err
	}
	if present {
		if s.Succeeds, err = protocol.Each(items, p, protocol.DecodeSuccession); err != nil {
			return s, err
		}
	}
	s.RetiringUntil, _, err = o.OptInt("retiringUntil", 1, protocol.MaxSafeInteger)
	return s, err
}

func decodeConsent(v any, path string) (ConsentRecord, error) {
	var c ConsentRecord
	o, err := protocol.StrictObject(v, path, "owner", "siteId", "paused")
	if err != nil {
		return c, err
	}
	if c.Owner, err = o.String("owner", 1, -1); err != nil {
		return c, err
	}
	if c.SiteID, err = o.String("siteId", 1, -1); err != nil {
		return c, err
	}
	c.Paused, _, err = o.OptBool("paused")
	return c, err
}

func decodeDevice(v any, path string) (DeviceRecord, error) {
	var d DeviceRecord
	o, err := protocol.StrictObject(v, path, "owner", "runnerId", "device", "revoked")
	if err != nil {
		return d, err
	}
	if d.Owner, err = o.String("owner", 1, -1); err != nil {
		return d, err
	}
	if d.RunnerID, err = o.String("runnerId", 1, -1); err != nil {
		return d, err
	}
	idv, idp, ok := o.Raw("device")
	if !ok {
		return d, &protocol.SchemaError{Path: idp, Msg: "required"}
	}
	if d.Device, err = protocol.DecodePublicIdentity(idv, idp); err != nil {
		return d, err
	}
	d.Revoked, _, err = o.OptBool("revoked")
	return d, err
}

func decodeRoster(v any, path string) (RosterRecord, error) {
	var r RosterRecord
	o, err := protocol.StrictObject(v, path, "id", "owner", "members")
	if err != nil {
		return r, err
	}
	if r.ID, err = o.String("id", 1, -1); err != nil {
		return r, err
	}
	if r.Owner, err = o.String("owner", 1, -1); err != nil {
		return r, err
	}
	items, p, err := o.Array("members", 0, -1)
	if err != nil {
		return r, err
	}
	r.Members, err = protocol.Each(items, p, protocol.DecodeStringItem)
	return r, err
}

func decodeRevocation(v any, path string) (RevocationRecord, error) {
	var r RevocationRecord
	o, err := protocol.StrictObject(v, path, "owner", "siteId")
	if err != nil {
		return r, err
	}
	if r.Owner, err = o.String("owner", 1, -1); err != nil {
		return r, err
	}
	r.SiteID, err = o.String("siteId", 1, -1)
	return r, err
}

// Merge upserts patch into base and returns the result; neither input is
// modified. It is the reference host's merge (test/reference/server.mjs):
// records are matched by key (sites by siteId, consents and revocations by
// owner+siteId, devices by runnerId, rosters by id); a match is replaced in
// place (array order matters to the first-match lookups), a new record is
// appended, and records of base that patch does not name are kept. With
// duplicate keys in base the last one is replaced, as the reference's
// new Map(entries) keeps the last index; that also makes Merge(f, f) == f.
//
// Keys compare as exact JS strings: ids are WTF-8 here, so "r\ud800",
// "r\udbff" and "r\ufffd" are three keys, as JSON.stringify keeps them
// apart in the reference, and a pair of ids is a pair, never a joined
// string that two different pairs could spell.
func Merge(base, patch Fixture) Fixture {
	return Fixture{
		Sites:    upsert(base.Sites, patch.Sites, func(s SiteRecord) string { return s.SiteID }),
		Consents: upsert(base.Consents, patch.Consents, func(c ConsentRecord) [2]string { return [2]string{c.Owner, c.SiteID} }),
		Devices:  upsert(base.Devices, patch.Devices, func(d DeviceRecord) string { return d.RunnerID }),
		Rosters:  upsert(base.Rosters, patch.Rosters, func(r RosterRecord) string { return r.ID }),
		Revoked:  upsert(base.Revoked, patch.Revoked, func(r RevocationRecord) [2]string { return [2]string{r.Owner, r.SiteID} }),
	}
}

func upsert[T any, K comparable](base, patch []T, key func(T) K) []T {
	out := make([]T, len(base), len(base)+len(patch))
	copy(out, base)
	at := make(map[K]int, len(out))
	for i, rec := range out {
		at[key(rec)] = i // the last occurrence wins
	}
	for _, rec := range patch {
		k := key(rec)
		if i, ok := at[k]; ok {
			out[i] = rec
			continue
		}
		at[k] = len(out)
		out = append(out, rec)
	}
	return out
}
