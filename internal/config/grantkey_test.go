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
	t.Parallel()
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
	t.Parallel()
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

// RELAY_GRANT_KEY_FILE selects the built-in engine: it excludes the remote
// authority and the remote signer, needs no RELAY_CONTROL_PLANE_PUBLIC (the
// key's public half is what devices pin), and refuses one that is another
// key's, saying which to write.
func TestBuiltinGrantMode(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "grant.key")
	// The seed 00 01 02 … 1f; its public half is below.
	if err := os.WriteFile(file, []byte("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const public = "A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg"

	c, err := Load(nil, envOf(map[string]string{"RELAY_GRANT_KEY_FILE": file}), io.Discard)
	if err != nil {
		t.Fatalf("key file alone: %v", err)
	}
	if c.GrantMode() != GrantsBuiltin || c.GrantKeyPublic != public || c.ControlPlanePublic != "" {
		t.Fatalf("key file alone: mode %q, public %q, controlPlanePublic %q", c.GrantMode(), c.GrantKeyPublic, c.ControlPlanePublic)
	}
	c, err = Load(nil, envOf(map[string]string{"RELAY_GRANT_KEY_FILE": file, "RELAY_CONTROL_PLANE_PUBLIC": public}), io.Discard)
	if err != nil || c.GrantMode() != GrantsBuiltin {
		t.Fatalf("key file with its own public half: %v, mode %q", err, c.GrantMode())
	}

	for name, tc := range map[string]struct {
		env  map[string]string
		want []string
	}{
		"another key's public half": {map[string]string{"RELAY_CONTROL_PLANE_PUBLIC": testCPKey},
			[]string{"RELAY_CONTROL_PLANE_PUBLIC is " + testCPKey, "has the public half " + public, "unset RELAY_CONTROL_PLANE_PUBLIC", "set it to " + public}},
		"with a remote authority": {map[string]string{"RELAY_GRANT_AUTHORITY_URL": "http://cp:8080", "RELAY_CONTROL_PLANE_PUBLIC": public},
			[]string{"RELAY_GRANT_KEY_FILE and RELAY_GRANT_AUTHORITY_URL are both set; choose one"}},
		"with a remote signer": {map[string]string{"RELAY_GRANT_SIGNER_URL": "http://kms/sign", "RELAY_CONTROL_PLANE_PUBLIC": public},
			[]string{"RELAY_GRANT_KEY_FILE and RELAY_GRANT_SIGNER_URL are both set; choose one"}},
		"with a token for nothing remote": {map[string]string{"RELAY_GRANT_AUTHORITY_TOKEN": "t0ken"},
			[]string{"RELAY_GRANT_AUTHORITY_TOKEN is set but no remote"}},
	} {
		env := map[string]string{"RELAY_GRANT_KEY_FILE": file}
		for k, v := range tc.env {
			env[k] = v
		}
		_, err := Load(nil, envOf(env), io.Discard)
		if err == nil {
			t.Errorf("%s: started", name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v\nwant %q", name, err, w)
			}
		}
	}
}
