package relay

// Test harness: the test Valkey (test/relaytest) under a namespace of each
// test's own, real *store.Store, real HTTP through httptest.Server.

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/projection"
	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/test/relaytest"
)

var _ Store = (*store.Store)(nil)

// projSource is a ProjectionSource tests can swap.
type projSource struct {
	p atomic.Pointer[projection.Projection]
}

func (s *projSource) Current() *projection.Projection { return s.p.Load() }
func (s *projSource) set(p *projection.Projection)    { s.p.Store(p) }

// Fresh is Current: a test's projection is always the latest.
func (s *projSource) Fresh(context.Context) (*projection.Projection, error) { return s.Current(), nil }

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// newStore opens a store with opts in a namespace of the test's own
// (opts.Namespace, or a fresh one) whose keys are deleted after the test.
func newStore(t testing.TB, c valkey.Client, opts store.Options) *store.Store {
	t.Helper()
	if opts.Namespace == "" {
		opts.Namespace = relaytest.Namespace(t, c)
	} else {
		relaytest.CleanupKeys(t, c, opts.Namespace+":*")
	}
	if opts.Logger == nil {
		opts.Logger = relaytest.Logger(t)
	}
	st, err := store.New(context.Background(), c, opts)
	if err != nil {
		t.Fatalf("store.New: %v", err)
	}
	return st
}

// env is one relay under test.
type env struct {
	t     testing.TB
	st    *store.Store
	proj  *projSource
	relay *Relay
	srv   *httptest.Server
}

type envOption func(*Config)

func newEnv(t testing.TB, opts ...envOption) *env {
	t.Helper()
	return newEnvOn(t, newStore(t, relaytest.Client(t), store.Options{}), opts...)
}

// newEnvOn builds a relay over an existing store (a second replica).
func newEnvOn(t testing.TB, st *store.Store, opts ...envOption) *env {
	t.Helper()
	ps := &projSource{}
	cfg := Config{
		Store:           st,
		Projection:      ps,
		VerificationURL: "https://example.test/device",
		Logger:          relaytest.Logger(t),
		// The bound itself is storetimeout_test's subject; elsewhere a busy
		// test machine (tests run in parallel) must not turn a slow store
		// call into the 503 the default half second would give.
		StoreTimeout: 10 * time.Second,
		// The store's clock, so tests that move it move the plane too.
		Clock: func() int64 {
			n, err := st.Now(context.Background())
			if err != nil {
				t.Errorf("store clock: %v", err)
			}
			return n
		},
	}
	for _, o := range opts {
		o(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("relay.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		r.Close(ctx)
	})
	srv := httptest.NewServer(r.Handler())
	t.Cleanup(srv.Close)
	return &env{t: t, st: st, proj: ps, relay: r, srv: srv}
}

func (e *env) now() int64 {
	n, err := e.st.Now(context.Background())
	if err != nil {
		e.t.Fatalf("store clock: %v", err)
	}
	return n
}

// ---- keys ----

type keys struct {
	priv ed25519.PrivateKey
	id   protocol.PublicIdentity
}

func newKeys(t testing.TB) keys {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	encRaw := make([]byte, 32)
	if _, err := rand.Read(encRaw); err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding.EncodeToString(encRaw)
	return keys{priv: priv, id: protocol.PublicIdentity{
		Identity:      base64.RawURLEncoding.EncodeToString(pub),
		Encryption:    enc,
		EncryptionSig: base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, protocol.EncryptionSigMessage(enc))),
	}}
}

func (k keys) keyID() string { return protocol.KeyID(k.id.Identity) }

// ---- requests ----

type resp struct {
	status int
	ctype  string
	body   []byte
}

func (r resp) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("response is not a JSON object: %v: %s", err, r.body)
	}
	return m
}

