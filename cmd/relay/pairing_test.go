package main

import (
	"crypto/rand"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/envelope"
	"github.com/byollm/relay-go/test/relaytest"
)

// TestPairingCommand: the real binary wires the pairing routes and `relay
// pairing`: a code minted on one process is shown and approved with the CLI
// through the other's admin listener, and polled back as approved on the
// first.
func TestPairingCommand(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	env := map[string]string{"RELAY_VALKEY_URL": relaytest.ValkeyURL(), "RELAY_NAMESPACE": ns, "RELAY_ADMIN_TOKEN": token,
		"RELAY_VERIFICATION_URL": "https://example.test/device"}
	a, b := start(t, env), start(t, env)
	cli := map[string]string{"RELAY_ADMIN_TOKEN": token}
	id, started := startPairing(t, a, cli)

	code, out, errs := runBinary(t, cli, "pairing", "show", "--admin", "http://"+b.Admin, strings.ToLower(started.UserCode))
	if code != 0 || !strings.Contains(out, id.KeyID()) || !strings.Contains(out, `"status": "pending"`) {
		t.Fatalf("show: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, errs = runBinary(t, cli, "pairing", "approve", started.UserCode, "--owner", "alice", "--admin", "http://"+b.Admin)
	if code != 0 || !strings.Contains(out, `"owner": "alice"`) {
		t.Fatalf("approve: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	a.WaitProjection(t, 2, time.Second)
	var polled struct{ Status, RunnerID, Owner string }
	pair(t, a, `{"protocolVersion":"2","action":"poll","deviceCode":"`+started.DeviceCode+`"}`, &polled)
	if polled.Status != "approved" || polled.Owner != "alice" || polled.RunnerID == "" {
		t.Fatalf("poll: %+v", polled)
	}
	code, _, errs = runBinary(t, cli, "pairing", "approve", started.UserCode, "--owner", "alice", "--admin", "http://"+a.Admin)
	if code != 1 || !strings.Contains(errs, "refused (404)") {
		t.Fatalf("approve a spent code: exit %d, stderr %q", code, errs)
	}
}

// startPairing pushes a one-owner projection ("alice") through p's admin
// listener with the CLI and starts a device-code pairing on p for a new
// device.
func startPairing(t *testing.T, p *relaytest.Relay, cli map[string]string) (*envelope.Identity, pairStarted) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "p.json")
	if err := os.WriteFile(file, []byte(fixture("alice")), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := runBinary(t, cli, "projection", "push", "--admin", "http://"+p.Admin, file); code != 0 {
		t.Fatalf("push: %d %q %q", code, out, errs)
	}
	id, err := envelope.Generate(1, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"protocolVersion": "2", "action": "start",
		"daemon": map[string]string{"version": "0.1.1", "label": "laptop", "platform": "linux"},
		"device": id.Public(), "capabilities": []any{}})
	var started pairStarted
	pair(t, p, string(body), &started)
	return id, started
}

// pairStarted is a pairing start's answer.
type pairStarted struct{ DeviceCode, UserCode string }

func pair(t *testing.T, p *relaytest.Relay, body string, into any) {
	t.Helper()
	resp, err := http.Post("http://"+p.Listen+"/byollm/pair", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(into) != nil {
		t.Fatalf("pair answered %d", resp.StatusCode)
	}
}
