// Package policycontract runs the policy store contract that
// @byollm/control-plane@0.1.1 publishes (`@byollm/control-plane/store-contract`,
// describePolicyStoreContract), unmodified, under vitest against the Go
// policy store (internal/policy), through a loopback bridge served here. It
// runs once per backend: the Valkey at RELAY_TEST_VALKEY_URL and the
// embedded miniredis, with opaqueIds: true.
//
// Needs node and npm on PATH; installs node_modules from the committed
// package-lock.json with `npm ci` when it is missing.
package policycontract

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/grantengine"
	"github.com/byollm/relay-go/internal/policy"
	"github.com/byollm/relay-go/test/relaytest"
)

// contractCases is how many `it` cases describePolicyStoreContract declares
// in 0.1.1 (the opaque-id case included). Asserting it catches a contract
// that silently lost cases.
const contractCases = 13

func TestPolicyStoreContract(t *testing.T) {
	for _, backend := range []struct {
		name string
		open func(testing.TB) valkey.Client
	}{
		{"valkey", relaytest.Client},
		{"embedded", relaytest.Embedded},
	} {
		t.Run(backend.name, func(t *testing.T) {
			runContract(t, backend.name, backend.open(t)).RequireAll(t, contractCases)
		})
	}
}

func runContract(t *testing.T, backend string, client valkey.Client) relaytest.VitestReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := &bridge{t: t, c: client, stores: map[string]*policy.Store{}}
	srv := httptest.NewServer(b)
	defer srv.Close()

	return relaytest.Vitest(ctx, t, ".", "RELAY_POLICY_BRIDGE_URL="+srv.URL, "RELAY_POLICY_BACKEND="+backend)
}

// bridge gives each contract case its own policy store (a fresh namespace)
// and answers its read and write acts.
type bridge struct {
	t      testing.TB // each namespace is deleted when it ends
	c      valkey.Client
	mu     sync.Mutex
	stores map[string]*policy.Store
}

type request struct {
	ID       string                `json:"id"`
	SiteID   string                `json:"siteId"`
	User     string                `json:"user"`
	Owner    string                `json:"owner"`
	Mappings []grantengine.Mapping `json:"mappings"`
}

// snapshotBody is PolicySnapshot as JSON: sets as arrays, absent when the
// store cannot say.
type snapshotBody struct {
	Consented string                `json:"consented"`
	Member    bool                  `json:"member"`
	Mappings  []grantengine.Mapping `json:"mappings"`
	Declares  []string              `json:"declares,omitempty"`
}

func (b *bridge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	op := strings.TrimPrefix(r.URL.Path, "/")
	ctx := r.Context()
	if op == "make" {
		ns := relaytest.Namespace(b.t, b.c)
		s, err := policy.NewStore(b.c, ns)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		b.mu.Lock()
		b.stores[ns] = s
		b.mu.Unlock()
		json.NewEncoder(w).Encode(map[string]string{"id": ns}) //nolint:errcheck
		return
	}
	b.mu.Lock()
	s := b.stores[req.ID]
	b.mu.Unlock()
	if s == nil {
		http.Error(w, "unknown store "+req.ID, http.StatusNotFound)
		return
	}
	var err error
	var reply any = map[string]bool{"ok": true}
	switch op {
	case "read":
		var snap grantengine.Snapshot
		snap, err = s.Read(ctx, req.SiteID, req.User, req.Owner)
		if err == nil {
			body := snapshotBody{Consented: snap.Consented, Member: snap.Member, Mappings: snap.Mappings}
			if snap.Declares != nil {
				body.Declares = []string{}
				for p := range snap.Declares {
					body.Declares = append(body.Declares, p)
				}
			}
			reply = body
		}
	case "consent":
		err = s.Consent(ctx, req.SiteID, req.User, req.Mappings)
	case "revoke":
		err = s.Revoke(ctx, req.SiteID, req.User)
	case "pause":
		err = s.Pause(ctx, req.SiteID, req.User)
	case "addMember":
		err = s.AddMember(ctx, req.Owner, req.User)
	case "removeMember":
		err = s.RemoveMember(ctx, req.Owner, req.User)
	case "done":
		err = s.Clear(ctx)
		if err == nil {
			b.mu.Lock()
			delete(b.stores, req.ID)
			b.mu.Unlock()
		}
	default:
		http.Error(w, "unknown op "+op, http.StatusNotFound)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(reply) //nolint:errcheck
}

// cleanup deletes every key of every namespace made, including those of a
// case that failed before done().
