package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/valkeyconn"
	"github.com/byollm/relay-go/test/relaytest"
	"github.com/byollm/relay-go/test/storehooks"
)

// Every store test runs against both backends: the test server
// (relaytest.ValkeyURL) and the embedded miniredis, plus the test cluster
// when one is configured (relaytest.ClusterURL). Each test gets its own
// namespace, whose keys go when it ends.

type backend struct {
	name   string
	client valkey.Client
}

func allBackends(t testing.TB) []backend {
	t.Helper()
	out := []backend{{"valkey", relaytest.Client(t)}, {"embedded", relaytest.Embedded(t)}}
	if relaytest.ClusterURL() != "" {
		out = append(out, backend{"cluster", relaytest.Cluster(t)})
	}
	return out
}

func realBackend(t testing.TB) backend { return allBackends(t)[0] }

// eachBackend runs f as a subtest per backend.
func eachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range allBackends(t) {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

// newStore makes a store in a fresh namespace and removes its keys after.
func newStore(t testing.TB, b backend, opts Options) *Store {
	t.Helper()
	if opts.Namespace == "" {
		opts.Namespace = relaytest.Namespace(t, b.client)
	} else {
		relaytest.CleanupKeys(t, b.client, opts.Namespace+":*")
	}
	if opts.Logger == nil {
		opts.Logger = relaytest.Logger(t)
	}
	s, err := New(context.Background(), b.client, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func scanKeys(t testing.TB, c valkey.Client, pattern string) []string {
	t.Helper()
	keys, err := scan(c, pattern)
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	return keys
}

// scan lists the keys on every primary (valkeyconn.Keys), sorted.
func scan(c valkey.Client, pattern string) ([]string, error) {
	out, err := valkeyconn.Keys(context.Background(), c, pattern)
	if err != nil {
		return nil, err
	}
	sort.Strings(out)
	return out, nil
}

// dump is every key of the namespace with its DUMP bytes: two equal dumps
// mean the call in between changed nothing.
func dump(t testing.TB, b backend, s *Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, k := range scanKeys(t, b.client, s.KeyPattern()) {
		typ, err := b.client.Do(context.Background(), b.client.B().Type().Key(k).Build()).ToString()
		if err != nil {
			t.Fatalf("type %s: %v", k, err)
		}
		var v string
		switch typ {
		case "hash":
			m, err := b.client.Do(context.Background(), b.client.B().Hgetall().Key(k).Build()).AsStrMap()
			if err != nil {
				t.Fatalf("hgetall: %v", err)
			}
			raw, _ := json.Marshal(m)
			v = string(raw)
		case "zset":
			z, err := b.client.Do(context.Background(), b.client.B().Zrange().Key(k).Min("0").Max("-1").Withscores().Build()).AsZScores()
			if err != nil {
				t.Fatalf("zrange: %v", err)
			}
			raw, _ := json.Marshal(z)
			v = string(raw)
		case "set":
			m, err := b.client.Do(context.Background(), b.client.B().Smembers().Key(k).Build()).AsStrSlice()
			if err != nil {
				t.Fatalf("smembers: %v", err)
			}
			slices.Sort(m)
			raw, _ := json.Marshal(m)
			v = string(raw)
		default:
			v, _ = b.client.Do(context.Background(), b.client.B().Get().Key(k).Build()).ToString()
		}
		out[k] = typ + ":" + v
	}
	return out
}

// The store contract's fixtures (store.md §7.1).
const (
	site        = "site_store"
	farDeadline = int64(4102444800000)
)

var envelope = json.RawMessage(`{"ciphertext":"AAAA","recipientKeyId":"r","senderKeyId":"s","direction":"payload","deadlineAt":4102444800000}`)

func stub(id, owner string) protocol.JobStub {
	return protocol.JobStub{ID: id, Kind: protocol.KindGenerate, Owner: owner, Site: "BYOLLM-TEST-SITE-KEY-ID",
		Audience: protocol.AudiencePrivate, SizeClass: "small", Streaming: false, DeadlineAt: farDeadline}
}

func freshDevice() protocol.PublicIdentity {
	var b [8]byte
	_, _ = rand.Read(b[:])
	x := hex.EncodeToString(b[:])
	return protocol.PublicIdentity{Identity: "id-" + x, Encryption: "enc-" + x, EncryptionSig: "sig-" + x}
}

// storeFixture bundles a store and the test for terse case bodies; tests
// name theirs h.
type storeFixture struct {
	t   *testing.T
	b   backend
	s   *Store
	ctx context.Context
}

func newFixture(t *testing.T, b backend, opts Options) *storeFixture {
	return &storeFixture{t: t, b: b, s: newStore(t, b, opts), ctx: context.Background()}
}

func (h *storeFixture) enqueueStub(siteID string, st protocol.JobStub) Job {
	h.t.Helper()
	j, err := h.s.Enqueue(h.ctx, EnqueueInput{ID: st.ID, SiteID: siteID, Stub: st})
	if err != nil {
		h.t.Fatalf("enqueue %s: %v", st.ID, err)
	}
	return j
}

func (h *storeFixture) enqueue(id, owner string) Job { return h.enqueueStub(site, stub(id, owner)) }

func claimArgs(mods ...func(*ClaimInput)) ClaimInput {
	in := ClaimInput{RunnerID: "runner_1", Owner: "alice", Device: freshDevice(),
		Routes: []Route{{SiteID: site, Owner: "alice"}}, Kinds: []string{protocol.KindGenerate}, Max: 10, LeaseMs: 60000}
	for _, m := range mods {
		m(&in)
	}
	return in
}

func runner(id string) func(*ClaimInput)     { return func(in *ClaimInput) { in.RunnerID = id } }
func maxJobs(n int) func(*ClaimInput)        { return func(in *ClaimInput) { in.Max = n } }
func leaseMs(ms int64) func(*ClaimInput)     { return func(in *ClaimInput) { in.LeaseMs = ms } }
func kinds(k ...string) func(*ClaimInput)    { return func(in *ClaimInput) { in.Kinds = k } }
func deviceOwner(o string) func(*ClaimInput) { return func(in *ClaimInput) { in.Owner = o } }
func routes(sites, owners []string) func(*ClaimInput) {
	return func(in *ClaimInput) {
		in.Routes = nil
		for _, s := range sites {
			for _, o := range owners {
				in.Routes = append(in.Routes, Route{SiteID: s, Owner: o})
			}
		}
	}
}

func (h *storeFixture) claim(mods ...func(*ClaimInput)) []ClaimedStub {
	h.t.Helper()
	out, err := h.s.Claim(h.ctx, claimArgs(mods...))
	if err != nil {
		h.t.Fatalf("claim: %v", err)
	}
	return out
}

func stubID(c ClaimedStub) string {
	var st protocol.JobStub
	_ = json.Unmarshal(c.Stub, &st)
	return st.ID
}

func stubOwner(c ClaimedStub) string {
	var st protocol.JobStub
	_ = json.Unmarshal(c.Stub, &st)
	return st.Owner
}

func ids(cs []ClaimedStub) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, stubID(c))
	}
	return out
}

