package projection

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/byollm/relay-go/internal/protocol"
)

// Appendix A identities (wire.md): device and site keys from fixed seeds.
var (
	devID = protocol.PublicIdentity{
		Identity:      "iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w",
		Encryption:    "e06Qm75__kTEZaIgA31gjuNYl9Me-XLwf3SJLLD3PxM",
		EncryptionSig: "l1bptkTYnc7hni1u9BsQvFGOhrujZKPaXc0IPHiRxnJb_Eqk2lfTLWNa6dZYRQy_Qu-y-kaI-gBhP0lhCuXZDA",
	}
	siteID = protocol.PublicIdentity{
		Identity:      "gTl3Dqh9F19Wo1Rmw0x-zMuNipG07jeiXfYPW4_Js5Q",
		Encryption:    "BSpQdzrI2Rdz8tyWYuEvDe_pFeQVuKHI4gpaPWqyuEM",
		EncryptionSig: "wEmAUJTOnu5I3bJIT36SFmOK149GxN7E4IL_PnVkPE7M0hQ4pLpFe4neCn9YBV6-hXU07V2WpW0H-Ip4sYUQCg",
	}
	devKeyID  = "BYOLLM-6HTG-Z65X-B7YF-S53D-MHDA-NFMK"
	siteKeyID = "BYOLLM-D8W0-7NFG-B682-M73D-NYY9-Q93J"
)

func ident(tag string) protocol.PublicIdentity {
	return protocol.PublicIdentity{Identity: "id-" + tag, Encryption: "enc-" + tag, EncryptionSig: "sig-" + tag}
}

// world is a fixture exercising every rule: duplicates (first match wins),
// a revocation beating a consent, a paused consent, rosters.
func world() Fixture {
	return Fixture{
		Sites: []SiteRecord{
			{SiteID: "site_b", Site: ident("b")},
			{SiteID: "site_a", Site: siteID},
			{SiteID: "site_a", Site: ident("a-dup")}, // shadowed
			{SiteID: "site_c", Site: ident("c")},
			{SiteID: "site_d", Site: ident("d")},
		},
		Consents: []ConsentRecord{
			{Owner: "alice", SiteID: "site_a"},
			{Owner: "alice", SiteID: "site_a", Paused: true}, // shadowed
			{Owner: "alice", SiteID: "site_b"},
			{Owner: "alice", SiteID: "site_c", Paused: true},
			{Owner: "alice", SiteID: "site_d"},
			{Owner: "bob", SiteID: "site_a"},
			{Owner: "bob", SiteID: "site_b", Paused: true},
			{Owner: "bob", SiteID: "site_d"},
			{Owner: "carol", SiteID: "site_a"},
			{Owner: "carol", SiteID: "site_b"},
		},
		Devices: []DeviceRecord{
			{Owner: "alice", RunnerID: "runner_alice", Device: devID},
			{Owner: "mallory", RunnerID: "runner_alice", Device: ident("m")}, // shadowed by runner id
			{Owner: "bob", RunnerID: "runner_bob", Device: ident("bob"), Revoked: true},
			{Owner: "bob", RunnerID: "runner_bob2", Device: devID}, // shadowed by identity
			{Owner: "carol", RunnerID: "runner_carol", Device: ident("carol")},
			{Owner: "carol", RunnerID: "runner_carol", Device: ident("carol2"), Revoked: true}, // shadowed
		},
		Rosters: []RosterRecord{
			{ID: "r1", Owner: "alice", Members: []string{"bob", "carol"}},
			{ID: "r2", Owner: "alice", Members: []string{"carol", "dave"}},
			{ID: "r3", Owner: "bob", Members: []string{"alice"}},
		},
		Revoked: []RevocationRecord{
			{Owner: "alice", SiteID: "site_d"},
			{Owner: "carol", SiteID: "site_b"},
		},
	}
}

