// Package posture runs the published deployment posture audit,
// byollm-audit-deployment from @byollm/conformance@0.1.1, against real relay
// processes: one serving TLS on its public listener (RELAY_TLS_CERT_FILE /
// RELAY_TLS_KEY_FILE) and, for contrast, one serving plaintext as it does
// behind a balancer that terminates TLS.
//
// The audit has a URL and nothing else. D007 asks for https and then sends
// plaintext HTTP to the same host and port: it passes when that is refused
// or redirected to https. D008-D010 need the origin's own address on port
// 443 behind an edge (the audit's third argument) and report "not measured"
// without it; a loopback test on a free port cannot give them one, so they
// are asserted unmeasured here, not passed.
package posture

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/byollm/relay-go/test/relaytest"
)

const auditTimeout = 2 * time.Minute

func TestAuditAgainstTLSReplica(t *testing.T) {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	relaytest.NodeModules(t, dir, filepath.Join("node_modules", ".package-lock.json"))
	tmp := t.TempDir()
	certFile, keyFile := writeCert(t, tmp)
	projection := filepath.Join(tmp, "projection.json")
	if err := os.WriteFile(projection, []byte(`{"consents":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	valkeyURL := relaytest.ValkeyURL()
	namespace := relaytest.Namespace(t, relaytest.Open(t, valkeyURL))
	env := map[string]string{
		"RELAY_VALKEY_URL":      valkeyURL,
		"RELAY_NAMESPACE":       namespace,
		"RELAY_PROJECTION_FILE": projection,
		"RELAY_ADMIN_LISTEN":    "off",
		"RELAY_LISTEN":          "127.0.0.1:0",
	}

	t.Run("TLS replica", func(t *testing.T) {
		tlsEnv := map[string]string{"RELAY_TLS_CERT_FILE": certFile, "RELAY_TLS_KEY_FILE": keyFile}
		for k, v := range env {
			tlsEnv[k] = v
		}
		addr := startRelay(t, tlsEnv)
		_, port, _ := net.SplitHostPort(addr)
		// The certificate names localhost; Node trusts it through
		// NODE_EXTRA_CA_CERTS, as an operator's private CA would be.
		out := audit(t, dir, "https://localhost:"+port, certFile)
		results := parse(t, out)
		for _, id := range []string{"D001", "D002", "D003", "D004", "D005", "D006", "D007", "D011"} {
			if results[id] != "ok" {
				t.Errorf("%s: %q, want ok\n%s", id, results[id], out)
			}
		}
		for _, id := range []string{"D008", "D009", "D010"} {
			if results[id] != "?" {
				t.Errorf("%s: %q, want not measured (no origin address on port 443 here)\n%s", id, results[id], out)
			}
		}
		if !strings.Contains(out, "plaintext answered 308 and redirects to https") {
			t.Errorf("D007 detail:\n%s", out)
		}
		if !strings.Contains(out, "8/11") {
			t.Errorf("want 8/11:\n%s", out)
		}
		t.Logf("TLS replica: %s", summary(out))
	})

	// Behind a balancer that terminates TLS the relay serves plaintext, as
	// the reference does: D007 fails there by design (7/11).
	t.Run("plaintext replica", func(t *testing.T) {
		addr := startRelay(t, env)
		_, port, _ := net.SplitHostPort(addr)
		out := audit(t, dir, "http://localhost:"+port, "")
		results := parse(t, out)
		if results["D007"] != "FAIL" || !strings.Contains(out, "7/11") {
			t.Errorf("plaintext replica: D007 %q, want FAIL and 7/11\n%s", results["D007"], out)
		}
		t.Logf("plaintext replica: %s", summary(out))
	})
}

var resultLine = regexp.MustCompile(`(?m)^\s+(ok|FAIL|\?)\s+(D\d{3})_`)

func parse(t *testing.T, out string) map[string]string {
	t.Helper()
	results := map[string]string{}
	for _, m := range resultLine.FindAllStringSubmatch(out, -1) {
		results[m[2]] = m[1]
	}
	if len(results) != 11 {
		t.Fatalf("want 11 checks in the report, found %d:\n%s", len(results), out)
	}
	return results
}

func summary(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "/11") {
			return strings.TrimSpace(l)
		}
	}
	return "(no summary line)"
}

// audit runs byollm-audit-deployment and returns its report. It exits 1
// whenever a check did not pass, unmeasured ones included, so the exit code
// is not the verdict here; the report is.
func audit(t *testing.T, dir, url, caFile string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), auditTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join("node_modules", "@byollm", "conformance", "dist", "audit-cli.js"), url)
	cmd.Dir = dir
	cmd.Env = os.Environ()
	if caFile != "" {
		cmd.Env = append(cmd.Env, "NODE_EXTRA_CA_CERTS="+caFile)
	}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 1) {
		t.Fatalf("byollm-audit-deployment %s: %v\n%s", url, err, out)
	}
	return string(out)
}

// startRelay starts the relay binary with env and returns its public
// address from the ready line; it is killed when the test ends.
func startRelay(t *testing.T, env map[string]string) string {
	t.Helper()
	var list []string
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	return relaytest.StartRelay(t, relaytest.RelayConfig{Env: list}).Listen
}

// writeCert writes a self-signed certificate for localhost and 127.0.0.1,
// valid for a year (D010 wants more than 90 days when it can measure).
func writeCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestMain(m *testing.M) { relaytest.Main(m) }
