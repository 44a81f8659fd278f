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
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/grantengine"
	"github.com/byollm/relay-go/internal/policy"
	"github.com/byollm/relay-go/internal/valkeyconn"
)

// contractCases is how many `it` cases describePolicyStoreContract declares
// in 0.1.1 (the opaque-id case included). Asserting it catches a contract
// that silently lost cases.
const contractCases = 13

func valkeyURL() string {
	if u := os.Getenv("RELAY_TEST_VALKEY_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

var installOnce sync.Once
var installErr error

func ensureNodeModules(t *testing.T) {
	t.Helper()
	installOnce.Do(func() {
		if _, err := os.Stat(filepath.Join("node_modules", ".bin", "vitest")); err == nil {
			return
		}
		out, err := exec.Command("npm", "ci", "--no-audit", "--no-fund").CombinedOutput()
		if err != nil {
			installErr = fmt.Errorf("npm ci in test/policycontract: %w\n%s", err, out)
		}
	})
	if installErr != nil {
		t.Fatal(installErr)
	}
}

type vitestReport struct {
	NumTotalTests  int `json:"numTotalTests"`
	NumPassedTests int `json:"numPassedTests"`
	NumFailedTests int `json:"numFailedTests"`
	TestResults    []struct {
		Name             string `json:"name"`
		Message          string `json:"message"`
		AssertionResults []struct {
			FullName        string   `json:"fullName"`
			Status          string   `json:"status"`
			FailureMessages []string `json:"failureMessages"`
		} `json:"assertionResults"`
	} `json:"testResults"`
}

func TestPolicyStoreContract(t *testing.T) {
	ensureNodeModules(t)
	for _, backend := range []struct{ name, url string }{
		{"valkey", valkeyURL()},
		{"embedded", ""},
	} {
		t.Run(backend.name, func(t *testing.T) {
			report := runContract(t, backend.name, backend.url)
			for _, file := range report.TestResults {
				if file.Message != "" {
					t.Errorf("%s: %s", file.Name, file.Message)
				}
				for _, a := range file.AssertionResults {
					if a.Status != "passed" {
						t.Errorf("[%s] %s\n    %s", a.Status, a.FullName, strings.Join(a.FailureMessages, "\n    "))
					}
				}
			}
			t.Logf("%s: %d/%d passed", backend.name, report.NumPassedTests, report.NumTotalTests)
			if report.NumTotalTests != contractCases || report.NumPassedTests != contractCases {
				t.Fatalf("contract on %s: %d of %d cases passed, want %d of %d",
					backend.name, report.NumPassedTests, report.NumTotalTests, contractCases, contractCases)
			}
		})
	}
}

func runContract(t *testing.T, backend, url string) vitestReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	client, closeClient, _, err := valkeyconn.Open(ctx, url, nil)
	if err != nil {
		t.Fatalf("open %s backend: %v", backend, err)
	}
	defer closeClient()

	b := &bridge{c: client, stores: map[string]*policy.Store{}}
	srv := httptest.NewServer(b)
	defer func() {
		srv.Close()
		b.cleanup(t)
	}()

	out := filepath.Join(t.TempDir(), "report.json")
	cmd := exec.CommandContext(ctx, filepath.Join("node_modules", ".bin", "vitest"),
		"run", "--reporter=json", "--outputFile="+out)
	cmd.Env = append(os.Environ(), "RELAY_POLICY_BRIDGE_URL="+srv.URL, "RELAY_POLICY_BACKEND="+backend, "NO_COLOR=1")
	var stdio bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdio, &stdio
	runErr := cmd.Run()
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

// bridge gives each contract case its own policy store (a fresh namespace)
// and answers its read and write acts.
type bridge struct {
	c      valkey.Client
	mu     sync.Mutex
	stores map[string]*policy.Store
	all    []string // every namespace made, for cleanup
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
		var raw [6]byte
		rand.Read(raw[:]) //nolint:errcheck // crypto/rand does not fail
		ns := "pcontract-" + hex.EncodeToString(raw[:])
		s, err := policy.NewStore(b.c, ns)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		b.mu.Lock()
		b.stores[ns] = s
		b.all = append(b.all, ns)
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
func (b *bridge) cleanup(t *testing.T) {
	ctx := context.Background()
	for _, ns := range b.all {
		keys, err := b.c.Do(ctx, b.c.B().Keys().Pattern(ns+":*").Build()).AsStrSlice()
		if err != nil {
			t.Errorf("clean up %s: %v", ns, err)
			continue
		}
		for _, k := range keys {
			b.c.Do(ctx, b.c.B().Del().Key(k).Build()) //nolint:errcheck
		}
	}
}
