// Package contract runs the routing-store contract that @byollm/relay@0.1.1
// publishes (`@byollm/relay/store-contract`), unmodified, under vitest against
// the Go store, through the loopback bridge in ./bridge. It runs once per
// backend: the Valkey at RELAY_TEST_VALKEY_URL, the embedded miniredis, and
// the Valkey Cluster at RELAY_TEST_VALKEY_CLUSTER_URL (skipped, saying so,
// when that is unset; .ci/run always sets it).
//
// Needs node and npm on PATH; installs test/contract/node_modules from the
// committed package-lock.json with `npm ci` when it is missing.
package contract

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/byollm/relay-go/test/contract/bridge"
	"github.com/byollm/relay-go/test/relaytest"
	"github.com/valkey-io/valkey-go"
)

// contractCases is how many `it` cases describeStoreContract declares in
// 0.1.1. Asserting the count catches a contract that silently lost cases
// (for example a failed import that declares none).
const contractCases = 38

func TestStoreContract(t *testing.T) {
	backends := []struct {
		name string
		open func(testing.TB) valkey.Client
	}{
		{"valkey", relaytest.Client},
		{"embedded", relaytest.Embedded},
		{"cluster", relaytest.Cluster}, // skips when no cluster is configured
	}
	for _, backend := range backends {
		t.Run(backend.name, func(t *testing.T) {
			runContract(t, backend.name, backend.open(t)).RequireAll(t, contractCases)
		})
	}
}

// runContract serves a bridge on client's backend and runs the vitest suite
// against it once.
func runContract(t *testing.T, backend string, client valkey.Client) relaytest.VitestReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := bridge.New(client, relaytest.Logger(t))
	srv := httptest.NewServer(b)
	defer func() {
		srv.Close()
		// Every case calls done(); anything left is from a case that failed
		// before it got there.
		if err := b.Close(context.Background()); err != nil {
			t.Errorf("clean up namespaces: %v", err)
		}
	}()

	return relaytest.Vitest(ctx, t, ".", "RELAY_CONTRACT_BRIDGE_URL="+srv.URL, "RELAY_CONTRACT_BACKEND="+backend)
}