func (e *env) do(method, path string, header http.Header, body []byte) resp {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	// Every answer carries its length (Relay.write), however long: a
	// chunked one shows as -1 here.
	if res.ContentLength != int64(len(b)) {
		e.t.Errorf("%s %s: Content-Length %d for a body of %d bytes", method, path, res.ContentLength, len(b))
	}
	return resp{status: res.StatusCode, ctype: res.Header.Get("Content-Type"), body: b}
}

// signed builds the three auth headers for caller over body.
func signed(callerHeader string, k keys, caller, endpoint string, issuedAt int64, body []byte) http.Header {
	h := http.Header{}
	h.Set(callerHeader, caller)
	h.Set(protocol.HeaderIssuedAt, strconv.FormatInt(issuedAt, 10))
	h.Set(protocol.HeaderSignature, protocol.SignRequest(k.priv, endpoint, caller, issuedAt, body))
	return h
}

// daemonPost signs and posts body to /byollm/<endpoint> as runner.
func (e *env) daemonPost(k keys, runner, endpoint string, body []byte) resp {
	e.t.Helper()
	h := signed(protocol.HeaderRunner, k, runner, endpoint, e.now(), body)
	return e.do("POST", "/byollm/"+endpoint, h, body)
}

// sitePost signs and posts body to /relay/site/<endpoint> as site.
func (e *env) sitePost(k keys, site, endpoint string, body []byte) resp {
	e.t.Helper()
	h := signed(protocol.HeaderSite, k, site, "site/"+endpoint, e.now(), body)
	return e.do("POST", "/relay/site/"+endpoint, h, body)
}

