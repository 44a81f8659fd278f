package admin

// The approval routes over real HTTP and a real Valkey: three "replicas"
// (each its own store, projection follower, daemon plane and admin
// listener) share one namespace; a daemon starts pairing on one, its code is
// looked up and approved through another, and it polls a third.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/envelope"
	"github.com/byollm/relay-go/internal/pairings"
	"github.com/byollm/relay-go/internal/projection"
	"github.com/byollm/relay-go/internal/projectionsync"
	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/relay"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/test/relaytest"
)

type replica struct {
	st    *store.Store
	proj  *projectionsync.Sync
	admin *httptest.Server
	plane *httptest.Server
}

type cluster struct {
	t        *testing.T
	c        valkey.Client
	ns       string
	replicas []*replica
}

func newCluster(t *testing.T, n int) *cluster {
	t.Helper()
	c := relaytest.Client(t)
	cl := &cluster{t: t, c: c, ns: relaytest.Namespace(t, c)}
	for range n {
		st, err := store.New(context.Background(), c, store.Options{Namespace: cl.ns, Logger: relaytest.Logger(t),
			// Every simulated daemon here pairs from the same loopback address.
			PairingsPerSource: 500})
		if err != nil {
			t.Fatal(err)
		}
		ps := projectionsync.New(c, projectionsync.Options{Namespace: cl.ns, Logger: relaytest.Logger(t)})
		if err := ps.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		r, err := relay.New(relay.Config{
			Store: st, Projection: ps, VerificationURL: "https://example.test/device", Logger: relaytest.Logger(t),
			Clock: func() int64 {
				now, err := st.Now(context.Background())
				if err != nil {
					t.Errorf("store clock: %v", err)
				}
				return now
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		plane := httptest.NewServer(r.Handler())
		adm := httptest.NewServer(New(Options{Token: token, Projections: ps, Pairings: pairings.New(st, ps), Logger: relaytest.Logger(t)}))
		t.Cleanup(plane.Close)
		t.Cleanup(adm.Close)
		cl.replicas = append(cl.replicas, &replica{st: st, proj: ps, admin: adm, plane: plane})
	}
	return cl
}

// setClock moves every replica's store clock (and so its plane clock).
func (cl *cluster) setClock(offsetMs int64) {
	for _, r := range cl.replicas {
		r.st.Testing().SetClockOffset(offsetMs)
	}
}

// follow makes every replica read the projection now (what the pub/sub
// message or the next poll does within a second).
func (cl *cluster) follow() {
	for _, r := range cl.replicas {
		if err := r.proj.Refresh(context.Background()); err != nil {
			cl.t.Fatal(err)
		}
	}
}

// keys is every key of the namespace with its value, for "left the store as
// it was" checks.
// pick is m's entries for keys, for a failure message.
func pick(m map[string]string, keys []string) map[string]string {
	out := map[string]string{}
	for _, k := range keys {
		out[k] = m[k]
	}
	return out
}

func (cl *cluster) dump() map[string]string {
	cl.t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	keys, err := cl.c.Do(ctx, cl.c.B().Keys().Pattern(cl.ns+":*").Build()).AsStrSlice()
	if err != nil {
		cl.t.Fatal(err)
	}
	for _, k := range keys {
		// A hash by its fields and values, so a difference names them (and
		// an encoding the server chose alone is no difference); any other
		// key by its DUMP.
		if t, _ := cl.c.Do(ctx, cl.c.B().Type().Key(k).Build()).ToString(); t == "hash" {
			m, err := cl.c.Do(ctx, cl.c.B().Hgetall().Key(k).Build()).AsStrMap()
			if err != nil {
				cl.t.Fatal(err)
			}
			fields := make([]string, 0, len(m))
			for f, v := range m {
				fields = append(fields, fmt.Sprintf("%q=%q", f, v))
			}
			sort.Strings(fields)
			out[k] = "hash{" + strings.Join(fields, " ") + "}"
			continue
		}
		v, err := cl.c.Do(ctx, cl.c.B().Dump().Key(k).Build()).ToString()
		if err != nil {
			cl.t.Fatal(err)
		}
		out[k] = v
	}
	return out
}

type daemon struct {
	id        *envelope.Identity
	code      string // user code
	device    string // device code
	expiresAt int64
}

// startPairing is a daemon's pair start through replica r.
func (cl *cluster) startPairing(r int, label string) daemon {
	cl.t.Helper()
	id, err := envelope.Generate(1, rand.Reader)
	if err != nil {
		cl.t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{
		"protocolVersion": "2", "action": "start",
		"daemon": protocol.DaemonInfo{Version: "0.1.1", Label: label, Platform: "linux"},
		"device": id.Public(),
		"capabilities": []protocol.Capability{{Kind: protocol.KindChat, Service: "svc", BackendID: "ollama",
			BackendClass: "http", Model: "llama3", OfferScope: "private"}},
	})
	got := post(cl.t, cl.replicas[r].plane.URL+"/byollm/pair", "", string(body))
	if got.status != 200 {
		cl.t.Fatalf("pair start: %d %s", got.status, got.body)
	}
	var s struct {
		DeviceCode, UserCode string
		ExpiresAt            int64
	}
	if err := json.Unmarshal([]byte(got.body), &s); err != nil {
		cl.t.Fatal(err)
	}
	return daemon{id: id, code: s.UserCode, device: s.DeviceCode, expiresAt: s.ExpiresAt}
}

// poll is a daemon's pair poll through replica r; it returns the body.
func (cl *cluster) poll(r int, d daemon) map[string]any {
	cl.t.Helper()
	got := post(cl.t, cl.replicas[r].plane.URL+"/byollm/pair", "",
		`{"protocolVersion":"2","action":"poll","deviceCode":"`+d.device+`"}`)
	if got.status != 200 {
		cl.t.Fatalf("pair poll: %d %s", got.status, got.body)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(got.body), &m); err != nil {
		cl.t.Fatal(err)
	}
	return m
}

func (cl *cluster) admin(r int, method, path, body string) answer {
	cl.t.Helper()
	srv := &httptest.Server{URL: cl.replicas[r].admin.URL}
	return call(cl.t, srv, method, path, "Bearer "+token, body)
}

func post(t *testing.T, u, auth, body string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

func decode(t *testing.T, a answer) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(a.body), &m); err != nil {
		t.Fatalf("%d %q: %v", a.status, a.body, err)
	}
	return m
}

func wantError(t *testing.T, a answer, status int, errName, msgHas string) {
	t.Helper()
	if a.status != status {
		t.Fatalf("status %d, want %d: %s", a.status, status, a.body)
	}
	m := decode(t, a)
	if m["error"] != errName || !strings.Contains(fmt.Sprint(m["message"]), msgHas) {
		t.Fatalf("body %s, want error %q with message containing %q", a.body, errName, msgHas)
	}
}

// withConsent stores a projection in which owner consents to site-1.
func (cl *cluster) withConsent(owners ...string) {
	cl.t.Helper()
	if got := cl.admin(0, "PUT", "/projection", doc(owners...)); got.status != 200 {
		cl.t.Fatalf("PUT: %d %s", got.status, got.body)
	}
	cl.follow()
}

// TestApproveByUserCode is the whole flow knowing only the code: started on
// replica 0, shown and approved through replica 1's admin API, polled on
// replica 2, which answers approved with the owner's sites; the code is then
// spent.
func TestApproveByUserCode(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 3)
	cl.withConsent("alice")
	d := cl.startPairing(0, "alice's laptop")
	if got := cl.poll(2, d); got["status"] != "pending" {
		t.Fatalf("before approval: %v", got)
	}

	// Lower case and padding are the same code (§13: trim, upper-case).
	for _, spelled := range []string{d.code, strings.ToLower(d.code), "  " + strings.ToLower(d.code) + "\t"} {
		got := cl.admin(1, "GET", "/pairings/"+url.PathEscape(spelled), "")
		if got.status != 200 {
			t.Fatalf("GET %q: %d %s", spelled, got.status, got.body)
		}
		var p pairings.Pairing
		if err := json.Unmarshal([]byte(got.body), &p); err != nil {
			t.Fatal(err)
		}
		if p.UserCode != d.code || p.Status != "pending" || p.RunnerID != "" || p.Device != d.id.Public() ||
			p.KeyID != d.id.KeyID() || p.Label != "alice's laptop" || p.Platform != "linux" || p.ExpiresAt != d.expiresAt ||
			!strings.Contains(string(p.Capabilities), `"model":"llama3"`) {
			t.Fatalf("GET %q: %s", spelled, got.body)
		}
		if strings.Contains(got.body, d.device) {
			t.Fatalf("the device code (the daemon's polling secret) leaked: %s", got.body)
		}
	}

	before := cl.admin(1, "GET", "/projection/status", "")
	got := cl.admin(1, "POST", "/pairings/"+url.PathEscape(" "+strings.ToLower(d.code)+" ")+"/approve", `{"owner":"alice"}`)
	if got.status != 200 {
		t.Fatalf("approve: %d %s", got.status, got.body)
	}
	var ok pairings.Approved
	if err := json.Unmarshal([]byte(got.body), &ok); err != nil {
		t.Fatal(err)
	}
	if ok.RunnerID != pairings.DefaultRunnerID(d.id.Public().Identity) || ok.Owner != "alice" || ok.UserCode != d.code ||
		ok.KeyID != d.id.KeyID() || ok.Version != int64(decode(t, before)["version"].(float64))+1 {
		t.Fatalf("approve answered %s (before: %s)", got.body, before.body)
	}
	// The approving replica has it in force at once.
	if cl.replicas[1].proj.Version() != ok.Version {
		t.Fatalf("approving replica at version %d, want %d", cl.replicas[1].proj.Version(), ok.Version)
	}
	if show := decode(t, cl.admin(0, "GET", "/pairings/"+d.code, "")); show["status"] != "approved" || show["runnerId"] != ok.RunnerID {
		t.Fatalf("GET after approval: %v", show)
	}

	cl.follow()
	polled := cl.poll(2, d)
	site := projection.SiteRecord{Site: protocol.PublicIdentity{Identity: "aWRlbnRpdHktMQ"}}
	if polled["status"] != "approved" || polled["runnerId"] != ok.RunnerID || polled["owner"] != "alice" {
		t.Fatalf("poll after approval: %v", polled)
	}
	if sites, _ := polled["sites"].(map[string]any); len(sites) != 1 || sites[site.KeyID()] == nil {
		t.Fatalf("poll sites: %v", polled["sites"])
	}
	// Single use: the daemon collected it; the code is gone everywhere.
	if again := cl.poll(0, d); again["status"] != "expired" {
		t.Fatalf("second poll: %v", again)
	}
	wantError(t, cl.admin(1, "GET", "/pairings/"+d.code, ""), 404, "not-found", "no pending pairing")
}

// TestApproveTwice: the second approval of a code is 409 and writes nothing.
func TestApproveTwice(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 2)
	cl.withConsent("alice")
	d := cl.startPairing(0, "laptop")
	if got := cl.admin(0, "POST", "/pairings/"+d.code+"/approve", `{"owner":"alice","runnerId":"r-1"}`); got.status != 200 {
		t.Fatalf("first: %d %s", got.status, got.body)
	}
	before := cl.dump()
	wantError(t, cl.admin(1, "POST", "/pairings/"+d.code+"/approve", `{"owner":"alice","runnerId":"r-2"}`), 409, "conflict", `approved already (runner "r-1")`)
	wantError(t, cl.admin(1, "POST", "/pairings/"+d.code+"/deny", ``), 409, "conflict", "approved already")
	if after := cl.dump(); !equalMaps(before, after) {
		t.Fatal("a refused approval changed the store")
	}
}

