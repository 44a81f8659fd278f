package config

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// RELAY_GRANT_KEY_FILE is checked at start: a readable Ed25519 seed is
// taken, anything else stops the start with how to make one.
func TestGrantKeyFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "grant.key")
	// 32 bytes, base64url.
	if err := os.WriteFile(good, []byte("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short.key")
	if err := os.WriteFile(short, []byte("AAECAw"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(nil, envOf(map[string]string{"RELAY_GRANT_KEY_FILE": good}), io.Discard)
	if err != nil || c.GrantKeyFile != good {
		t.Fatalf("good key: %v %q", err, c.GrantKeyFile)
	}
	c, err = Load(nil, envOf(map[string]string{"RELAY_GRANT_KEY_FILE": ""}), io.Discard)
	if err != nil || c.GrantKeyFile != "" {
		t.Fatalf("unset: %v %q", err, c.GrantKeyFile)
	}
	for name, tc := range map[string]struct{ path, want string }{
		"missing":   {filepath.Join(dir, "nope"), "no such file"},
		"too short": {short, "want 32"},
	} {
		_, err := Load(nil, envOf(map[string]string{"RELAY_GRANT_KEY_FILE": tc.path}), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "RELAY_GRANT_KEY_FILE") ||
			!strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "head -c 32 /dev/urandom") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// RELAY_POLICY_FILE must name a readable regular file.
func TestPolicyFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(file, []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := Load(nil, envOf(map[string]string{"RELAY_POLICY_FILE": file}), io.Discard); err != nil || c.PolicyFile != file {
		t.Fatalf("file: %v %q", err, c.PolicyFile)
	}
	for _, bad := range []string{filepath.Join(t.TempDir(), "nope.json"), t.TempDir()} {
		if _, err := Load(nil, envOf(map[string]string{"RELAY_POLICY_FILE": bad}), io.Discard); err == nil || !strings.Contains(err.Error(), "RELAY_POLICY_FILE") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