// siteGet signs a read over the empty body.
func (e *env) siteGet(k keys, site, endpoint, siteIDParam string) resp {
	e.t.Helper()
	h := signed(protocol.HeaderSite, k, site, "site/"+endpoint, e.now(), nil)
	return e.do("GET", "/relay/site/"+endpoint+"?siteId="+siteIDParam+"&protocolVersion=2", h, nil)
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := protocol.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func expect(t testing.TB, got resp, status int, body string) {
	t.Helper()
	if got.status != status || string(got.body) != body {
		t.Fatalf("got %d %s\nwant %d %s", got.status, got.body, status, body)
	}
	if got.ctype != "application/json" {
		t.Fatalf("content-type %q, want application/json", got.ctype)
	}
}

// ---- a small world ----

// world: sites site_a and site_b; owners alice and bob with devices
// runner_alice and runner_bob; both consent to site_a, bob also to site_b.
type world struct {
	siteA, siteB keys
	alice, bob   keys
	fx           projection.Fixture
}

func newWorld(t testing.TB) *world {
	t.Helper()
	w := &world{siteA: newKeys(t), siteB: newKeys(t), alice: newKeys(t), bob: newKeys(t)}
	w.fx = projection.Fixture{
		Sites: []projection.SiteRecord{
			{SiteID: "site_a", Site: w.siteA.id},
			{SiteID: "site_b", Site: w.siteB.id},
		},
		Consents: []projection.ConsentRecord{
			{Owner: "alice", SiteID: "site_a"},
			{Owner: "bob", SiteID: "site_a"},
			{Owner: "bob", SiteID: "site_b"},
		},
		Devices: []projection.DeviceRecord{
			{Owner: "alice", RunnerID: "runner_alice", Device: w.alice.id},
			{Owner: "bob", RunnerID: "runner_bob", Device: w.bob.id},
		},
	}
	return w
}

func (w *world) projection() *projection.Projection { return projection.New(w.fx) }

// install loads the world's projection into e.
func (w *world) install(e *env) { e.proj.set(w.projection()) }

var chatCapability = protocol.Capability{
	Kind: protocol.KindChat, Service: "svc", BackendID: "ollama", BackendClass: "http",
	Model: "llama3", OfferScope: "private",
}

type claimBody struct {
	ProtocolVersion string                `json:"protocolVersion"`
	RunnerID        string                `json:"runnerId"`
	Capabilities    []protocol.Capability `json:"capabilities"`
	Max             int                   `json:"max"`
}

func claimJSON(t testing.TB, runner string, max int) []byte {
	return mustJSON(t, claimBody{"2", runner, []protocol.Capability{chatCapability}, max})
}

type heartbeatBody struct {
	ProtocolVersion string                `json:"protocolVersion"`
	RunnerID        string                `json:"runnerId"`
	DaemonVersion   string                `json:"daemonVersion"`
	Capabilities    []protocol.Capability `json:"capabilities"`
	ActiveLeases    []protocol.GrantRef   `json:"activeLeases"`
}

func heartbeatJSON(t testing.TB, runner, version string, leases ...protocol.GrantRef) []byte {
	if leases == nil {
		leases = []protocol.GrantRef{}
	}
	return mustJSON(t, heartbeatBody{"2", runner, version, []protocol.Capability{chatCapability}, leases})
}

type holderBody struct {
	ProtocolVersion string `json:"protocolVersion"`
	RunnerID        string `json:"runnerId"`
	JobID           string `json:"jobId"`
	LeaseID         string `json:"leaseId"`
}

func fetchJSON(t testing.TB, runner, job, lease string) []byte {
	return mustJSON(t, holderBody{"2", runner, job, lease})
}

type resultBody struct {
	ProtocolVersion string                  `json:"protocolVersion"`
	RunnerID        string                  `json:"runnerId"`
	JobID           string                  `json:"jobId"`
	LeaseID         string                  `json:"leaseId"`
	Envelope        protocol.SealedEnvelope `json:"envelope"`
	Disposition     string                  `json:"disposition"`
}

func resultJSON(t testing.TB, runner, job, lease string, env protocol.SealedEnvelope) []byte {
	return mustJSON(t, resultBody{"2", runner, job, lease, env, "ok"})
}

type releaseBody struct {
	ProtocolVersion string              `json:"protocolVersion"`
	RunnerID        string              `json:"runnerId"`
	Leases          []protocol.GrantRef `json:"leases"`
	Reason          string              `json:"reason"`
}

func releaseJSON(t testing.TB, runner, reason string, leases ...protocol.GrantRef) []byte {
	return mustJSON(t, releaseBody{"2", runner, leases, reason})
}

type enqueueBody struct {
	ProtocolVersion string           `json:"protocolVersion"`
	SiteID          string           `json:"siteId"`
	Stub            protocol.JobStub `json:"stub"`
}

func (e *env) stub(id, owner string, site keys) protocol.JobStub {
	return protocol.JobStub{
		ID: id, Kind: protocol.KindChat, Owner: owner, Site: site.keyID(),
		Audience: protocol.AudienceTeam, SizeClass: "small", DeadlineAt: e.now() + 3_600_000,
	}
}

func enqueueJSON(t testing.TB, siteID string, stub protocol.JobStub) []byte {
	return mustJSON(t, enqueueBody{"2", siteID, stub})
}

type payloadBody struct {
	ProtocolVersion string                  `json:"protocolVersion"`
	SiteID          string                  `json:"siteId"`
	JobID           string                  `json:"jobId"`
	Envelope        protocol.SealedEnvelope `json:"envelope"`
}

func payloadJSON(t testing.TB, siteID, job string, env protocol.SealedEnvelope) []byte {
	return mustJSON(t, payloadBody{"2", siteID, job, env})
}

type cancelBody struct {
	ProtocolVersion string `json:"protocolVersion"`
	SiteID          string `json:"siteId"`
	JobID           string `json:"jobId"`
}

func cancelJSON(t testing.TB, siteID, job string) []byte {
	return mustJSON(t, cancelBody{"2", siteID, job})
}

// envelope is opaque ciphertext: the relay never opens it.
func envelope(direction string) protocol.SealedEnvelope {
	return protocol.SealedEnvelope{
		Ciphertext:     base64.RawURLEncoding.EncodeToString([]byte("ciphertext " + randomHex(16))),
		RecipientKeyID: "BYOLLM-RECP", SenderKeyID: "BYOLLM-SEND",
		Direction: direction, DeadlineAt: 1_800_003_600_000,
	}
}