func jobIDs(js []Job) []string {
	out := []string{}
	for _, j := range js {
		out = append(out, j.ID)
	}
	return out
}

func (h *storeFixture) job(siteID, id string) *Job {
	h.t.Helper()
	j, err := h.s.Job(h.ctx, siteID, id)
	if err != nil {
		h.t.Fatalf("job: %v", err)
	}
	return j
}

func (h *storeFixture) mustState(id, want string) {
	h.t.Helper()
	j := h.job(site, id)
	if j == nil {
		h.t.Fatalf("job %s missing, want %s", id, want)
	}
	if j.State != want {
		h.t.Fatalf("job %s state %s, want %s", id, j.State, want)
	}
}

func (h *storeFixture) seal(id string) SealResult {
	h.t.Helper()
	r, err := h.s.Seal(h.ctx, site, id, envelope)
	if err != nil {
		h.t.Fatalf("seal: %v", err)
	}
	return r
}

func (h *storeFixture) take(id, runnerID, lease string) TakeResult {
	h.t.Helper()
	r, err := h.s.TakePayload(h.ctx, HolderInput{JobID: id, RunnerID: runnerID, LeaseID: lease})
	if err != nil {
		h.t.Fatalf("take: %v", err)
	}
	return r
}

func (h *storeFixture) complete(id, runnerID, lease string, disp string) CompleteResult {
	h.t.Helper()
	r, err := h.s.Complete(h.ctx, CompleteInput{JobID: id, RunnerID: runnerID, LeaseID: lease, Envelope: envelope, Disposition: disp})
	if err != nil {
		h.t.Fatalf("complete: %v", err)
	}
	return r
}