func TestLookups(t *testing.T) {
	p := New(world())

	site := func(id string) string {
		s := p.SiteFor(id)
		if s == nil {
			return "<nil>"
		}
		return s.Site.Identity
	}
	for _, c := range []struct{ id, want string }{
		{"site_a", siteID.Identity}, {"site_b", "id-b"}, {"site_x", "<nil>"}, {"", "<nil>"},
	} {
		if got := site(c.id); got != c.want {
			t.Errorf("SiteFor(%q) = %s, want %s", c.id, got, c.want)
		}
	}

	dev := func(d *DeviceRecord) string {
		if d == nil {
			return "<nil>"
		}
		return d.Owner + "/" + d.RunnerID
	}
	for _, c := range []struct{ runner, want string }{
		{"runner_alice", "alice/runner_alice"}, {"runner_bob", "bob/runner_bob"},
		{"runner_carol", "carol/runner_carol"}, {"nobody", "<nil>"},
	} {
		if got := dev(p.DeviceFor(c.runner)); got != c.want {
			t.Errorf("DeviceFor(%q) = %s, want %s", c.runner, got, c.want)
		}
	}
	for _, c := range []struct{ identity, want string }{
		{devID.Identity, "alice/runner_alice"}, {"id-bob", "bob/runner_bob"},
		{"id-carol2", "carol/runner_carol"}, {"id-nobody", "<nil>"},
		// Exact string equality: a padded encoding of the same key is a
		// different device (its keyId is the same).
		{devID.Identity + "=", "<nil>"},
	} {
		if got := dev(p.DeviceByFingerprint(c.identity)); got != c.want {
			t.Errorf("DeviceByFingerprint(%q) = %s, want %s", c.identity, got, c.want)
		}
	}

	for _, c := range []struct {
		keyID, want string
		ok          bool
	}{
		{siteKeyID, "site_a", true},
		{protocol.KeyID("id-b"), "site_b", true},
		{protocol.KeyID("id-a-dup"), "site_a", true}, // the shadowed record still maps
		{devKeyID, "", false},
		{"BYOLLM-XXXX", "", false},
	} {
		got, ok := p.SiteIDForKey(c.keyID)
		if got != c.want || ok != c.ok {
			t.Errorf("SiteIDForKey(%q) = %q,%v want %q,%v", c.keyID, got, ok, c.want, c.ok)
		}
	}

	for _, c := range []struct {
		runner string
		want   bool
	}{
		{"runner_alice", false}, {"runner_bob", true},
		{"runner_carol", false}, // the revoked duplicate is shadowed
		{"runner_bob2", false}, {"nobody", false},
	} {
		if got := p.RevokedDevice(c.runner); got != c.want {
			t.Errorf("RevokedDevice(%q) = %v, want %v", c.runner, got, c.want)
		}
	}
}

func TestConsentRules(t *testing.T) {
	p := New(world())
	cases := []struct {
		owner, site             string
		consent                 string // "none", "live", "paused"
		mayRoute, paused, sites bool
	}{
		{"alice", "site_a", "live", true, false, true},   // first match: not the paused duplicate
		{"alice", "site_c", "paused", false, true, true}, // paused is still a consent
		{"alice", "site_d", "none", false, false, false}, // revocation beats consent
		{"carol", "site_b", "none", false, false, false}, // revocation beats consent
		{"bob", "site_b", "paused", false, true, true},
		{"bob", "site_c", "none", false, false, false},
		{"dave", "site_a", "none", false, false, false},
		{"alice", "site_x", "live", true, false, false}, // consent to an unregistered site
	}
	p = New(Merge(world(), Fixture{Consents: []ConsentRecord{{Owner: "alice", SiteID: "site_x"}}}))
	for _, c := range cases {
		got := "none"
		if r := p.ConsentFor(c.owner, c.site); r != nil {
			got = "live"
			if r.Paused {
				got = "paused"
			}
		}
		if got != c.consent {
			t.Errorf("ConsentFor(%s,%s) = %s, want %s", c.owner, c.site, got, c.consent)
		}
		if m := p.MayRouteFor(c.owner, c.site); m != c.mayRoute {
			t.Errorf("MayRouteFor(%s,%s) = %v", c.owner, c.site, m)
		}
		if m := p.PausedFor(c.owner, c.site); m != c.paused {
			t.Errorf("PausedFor(%s,%s) = %v", c.owner, c.site, m)
		}
		inSites := false
		for _, s := range p.SitesFor(c.owner) {
			if s.SiteID == c.site {
				inSites = true
			}
		}
		if inSites != c.sites {
			t.Errorf("SitesFor(%s) contains %s = %v", c.owner, c.site, inSites)
		}
	}
}

func siteIDs(ss []SiteRecord) []string {
	out := []string{}
	for _, s := range ss {
		out = append(out, s.SiteID+"="+s.Site.Identity)
	}
	return out
}

