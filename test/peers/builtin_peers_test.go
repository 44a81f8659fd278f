package peers

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/byollm/relay-go/internal/grantengine"
	"github.com/byollm/relay-go/test/relaytest"
)

// builtinScenarios are the titles builtin.test.mjs reports with the key
// file (PEERS_GRANT_MODE=builtin); signerScenarios with the remote signer.
var (
	builtinScenarios = []string{
		"B1 a device-code-paired Runner pins the key file's public half; a teammate's job is granted, verified by the daemon and run",
		"B2 the owner's own job still runs",
		"B3 a non-member's job is declined permanently and never offered to that device again",
		"B4 a paused consent is declined transiently and runs once resumed through the policy admin API",
	}
	signerScenarios = []string{
		"B5 signer mode: the engine decides, the HTTP signer signs, the teammate's job is granted, verified by the daemon and run",
	}
)

// TestBuiltinGrantPeers runs team sharing with the built-in engine: three
// replicas with RELAY_GRANT_KEY_FILE (key file mode) or with
// RELAY_GRANT_SIGNER_URL + RELAY_CONTROL_PLANE_PUBLIC and a small HTTP signer
// holding the key in this process (signer mode); the policy is written
// through the replicas' admin API (POST /policy/merge). The daemon is the
// published byollm, paired by device code, offering its service to its team.
func TestBuiltinGrantPeers(t *testing.T) {
	t.Parallel() // its own namespace, replicas, ports, proxy and daemon homes
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("getwd: %v", err)
	}
	if os.Getenv("PEERS_RELAY") == "reference" {
		t.Skip("PEERS_RELAY=reference: the reference relay has no built-in grant engine")
	}
	relaytest.NodeModules(t, dir, filepath.Join("node_modules", ".package-lock.json"))
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	public := base64.RawURLEncoding.EncodeToString(priv.Public().(ed25519.PublicKey))

	t.Run("key file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "grant.key")
		if err := os.WriteFile(file, grantengine.SeedText(priv), 0o600); err != nil {
			t.Fatal(err)
		}
		runGrantSuite(t, dir, "vitest.builtin.config.mjs", builtinScenarios,
			map[string]string{"RELAY_GRANT_KEY_FILE": file},
			[]string{"PEERS_GRANT_MODE=builtin", "PEERS_CONTROL_PLANE_PUBLIC=" + public})
	})

	t.Run("signer", func(t *testing.T) {
		// The remote signer's contract (README, "Grants"): POST
		// {"message": base64url} -> {"signature": base64url}; GET /stats is
		// this test's own, for the suite to see it was used.
		var signed atomic.Int64
		mux := http.NewServeMux()
		mux.HandleFunc("POST /sign", func(w http.ResponseWriter, r *http.Request) {
			var in struct {
				Message string `json:"message"`
			}
			if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&in); err != nil {
				http.Error(w, `{"error":"bad-request"}`, http.StatusBadRequest)
				return
			}
			msg, err := base64.RawURLEncoding.DecodeString(in.Message)
			if err != nil {
				http.Error(w, `{"error":"bad-request"}`, http.StatusBadRequest)
				return
			}
			signed.Add(1)
			w.Header().Set("content-type", "application/json")
			json.NewEncoder(w).Encode(map[string]string{"signature": base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, msg))}) //nolint:errcheck
		})
		mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
			json.NewEncoder(w).Encode(map[string]int64{"signed": signed.Load()}) //nolint:errcheck
		})
		signer := httptest.NewServer(mux)
		t.Cleanup(signer.Close)
		runGrantSuite(t, dir, "vitest.builtin.config.mjs", signerScenarios,
			map[string]string{"RELAY_GRANT_SIGNER_URL": signer.URL + "/sign", "RELAY_CONTROL_PLANE_PUBLIC": public},
			[]string{"PEERS_GRANT_MODE=signer", "PEERS_CONTROL_PLANE_PUBLIC=" + public, "PEERS_SIGNER_STATS=" + signer.URL + "/stats"})
	})
}
