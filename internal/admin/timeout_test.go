package admin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/opsview"
	"github.com/byollm/relay-go/internal/pairings"
	"github.com/byollm/relay-go/internal/policy"
	"github.com/byollm/relay-go/internal/projectionsync"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/test/relaytest"
)

// With Valkey frozen, every admin route that reads or writes the store
// answers the retryable 503 within about RELAY_STORE_TIMEOUT, as the planes
// do, instead of waiting for valkey-go to give up on the connection (the
// projection status took 2,062 ms before). Once the server is thawed the
// routes serve again.
func TestAdminFrozenStoreAnswersFast503(t *testing.T) {
	// A server of this test's own, frozen with SIGSTOP (the shared test
	// server is never frozen).
	srv := relaytest.StartServer(t)
	c := relaytest.Open(t, srv.URL())
	ns := relaytest.Namespace(t, c)
	// Runs before the namespace cleanup, should the test stop while frozen.
	t.Cleanup(func() { _ = srv.Signal(syscall.SIGCONT) })
	ctx := context.Background()
	st, err := store.New(ctx, c, store.Options{Namespace: ns, Logger: relaytest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ps := projectionsync.New(c, projectionsync.Options{Namespace: ns, Logger: relaytest.Logger(t)})
	if err := ps.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.NewStore(c, ns)
	if err != nil {
		t.Fatal(err)
	}
	const timeout = 200 * time.Millisecond
	adm := New(Options{Token: token, Projections: ps, Pairings: pairings.New(st, ps), Policies: pol, Placement: st,
		StoreTimeout: timeout, Logger: relaytest.Logger(t)})
	ui := opsview.New(opsview.Options{Source: opsview.StoreSource{Store: st, Client: c, Proj: ps.Current},
		AdminToken: token, StoreTimeout: timeout, Logger: relaytest.Logger(t)})
	adm.HandleOpen(http.MethodGet, "/ui/*", ui)
	hs := httptest.NewServer(adm)
	t.Cleanup(hs.Close)
	auth := "Bearer " + token
	if a := call(t, hs, "PUT", "/projection", auth, doc("alice")); a.status != 200 {
		t.Fatalf("put: %d %s", a.status, a.body)
	}

	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP: %v", err)
	}
	// Without the bound these took 2 s and more. The timeout plus
	// generous slack for a loaded machine, well under that.
	const within = 1500 * time.Millisecond
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/projection/status", ""},
		{"GET", "/projection", ""},
		{"PUT", "/projection", doc("alice", "bob")},
		{"POST", "/projection/merge", doc("carol")},
		{"DELETE", "/projection/approved/runner-x", ""},
		{"GET", "/policy", ""},
		{"GET", "/policy/status", ""},
		{"PUT", "/policy", policyDoc},
		{"POST", "/policy/merge", policyDoc},
		{"GET", "/pairings/ABCD-EFGH", ""},
		{"POST", "/pairings/ABCD-EFGH/approve", `{"owner":"alice"}`},
		{"POST", "/pairings/ABCD-EFGH/deny", ""},
		{"GET", "/placement", ""},
		{"GET", "/ui/", ""},
		{"GET", "/ui/site/site-1", ""},
	} {
		start := time.Now()
		req, _ := http.NewRequest(r.method, hs.URL+r.path, strings.NewReader(r.body))
		req.Header.Set("Authorization", auth)
		req.Header.Set("Accept", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		took := time.Since(start)
		t.Logf("%s %s: %d after %v", r.method, r.path, resp.StatusCode, took.Round(time.Millisecond))
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("%s %s with the store frozen: %d, want the retryable 503", r.method, r.path, resp.StatusCode)
		}
		if took > within {
			t.Errorf("%s %s answered after %v with the store frozen; want within %v (store timeout %v)", r.method, r.path, took, within, timeout)
		}
	}

	if err := srv.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT: %v", err)
	}
	relaytest.WaitFor(t, 10*time.Second, "the projection status served once the store is back", func() bool {
		return call(t, hs, "GET", "/projection/status", auth, "").status == 200
	})
}
