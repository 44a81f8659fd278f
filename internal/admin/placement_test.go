package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/test/relaytest"
)

// GET /placement shows a real store's placement behind the token, and no
// method on it changes anything.
func TestPlacementRoute(t *testing.T) {
	c := relaytest.Client(t)
	ctx := context.Background()
	st, err := store.New(ctx, c, store.Options{Namespace: relaytest.Namespace(t, c), Logger: relaytest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, site := range []string{"a", "b", "c"} {
		if _, err := st.SiteUse(ctx, []string{site}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Claim(ctx, store.ClaimInput{RunnerID: "r", Owner: "o", Routes: []store.Route{{SiteID: "a", Owner: "o"}, {SiteID: "b", Owner: "o"}},
		Kinds: []string{"llm.generate"}, Max: 1, LeaseMs: 1000}); err != nil {
		t.Fatal(err)
	}
	srv, _ := setup(t, Options{Token: token, Placement: st})
	if a := call(t, srv, http.MethodGet, "/placement", "", ""); a.status != http.StatusUnauthorized {
		t.Fatalf("without a token: %d", a.status)
	}
	a := call(t, srv, http.MethodGet, "/placement?sites=1", "Bearer "+token, "")
	var rep store.PlacementReport
	if a.status != http.StatusOK || json.Unmarshal([]byte(a.body), &rep) != nil {
		t.Fatalf("placement: %d %s", a.status, a.body)
	}
	// Claimed from: placed; only read: not.
	if len(rep.Sites) != 2 || rep.Layout != store.LayoutVersion || len(rep.Shards) != st.Shards() {
		t.Fatalf("report %+v", rep)
	}
	if _, ok := rep.Sites["c"]; ok {
		t.Fatalf("a site only read was placed: %+v", rep.Sites)
	}
	for _, m := range []string{http.MethodPut, http.MethodPost, http.MethodDelete} {
		if a := call(t, srv, m, "/placement", "Bearer "+token, `{"sites":{"a":3}}`); a.status != http.StatusMethodNotAllowed && a.status != http.StatusNotFound {
			t.Fatalf("%s /placement: %d", m, a.status)
		}
	}
}