// TestApproveConcurrently: many admins approve one code at once through two
// replicas; exactly one wins.
func TestApproveConcurrently(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 2)
	cl.withConsent("alice")
	d := cl.startPairing(0, "laptop")
	var wg sync.WaitGroup
	results := make([]int, 16)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = cl.admin(i%2, "POST", "/pairings/"+d.code+"/approve",
				fmt.Sprintf(`{"owner":"alice","runnerId":"r-%d"}`, i)).status
		}()
	}
	wg.Wait()
	wins := 0
	for _, s := range results {
		switch s {
		case 200:
			wins++
		case 409:
		default:
			t.Fatalf("status %d in %v", s, results)
		}
	}
	n, err := cl.c.Do(context.Background(), cl.c.B().Hlen().Key(projectionsync.ApprovedKey(cl.ns)).Build()).AsInt64()
	if wins != 1 || err != nil || n != 1 {
		t.Fatalf("%d approvals won, %d records (%v): %v", wins, n, err, results)
	}
}

// TestExpiredAndUnknownCodes: an expired code is 404 to GET and 409 to
// approve and deny, an unknown one 404 to all three; none changes the store.
func TestExpiredAndUnknownCodes(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 2)
	cl.withConsent("alice")
	d := cl.startPairing(0, "laptop")
	cl.setClock(600_000) // past expiresAt = start + 600 000
	before := cl.dump()
	wantError(t, cl.admin(1, "GET", "/pairings/"+d.code, ""), 404, "not-found", "no pending pairing")
	wantError(t, cl.admin(1, "POST", "/pairings/"+d.code+"/approve", `{"owner":"alice"}`), 409, "conflict", "has expired")
	wantError(t, cl.admin(1, "POST", "/pairings/"+d.code+"/deny", ``), 409, "conflict", "has expired")
	for _, unknown := range []string{"0000-0000", "not-a-code", strings.Repeat("Z", 64)} {
		wantError(t, cl.admin(1, "GET", "/pairings/"+unknown, ""), 404, "not-found", "no pending pairing")
		wantError(t, cl.admin(1, "POST", "/pairings/"+unknown+"/approve", `{"owner":"alice"}`), 404, "not-found", "no pending pairing")
		wantError(t, cl.admin(1, "POST", "/pairings/"+unknown+"/deny", ``), 404, "not-found", "no pending pairing")
	}
	if after := cl.dump(); !equalMaps(before, after) {
		t.Fatal("refused requests changed the store")
	}
	if got := cl.poll(0, d); got["status"] != "expired" {
		t.Fatalf("poll: %v", got)
	}
}

