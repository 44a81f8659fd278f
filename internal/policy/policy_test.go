package policy

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/grantengine"
	"github.com/byollm/relay-go/internal/projection"
	"github.com/byollm/relay-go/test/relaytest"
)

// backends: the real Valkey/Redis and the embedded default.
func backends(t *testing.T) map[string]func(testing.TB) valkey.Client {
	return map[string]func(testing.TB) valkey.Client{"valkey": relaytest.Client, "embedded": relaytest.Embedded}
}

// newStore opens a policy store in a fresh namespace, deleted afterwards.
func newStore(t *testing.T, open func(testing.TB) valkey.Client) (*Store, valkey.Client, string) {
	t.Helper()
	c := open(t)
	ns := relaytest.Namespace(t, c)
	s, err := NewStore(c, ns)
	if err != nil {
		t.Fatal(err)
	}
	return s, c, ns
}

func str(s string) *string { return &s }

var qwen = grantengine.Mapping{Purpose: "default", Kind: "llm.generate", Service: "qwen", Owner: nil}

// A malformed document is refused whole, with the field named.
func TestParseRefusesMalformedDocuments(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", MaxIDBytes+1)
	for _, tc := range []struct {
		name, doc, want string
		merge           bool
	}{
		{"not json", `{`, "not valid JSON", false},
		{"not an object", `[]`, "expected object", false},
		{"unknown top key", `{"consent":[]}`, `unrecognized key "consent"`, false},
		{"revoke outside merge", `{"revoke":[]}`, `unrecognized key "revoke"`, false},
		{"consents not array", `{"consents":{}}`, "consents: expected array", false},
		{"consent without user", `{"consents":[{"siteId":"s","mappings":[]}]}`, "consents[0].user: required", false},
		{"consent extra key", `{"consents":[{"siteId":"s","user":"u","mappings":[],"x":1}]}`, `consents[0]: unrecognized key "x"`, false},
		{"consent without mappings", `{"consents":[{"siteId":"s","user":"u"}]}`, "consents[0].mappings: required", false},
		{"paused not bool", `{"consents":[{"siteId":"s","user":"u","paused":"yes","mappings":[]}]}`, "consents[0].paused", false},
		{"empty site id", `{"consents":[{"siteId":"","user":"u","mappings":[]}]}`, "consents[0].siteId: too short", false},
		{"NUL in user", `{"consents":[{"siteId":"s","user":"a\u0000b","mappings":[]}]}`, "consents[0].user: holds U+0000", false},
		{"huge user", `{"consents":[{"siteId":"s","user":"` + long + `","mappings":[]}]}`, "consents[0].user: too long", false},
		{"mapping owner number", `{"consents":[{"siteId":"s","user":"u","mappings":[{"purpose":"p","kind":"k","service":"q","owner":7}]}]}`,
			"consents[0].mappings[0].owner: expected string or null", false},
		{"mapping owner absent", `{"consents":[{"siteId":"s","user":"u","mappings":[{"purpose":"p","kind":"k","service":"q"}]}]}`,
			"consents[0].mappings[0].owner: required", false},
		{"mapping without service", `{"consents":[{"siteId":"s","user":"u","mappings":[{"purpose":"p","kind":"k","owner":null}]}]}`,
			"consents[0].mappings[0].service: required", false},
		{"repeated consent", `{"consents":[{"siteId":"s","user":"u","mappings":[]},{"siteId":"s","user":"u","mappings":[]}]}`,
			"consents[1]: repeats consents[0]", false},
		{"team members not strings", `{"teams":[{"owner":"o","members":[1]}]}`, "teams[0].members[0]: expected string", false},
		{"team member repeated", `{"teams":[{"owner":"o","members":["a","a"]}]}`, "teams[0].members[1]: repeats", false},
		{"team repeated", `{"teams":[{"owner":"o","members":[]},{"owner":"o","members":["a"]}]}`, "teams[1]: repeats teams[0]", false},
		{"declares purposes missing", `{"declares":[{"siteId":"s"}]}`, "declares[0].purposes: required", false},
		{"merge revokes what it writes", `{"consents":[{"siteId":"s","user":"u","mappings":[]}],"revoke":[{"siteId":"s","user":"u"}]}`,
			"revoke[0]: withdraws the consent consents[0] writes", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc), tc.merge)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse(%s) = %v, want an error containing %q", tc.doc, err, tc.want)
			}
		})
	}
}

