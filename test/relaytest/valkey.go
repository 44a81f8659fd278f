package relaytest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/valkeyconn"
)

// DefaultValkeyURL is the test server when RELAY_TEST_VALKEY_URL is unset.
const DefaultValkeyURL = "redis://127.0.0.1:6379/0"

// ValkeyURL is the test Valkey server: RELAY_TEST_VALKEY_URL, or
// DefaultValkeyURL.
func ValkeyURL() string {
	if u := os.Getenv("RELAY_TEST_VALKEY_URL"); u != "" {
		return u
	}
	return DefaultValkeyURL
}

// ClusterURL is the test Valkey Cluster, RELAY_TEST_VALKEY_CLUSTER_URL, or ""
// when none is configured.
func ClusterURL() string { return os.Getenv("RELAY_TEST_VALKEY_CLUSTER_URL") }

// RequireCluster returns ClusterURL, or skips t when it is unset.
func RequireCluster(t testing.TB) string {
	t.Helper()
	u := ClusterURL()
	if u == "" {
		t.Skip("RELAY_TEST_VALKEY_CLUSTER_URL is unset: no cluster to test against (start one with .ci/cluster start)")
	}
	return u
}

// shared holds the process-wide clients by URL ("" is the embedded server).
// Opening a client per test would cost a connection pool each, and store
// tests run hundreds of subtests.
var shared struct {
	mu      sync.Mutex
	clients map[string]valkey.Client
}

// Client is the shared client of the test server (ValkeyURL). Do not close
// it; it lives as long as the test process.
func Client(t testing.TB) valkey.Client {
	t.Helper()
	return sharedClient(t, ValkeyURL())
}

// Embedded is the shared client of one embedded in-process server (the
// store's no-URL mode, miniredis), started on first use.
func Embedded(t testing.TB) valkey.Client {
	t.Helper()
	return sharedClient(t, "")
}

// Cluster is the shared client of the test cluster (ClusterURL); it skips t
// when none is configured and fails it when the URL is not a cluster.
func Cluster(t testing.TB) valkey.Client {
	t.Helper()
	c := sharedClient(t, RequireCluster(t))
	if !valkeyconn.IsCluster(c) {
		t.Fatalf("RELAY_TEST_VALKEY_CLUSTER_URL=%s is not a cluster (CLUSTER SLOTS refused)", ClusterURL())
	}
	return c
}

func sharedClient(t testing.TB, url string) valkey.Client {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if c, ok := shared.clients[url]; ok {
		return c
	}
	c, _, _, err := valkeyconn.Open(context.Background(), url, 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("relaytest: %v", describe(url, err))
	}
	if shared.clients == nil {
		shared.clients = map[string]valkey.Client{}
	}
	shared.clients[url] = c
	return c
}

// Open connects to url as the relay does (valkeyconn.Open; "" starts an
// embedded server) with a client of t's own, closed when t ends. Use it when
// a test closes or breaks its client; otherwise Client is cheaper.
func Open(t testing.TB, url string) valkey.Client {
	t.Helper()
	c, closeFn, _, err := valkeyconn.Open(context.Background(), url, 0, Logger(t))
	if err != nil {
		t.Fatalf("relaytest: %v", describe(url, err))
	}
	t.Cleanup(closeFn)
	return c
}

func describe(url string, err error) error {
	if url == "" {
		return fmt.Errorf("embedded server: %w", err)
	}
	return fmt.Errorf("test server %s (RELAY_TEST_VALKEY_URL / RELAY_TEST_VALKEY_CLUSTER_URL): %w", url, err)
}
