// Package lifecycle_test runs whole relay processes through the events of
// their life in production, under load from the load generator
// (internal/loadgen): rolling restarts behind a readiness-checking load
// balancer, and a Valkey outage with a real stop and restart. The numbers
// that must stay zero are the load generator's: jobs lost, jobs run twice.
package lifecycle_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/byollm/relay-go/test/relaytest"
)

func TestMain(m *testing.M) { relaytest.Main(m) }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newReplica prepares a relay replica on fixed ports, so it can be stopped
// and started again as a pod restarted in place or a systemd unit.
func newReplica(t *testing.T, name string, env []string) *relaytest.Relay {
	return relaytest.NewRelay(t, relaytest.RelayConfig{Name: name, Env: append(env, "RELAY_LOG_LEVEL=info")})
}

// run starts a new incarnation of r, failing the test if it is not ready.
func run(t *testing.T, r *relaytest.Relay) {
	t.Helper()
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
}

// probe GETs an admin path and returns the status (0 when unreachable).
func probe(ctx context.Context, hc *http.Client, url string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	res, err := hc.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 8<<20))
	return res.StatusCode, string(b)
}

// relayLines keeps the relay_* series of a /metrics scrape, histogram
// buckets left out.
func relayLines(scrape string) string {
	var out []string
	for _, l := range strings.Split(scrape, "\n") {
		if strings.HasPrefix(l, "relay_") && !strings.Contains(l, "_bucket{") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