// TestApprovalRacingExpiry: approvals sent while the code's expiry passes
// either win whole (record written, the approval answered 200) or lose
// whole (409, nothing written); the script judges liveness on its own TIME
// reading, so there is no third outcome.
func TestApprovalRacingExpiry(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 2)
	cl.withConsent("alice")
	const n = 24
	ds := make([]daemon, n)
	for i := range ds {
		ds[i] = cl.startPairing(i%2, fmt.Sprintf("d%d", i))
	}
	// Put the clock about 3 ms before the codes' expiry (minted within a few
	// ms of each other), so the approvals below straddle it.
	now, err := cl.replicas[0].st.Now(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cl.setClock(ds[n/2].expiresAt - now - 3)
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = cl.admin(i%2, "POST", "/pairings/"+ds[i].code+"/approve",
				fmt.Sprintf(`{"owner":"alice","runnerId":"race-%d"}`, i)).status
		}()
	}
	wg.Wait()
	approved, err := cl.c.Do(context.Background(), cl.c.B().Hgetall().Key(projectionsync.ApprovedKey(cl.ns)).Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	won := 0
	for i, s := range statuses {
		_, written := approved[fmt.Sprintf("race-%d", i)]
		switch {
		case s == 200 && written:
			won++
		case (s == 409 || s == 404) && !written:
		default:
			t.Fatalf("code %d: status %d, record written %v", i, s, written)
		}
	}
	t.Logf("%d of %d approvals won the race with expiry", won, n)
}