func (h *storeFixture) release(runnerID string, grants []protocol.GrantRef, reason string, retryAfter *int64) []string {
	h.t.Helper()
	r, err := h.s.ReleaseLeases(h.ctx, ReleaseInput{RunnerID: runnerID, Leases: grants, Reason: reason, RetryAfter: retryAfter})
	if err != nil {
		h.t.Fatalf("release: %v", err)
	}
	return r
}

func (h *storeFixture) sweep() []Job {
	h.t.Helper()
	r, err := h.s.Sweep(h.ctx)
	if err != nil {
		h.t.Fatalf("sweep: %v", err)
	}
	return r
}

func (h *storeFixture) now() int64 {
	h.t.Helper()
	n, err := h.s.Now(h.ctx)
	if err != nil {
		h.t.Fatalf("now: %v", err)
	}
	return n
}

func grant(c ClaimedStub) protocol.GrantRef {
	return protocol.GrantRef{JobID: stubID(c), LeaseID: c.Lease.ID}
}

func hostNow() int64 { return time.Now().UnixMilli() }

func equalStrings(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s = %q, want %q", what, got, want)
	}
}

// frozenBackend is a private miniredis whose clock stands still at T, for
// the exact clock arithmetic of store.md §7.3 (a real server's TIME moves).
func frozenBackend(t testing.TB, at time.Time) (backend, *miniredis.Miniredis) {
	t.Helper()
	srv := miniredis.RunT(t)
	srv.SetTime(at)
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatalf("frozen backend: %v", err)
	}
	t.Cleanup(c.Close)
	return backend{"frozen", c}, srv
}

// churnLog collects OnChurn reports.
type churnLog struct {
	mu      sync.Mutex
	reports []ChurnReport
}

func (c *churnLog) add(r ChurnReport) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reports = append(c.reports, r)
}

func (c *churnLog) all(s *Store) []ChurnReport {
	s.churnWG.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.reports)
}

// placedShard is site's shard, placing it if it has none yet.
func placedShard(s *Store, site string) int {
	if err := s.placeSites(context.Background(), site); err != nil {
		panic(err)
	}
	return s.k.siteShard(site)
}

// pinnedSite places a new site id (prefix plus a number) on shard sh.
func pinnedSite(s *Store, prefix string, sh int) string {
	for i := 0; ; i++ {
		id := fmt.Sprint(prefix, i)
		if _, ok := s.k.place.Cached(id); ok {
			continue
		}
		if err := s.place(context.Background(), []string{id}, map[string]int{id: sh}); err != nil {
			panic(err)
		}
		if s.k.siteShard(id) == sh {
			return id
		}
	}
}

// sameShardSite is a site id other than site on site's shard.
func sameShardSite(s *Store, site string) string {
	return pinnedSite(s, "site_b", placedShard(s, site))
}

// otherShardSite is a site id on another shard than site's.
func otherShardSite(s *Store, site string) string {
	return pinnedSite(s, "site_c", (placedShard(s, site)+1)%s.Shards())
}

// writeRawStub overwrites a job's stored stub bytes as an older version
// might have written them (the contract's test-only hook).
func (h *storeFixture) writeRawStub(siteID, jobID, raw string) error {
	n, err := h.s.Testing().RunJobScript(h.ctx, storehooks.WriteRawStub, siteID, jobID, raw)
	if err == nil && n != 1 {
		err = fmt.Errorf("write raw stub: no job %q at site %q", jobID, siteID)
	}
	return err
}

// presenceField is one field of runner's presence record as stored, and
// whether it is there.
func (h *storeFixture) presenceField(runner, field string) (string, bool) {
	h.t.Helper()
	v, err := h.b.client.Do(h.ctx, h.b.client.B().Hget().Key(h.s.k.presence(runner)).Field(field).Build()).ToString()
	if valkey.IsValkeyNil(err) {
		return "", false
	}
	if err != nil {
		h.t.Fatalf("presence field %s: %v", field, err)
	}
	return v, true
}

// mustPresenceField is presenceField of a field the record must hold.
func (h *storeFixture) mustPresenceField(runner, field string) string {
	h.t.Helper()
	v, ok := h.presenceField(runner, field)
	if !ok {
		h.t.Fatalf("%s's presence record has no %s", runner, field)
	}
	return v
}
