package policy

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"

	"slices"
	"strconv"
	"strings"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/grantengine"
	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/scriptrun"
	"github.com/byollm/relay-go/internal/store"
)

// Store is the policy in Valkey, under the routing store's namespace and
// hash tag (keys in internal/store/doc.go). Every write is one script
// (lua/policy_write.lua), so a replacing write is never seen half done; a
// read is one script that also returns the store clock. Any number of
// replicas share it; it keeps nothing in memory.
type Store struct {
	r     *scriptrun.Runner
	p     string
	read  *scriptrun.Script
	dump  *scriptrun.Script
	write *scriptrun.Script
}

// NewStore prepares the policy scripts for namespace ("" is the routing
// store's default, "byollm"), run on c unobserved and unbounded (tests,
// tools); the relay uses NewStoreOn with its runner.
func NewStore(c valkey.Client, namespace string) (*Store, error) {
	if c == nil {
		return nil, errors.New("policy store: nil valkey client")
	}
	return NewStoreOn(scriptrun.NewRunner(c, scriptrun.Options{}), namespace)
}

// NewStoreOn is NewStore whose calls r runs: observed, bounded and
// classified as the routing store's.
func NewStoreOn(r *scriptrun.Runner, namespace string) (*Store, error) {
	if namespace == "" {
		namespace = store.DefaultNamespace
	}
	if err := store.CheckNamespace(namespace); err != nil {
		return nil, fmt.Errorf("policy store: %w", err)
	}
	load := func(name string) (*scriptrun.Script, error) {
		src, err := store.ScriptSource(name)
		if err != nil {
			return nil, fmt.Errorf("policy store: %w", err)
		}
		sc, err := scriptrun.New(name, src)
		if err != nil {
			return nil, fmt.Errorf("policy store: %w", err)
		}
		return sc, nil
	}
	s := &Store{r: r, p: store.KeyPrefix(namespace)}
	var err error
	if s.read, err = load("policy_read"); err != nil {
		return nil, err
	}
	if s.dump, err = load("policy_dump"); err != nil {
		return nil, err
	}
	if s.write, err = load("policy_write"); err != nil {
		return nil, err
	}
	return s, nil
}