func TestSitesFor(t *testing.T) {
	p := New(world())
	cases := []struct {
		owner string
		want  []string
	}{
		// Sorted by siteId; both site_a records are listed (the pairing set
		// filters sites, it does not dedupe them), in fixture order.
		{"alice", []string{"site_a=" + siteID.Identity, "site_a=id-a-dup", "site_b=id-b", "site_c=id-c"}},
		{"bob", []string{"site_a=" + siteID.Identity, "site_a=id-a-dup", "site_b=id-b", "site_d=id-d"}},
		{"carol", []string{"site_a=" + siteID.Identity, "site_a=id-a-dup"}},
		{"dave", []string{}},
	}
	for _, c := range cases {
		if got := siteIDs(p.SitesFor(c.owner)); !reflect.DeepEqual(got, c.want) {
			t.Errorf("SitesFor(%s) = %v, want %v", c.owner, got, c.want)
		}
	}
	// JS order is UTF-16 code units: an astral siteId sorts before U+FF61.
	q := New(Fixture{
		Sites:    []SiteRecord{{SiteID: "\uff61", Site: ident("1")}, {SiteID: "😀", Site: ident("2")}, {SiteID: "Z", Site: ident("3")}, {SiteID: "a", Site: ident("4")}},
		Consents: []ConsentRecord{{Owner: "o", SiteID: "\uff61"}, {Owner: "o", SiteID: "😀"}, {Owner: "o", SiteID: "Z"}, {Owner: "o", SiteID: "a"}},
	})
	want := []string{"Z=id-3", "a=id-4", "😀=id-2", "\uff61=id-1"}
	if got := siteIDs(q.SitesFor("o")); !reflect.DeepEqual(got, want) {
		t.Errorf("UTF-16 order: %v, want %v", got, want)
	}
	// Stable beyond insertion-sort sizes (checked against the reference's
	// Array.prototype.sort with 40 records).
	big := Fixture{Consents: []ConsentRecord{{Owner: "o", SiteID: "s"}, {Owner: "o", SiteID: "t"}}}
	for i := range 40 {
		sid := "s"
		if i%3 == 0 {
			sid = "t"
		}
		big.Sites = append(big.Sites, SiteRecord{SiteID: sid, Site: ident(strconv.Itoa(i))})
	}
	var order []string
	for _, s := range New(big).SitesFor("o") {
		order = append(order, strings.TrimPrefix(s.Site.Identity, "id-"))
	}
	if got, want := strings.Join(order, ","), "1,2,4,5,7,8,10,11,13,14,16,17,19,20,22,23,25,26,28,29,31,32,34,35,37,38,0,3,6,9,12,15,18,21,24,27,30,33,36,39"; got != want {
		t.Errorf("stable order = %s, want %s", got, want)
	}
	// The returned slice is the caller's: changing it leaves the cache alone.
	got := q.SitesFor("o")
	got[0].SiteID = "mutated"
	if again := siteIDs(q.SitesFor("o")); !reflect.DeepEqual(again, want) {
		t.Errorf("cache mutated: %v", again)
	}
}

func TestRostersAndRoutes(t *testing.T) {
	p := New(world())
	owners := []struct {
		owner string
		want  []string
	}{
		{"alice", []string{"alice", "bob", "carol", "dave"}},
		{"bob", []string{"bob", "alice"}},
		{"carol", []string{"carol"}},
		{"nobody", []string{"nobody"}},
	}
	for _, c := range owners {
		if got := p.OwnersRunnableBy(c.owner); !reflect.DeepEqual(got, c.want) {
			t.Errorf("OwnersRunnableBy(%s) = %v, want %v", c.owner, got, c.want)
		}
	}
	for _, c := range []struct {
		dev, job string
		want     bool
	}{
		{"alice", "alice", true}, {"alice", "dave", true}, {"bob", "alice", true},
		{"bob", "carol", false}, {"carol", "alice", false}, {"x", "x", true},
	} {
		if got := p.MayRunFor(c.dev, c.job); got != c.want {
			t.Errorf("MayRunFor(%s,%s) = %v", c.dev, c.job, got)
		}
	}
	r := func(site, owner string) protocol.Route { return protocol.Route{SiteID: site, Owner: owner} }
	routes := []struct {
		owner string
		want  []protocol.Route
	}{
		// alice may route site_b and site_a (site_c paused, site_d revoked).
		// On site_b: bob is paused, carol revoked. On site_a: bob and carol
		// are live, dave has no consent. site_a appears twice in the fixture
		// but each route once.
		{"alice", []protocol.Route{r("site_b", "alice"), r("site_a", "alice"), r("site_a", "bob"), r("site_a", "carol")}},
		// bob: site_a and site_d live (site_b paused); alice is on his roster
		// but revoked on site_d.
		{"bob", []protocol.Route{r("site_a", "bob"), r("site_a", "alice"), r("site_d", "bob")}},
		{"carol", []protocol.Route{r("site_a", "carol")}},
		{"dave", []protocol.Route{}},
	}
	for _, c := range routes {
		if got := p.RoutesFor(c.owner); !reflect.DeepEqual(got, c.want) {
			t.Errorf("RoutesFor(%s) = %v, want %v", c.owner, got, c.want)
		}
		// Memoised answers are stable and independent of the caller's copy.
		got := p.RoutesFor(c.owner)
		if len(got) > 0 {
			got[0].Owner = "mutated"
		}
		if again := p.RoutesFor(c.owner); !reflect.DeepEqual(again, c.want) {
			t.Errorf("RoutesFor(%s) second call = %v", c.owner, again)
		}
	}
}

