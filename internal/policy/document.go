// Package policy is the built-in grant engine's policy (consents with their
// mappings, paused consents, team membership, declared purposes): the
// document operators write through the admin listener or `relay policy
// push`, its strict schema, the Valkey-backed store beside the projection
// (the PolicyStore of @byollm/control-plane, whose published contract it
// passes), and the check of the policy against the projection, so the
// routing filter and the authority cannot disagree unseen.
package policy

import (
	"errors"
	"fmt"
	"strings"

	"github.com/byollm/relay-go/internal/grantengine"
	"github.com/byollm/relay-go/internal/protocol"
)

// MaxIDBytes bounds every id and name in a policy document (the routing
// store's identifier limit).
const MaxIDBytes = 4096

// Consent is one person's consent to one site, with the mappings it carries
// (the mapping is the consent). Paused keeps the mappings and lets no work
// through.
type Consent struct {
	SiteID   string                `json:"siteId"`
	User     string                `json:"user"`
	Paused   bool                  `json:"paused"`
	Mappings []grantengine.Mapping `json:"mappings"`
}

// Team is the people who may use one owner's devices. The owner is not
// implicitly a member (and needs not be: a device always runs its owner's
// work).
type Team struct {
	Owner   string   `json:"owner"`
	Members []string `json:"members"`
}

// Declared is a site's declared purposes. A site with no entry declares
// everything.
type Declared struct {
	SiteID   string   `json:"siteId"`
	Purposes []string `json:"purposes"`
}

// Revocation withdraws one consent (merge documents only).
type Revocation struct {
	SiteID string `json:"siteId"`
	User   string `json:"user"`
}

// Document is a policy document. In a replacing write (PUT) it is the whole
// policy; in a merge it upserts consents by (siteId, user), teams by owner
// (the member list is replaced), declares by siteId, and withdraws the
// consents named in Revoke.
type Document struct {
	Consents []Consent    `json:"consents"`
	Teams    []Team       `json:"teams"`
	Declares []Declared   `json:"declares"`
	Revoke   []Revocation `json:"revoke,omitempty"`
}

// Parse decodes a policy document strictly: unknown keys, wrong types, empty
// or oversized ids, ids holding U+0000, and repeated entries are refused
// whole with an error naming the field (e.g. "policy:
// consents[2].mappings[0].owner: expected string or null, received number").
// merge allows the "revoke" list.
func Parse(data []byte, merge bool) (Document, error) {
	// Keys named twice are refused, not resolved last-wins as JSON.parse
	// does: a document written for the admin listener means one thing.
	v, err := protocol.ParseJSONUnique(protocol.RequestText(data))
	var dup *protocol.DuplicateKeyError
	if errors.As(err, &dup) {
		return Document{}, fmt.Errorf("policy: %w", err)
	}
	if err != nil {
		return Document{}, fmt.Errorf("policy: the document is not valid JSON")
	}
	d, err := decode(v, merge)
	if err != nil {
		return Document{}, fmt.Errorf("policy: %w", err)
	}
	return d, nil
}

func decode(v any, merge bool) (Document, error) {
	d := Document{Consents: []Consent{}, Teams: []Team{}, Declares: []Declared{}}
	allowed := []string{"consents", "teams", "declares"}
	if merge {
		allowed = append(allowed, "revoke")
	}
	o, err := protocol.StrictObject(v, "", allowed...)
	if err != nil {
		return d, err
	}
	if d.Consents, err = list(o, "consents", decodeConsent); err != nil {
		return d, err
	}
	if d.Teams, err = list(o, "teams", decodeTeam); err != nil {
		return d, err
	}
	if d.Declares, err = list(o, "declares", decodeDeclared); err != nil {
		return d, err
	}
	if merge {
		if d.Revoke, err = list(o, "revoke", decodeRevocation); err != nil {
			return d, err
		}
	}
	if err := unique(d.Consents, "consents", "siteId and user", func(c Consent) string { return pair(c.SiteID, c.User) }); err != nil {
		return d, err
	}
	if err := unique(d.Teams, "teams", "owner", func(t Team) string { return t.Owner }); err != nil {
		return d, err
	}
	if err := unique(d.Declares, "declares", "siteId", func(x Declared) string { return x.SiteID }); err != nil {
		return d, err
	}
	if err := unique(d.Revoke, "revoke", "siteId and user", func(r Revocation) string { return pair(r.SiteID, r.User) }); err != nil {
		return d, err
	}
	// A merge that both writes and withdraws one consent says two things.
	seen := map[string]int{}
	for i, c := range d.Consents {
		seen[pair(c.SiteID, c.User)] = i
	}
	for i, r := range d.Revoke {
		if j, ok := seen[pair(r.SiteID, r.User)]; ok {
			return d, &protocol.SchemaError{Path: protocol.IndexPath("revoke", i), Msg: fmt.Sprintf("withdraws the consent consents[%d] writes", j)}
		}
	}
	return d, nil
}