func enc(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func dec(s string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	return string(b), err
}

// field is a consent's hash field: ⟨S⟩:⟨U⟩. base64url holds no ':', so no
// two (site, user) pairs share a field whatever the ids contain.
func consentField(siteID, user string) string { return enc(siteID) + ":" + enc(user) }

func (s *Store) kConsents() string     { return s.p + "pol:c" }
func (s *Store) kPaused() string       { return s.p + "pol:p" }
func (s *Store) kTeamOwners() string   { return s.p + "pol:towners" }
func (s *Store) kDeclares() string     { return s.p + "pol:d" }
func (s *Store) kVersion() string      { return s.p + "pol:v" }
func (s *Store) kTeam(o string) string { return s.p + "pol:t:" + enc(o) }

func (s *Store) writeKeys() []string {
	return []string{s.kConsents(), s.kPaused(), s.kTeamOwners(), s.kDeclares(), s.kVersion()}
}

func (s *Store) exec(ctx context.Context, sc *scriptrun.Script, keys []string, args ...string) (valkey.ValkeyMessage, error) {
	all := append([]string{s.p, "0", "0"}, args...)
	// The migration guard goes last (store.GuardKey), as lib/common.lua,
	// which every policy script includes, expects.
	withGuard := append(keys[:len(keys):len(keys)], store.GuardKey(s.p))
	return s.r.Run(ctx, sc, withGuard, all)
}

// Read answers one (site, user, owner) question (PolicyStore.read,
// grantengine.PolicyReader). Ids the store cannot hold (U+0000, over
// MaxIDBytes) are an error, never a snapshot of somebody else's.
func (s *Store) Read(ctx context.Context, siteID, user, owner string) (grantengine.Snapshot, error) {
	for _, id := range []string{siteID, user, owner} {
		if len(id) > MaxIDBytes || strings.IndexByte(id, 0) >= 0 {
			return grantengine.Snapshot{}, errors.New("policy read: an id holds U+0000 or is over the length limit")
		}
	}
	msg, err := s.exec(ctx, s.read,
		[]string{s.kConsents(), s.kPaused(), s.kTeam(owner), s.kDeclares()},
		consentField(siteID, user), enc(user), enc(siteID))
	if err != nil {
		return grantengine.Snapshot{}, fmt.Errorf("policy read: %w", err)
	}
	parts, err := msg.ToArray()
	if err != nil || len(parts) != 5 {
		return grantengine.Snapshot{}, fmt.Errorf("policy read: reply: %v", err)
	}
	snap := grantengine.Snapshot{Consented: grantengine.ConsentNo, Mappings: []grantengine.Mapping{}}
	if mappings, err := parts[0].ToString(); err == nil {
		if snap.Mappings, err = decodeMappings(mappings); err != nil {
			return grantengine.Snapshot{}, fmt.Errorf("policy read: stored mappings: %w", err)
		}
		snap.Consented = grantengine.ConsentYes
		if paused, _ := parts[1].AsInt64(); paused == 1 {
			snap.Consented = grantengine.ConsentPaused
		}
	}
	member, _ := parts[2].AsInt64()
	snap.Member = member == 1
	if purposes, err := parts[3].ToString(); err == nil {
		list, err := decodeStrings(purposes)
		if err != nil {
			return grantengine.Snapshot{}, fmt.Errorf("policy read: stored purposes: %w", err)
		}
		snap.Declares = make(map[string]bool, len(list))
		for _, p := range list {
			snap.Declares[p] = true
		}
	}
	now, err := parts[4].ToString()
	if err != nil {
		return grantengine.Snapshot{}, fmt.Errorf("policy read: clock: %w", err)
	}
	if snap.Now, err = strconv.ParseInt(now, 10, 64); err != nil {
		return grantengine.Snapshot{}, fmt.Errorf("policy read: clock: %w", err)
	}
	return snap, nil
}

func decodeMappings(text string) ([]grantengine.Mapping, error) {
	v, err := protocol.ParseJSON([]byte(text))
	if err != nil {
		return nil, err
	}
	items, err := protocol.CheckArray(v, "mappings", 0, -1)
	if err != nil {
		return nil, err
	}
	return protocol.Each(items, "mappings", DecodeMapping)
}

func decodeStrings(text string) ([]string, error) {
	v, err := protocol.ParseJSON([]byte(text))
	if err != nil {
		return nil, err
	}
	items, err := protocol.CheckArray(v, "purposes", 0, -1)
	if err != nil {
		return nil, err
	}
	return protocol.Each(items, "purposes", checkID)
}

// change is one policy_write call's sections.
type change struct {
	replace  bool
	consents []Consent
	revokes  []Revocation
	pauses   []struct {
		SiteID, User string
		On           bool
	}
	teams   []Team
	members []struct {
		Owner, User string
		Add         bool
	}
	declares []Declared
}

// apply runs one change; it reports the version after it and whether the
// policy changed (a merge or act that changes nothing keeps the version).
func (s *Store) apply(ctx context.Context, c change) (int64, bool, error) {
	args := []string{"merge"}
	if c.replace {
		args[0] = "replace"
	}
	args = append(args, strconv.Itoa(len(c.consents)))
	for _, x := range c.consents {
		m := x.Mappings
		if m == nil {
			m = []grantengine.Mapping{}
		}
		blob, err := protocol.Marshal(m)
		if err != nil {
			return 0, false, fmt.Errorf("policy write: %w", err)
		}
		args = append(args, consentField(x.SiteID, x.User), string(blob), flag(x.Paused))
	}
	args = append(args, strconv.Itoa(len(c.revokes)))
	for _, x := range c.revokes {
		args = append(args, consentField(x.SiteID, x.User))
	}
	args = append(args, strconv.Itoa(len(c.pauses)))
	for _, x := range c.pauses {
		args = append(args, consentField(x.SiteID, x.User), flag(x.On))
	}
	args = append(args, strconv.Itoa(len(c.teams)))
	for _, t := range c.teams {
		args = append(args, enc(t.Owner), strconv.Itoa(len(t.Members)))
		for _, u := range t.Members {
			args = append(args, enc(u))
		}
	}
	args = append(args, strconv.Itoa(len(c.members)))
	for _, x := range c.members {
		args = append(args, enc(x.Owner), enc(x.User), flag(x.Add))
	}
	args = append(args, strconv.Itoa(len(c.declares)))
	for _, d := range c.declares {
		p := d.Purposes
		if p == nil {
			p = []string{}
		}
		blob, err := protocol.Marshal(p)
		if err != nil {
			return 0, false, fmt.Errorf("policy write: %w", err)
		}
		args = append(args, enc(d.SiteID), string(blob))
	}
	msg, err := s.exec(ctx, s.write, s.writeKeys(), args...)
	if err != nil {
		return 0, false, fmt.Errorf("policy write: %w", err)
	}
	reply, err := msg.ToArray()
	if err != nil || len(reply) != 2 {
		return 0, false, fmt.Errorf("policy write: reply: %v", err)
	}
	v, err1 := reply[0].AsInt64()
	changed, err2 := reply[1].AsInt64()
	if err := errors.Join(err1, err2); err != nil {
		return 0, false, fmt.Errorf("policy write: reply: %w", err)
	}
	return v, changed == 1, nil
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// validate re-checks a Document built in Go (not parsed) with the
// document's own rules, so a Go caller cannot store what a PUT would refuse.
func validate(d Document, merge bool) error {
	if !merge && len(d.Revoke) > 0 {
		return errors.New("policy: revoke: only a merge withdraws consents")
	}
	if d.Consents == nil {
		d.Consents = []Consent{}
	}
	if d.Teams == nil {
		d.Teams = []Team{}
	}
	if d.Declares == nil {
		d.Declares = []Declared{}
	}
	for i := range d.Consents {
		if d.Consents[i].Mappings == nil {
			d.Consents[i].Mappings = []grantengine.Mapping{}
		}
	}
	for i := range d.Teams {
		if d.Teams[i].Members == nil {
			d.Teams[i].Members = []string{}
		}
	}
	for i := range d.Declares {
		if d.Declares[i].Purposes == nil {
			d.Declares[i].Purposes = []string{}
		}
	}
	blob, err := protocol.Marshal(d)
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	_, err = Parse(blob, merge)
	return err
}

// Put replaces the whole policy with d (validated as Parse would). Returns
// the new version.
func (s *Store) Put(ctx context.Context, d Document) (int64, error) {
	if err := validate(d, false); err != nil {
		return 0, err
	}
	v, _, err := s.apply(ctx, change{replace: true, consents: d.Consents, teams: d.Teams, declares: d.Declares})
	return v, err
}

// Merge upserts d into the policy: consents by (siteId, user), teams by
// owner, declares by siteId; Revoke withdraws consents. Returns the
// version after it.
func (s *Store) Merge(ctx context.Context, d Document) (int64, error) {
	v, _, err := s.MergeChanged(ctx, d)
	return v, err
}

// MergeChanged is Merge that also reports whether the policy changed: a
// merge that changes nothing (an empty document, entries written again as
// they are) writes nothing and keeps the version, as the projection's
// empty merge does.
func (s *Store) MergeChanged(ctx context.Context, d Document) (int64, bool, error) {
	if err := validate(d, true); err != nil {
		return 0, false, err
	}
	return s.apply(ctx, change{consents: d.Consents, revokes: d.Revoke, teams: d.Teams, declares: d.Declares})
}

func checkIDs(ids ...string) error {
	for _, id := range ids {
		if _, err := checkID(id, "id"); err != nil {
			return fmt.Errorf("policy: %w", err)
		}
	}
	return nil
}

// Consent records a consent with its mappings and lifts any pause
// (MemoryPolicyStore.consent).
func (s *Store) Consent(ctx context.Context, siteID, user string, mappings []grantengine.Mapping) error {
	if mappings == nil {
		mappings = []grantengine.Mapping{}
	}
	_, err := s.Merge(ctx, Document{Consents: []Consent{{SiteID: siteID, User: user, Mappings: mappings}}})
	return err
}

// Revoke withdraws a consent, its mappings with it.
func (s *Store) Revoke(ctx context.Context, siteID, user string) error {
	_, err := s.Merge(ctx, Document{Revoke: []Revocation{{SiteID: siteID, User: user}}})
	return err
}

// Pause pauses a consent without withdrawing it; Resume lifts the pause.
func (s *Store) Pause(ctx context.Context, siteID, user string) error {
	return s.setPause(ctx, siteID, user, true)
}

// Resume lets a paused consent move again.
func (s *Store) Resume(ctx context.Context, siteID, user string) error {
	return s.setPause(ctx, siteID, user, false)
}

func (s *Store) setPause(ctx context.Context, siteID, user string, on bool) error {
	if err := checkIDs(siteID, user); err != nil {
		return err
	}
	c := change{}
	c.pauses = append(c.pauses, struct {
		SiteID, User string
		On           bool
	}{siteID, user, on})
	_, _, err := s.apply(ctx, c)
	return err
}

// AddMember puts user on owner's team; RemoveMember takes them off.
func (s *Store) AddMember(ctx context.Context, owner, user string) error {
	return s.setMember(ctx, owner, user, true)
}

// RemoveMember takes user off owner's team.
func (s *Store) RemoveMember(ctx context.Context, owner, user string) error {
	return s.setMember(ctx, owner, user, false)
}

func (s *Store) setMember(ctx context.Context, owner, user string, add bool) error {
	if err := checkIDs(owner, user); err != nil {
		return err
	}
	c := change{}
	c.members = append(c.members, struct {
		Owner, User string
		Add         bool
	}{owner, user, add})
	_, _, err := s.apply(ctx, c)
	return err
}

// Get reads the whole policy, in a stable order (consents by siteId then
// user, teams by owner, declares by siteId; JS string order), and its
// version (0 before the first write).
func (s *Store) Get(ctx context.Context) (Document, int64, error) {
	msg, err := s.exec(ctx, s.dump, s.writeKeys())
	if err != nil {
		return Document{}, 0, fmt.Errorf("policy get: %w", err)
	}
	parts, err := msg.ToArray()
	if err != nil || len(parts) != 5 {
		return Document{}, 0, fmt.Errorf("policy get: reply: %v", err)
	}
	var version int64
	if v, err := parts[0].ToString(); err == nil {
		version, _ = strconv.ParseInt(v, 10, 64)
	}
	d := Document{Consents: []Consent{}, Teams: []Team{}, Declares: []Declared{}}
	paused := map[string]bool{}
	if ps, err := parts[2].AsStrSlice(); err == nil {
		for _, f := range ps {
			paused[f] = true
		}
	}
	consents, _ := parts[1].AsStrSlice()
	for i := 0; i+1 < len(consents); i += 2 {
		f := consents[i]
		es, eu, _ := strings.Cut(f, ":")
		site, err1 := dec(es)
		user, err2 := dec(eu)
		if err1 != nil || err2 != nil {
			return Document{}, 0, fmt.Errorf("policy get: bad consent field %q", f)
		}
		m, err := decodeMappings(consents[i+1])
		if err != nil {
			return Document{}, 0, fmt.Errorf("policy get: stored mappings: %w", err)
		}
		d.Consents = append(d.Consents, Consent{SiteID: site, User: user, Paused: paused[f], Mappings: m})
	}
	declares, _ := parts[3].AsStrSlice()
	for i := 0; i+1 < len(declares); i += 2 {
		site, err := dec(declares[i])
		if err != nil {
			return Document{}, 0, fmt.Errorf("policy get: bad declares field %q", declares[i])
		}
		p, err := decodeStrings(declares[i+1])
		if err != nil {
			return Document{}, 0, fmt.Errorf("policy get: stored purposes: %w", err)
		}
		d.Declares = append(d.Declares, Declared{SiteID: site, Purposes: p})
	}
	teams, _ := parts[4].ToArray()
	for i := 0; i+1 < len(teams); i += 2 {
		eo, _ := teams[i].ToString()
		owner, err := dec(eo)
		if err != nil {
			return Document{}, 0, fmt.Errorf("policy get: bad team owner %q", eo)
		}
		ems, _ := teams[i+1].AsStrSlice()
		t := Team{Owner: owner, Members: make([]string, 0, len(ems))}
		for _, em := range ems {
			u, err := dec(em)
			if err != nil {
				return Document{}, 0, fmt.Errorf("policy get: bad member %q", em)
			}
			t.Members = append(t.Members, u)
		}
		d.Teams = append(d.Teams, t)
	}
	sortDocument(&d)
	return d, version, nil
}

// Version is the policy's version: 0 before the first write, then one more
// per write.
func (s *Store) Version(ctx context.Context) (int64, error) {
	c := s.r.Client()
	n, err := s.r.Do(ctx, "policy_version", c.B().Get().Key(s.kVersion()).Build()).AsInt64()
	if valkey.IsValkeyNil(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("policy version: %w", err)
	}
	return n, nil
}

// Clear deletes every policy key (tests).
func (s *Store) Clear(ctx context.Context) error {
	_, _, err := s.apply(ctx, change{replace: true})
	if err != nil {
		return err
	}
	c := s.r.Client()
	return s.r.Do(ctx, "policy_clear", c.B().Del().Key(s.kVersion()).Build()).Error()
}

// sortDocument puts a document in Get's order: consents by siteId then
// user, teams by owner with sorted members, declares by siteId (JS string
// order).
func sortDocument(d *Document) {
	for i := range d.Teams {
		slices.SortFunc(d.Teams[i].Members, protocol.CompareUTF16)
	}
	slices.SortFunc(d.Consents, func(a, b Consent) int {
		if c := protocol.CompareUTF16(a.SiteID, b.SiteID); c != 0 {
			return c
		}
		return protocol.CompareUTF16(a.User, b.User)
	})
	slices.SortFunc(d.Teams, func(a, b Team) int { return protocol.CompareUTF16(a.Owner, b.Owner) })
	slices.SortFunc(d.Declares, func(a, b Declared) int { return protocol.CompareUTF16(a.SiteID, b.SiteID) })
}

// marshalForCompare encodes d without its revoke list.
func marshalForCompare(d Document) ([]byte, error) {
	d.Revoke = nil
	if d.Consents == nil {
		d.Consents = []Consent{}
	}
	if d.Teams == nil {
		d.Teams = []Team{}
	}
	if d.Declares == nil {
		d.Declares = []Declared{}
	}
	for i := range d.Consents {
		if d.Consents[i].Mappings == nil {
			d.Consents[i].Mappings = []grantengine.Mapping{}
		}
	}
	return protocol.Marshal(d)
}
