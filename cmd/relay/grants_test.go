package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/grantengine"
	"github.com/byollm/relay-go/internal/loadgen"
	"github.com/byollm/relay-go/test/relaytest"
)

// grantKey writes a fresh grant key file and returns its path and key.
func grantKey(t *testing.T) (string, ed25519.PrivateKey) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "grant.key")
	if err := os.WriteFile(file, grantengine.SeedText(priv), 0o600); err != nil {
		t.Fatal(err)
	}
	return file, priv
}

func publicOf(priv ed25519.PrivateKey) string {
	return base64.RawURLEncoding.EncodeToString(priv.Public().(ed25519.PublicKey))
}

// grantRun drives a small load where every job is a teammate's, so every
// claim needs a grant, through the given replicas: the simulated daemons pin
// the key their pairing hands over and verify every grant with it.
func grantRun(t *testing.T, replicas ...*relaytest.Relay) *loadgen.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cfg := loadgen.Config{Grants: true, Sites: 2, Daemons: 3, Jobs: 30, Concurrency: 6, AdminToken: token, Drain: 30 * time.Second}
	for _, p := range replicas {
		cfg.Replicas = append(cfg.Replicas, "http://"+p.Listen)
	}
	cfg.AdminURLs = []string{"http://" + replicas[0].Admin}
	cfg.StatusURLs = relaytest.AdminURLs(replicas...)
	rep, err := loadgen.Run(ctx, cfg, nil)
	if err != nil {
		t.Fatalf("grant run: %v", err)
	}
	if j := rep.Jobs; !rep.OK() || j.Collected != int64(cfg.Jobs) || j.GrantsVerified < int64(cfg.Jobs) {
		t.Fatalf("grant run: %+v, problems %q", j, rep.Problems)
	}
	return rep
}

// TestBuiltinGrants: replicas started with RELAY_GRANT_KEY_FILE (and no
// RELAY_CONTROL_PLANE_PUBLIC) hand the key file's public half to a device
// paired by device code, and every teammate's job claimed through either
// replica carries a grant signed with that key, for the policy pushed
// through the admin listener.
func TestBuiltinGrants(t *testing.T) {
	t.Parallel()
	file, priv := grantKey(t)
	ns := namespace(t)
	env := map[string]string{"RELAY_VALKEY_URL": relaytest.ValkeyURL(), "RELAY_NAMESPACE": ns, "RELAY_ADMIN_TOKEN": token,
		"RELAY_VERIFICATION_URL": "https://example.test/device", "RELAY_GRANT_KEY_FILE": file}
	a, b := start(t, env), start(t, env)
	if !strings.Contains(a.Log(), `"grants":"builtin"`) {
		t.Fatalf("start line does not say grants=builtin:\n%s", a.Log())
	}

	// Device code: started on a, approved with the CLI through b, polled
	// back on a with the key to pin.
	cli := map[string]string{"RELAY_ADMIN_TOKEN": token}
	_, started := startPairing(t, a, cli)
	if code, out, errs := runBinary(t, cli, "pairing", "approve", started.UserCode, "--owner", "alice", "--admin", "http://"+b.Admin); code != 0 {
		t.Fatalf("approve: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	a.WaitProjection(t, 2, time.Second)
	var polled struct{ Status, ControlPlanePublic string }
	pair(t, a, `{"protocolVersion":"2","action":"poll","deviceCode":"`+started.DeviceCode+`"}`, &polled)
	if polled.Status != "approved" || polled.ControlPlanePublic != publicOf(priv) {
		t.Fatalf("poll: %+v, want controlPlanePublic %s", polled, publicOf(priv))
	}

	rep := grantRun(t, a, b)
	t.Logf("%d jobs, %d grants verified against %s", rep.Jobs.Collected, rep.Jobs.GrantsVerified, publicOf(priv))
}

// TestSignerGrants: with RELAY_GRANT_SIGNER_URL and RELAY_CONTROL_PLANE_PUBLIC
// the built-in engine decides and an HTTP signer holding the key signs (here
// a small one in the test, standing in for a KMS front); the relay never
// reads a key file.
func TestSignerGrants(t *testing.T) {
	t.Parallel()
	_, priv := grantKey(t)
	var signed atomic.Int64
	signer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct{ Message string }
		msg, err := base64.RawURLEncoding.DecodeString(func() string { _ = json.NewDecoder(r.Body).Decode(&in); return in.Message }())
		if r.Method != http.MethodPost || r.Header.Get("Authorization") != "Bearer kms-token" || err != nil {
			http.Error(w, "no", http.StatusBadRequest)
			return
		}
		signed.Add(1)
		w.Header().Set("content-type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"signature": base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, msg))}) //nolint:errcheck
	}))
	t.Cleanup(signer.Close)
	ns := namespace(t)
	p := start(t, map[string]string{"RELAY_VALKEY_URL": relaytest.ValkeyURL(), "RELAY_NAMESPACE": ns, "RELAY_ADMIN_TOKEN": token,
		"RELAY_GRANT_SIGNER_URL": signer.URL + "/sign", "RELAY_CONTROL_PLANE_PUBLIC": publicOf(priv), "RELAY_GRANT_AUTHORITY_TOKEN": "kms-token"})
	rep := grantRun(t, p)
	// One probe at start, then one signature per grant.
	if n := signed.Load(); n < rep.Jobs.GrantsVerified+1 {
		t.Fatalf("the signer signed %d times for %d grants", n, rep.Jobs.GrantsVerified)
	}
}

// TestBuiltinGrantRefusals: a key file with another key's
// RELAY_CONTROL_PLANE_PUBLIC, or with a remote authority, stops the start
// with what to change; nothing is served.
func TestBuiltinGrantRefusals(t *testing.T) {
	t.Parallel()
	file, priv := grantKey(t)
	_, other := grantKey(t)
	for name, tc := range map[string]struct {
		env  map[string]string
		want string
	}{
		"another key": {map[string]string{"RELAY_CONTROL_PLANE_PUBLIC": publicOf(other)},
			"has the public half " + publicOf(priv)},
		"and an authority": {map[string]string{"RELAY_GRANT_AUTHORITY_URL": "http://127.0.0.1:1/cp", "RELAY_CONTROL_PLANE_PUBLIC": publicOf(priv)},
			"RELAY_GRANT_KEY_FILE and RELAY_GRANT_AUTHORITY_URL are both set"},
	} {
		env := map[string]string{"RELAY_VALKEY_URL": relaytest.ValkeyURL(), "RELAY_NAMESPACE": "unused", "RELAY_LISTEN": "127.0.0.1:0",
			"RELAY_ADMIN_LISTEN": "off", "RELAY_GRANT_KEY_FILE": file}
		for k, v := range tc.env {
			env[k] = v
		}
		code, out, errs := runBinary(t, env)
		if code != exitConfig || !strings.Contains(errs, tc.want) || strings.Contains(out, "ready") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", name, code, out, errs)
		}
	}
}