// TestDeny: a denied code is gone: the daemon's next poll is "expired" and
// the code can no longer be shown or approved.
func TestDeny(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 3)
	cl.withConsent("alice")
	d := cl.startPairing(0, "laptop")
	if got := cl.admin(1, "POST", "/pairings/"+strings.ToLower(d.code)+"/deny", ""); got.status != 200 || got.body != `{"status":"denied"}` {
		t.Fatalf("deny: %d %s", got.status, got.body)
	}
	if got := cl.poll(2, d); got["status"] != "expired" {
		t.Fatalf("poll after deny: %v", got)
	}
	wantError(t, cl.admin(2, "GET", "/pairings/"+d.code, ""), 404, "not-found", "")
	wantError(t, cl.admin(2, "POST", "/pairings/"+d.code+"/approve", `{"owner":"alice"}`), 404, "not-found", "")
}

// TestApproveConflictsWithProjection: the projection's records of the same
// identity or runner id decide, and a refused approval writes nothing.
func TestApproveConflictsWithProjection(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 1)
	cl.withConsent("alice", "bob")
	d := cl.startPairing(0, "laptop")
	rec := func(owner, runner string, id protocol.PublicIdentity, revoked bool) string {
		b, _ := json.Marshal(projection.DeviceRecord{Owner: owner, RunnerID: runner, Device: id, Revoked: revoked})
		return string(b)
	}
	other, _ := envelope.Generate(1, rand.Reader)
	for _, tt := range []struct {
		name, devices, body, msg string
	}{
		{"same identity, another owner", rec("bob", "bobs", d.id.Public(), false), `{"owner":"alice"}`, "another owner"},
		{"same identity, revoked", rec("alice", "old", d.id.Public(), true), `{"owner":"alice"}`, "revoked"},
		{"same identity, another runner id", rec("alice", "old", d.id.Public(), false), `{"owner":"alice","runnerId":"new"}`, `already in the projection as runner "old"`},
		{"runner id of another device", rec("alice", "taken", other.Public(), false), `{"owner":"alice","runnerId":"taken"}`, "belongs to another device"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := cl.admin(0, "PUT", "/projection", strings.TrimSuffix(doc("alice", "bob"), "}")+`,"devices":[`+tt.devices+`]}`); got.status != 200 {
				t.Fatalf("PUT: %d %s", got.status, got.body)
			}
			before := cl.dump()
			wantError(t, cl.admin(0, "POST", "/pairings/"+d.code+"/approve", tt.body), 409, "conflict", tt.msg)
			if after := cl.dump(); !equalMaps(before, after) {
				k := changedKeys(before, after)
				t.Fatalf("a refused approval changed the store: %v\nbefore: %v\nafter:  %v", k, pick(before, k), pick(after, k))
			}
		})
	}
	// The same identity and owner already in the projection: the approval
	// takes that record's runner id.
	if got := cl.admin(0, "PUT", "/projection", strings.TrimSuffix(doc("alice"), "}")+`,"devices":[`+rec("alice", "known", d.id.Public(), false)+`]}`); got.status != 200 {
		t.Fatal(got.body)
	}
	if got := cl.admin(0, "POST", "/pairings/"+d.code+"/approve", `{"owner":"alice"}`); got.status != 200 || decode(t, got)["runnerId"] != "known" {
		t.Fatalf("approve: %d %s", got.status, got.body)
	}
}

