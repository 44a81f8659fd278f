package projection

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"testing"
)

// fixtureSeeds are the documents of testdata/zod_fixtures.json (accepted and
// refused by the reference's RelayFixtureSchema) plus the test world.
func fixtureSeeds(f *testing.F) []string {
	f.Helper()
	raw, err := os.ReadFile("testdata/zod_fixtures.json")
	if err != nil {
		f.Fatal(err)
	}
	var rows [][3]any
	if err := json.Unmarshal(raw, &rows); err != nil {
		f.Fatal(err)
	}
	out := []string{string(world().JSON())}
	for _, r := range rows {
		out = append(out, r[0].(string))
	}
	return out
}

// reversed is f with every array in reverse order: the same records, other
// duplicates last, so merging it exercises replace-in-place.
func reversed(f Fixture) Fixture {
	r := Fixture{Sites: slices.Clone(f.Sites), Consents: slices.Clone(f.Consents), Devices: slices.Clone(f.Devices),
		Rosters: slices.Clone(f.Rosters), Revoked: slices.Clone(f.Revoked)}
	slices.Reverse(r.Sites)
	slices.Reverse(r.Consents)
	slices.Reverse(r.Devices)
	slices.Reverse(r.Rosters)
	slices.Reverse(r.Revoked)
	return r
}

// FuzzParseFixture: an accepted document round-trips through its canonical
// JSON; a patch accepts whatever a document accepts, to the same value;
// merging a document with itself (or with nothing) changes nothing; merging
// a patch twice is merging it once; the lookups find each record's first
// occurrence. Whether Parse refuses what zod refuses is
// TestParseMatchesReference's job (it has the reference's verdicts).
func FuzzParseFixture(f *testing.F) {
	for _, s := range fixtureSeeds(f) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		fx, err := Parse(doc)
		patch, perr := ParsePatch(doc)
		if err != nil {
			return
		}
		if perr != nil || !bytes.Equal(patch.JSON(), fx.JSON()) {
			t.Fatalf("Parse accepted, ParsePatch: %v", perr)
		}
		canon := fx.JSON()
		back, err := Parse(canon)
		if err != nil {
			t.Fatalf("canonical %s refused: %v", canon, err)
		}
		if !bytes.Equal(back.JSON(), canon) {
			t.Fatalf("canonical form not stable:\n%s\n%s", canon, back.JSON())
		}
		if got := Merge(fx, fx).JSON(); !bytes.Equal(got, canon) {
			t.Fatalf("Merge(doc, doc) changed it:\n%s\n%s", canon, got)
		}
		if got := Merge(fx, Fixture{}).JSON(); !bytes.Equal(got, canon) {
			t.Fatalf("Merge(doc, nothing) changed it:\n%s\n%s", canon, got)
		}
		rev := reversed(fx)
		once := Merge(fx, rev)
		if twice := Merge(once, rev); !bytes.Equal(twice.JSON(), once.JSON()) {
			t.Fatalf("merging a patch twice differs from once:\n%s\n%s", once.JSON(), twice.JSON())
		}
		if len(once.Sites) != len(fx.Sites) || len(once.Devices) != len(fx.Devices) {
			t.Fatalf("merging records already there added some: %s", once.JSON())
		}
		if err := Validate(once); err != nil {
			t.Fatalf("a merge of valid documents is invalid: %v", err)
		}
		p := New(fx)
		for _, d := range fx.Devices {
			first := fx.Devices[slices.IndexFunc(fx.Devices, func(e DeviceRecord) bool { return e.RunnerID == d.RunnerID })]
			if got := p.DeviceFor(d.RunnerID); got == nil || *got != first {
				t.Fatalf("DeviceFor(%q) = %+v, first is %+v", d.RunnerID, got, first)
			}
		}
		for _, c := range fx.Consents {
			revoked := slices.ContainsFunc(fx.Revoked, func(r RevocationRecord) bool { return r.Owner == c.Owner && r.SiteID == c.SiteID })
			got := p.ConsentFor(c.Owner, c.SiteID)
			if revoked != (got == nil) {
				t.Fatalf("ConsentFor(%q, %q) = %+v, revoked %v", c.Owner, c.SiteID, got, revoked)
			}
			if got != nil {
				first := fx.Consents[slices.IndexFunc(fx.Consents, func(e ConsentRecord) bool { return e.Owner == c.Owner && e.SiteID == c.SiteID })]
				if *got != first {
					t.Fatalf("ConsentFor(%q, %q) = %+v, first is %+v", c.Owner, c.SiteID, got, first)
				}
			}
		}
	})
}