func TestEmptyAndImmutable(t *testing.T) {
	e := Empty()
	if e.SiteFor("x") != nil || e.DeviceFor("x") != nil || len(e.SitesFor("x")) != 0 || len(e.RoutesFor("x")) != 0 {
		t.Error("empty projection answers something")
	}
	if got := string(e.JSON()); got != `{"sites":[],"consents":[],"devices":[],"rosters":[],"revoked":[]}` {
		t.Errorf("empty JSON = %s", got)
	}
	f := world()
	p := New(f)
	f.Sites[1].SiteID = "changed"
	f.Rosters[0].Members[0] = "changed"
	if p.SiteFor("site_a") == nil || !p.MayRunFor("alice", "bob") {
		t.Error("projection changed with its input")
	}
}

func TestParse(t *testing.T) {
	id := `{"identity":"i","encryption":"e","encryptionSig":"s"}`
	ok := []struct{ doc, canon string }{
		{`{"consents":[]}`, `{"sites":[],"consents":[],"devices":[],"rosters":[],"revoked":[]}`},
		{`{"consents":[{"owner":"o","siteId":"s"}]}`, `{"sites":[],"consents":[{"owner":"o","siteId":"s","paused":false}],"devices":[],"rosters":[],"revoked":[]}`},
		{"\ufeff" + `{"consents":[],"devices":[{"owner":"o","runnerId":"r","device":` + id + `,"revoked":false}]}`,
			`{"sites":[],"consents":[],"devices":[{"owner":"o","runnerId":"r","device":` + id + `}],"rosters":[],"revoked":[]}`},
		{`{"sites":[{"siteId":"s","site":` + id + `,"succeeds":[{"identity":` + id + `,"signature":"x"}],"retiringUntil":1e12}],"consents":[]}`,
			`{"sites":[{"siteId":"s","site":` + id + `,"succeeds":[{"identity":` + id + `,"signature":"x"}],"retiringUntil":1000000000000}],"consents":[],"devices":[],"rosters":[],"revoked":[]}`},
		{`{"consents":[],"rosters":[{"id":"r","owner":"o","members":[]}],"revoked":[{"owner":"o","siteId":"s"}]}`,
			`{"sites":[],"consents":[],"devices":[],"rosters":[{"id":"r","owner":"o","members":[]}],"revoked":[{"owner":"o","siteId":"s"}]}`},
	}
	for _, c := range ok {
		f, err := Parse([]byte(c.doc))
		if err != nil {
			t.Errorf("Parse(%s): %v", c.doc, err)
			continue
		}
		if got := string(f.JSON()); got != c.canon {
			t.Errorf("Parse(%s).JSON() =\n%s\nwant\n%s", c.doc, got, c.canon)
		}
		if err := Validate(f); err != nil {
			t.Errorf("Validate after Parse: %v", err)
		}
	}
	succ := `{"identity":` + id + `,"signature":"x"}`
	chain := func(n int) string { return strings.TrimSuffix(strings.Repeat(succ+",", n), ",") }
	if _, err := Parse([]byte(`{"sites":[{"siteId":"s","site":` + id + `,"succeeds":[` + chain(64) + `]}],"consents":[]}`)); err != nil {
		t.Errorf("64 successions refused: %v", err)
	}
	bad := []struct{ doc, want string }{
		{`{}`, `consents: required`},
		{`{"consents":null}`, `consents: expected array`},
		{`{"consents":[],"extra":[]}`, `unrecognized key "extra"`},
		{`[]`, `expected object`},
		{`{"consents":[]`, `not valid JSON`},
		{`{"consents":[],"devices":[{"owner":"o","runnerId":"r","device":` + id + `},{"owner":"o","runnerId":"r","device":` + id + `},{"owner":"o","runnerId":"r","device":{"identity":1,"encryption":"e","encryptionSig":"s"}}]}`,
			`devices[2].device.identity: expected string`},
		{`{"consents":[],"devices":[{"owner":"o","runnerId":"r","device":` + id + `,"revoked":null}]}`, `devices[0].revoked: expected boolean`},
		{`{"consents":[{"owner":"o","siteId":"s","paused":"no"}]}`, `consents[0].paused: expected boolean`},
		{`{"consents":[{"owner":"","siteId":"s"}]}`, `consents[0].owner: too short`},
		{`{"consents":[],"sites":[{"siteId":"s","site":` + id + `,"retiringUntil":0}]}`, `sites[0].retiringUntil: too small`},
		{`{"consents":[],"sites":[{"siteId":"s","site":` + id + `,"retiringUntil":1.5}]}`, `sites[0].retiringUntil: expected int`},
		{`{"consents":[],"sites":[{"siteId":"s","site":` + id + `,"succeeds":[` + chain(65) + `]}]}`, `sites[0].succeeds: too big`},
		{`{"consents":[],"sites":[{"siteId":"s","site":` + id + `,"succeeds":[{"identity":` + id + `,"signature":"x","extra":1}]}]}`, `sites[0].succeeds[0]: unrecognized key "extra"`},
		{`{"consents":[],"sites":[{"siteId":"s"}]}`, `sites[0].site: required`},
		{`{"consents":[],"rosters":[{"id":"r","owner":"o","members":[""]}]}`, `rosters[0].members[0]: too short`},
		{`{"consents":[],"revoked":[{"owner":"o"}]}`, `revoked[0].siteId: required`},
	}
	for _, c := range bad {
		_, err := Parse([]byte(c.doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%s) err = %v, want %q", c.doc, err, c.want)
		}
	}
	if err := Validate(Fixture{Consents: []ConsentRecord{{Owner: "", SiteID: "s"}}}); err == nil {
		t.Error("Validate accepted an empty owner")
	}
}