// TestApprovalSurvivesWholesalePut: a control plane that never heard of an
// approval replaces the projection; the device stays approved (the daemon's
// poll is approved, GET /projection lists it) until a document record with
// its runner id takes it over, here revoked.
func TestApprovalSurvivesWholesalePut(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 2)
	cl.withConsent("alice")
	d := cl.startPairing(0, "laptop")
	if got := cl.admin(0, "POST", "/pairings/"+d.code+"/approve", `{"owner":"alice","runnerId":"r-9"}`); got.status != 200 {
		t.Fatal(got.body)
	}
	// The control plane's next push: a new consent, no devices at all.
	if got := cl.admin(1, "PUT", "/projection", doc("alice", "carol")); got.status != 200 || decode(t, got)["changed"] != true {
		t.Fatalf("PUT: %d %s", got.status, got.body)
	}
	// ... and a merge that names other devices only.
	if got := cl.admin(0, "POST", "/projection/merge", `{"devices":[{"owner":"carol","runnerId":"c-1","device":{"identity":"aQ","encryption":"ZQ","encryptionSig":"cw"}}]}`); got.status != 200 {
		t.Fatalf("merge: %d %s", got.status, got.body)
	}
	cl.follow()
	for i, r := range cl.replicas {
		dev := r.proj.Current().DeviceByFingerprint(d.id.Public().Identity)
		if dev == nil || dev.RunnerID != "r-9" || dev.Owner != "alice" || dev.Revoked {
			t.Fatalf("replica %d: device in force %+v", i, dev)
		}
	}
	got := cl.admin(1, "GET", "/projection", "")
	if got.header.Get("X-Projection-Approved") != "1" {
		t.Fatalf("X-Projection-Approved %q", got.header.Get("X-Projection-Approved"))
	}
	f, err := projection.Parse([]byte(got.body))
	if err != nil || len(f.Devices) != 2 || f.Devices[0].RunnerID != "c-1" || f.Devices[1].RunnerID != "r-9" || len(f.Consents) != 2 {
		t.Fatalf("GET /projection: %v %s", err, got.body)
	}
	if polled := cl.poll(1, d); polled["status"] != "approved" || polled["runnerId"] != "r-9" {
		t.Fatalf("poll: %v", polled)
	}

	// The control plane takes the device over (it learned of it from GET
	// /projection) and revokes it: its record wins.
	revoked := strings.TrimSuffix(doc("alice"), "}") + `,"devices":[{"owner":"alice","runnerId":"r-9","device":` +
		string(protocol.MustMarshal(d.id.Public())) + `,"revoked":true}]}`
	if got := cl.admin(0, "PUT", "/projection", revoked); got.status != 200 {
		t.Fatalf("PUT: %d %s", got.status, got.body)
	}
	cl.follow()
	for i, r := range cl.replicas {
		if !r.proj.Current().RevokedDevice("r-9") {
			t.Fatalf("replica %d: r-9 not revoked", i)
		}
	}
	f, _ = projection.Parse([]byte(cl.admin(1, "GET", "/projection", "").body))
	if len(f.Devices) != 1 || !f.Devices[0].Revoked {
		t.Fatalf("GET /projection devices: %+v", f.Devices)
	}
}

