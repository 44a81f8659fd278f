package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byollm/relay-go/test/relaytest"
)

// TestPolicyFileAndCLI: a replica started with RELAY_POLICY_FILE pushes it,
// `relay policy push` writes through another replica's admin listener, and a
// bad policy file stops the start naming the field.
func TestPolicyFileAndCLI(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.json")
	os.WriteFile(file, []byte(`{"consents":[{"siteId":"site-1","user":"alice","mappings":[]}]}`), 0o600) //nolint:errcheck
	env := map[string]string{"RELAY_VALKEY_URL": relaytest.ValkeyURL(), "RELAY_NAMESPACE": ns, "RELAY_ADMIN_TOKEN": token}
	withFile := map[string]string{"RELAY_POLICY_FILE": file}
	for k, v := range env {
		withFile[k] = v
	}
	start(t, withFile)
	b := start(t, env)
	get := func() string {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+b.Admin+"/policy", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.Header.Get("X-Policy-Version") + " " + string(body)
	}
	if got := get(); !strings.HasPrefix(got, `1 {"consents":[{"siteId":"site-1","user":"alice"`) {
		t.Fatalf("after start with a file: %s", got)
	}
	patch := filepath.Join(dir, "patch.json")
	os.WriteFile(patch, []byte(`{"teams":[{"owner":"bob","members":["alice"]}]}`), 0o600) //nolint:errcheck
	code, out, errs := runBinary(t, map[string]string{"RELAY_ADMIN_TOKEN": token, "RELAY_ADMIN_URL": "http://" + b.Admin}, "policy", "push", "--merge", patch)
	if code != 0 || !strings.Contains(out, `"version":2`) {
		t.Fatalf("policy push: %d %q %q", code, out, errs)
	}
	if got := get(); !strings.Contains(got, `"teams":[{"owner":"bob","members":["alice"]}]`) {
		t.Fatalf("after push: %s", got)
	}

	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"teams":[{"owner":"bob","members":[7]}]}`), 0o600) //nolint:errcheck
	code, out, errs = runBinary(t, map[string]string{"RELAY_VALKEY_URL": relaytest.ValkeyURL(), "RELAY_NAMESPACE": ns, "RELAY_POLICY_FILE": bad,
		"RELAY_LISTEN": "127.0.0.1:0", "RELAY_ADMIN_LISTEN": "off"})
	if code != 1 || !strings.Contains(errs, "teams[0].members[0]: expected string") || strings.Contains(out, "ready") {
		t.Fatalf("bad policy file: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if got := get(); !strings.HasPrefix(got, "2 ") {
		t.Fatalf("a refused file moved the policy: %s", got)
	}
}