// pair joins two ids unambiguously (ids hold no U+0000).
func pair(a, b string) string { return a + "\x00" + b }

func unique[T any](items []T, field, what string, key func(T) string) error {
	first := make(map[string]int, len(items))
	for i, it := range items {
		k := key(it)
		if j, ok := first[k]; ok {
			return &protocol.SchemaError{Path: protocol.IndexPath(field, i), Msg: fmt.Sprintf("repeats %s[%d] (same %s)", field, j, what)}
		}
		first[k] = i
	}
	return nil
}

func list[T any](o *protocol.Fields, key string, dec func(any, string) (T, error)) ([]T, error) {
	items, p, present, err := o.OptArray(key, 0, -1)
	if err != nil {
		return nil, err
	}
	if !present {
		return []T{}, nil
	}
	return protocol.Each(items, p, dec)
}

// checkID applies the id rules: a non-empty string of at most MaxIDBytes
// bytes without U+0000 (the store's keys encode every other byte).
func checkID(v any, path string) (string, error) {
	s, err := protocol.CheckString(v, path, 1, -1)
	if err != nil {
		return "", err
	}
	if len(s) > MaxIDBytes {
		return "", &protocol.SchemaError{Path: path, Msg: fmt.Sprintf("too long: %d bytes, at most %d", len(s), MaxIDBytes)}
	}
	if strings.IndexByte(s, 0) >= 0 {
		return "", &protocol.SchemaError{Path: path, Msg: "holds U+0000"}
	}
	return s, nil
}

func field(o *protocol.Fields, key string) (string, error) {
	v, p, ok := o.Raw(key)
	if !ok {
		return "", &protocol.SchemaError{Path: p, Msg: "required"}
	}
	return checkID(v, p)
}

func decodeConsent(v any, path string) (Consent, error) {
	var c Consent
	o, err := protocol.StrictObject(v, path, "siteId", "user", "paused", "mappings")
	if err != nil {
		return c, err
	}
	if c.SiteID, err = field(o, "siteId"); err != nil {
		return c, err
	}
	if c.User, err = field(o, "user"); err != nil {
		return c, err
	}
	if c.Paused, _, err = o.OptBool("paused"); err != nil {
		return c, err
	}
	items, p, err := o.Array("mappings", 0, -1)
	if err != nil {
		return c, err
	}
	c.Mappings, err = protocol.Each(items, p, DecodeMapping)
	return c, err
}

// DecodeMapping checks one mapping: {purpose, kind, service, owner: string
// or null}, every key required.
func DecodeMapping(v any, path string) (grantengine.Mapping, error) {
	var m grantengine.Mapping
	o, err := protocol.StrictObject(v, path, "purpose", "kind", "service", "owner")
	if err != nil {
		return m, err
	}
	if m.Purpose, err = field(o, "purpose"); err != nil {
		return m, err
	}
	if m.Kind, err = field(o, "kind"); err != nil {
		return m, err
	}
	if m.Service, err = field(o, "service"); err != nil {
		return m, err
	}
	ov, op, ok := o.Raw("owner")
	if !ok {
		return m, &protocol.SchemaError{Path: op, Msg: "required (null for the mapper's own service)"}
	}
	if ov == nil {
		return m, nil
	}
	if _, isString := ov.(string); !isString {
		return m, &protocol.SchemaError{Path: op, Msg: "expected string or null"}
	}
	owner, err := checkID(ov, op)
	if err != nil {
		return m, err
	}
	m.Owner = &owner
	return m, nil
}

func decodeTeam(v any, path string) (Team, error) {
	var t Team
	o, err := protocol.StrictObject(v, path, "owner", "members")
	if err != nil {
		return t, err
	}
	if t.Owner, err = field(o, "owner"); err != nil {
		return t, err
	}
	items, p, err := o.Array("members", 0, -1)
	if err != nil {
		return t, err
	}
	if t.Members, err = protocol.Each(items, p, checkID); err != nil {
		return t, err
	}
	return t, unique(t.Members, p, "user", func(s string) string { return s })
}

func decodeDeclared(v any, path string) (Declared, error) {
	var d Declared
	o, err := protocol.StrictObject(v, path, "siteId", "purposes")
	if err != nil {
		return d, err
	}
	if d.SiteID, err = field(o, "siteId"); err != nil {
		return d, err
	}
	items, p, err := o.Array("purposes", 0, -1)
	if err != nil {
		return d, err
	}
	if d.Purposes, err = protocol.Each(items, p, checkID); err != nil {
		return d, err
	}
	return d, unique(d.Purposes, p, "purpose", func(s string) string { return s })
}

func decodeRevocation(v any, path string) (Revocation, error) {
	var r Revocation
	o, err := protocol.StrictObject(v, path, "siteId", "user")
	if err != nil {
		return r, err
	}
	if r.SiteID, err = field(o, "siteId"); err != nil {
		return r, err
	}
	r.User, err = field(o, "user")
	return r, err
}