// TestPairingRequestsRefused: malformed requests are refused with the
// protocol's error body and change nothing; there is no listing.
func TestPairingRequestsRefused(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 1)
	cl.withConsent("alice")
	d := cl.startPairing(0, "laptop")
	before := cl.dump()
	approve := "/pairings/" + d.code + "/approve"
	for _, tt := range []struct{ body, msg string }{
		{``, "body must be"},
		{`{}`, "owner: required"},
		{`{"owner":""}`, "owner: required"},
		{`{"owner":7}`, "owner: expected string"},
		{`{"owner":"alice","extra":1}`, `unrecognized key "extra"`},
		{`{"owner":"alice","runnerId":""}`, "runnerId: must be non-empty"},
		{`{"owner":"alice"} {}`, "not valid JSON"},
		{`{"owner":"` + strings.Repeat("a", maxApprovalBody) + `"}`, "cannot read body"},
		// Issue 27, defect 8: a key named twice is refused, not read as its
		// last value; ids are bounded and hold no control character.
		{`{"owner":"alice","owner":"mallory"}`, `names the key "owner" twice`},
		{`{"owner":"alice","runnerId":"r1","runnerId":"r2"}`, `names the key "runnerId" twice`},
		// A lone surrogate is no character: refused, as the store refuses
		// a runner id that is not UTF-8 (it became U+FFFD, so "r\ud800"
		// and "r\ufffd" were one runner).
		{`{"owner":"alice","runnerId":"runner-\ud800"}`, "runnerId: holds a lone surrogate"},
		{`{"owner":"al\udfffice"}`, "owner: holds a lone surrogate"},
		{`{"owner":"` + strings.Repeat("o", 60000) + `"}`, "owner: too long: 60000 bytes, at most 4096"},
		{`{"owner":"al\u0007ice"}`, "owner: holds the control character U+0007"},
		{`{"owner":"alice\n"}`, "owner: holds the control character U+000A"},
		{`{"owner":"alice","runnerId":"r\u0000"}`, "runnerId: holds the control character U+0000"},
		{`{"owner":"alice","runnerId":"r\u009b"}`, "runnerId: holds the control character U+009B"},
	} {
		wantError(t, cl.admin(0, "POST", approve, tt.body), 400, "bad-request", tt.msg)
	}
	wantError(t, cl.admin(0, "GET", "/pairings/"+strings.Repeat("A", 65), ""), 400, "bad-request", "longer than 64")
	wantError(t, cl.admin(0, "GET", "/pairings/AB%00CD", ""), 400, "bad-request", "control character")
	// No enumeration: the collection itself is not a route.
	wantError(t, cl.admin(0, "GET", "/pairings", ""), 404, "not-found", "")
	wantError(t, cl.admin(0, "GET", "/pairings/", ""), 404, "not-found", "")
	// The token guards every pairing route.
	srv := &httptest.Server{URL: cl.replicas[0].admin.URL}
	if got := call(t, srv, "GET", "/pairings/"+d.code, "", ""); got.status != 401 {
		t.Fatalf("no token: %d", got.status)
	}
	if got := call(t, srv, "POST", approve, "Bearer wrong", `{"owner":"alice"}`); got.status != 401 {
		t.Fatalf("wrong token: %d", got.status)
	}
	if after := cl.dump(); !equalMaps(before, after) {
		t.Fatal("refused requests changed the store")
	}
}

