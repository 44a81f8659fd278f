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
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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

var installOnce sync.Once
var installErr error

// ensureNodeModules installs the pinned npm packages once per test binary.
func ensureNodeModules(t *testing.T) {
	t.Helper()
	installOnce.Do(func() {
		if _, err := os.Stat(filepath.Join("node_modules", ".bin", "vitest")); err == nil {
			return
		}
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		out, err := cmd.CombinedOutput()
		if err != nil {
			installErr = fmt.Errorf("npm ci in test/contract: %w\n%s", err, out)
		}
	})
	if installErr != nil {
		t.Fatal(installErr)
	}
}

// vitestReport is the part of vitest's JSON reporter output we read (the
// Jest-compatible shape).
type vitestReport struct {
	NumTotalTests   int  `json:"numTotalTests"`
	NumPassedTests  int  `json:"numPassedTests"`
	NumFailedTests  int  `json:"numFailedTests"`
	NumPendingTests int  `json:"numPendingTests"`
	Success         bool `json:"success"`
	TestResults     []struct {
		Name             string `json:"name"`
		Status           string `json:"status"`
		Message          string `json:"message"`
		AssertionResults []struct {
			FullName        string   `json:"fullName"`
			Status          string   `json:"status"`
			FailureMessages []string `json:"failureMessages"`
		} `json:"assertionResults"`
	} `json:"testResults"`
}

func TestStoreContract(t *testing.T) {
	ensureNodeModules(t)
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
			report := runContract(t, backend.name, backend.open(t))
			var failures []string
			for _, file := range report.TestResults {
				if file.Message != "" {
					failures = append(failures, fmt.Sprintf("%s: %s", file.Name, file.Message))
				}
				for _, a := range file.AssertionResults {
					if a.Status != "passed" {
						failures = append(failures, fmt.Sprintf("[%s] %s\n    %s", a.Status, a.FullName,
							strings.ReplaceAll(strings.Join(a.FailureMessages, "\n"), "\n", "\n    ")))
					}
				}
			}
			t.Logf("%s: %d/%d passed (%d failed, %d pending)", backend.name,
				report.NumPassedTests, report.NumTotalTests, report.NumFailedTests, report.NumPendingTests)
			for _, f := range failures {
				t.Error(f)
			}
			if report.NumTotalTests != contractCases || report.NumPassedTests != contractCases {
				t.Fatalf("contract on %s: %d of %d cases passed, want %d of %d",
					backend.name, report.NumPassedTests, report.NumTotalTests, contractCases, contractCases)
			}
		})
	}
}

// runContract serves a bridge on client's backend and runs the vitest suite
// against it once.
func runContract(t *testing.T, backend string, client valkey.Client) vitestReport {
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

	out := filepath.Join(t.TempDir(), "report.json")
	cmd := exec.CommandContext(ctx, filepath.Join("node_modules", ".bin", "vitest"),
		"run", "--reporter=json", "--outputFile="+out)
	cmd.Env = append(os.Environ(),
		"RELAY_CONTRACT_BRIDGE_URL="+srv.URL,
		"RELAY_CONTRACT_BACKEND="+backend,
		"NO_COLOR=1",
	)
	var stdio bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdio, &stdio
	start := time.Now()
	runErr := cmd.Run() // non-zero when a case fails; the report says which
	t.Logf("vitest on %s took %v", backend, time.Since(start).Round(time.Millisecond))

	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("vitest wrote no report (%v): %v\n%s", runErr, err, stdio.String())
	}
	var report vitestReport
	if err := json.Unmarshal(data, &report); err != nil {
		t.Fatalf("parse vitest report: %v\n%s", err, data)
	}
	if runErr != nil && report.NumFailedTests == 0 {
		t.Errorf("vitest failed with no failed case: %v\n%s", runErr, stdio.String())
	}
	return report
}