// PUT replaces everything, a merge upserts and withdraws, and GET gives the
// policy back; every write bumps the version.
func TestPutMergeGet(t *testing.T) {
	t.Parallel()
	for name, url := range backends(t) {
		t.Run(name, func(t *testing.T) {
			s, _, _ := newStore(t, url)
			ctx := context.Background()
			if _, v, err := s.Get(ctx); err != nil || v != 0 {
				t.Fatalf("empty: %v %d", err, v)
			}
			first, err := Parse([]byte(`{
				"consents":[{"siteId":"s1","user":"alice","mappings":[{"purpose":"default","kind":"llm.generate","service":"qwen","owner":"bob"}]},
				            {"siteId":"s1","user":"carol","paused":true,"mappings":[]}],
				"teams":[{"owner":"bob","members":["alice","carol"]}],
				"declares":[{"siteId":"s1","purposes":["default","writing"]}]}`), false)
			if err != nil {
				t.Fatal(err)
			}
			if v, err := s.Put(ctx, first); err != nil || v != 1 {
				t.Fatalf("put: %v %d", err, v)
			}
			got, v, err := s.Get(ctx)
			if err != nil || v != 1 || !reflect.DeepEqual(got, first) {
				t.Fatalf("get after put: %v %d\n got %+v\nwant %+v", err, v, got, first)
			}
			snap, err := s.Read(ctx, "s1", "alice", "bob")
			if err != nil || snap.Consented != "yes" || !snap.Member || len(snap.Mappings) != 1 || *snap.Mappings[0].Owner != "bob" ||
				!snap.Declares["writing"] || snap.Declares["chat"] || snap.Now <= 0 {
				t.Fatalf("read: %v %+v", err, snap)
			}
			if snap, _ := s.Read(ctx, "s1", "carol", "bob"); snap.Consented != "paused" {
				t.Fatalf("carol: %+v", snap)
			}
			merge, err := Parse([]byte(`{"consents":[{"siteId":"s2","user":"alice","mappings":[]}],
				"teams":[{"owner":"bob","members":["dave"]}],"revoke":[{"siteId":"s1","user":"carol"}]}`), true)
			if err != nil {
				t.Fatal(err)
			}
			if v, err := s.Merge(ctx, merge); err != nil || v != 2 {
				t.Fatalf("merge: %v %d", err, v)
			}
			got, _, _ = s.Get(ctx)
			if len(got.Consents) != 2 || got.Consents[0].User != "alice" || got.Consents[0].SiteID != "s1" || got.Consents[1].SiteID != "s2" {
				t.Fatalf("consents after merge: %+v", got.Consents)
			}
			if !reflect.DeepEqual(got.Teams, []Team{{Owner: "bob", Members: []string{"dave"}}}) {
				t.Fatalf("teams after merge: %+v", got.Teams)
			}
			if snap, _ := s.Read(ctx, "s1", "alice", "bob"); snap.Member {
				t.Fatal("alice still on bob's team after the merge replaced it")
			}
			// PUT of an empty document empties the policy.
			if _, err := s.Put(ctx, Document{}); err != nil {
				t.Fatal(err)
			}
			if got, _, _ := s.Get(ctx); len(got.Consents)+len(got.Teams)+len(got.Declares) != 0 {
				t.Fatalf("after empty put: %+v", got)
			}
		})
	}
}

// Ids holding ':', '{', '}' and ids of the largest length are kept apart
// and given back exactly; ids the store cannot hold (U+0000, too long) are
// refused before anything is written.
func TestOddIDsNeitherCorruptNorCollide(t *testing.T) {
	t.Parallel()
	for name, url := range backends(t) {
		t.Run(name, func(t *testing.T) {
			s, _, _ := newStore(t, url)
			ctx := context.Background()
			long := strings.Repeat("{:}", MaxIDBytes/3)
			pairs := [][2]string{{"a", "b:c"}, {"a:b", "c"}, {"{x}", "y"}, {"{x", "}y"}, {long, long[:MaxIDBytes-1]}, {"a:", "b"}, {"a", ":b"}}
			for i, p := range pairs {
				m := []grantengine.Mapping{{Purpose: "p", Kind: "k", Service: "svc" + string(rune('0'+i)), Owner: str(p[0])}}
				if err := s.Consent(ctx, p[0], p[1], m); err != nil {
					t.Fatalf("consent %q: %v", p, err)
				}
				if err := s.AddMember(ctx, p[0], p[1]); err != nil {
					t.Fatal(err)
				}
			}
			for i, p := range pairs {
				snap, err := s.Read(ctx, p[0], p[1], p[0])
				if err != nil || snap.Consented != "yes" || !snap.Member || len(snap.Mappings) != 1 ||
					snap.Mappings[0].Service != "svc"+string(rune('0'+i)) || *snap.Mappings[0].Owner != p[0] {
					t.Fatalf("pair %d %q: %v %+v", i, p, err, snap)
				}
			}
			// The boundaries moved: none of these were written.
			for _, p := range [][2]string{{"ab", "c"}, {"a", "b"}, {"{x}y", "y"}, {"a", "b:"}} {
				if snap, _ := s.Read(ctx, p[0], p[1], p[0]); snap.Consented != "no" || snap.Member {
					t.Fatalf("%q reads %+v", p, snap)
				}
			}
			got, v, err := s.Get(ctx)
			if err != nil || len(got.Consents) != len(pairs) {
				t.Fatalf("get: %v %d consents", err, len(got.Consents))
			}
			for _, p := range pairs {
				found := false
				for _, c := range got.Consents {
					found = found || (c.SiteID == p[0] && c.User == p[1])
				}
				if !found {
					t.Fatalf("pair %q not given back", p)
				}
			}
			// Refused before any write: the version does not move.
			for _, bad := range [][2]string{{"a\x00b", "c"}, {"a", strings.Repeat("u", MaxIDBytes+1)}} {
				if err := s.Consent(ctx, bad[0], bad[1], nil); err == nil {
					t.Fatalf("consent %q accepted", bad)
				}
				if err := s.AddMember(ctx, bad[0], bad[1]); err == nil {
					t.Fatalf("member %q accepted", bad)
				}
				if _, err := s.Read(ctx, bad[0], bad[1], "o"); err == nil {
					t.Fatalf("read %q answered", bad)
				}
			}
			if _, v2, _ := s.Get(ctx); v2 != v {
				t.Fatalf("version moved from %d to %d on refused writes", v, v2)
			}
		})
	}
}