// TestPairingCommand drives `relay pairing show|approve|deny` against a
// running admin listener.
func TestPairingCommand(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 2)
	cl.withConsent("alice")
	d := cl.startPairing(0, "laptop")
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		getenv := func(k string) string {
			if k == "RELAY_ADMIN_TOKEN" {
				return token
			}
			return ""
		}
		code := RunPairingCLI(context.Background(), append([]string{"--admin", cl.replicas[1].admin.URL}, args...), getenv, &out, &errb)
		return code, out.String(), errb.String()
	}
	code, out, errs := run("show", strings.ToLower(d.code))
	if code != ExitOK || !strings.Contains(out, d.id.KeyID()) || !strings.Contains(out, `"status": "pending"`) {
		t.Fatalf("show: %d %q %q", code, out, errs)
	}
	if code, _, errs := run("approve", d.code); code != ExitUsage || !strings.Contains(errs, "--owner is required") {
		t.Fatalf("approve without owner: %d %q", code, errs)
	}
	code, out, errs = run("approve", d.code, "--owner", "alice", "--runner-id", "cli-1")
	if code != ExitOK || !strings.Contains(out, `"runnerId": "cli-1"`) {
		t.Fatalf("approve: %d %q %q", code, out, errs)
	}
	if code, _, errs := run("approve", d.code, "--owner", "alice"); code != ExitRefused || !strings.Contains(errs, "refused (409): conflict") {
		t.Fatalf("approve twice: %d %q", code, errs)
	}
	if code, _, errs := run("show", "0000-0000"); code != ExitRefused || !strings.Contains(errs, "refused (404)") {
		t.Fatalf("show unknown: %d %q", code, errs)
	}
	d2 := cl.startPairing(1, "other")
	if code, out, errs := run("deny", d2.code); code != ExitOK || !strings.Contains(out, "denied") {
		t.Fatalf("deny: %d %q %q", code, out, errs)
	}
	if code, _, errs := run("list"); code != ExitUsage || !strings.Contains(errs, `unknown command "list"`) {
		t.Fatalf("list: %d %q", code, errs)
	}
	cl.follow()
	if polled := cl.poll(0, d); polled["status"] != "approved" || polled["runnerId"] != "cli-1" {
		t.Fatalf("poll: %v", polled)
	}
	if code, out, errs := run("unpair", "cli-1"); code != ExitOK || !strings.Contains(out, `"removed": true`) {
		t.Fatalf("unpair: %d %q %q", code, out, errs)
	}
	if code, _, errs := run("unpair", "cli-1"); code != ExitRefused || !strings.Contains(errs, "refused (404)") {
		t.Fatalf("unpair twice: %d %q", code, errs)
	}
}