func TestMerge(t *testing.T) {
	base := Fixture{
		Sites:    []SiteRecord{{SiteID: "a", Site: ident("a1")}, {SiteID: "b", Site: ident("b1")}},
		Consents: []ConsentRecord{{Owner: "o", SiteID: "a"}, {Owner: "o", SiteID: "b"}},
		Devices:  []DeviceRecord{{Owner: "o", RunnerID: "r1", Device: ident("r1")}},
		Rosters:  []RosterRecord{{ID: "x", Owner: "o", Members: []string{"m"}}},
		Revoked:  []RevocationRecord{{Owner: "o", SiteID: "c"}},
	}
	patch := Fixture{
		Sites:    []SiteRecord{{SiteID: "b", Site: ident("b2")}, {SiteID: "c", Site: ident("c1")}},
		Consents: []ConsentRecord{{Owner: "o", SiteID: "a", Paused: true}, {Owner: "p", SiteID: "a"}},
		Devices:  []DeviceRecord{{Owner: "o", RunnerID: "r1", Device: ident("r1"), Revoked: true}},
		Rosters:  []RosterRecord{{ID: "y", Owner: "o", Members: []string{"n"}}, {ID: "x", Owner: "o", Members: nil}},
		Revoked:  []RevocationRecord{{Owner: "o", SiteID: "c"}, {Owner: "p", SiteID: "b"}},
	}
	got := Merge(base, patch)
	want := Fixture{
		Sites:    []SiteRecord{{SiteID: "a", Site: ident("a1")}, {SiteID: "b", Site: ident("b2")}, {SiteID: "c", Site: ident("c1")}},
		Consents: []ConsentRecord{{Owner: "o", SiteID: "a", Paused: true}, {Owner: "o", SiteID: "b"}, {Owner: "p", SiteID: "a"}},
		Devices:  []DeviceRecord{{Owner: "o", RunnerID: "r1", Device: ident("r1"), Revoked: true}},
		Rosters:  []RosterRecord{{ID: "x", Owner: "o", Members: nil}, {ID: "y", Owner: "o", Members: []string{"n"}}},
		Revoked:  []RevocationRecord{{Owner: "o", SiteID: "c"}, {Owner: "p", SiteID: "b"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Merge =\n%+v\nwant\n%+v", got, want)
	}
	if base.Sites[1].Site.Identity != "id-b1" || len(base.Consents) != 2 {
		t.Error("Merge modified base")
	}
	// An empty patch keeps everything; a duplicate in base has its last
	// occurrence replaced (the reference host's new Map(entries)), which
	// makes merging a document into itself a no-op.
	if got := Merge(base, Fixture{}); !reflect.DeepEqual(got, base) {
		t.Errorf("empty patch changed base: %+v", got)
	}
	dup := Fixture{Sites: []SiteRecord{{SiteID: "a", Site: ident("1")}, {SiteID: "a", Site: ident("2")}}}
	m := Merge(dup, Fixture{Sites: []SiteRecord{{SiteID: "a", Site: ident("3")}}})
	if m.Sites[0].Site.Identity != "id-1" || m.Sites[1].Site.Identity != "id-3" {
		t.Errorf("duplicate replace = %+v", m.Sites)
	}
	if self := Merge(dup, dup); !reflect.DeepEqual(self.Sites, dup.Sites) {
		t.Errorf("Merge(dup, dup) = %+v", self.Sites)
	}
	// Round trip through JSON keeps the merged document.
	back, err := Parse(got.JSON())
	if err != nil {
		t.Fatal(err)
	}
	back.Rosters[0].Members = nil // [] and nil are the same document
	if !reflect.DeepEqual(back, want) {
		t.Errorf("round trip = %+v", back)
	}
}

// TestMergeExactKeys: keys are the exact JS strings. Ids that differ only
// in a lone surrogate, or in where a NUL splits an (owner, siteId) pair,
// are different records, and the lookups keep them apart too.
func TestMergeExactKeys(t *testing.T) {
	patch, err := ParsePatch([]byte(`{"devices":[` +
		`{"owner":"o","runnerId":"r\ud800","device":{"identity":"a","encryption":"b","encryptionSig":"c"}},` +
		`{"owner":"o","runnerId":"r\udbff","device":{"identity":"a","encryption":"b","encryptionSig":"c"}},` +
		`{"owner":"o","runnerId":"r\ufffd","device":{"identity":"a","encryption":"b","encryptionSig":"c"}}],` +
		`"consents":[{"owner":"a\u0000","siteId":"b"},{"owner":"a","siteId":"\u0000b","paused":true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	m := Merge(Fixture{}, patch)
	if len(m.Devices) != 3 || len(m.Consents) != 2 {
		t.Fatalf("merged %d devices, %d consents: %s", len(m.Devices), len(m.Consents), m.JSON())
	}
	p := New(m)
	for _, id := range []string{"r\xed\xa0\x80", "r\xed\xaf\xbf", "r\ufffd"} {
		if d := p.DeviceFor(id); d == nil || d.RunnerID != id {
			t.Errorf("DeviceFor(%q) = %+v", id, d)
		}
	}
	if c := p.ConsentFor("a", "\x00b"); c == nil || !c.Paused {
		t.Errorf(`ConsentFor("a", "\x00b") = %+v, want the paused one`, c)
	}
	if c := p.ConsentFor("a\x00", "b"); c == nil || c.Paused {
		t.Errorf(`ConsentFor("a\x00", "b") = %+v, want the live one`, c)
	}
}

func TestParsePatch(t *testing.T) {
	// consents may be left out of a patch, not of a document.
	if _, err := ParsePatch([]byte(`{"sites":[]}`)); err != nil {
		t.Errorf("ParsePatch without consents: %v", err)
	}
	if _, err := Parse([]byte(`{"sites":[]}`)); err == nil {
		t.Error("Parse accepted a document without consents")
	}
	for doc, want := range map[string]string{
		`[]`:                          "projection: expected object, received array",
		`{"consents":null}`:           "projection: consents: expected array, received null",
		`{"devices":[{"owner":"o"}]}`: "projection: devices[0].runnerId: required",
		`{"robots":[]}`:               `projection: unrecognized key "robots"`,
	} {
		if _, err := ParsePatch([]byte(doc)); err == nil || err.Error() != want {
			t.Errorf("ParsePatch(%s) = %v, want %q", doc, err, want)
		}
	}
}