// A paused consent stays paused across a resume of another pair, and
// consenting again lifts a pause (MemoryPolicyStore.consent).
func TestPauseResume(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t, relaytest.Embedded)
	ctx := context.Background()
	if err := s.Consent(ctx, "s", "u", []grantengine.Mapping{qwen}); err != nil {
		t.Fatal(err)
	}
	s.Pause(ctx, "s", "u") //nolint:errcheck
	if snap, _ := s.Read(ctx, "s", "u", "u"); snap.Consented != "paused" || len(snap.Mappings) != 1 {
		t.Fatalf("paused: %+v", snap)
	}
	s.Resume(ctx, "s", "u") //nolint:errcheck
	if snap, _ := s.Read(ctx, "s", "u", "u"); snap.Consented != "yes" {
		t.Fatalf("resumed: %+v", snap)
	}
	s.Pause(ctx, "s", "u")                                //nolint:errcheck
	s.Consent(ctx, "s", "u", []grantengine.Mapping{qwen}) //nolint:errcheck
	if snap, _ := s.Read(ctx, "s", "u", "u"); snap.Consented != "yes" {
		t.Fatalf("re-consented: %+v", snap)
	}
	s.Revoke(ctx, "s", "u") //nolint:errcheck
	if snap, _ := s.Read(ctx, "s", "u", "u"); snap.Consented != "no" || len(snap.Mappings) != 0 {
		t.Fatalf("revoked: %+v", snap)
	}
}

// Check lists every way the projection and the policy disagree, and nothing
// when they agree.
func TestCheckAgainstProjection(t *testing.T) {
	t.Parallel()
	f := projection.Fixture{
		Consents: []projection.ConsentRecord{
			{Owner: "alice", SiteID: "s1"},
			{Owner: "bob", SiteID: "s1", Paused: true},
			{Owner: "carol", SiteID: "s1"},
		},
		Rosters: []projection.RosterRecord{{ID: "r", Owner: "bob", Members: []string{"alice", "carol"}}},
		Revoked: []projection.RevocationRecord{{Owner: "carol", SiteID: "s1"}},
	}
	agree := Document{
		Consents: []Consent{{SiteID: "s1", User: "alice", Mappings: []grantengine.Mapping{qwen}}, {SiteID: "s1", User: "bob", Paused: true}},
		Teams:    []Team{{Owner: "bob", Members: []string{"carol", "alice"}}},
	}
	if drift, n := Check(agree, f); n != 0 {
		t.Fatalf("agreeing documents: %d %v", n, drift)
	}
	disagree := Document{
		Consents: []Consent{{SiteID: "s1", User: "bob"}, {SiteID: "s1", User: "carol"}},
		Teams:    []Team{{Owner: "bob", Members: []string{"alice", "dave"}}},
	}
	drift, n := Check(disagree, f)
	want := []string{
		`consent of "alice" to site "s1": the projection has it (live), the policy does not`,
		`consent of "bob" to site "s1": the projection says paused, the policy says live`,
		`consent of "carol" to site "s1": the policy has it (live), the projection does not`,
		`team of "bob": "carol" is on the projection's roster, not on the policy's team`,
		`team of "bob": "dave" is on the policy's team, not on the projection's roster`,
	}
	if n != len(want) {
		t.Fatalf("%d disagreements, want %d: %v", n, len(want), drift)
	}
	for i, w := range want {
		if !strings.HasPrefix(drift[i], w) {
			t.Errorf("drift[%d] = %q, want it to start %q", i, drift[i], w)
		}
	}
}