// TestUnapprove: DELETE /projection/approved/{runnerId} unpairs a device
// approved by code on every replica; an unknown runner id is 404 and
// changes nothing.
func TestUnapprove(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 2)
	cl.withConsent("alice")
	d := cl.startPairing(0, "laptop")
	if got := cl.admin(0, "POST", "/pairings/"+d.code+"/approve", `{"owner":"alice","runnerId":"r/1"}`); got.status != 200 {
		t.Fatal(got.body)
	}
	cl.follow()
	if cl.replicas[1].proj.Current().DeviceFor("r/1") == nil {
		t.Fatal("not approved")
	}
	before := cl.dump()
	wantError(t, cl.admin(1, "DELETE", "/projection/approved/other", ""), 404, "not-found", "no device approved by code")
	if after := cl.dump(); !equalMaps(before, after) {
		t.Fatal("a refused unapproval changed the store")
	}
	got := cl.admin(1, "DELETE", "/projection/approved/"+url.PathEscape("r/1"), "")
	if got.status != 200 || decode(t, got)["removed"] != true {
		t.Fatalf("DELETE: %d %s", got.status, got.body)
	}
	cl.follow()
	for i, r := range cl.replicas {
		if r.proj.Current().DeviceByFingerprint(d.id.Public().Identity) != nil {
			t.Fatalf("replica %d still has the device", i)
		}
	}
	if f, _ := projection.Parse([]byte(cl.admin(0, "GET", "/projection", "").body)); len(f.Devices) != 0 {
		t.Fatalf("GET /projection devices: %+v", f.Devices)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

var _ = slog.Default

// changedKeys names the keys whose dumps differ between a and b.
func changedKeys(a, b map[string]string) []string {
	var out []string
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			out = append(out, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	return out
}

// TestNoOpMergeKeepsApprovals: a merge that changes nothing, sent to a
// replica that has not yet followed an approval made elsewhere, must not
// put the bare document in force under the approval's version (which the
// version poll would then take for current, hiding the device there).
func TestNoOpMergeKeepsApprovals(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 2)
	cl.withConsent("alice")
	d := cl.startPairing(0, "laptop")
	if got := cl.admin(1, "POST", "/pairings/"+d.code+"/approve", `{"owner":"alice","runnerId":"r-1"}`); got.status != 200 {
		t.Fatal(got.body)
	}
	// Replica 0 has not followed the approval yet; a no-op merge reaches it.
	if got := cl.admin(0, "POST", "/projection/merge", `{"devices":[]}`); got.status != 200 || decode(t, got)["changed"] != false {
		t.Fatalf("merge: %d %s", got.status, got.body)
	}
	cl.follow()
	for i, r := range cl.replicas {
		if dev := r.proj.Current().DeviceFor("r-1"); dev == nil {
			t.Fatalf("replica %d (version %d): the approved device is not in force", i, r.proj.Version())
		}
	}
}
