package relaytest

// Stop-gap versions of the helpers the "harness" half of this package
// provides (test server URLs, namespaces, waiting, logging), so the process
// half builds on its own; they are replaced by that half's at merge.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/valkeyconn"
)

// ValkeyURL is the shared test server (RELAY_TEST_VALKEY_URL).
func ValkeyURL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv("RELAY_TEST_VALKEY_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// ClusterURL is the test cluster (RELAY_TEST_VALKEY_CLUSTER_URL), "" when
// there is none.
func ClusterURL(t testing.TB) string {
	t.Helper()
	return os.Getenv("RELAY_TEST_VALKEY_CLUSTER_URL")
}

// Client connects to the Valkey at url until the test ends.
func Client(t testing.TB, url string) valkey.Client {
	t.Helper()
	opt, err := valkey.ParseURL(url)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	opt.DisableCache = true
	c, err := valkey.NewClient(opt)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(c.Close)
	return c
}

var nsUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// Namespace is a fresh key namespace on client's server, its keys deleted
// when the test ends.
func Namespace(t testing.TB, client valkey.Client) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := strings.ToLower(nsUnsafe.ReplaceAllString(t.Name(), "-"))
	if len(name) > 24 {
		name = name[:24]
	}
	ns := "t-" + strings.Trim(name, "-") + "-" + hex.EncodeToString(b)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := valkeyconn.DeleteMatching(ctx, client, ns+":*"); err != nil {
			t.Errorf("delete namespace %s: %v", ns, err)
		}
	})
	return ns
}

// WaitFor polls cond until it holds, failing the test with msg after
// timeout.
func WaitFor(t testing.TB, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	if !poll(timeout, 10*time.Millisecond, cond) {
		t.Fatalf("after %v: %s", timeout, msg)
	}
}

// Logger writes through t.Log.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, nil))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
