package projectionsync

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/byollm/relay-go/internal/projection"
	"github.com/byollm/relay-go/internal/protocol"
)

// FuzzMergeDocs is the admin merge (POST /projection/merge) without Valkey:
// a merge either refuses with a message naming the body or the stored
// document, or yields a valid canonical document; merging the same patch
// again changes nothing more; a stored document merged with itself, with
// empty lists or with {} is unchanged.
func FuzzMergeDocs(f *testing.F) {
	raw, err := os.ReadFile("../projection/testdata/zod_fixtures.json")
	if err != nil {
		f.Fatal(err)
	}
	var rows [][3]any
	if err := json.Unmarshal(raw, &rows); err != nil {
		f.Fatal(err)
	}
	patches := []string{emptyLists, `{}`, `{"consents":[` + consent("alice", true) + `]}`,
		`{"devices":[` + device(`r\ud800`) + `,` + device(`r\udbff`) + `,` + device(`r\ufffd`) + `]}`,
		`{"consents":[{"owner":"a\u0000","siteId":"b"},{"owner":"a","siteId":"\u0000b"}]}`}
	bases := []string{string(emptyDoc().canon), fixture(consent("alice", false), consent("bob", true))}
	for _, r := range rows {
		bases = append(bases, r[0].(string))
		if r[1].(bool) {
			patches = append(patches, r[0].(string))
		}
	}
	for i, b := range bases {
		f.Add([]byte(b), []byte(patches[i%len(patches)]))
	}
	for _, p := range patches {
		f.Add([]byte(bases[1]), []byte(p))
	}
	f.Fuzz(func(t *testing.T, base, patch []byte) {
		d, err := mergeDocs(base, patch)
		pf, perr := projection.ParsePatch(patch)
		if perr != nil {
			if err == nil || !strings.HasPrefix(err.Error(), "merge body: ") {
				t.Fatalf("patch refused by ParsePatch (%v); mergeDocs: %v", perr, err)
			}
			return
		}
		b, berr := decodeDoc(base)
		if berr != nil {
			if err == nil || !strings.HasPrefix(err.Error(), "stored projection: ") {
				t.Fatalf("base refused (%v); mergeDocs: %v", berr, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("valid base and patch, merge refused: %v", err)
		}
		if again, err := decodeDoc(d.canon); err != nil || !bytes.Equal(again.canon, d.canon) {
			t.Fatalf("merged document %s not canonical and valid: %v", d.canon, err)
		}
		if twice, err := mergeDocs(d.canon, patch); err != nil || !bytes.Equal(twice.canon, d.canon) {
			t.Fatalf("merging the patch again changed the document:\n%s\n%s (%v)", d.canon, twice.canon, err)
		}
		for _, same := range [][]byte{base, b.canon, []byte(emptyLists), []byte(`{}`)} {
			if got, err := mergeDocs(base, same); err != nil || !bytes.Equal(got.canon, b.canon) {
				t.Fatalf("merging %s into itself/nothing changed it:\n%s\n%s (%v)", same, b.canon, got.canon, err)
			}
		}
		// A merge only replaces and appends: no array shrinks, none grows
		// by more than the patch holds.
		p := fromFixture(pf).counts
		for i, c := range [][3]int{{d.counts.Sites, b.counts.Sites, p.Sites}, {d.counts.Consents, b.counts.Consents, p.Consents},
			{d.counts.Devices, b.counts.Devices, p.Devices}, {d.counts.Rosters, b.counts.Rosters, p.Rosters}, {d.counts.Revoked, b.counts.Revoked, p.Revoked}} {
			if c[0] < c[1] || c[0] > c[1]+c[2] {
				t.Fatalf("array %d: %d records after merging %d into %d", i, c[0], c[2], c[1])
			}
		}
	})
}

// FuzzMergeIDs: records are the same record exactly when their ids are the
// same JS string (the same UTF-16 units), the reference's JSON.stringify
// keys. Three runner ids make as many devices as distinct strings among
// them, and three (owner, siteId) pairs as many consents as distinct pairs.
func FuzzMergeIDs(f *testing.F) {
	f.Add("r\xed\xa0\x80", "r\xed\xaf\xbf", "r\ufffd")
	f.Add("a\x00", "b", "\x00b")
	f.Add("r", "r", "s")
	f.Add("\U0001F600", "\xed\xa0\xbd\xed\xb8\x80", "\xff")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		ids := []string{a, b, c}
		var js []string // each id as the JS string JSON.parse gives
		for _, id := range ids {
			v, err := protocol.ParseJSON(protocol.AppendJSString(nil, id))
			if err != nil {
				t.Fatalf("%q: %v", id, err)
			}
			if v.(string) == "" {
				return // ids must be non-empty
			}
			js = append(js, v.(string))
		}
		var devices, consents []string
		for i, id := range ids {
			devices = append(devices, `{"owner":"o","runnerId":`+string(protocol.AppendJSString(nil, id))+
				`,"device":{"identity":"aWQ","encryption":"ZW5j","encryptionSig":"c2ln"}}`)
			next := ids[(i+1)%3]
			consents = append(consents, `{"owner":`+string(protocol.AppendJSString(nil, id))+`,"siteId":`+string(protocol.AppendJSString(nil, next))+`}`)
		}
		// One merge with all three, and three merges of one each.
		patch := `{"devices":[` + strings.Join(devices, ",") + `],"consents":[` + strings.Join(consents, ",") + `]}`
		all, err := mergeDocs(emptyDoc().canon, []byte(patch))
		if err != nil {
			t.Fatalf("merge %s: %v", patch, err)
		}
		doc := emptyDoc().canon
		for i := range ids {
			d, err := mergeDocs(doc, []byte(`{"devices":[`+devices[i]+`],"consents":[`+consents[i]+`]}`))
			if err != nil {
				t.Fatal(err)
			}
			doc = d.canon
		}
		if !bytes.Equal(doc, all.canon) {
			t.Fatalf("one merge:\n%s\nthree merges:\n%s", all.canon, doc)
		}
		distinct := map[string]bool{}
		pairs := map[[2]string]bool{}
		for i := range js {
			distinct[js[i]] = true
			pairs[[2]string{js[i], js[(i+1)%3]}] = true
		}
		if all.counts.Devices != len(distinct) || all.counts.Consents != len(pairs) {
			t.Fatalf("ids %q: %d devices, %d consents; want %d, %d", js, all.counts.Devices, all.counts.Consents, len(distinct), len(pairs))
		}
		p := all.proj
		for i, id := range js {
			if d := p.DeviceFor(id); d == nil || d.RunnerID != id {
				t.Fatalf("DeviceFor(%q) = %+v", id, d)
			}
			if c := p.ConsentFor(id, js[(i+1)%3]); c == nil || c.Owner != id || c.SiteID != js[(i+1)%3] {
				t.Fatalf("ConsentFor(%q, %q) = %+v", id, js[(i+1)%3], c)
			}
		}
	})
}
