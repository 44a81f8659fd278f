// Package deploy_test checks the deployment files against the Kubernetes API
// types, kustomize, the relay's configuration and the Go toolchain. No
// container engine runs here, so the files themselves are what is tested.
package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/byollm/relay-go/internal/config"
	"github.com/byollm/relay-go/internal/telemetry"
)

// root is the repository root, seen from test/deploy.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("repository root not found from test/deploy: %v", err)
	}
	return dir
}

func readFile(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), rel))
	if err != nil {
		t.Fatalf("read %s: %v", rel, err)
	}
	return b
}

// relayEnvNames returns every environment variable the relay reads: the
// RELAY_* names of internal/config (a renamed variable fails these tests),
// the OpenTelemetry names the SDK reads when telemetry is set up, and
// GOMEMLIMIT.
func relayEnvNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, n := range config.EnvVars() {
		names[n] = true
	}
	if !names["RELAY_VALKEY_URL"] || !names["RELAY_LISTEN"] {
		t.Fatalf("config.EnvVars() = %v lacks the basics", config.EnvVars())
	}
	for _, n := range []string{telemetry.EnvOTLPEndpoint, telemetry.EnvOTLPTracesEndpoint, telemetry.EnvSDKDisabled} {
		names[n] = true
	}
	// The Go runtime's soft memory limit, set from the container's limit.
	names["GOMEMLIMIT"] = true
	return names
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// splitDocs splits a multi-document YAML stream, dropping empty documents.
func splitDocs(b []byte) [][]byte {
	var out [][]byte
	for _, d := range docSep.Split(string(b), -1) {
		if strings.TrimSpace(stripComments(d)) != "" {
			out = append(out, []byte(d))
		}
	}
	return out
}

func stripComments(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// portOf returns the port of a listen address like ":8080" or "0.0.0.0:8081".
func portOf(t *testing.T, addr string) int {
	t.Helper()
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		t.Fatalf("listen address %q has no port", addr)
	}
	p, err := strconv.Atoi(addr[i+1:])
	if err != nil {
		t.Fatalf("listen address %q: %v", addr, err)
	}
	return p
}
