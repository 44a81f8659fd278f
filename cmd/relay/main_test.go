package main

// End-to-end: the real binary, started as separate processes sharing one
// Valkey namespace, driven over HTTP and through its own CLI.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/byollm/relay-go/test/relaytest"
)

const token = "e2e-admin-token-0123456789"

func TestMain(m *testing.M) { relaytest.Main(m) }

// namespace returns a fresh namespace whose keys are deleted after the test.
func namespace(t *testing.T) string {
	t.Helper()
	return relaytest.Namespace(t, relaytest.Open(t, relaytest.ValkeyURL()))
}

// start runs the relay binary with env on fixed loopback ports and waits
// for its ready line; it is killed when the test ends.
func start(t *testing.T, env map[string]string) *relaytest.Relay {
	t.Helper()
	var list []string
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	return relaytest.StartRelay(t, relaytest.RelayConfig{Env: list, Token: env["RELAY_ADMIN_TOKEN"]})
}

// runBinary runs the binary to completion and returns its exit code and output.
func runBinary(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(relaytest.RelayBinary(t), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() { <-ctx.Done(); cmd.Process.Kill() }()
	cmd.Run()
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

func status(t *testing.T, p *relaytest.Relay) relaytest.ProjectionStatus {
	t.Helper()
	s, err := p.ProjectionStatus()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const site = `{"siteId":"site-1","site":{"identity":"aWRlbnRpdHktMQ","encryption":"ZW5jLTE","encryptionSig":"c2lnLTE"}}`

func fixture(owners ...string) string {
	var cs []string
	for _, o := range owners {
		cs = append(cs, `{"owner":"`+o+`","siteId":"site-1"}`)
	}
	return `{"sites":[` + site + `],"consents":[` + strings.Join(cs, ",") + `]}`
}

// TestTwoReplicas: two processes share a namespace; a projection pushed
// with the CLI through one is in force on the other within a second.
func TestTwoReplicas(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	env := map[string]string{"RELAY_VALKEY_URL": relaytest.ValkeyURL(), "RELAY_NAMESPACE": ns, "RELAY_ADMIN_TOKEN": token}
	a, b := start(t, env), start(t, env)
	dir := t.TempDir()
	file := filepath.Join(dir, "p.json")
	patch := filepath.Join(dir, "patch.json")
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(file, []byte(fixture("alice")), 0o600)
	os.WriteFile(patch, []byte(`{"consents":[{"owner":"bob","siteId":"site-1"}]}`), 0o600)
	os.WriteFile(bad, []byte(`{"consents":[],"sites":[{"siteId":"s"}]}`), 0o600)
	cli := map[string]string{"RELAY_ADMIN_TOKEN": token}

	code, out, errs := runBinary(t, cli, "projection", "push", "--admin", "http://"+a.Admin, file)
	if code != 0 || !strings.Contains(out, `"version":1`) {
		t.Fatalf("push: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	t.Logf("replace followed by the other replica in %v", b.WaitProjection(t, 1, time.Second))

	code, out, errs = runBinary(t, cli, "projection", "push", "--merge", "--admin", "http://"+b.Admin, patch)
	if code != 0 || !strings.Contains(out, `"consents":2`) {
		t.Fatalf("push --merge: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	t.Logf("merge followed by the other replica in %v", a.WaitProjection(t, 2, time.Second))

	code, out, errs = runBinary(t, cli, "projection", "push", "--admin", "http://"+a.Admin, bad)
	if code != 1 || !strings.Contains(errs, "sites[0].site: required") {
		t.Fatalf("bad push: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if sa, sb := status(t, a), status(t, b); sa.Version != 2 || sa.Replica.Version != 2 || sb.Replica.Version != 2 {
		t.Fatalf("a refused push moved the projection: %+v %+v", sa, sb)
	}

	// The planes answer on the other listener (an unsigned claim is refused
	// by the relay, not by a missing route).
	resp, err := http.Post("http://"+b.Listen+"/byollm/claim", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == 404 || resp.StatusCode >= 500 || !strings.Contains(string(body), `"error"`) {
		t.Fatalf("claim on the planes: %d %s", resp.StatusCode, body)
	}

	// SIGTERM: graceful, exit 0.
	if _, err := a.Stop(syscall.SIGTERM, 10*time.Second); errors.Is(err, relaytest.ErrStillRunning) {
		t.Fatal("no exit 10s after SIGTERM")
	}
	if a.ExitCode() != 0 || !strings.Contains(a.Log(), "relay stopped") {
		t.Fatalf("SIGTERM exit %d", a.ExitCode())
	}
}

// TestProjectionFile: a replica started with RELAY_PROJECTION_FILE pushes it,
// and edits reach a replica without the file.
func TestProjectionFile(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	file := filepath.Join(t.TempDir(), "projection.json")
	os.WriteFile(file, []byte(fixture("alice")), 0o600)
	env := map[string]string{"RELAY_VALKEY_URL": relaytest.ValkeyURL(), "RELAY_NAMESPACE": ns, "RELAY_ADMIN_TOKEN": token}
	withFile := map[string]string{"RELAY_PROJECTION_FILE": file}
	for k, v := range env {
		withFile[k] = v
	}
	a := start(t, withFile)
	b := start(t, env)
	if s := status(t, b); s.Version != 1 || s.Replica.Version != 1 {
		t.Fatalf("after start with a file: %+v", s)
	}
	os.WriteFile(file, []byte(fixture("alice", "bob")), 0o600)
	t.Logf("file edit in force on the other replica after %v", b.WaitProjection(t, 2, 3*time.Second))
	os.WriteFile(file, []byte(`{"consents":[{"owner":"x"}]}`), 0o600)
	// Once the replica has refused the bad file (it logs the field), the
	// stored projection must still be the last good one.
	relaytest.WaitFor(t, 3*time.Second, "the bad file's field is not in the log", func() bool {
		return strings.Contains(a.Log(), "consents[0].siteId: required")
	})
	if s := status(t, b); s.Version != 2 || s.Replica.Version != 2 {
		t.Fatalf("a bad file changed the projection: %+v", s)
	}
}

func TestStartRefusals(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"consents":[{"owner":1,"siteId":"s"}]}`), 0o600)
	keyFile, _ := grantKey(t)
	tests := []struct {
		name string
		env  map[string]string
		code int
		want string
	}{
		{"control plane public without an authority", map[string]string{"RELAY_CONTROL_PLANE_PUBLIC": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}, 2,
			"controlPlanePublic is set but authorGrant is not: devices would be told to expect signed grants that nothing here can produce, and would refuse every job"},
		{"key file and remote signer", map[string]string{"RELAY_GRANT_SIGNER_URL": "http://127.0.0.1:1/sign", "RELAY_GRANT_KEY_FILE": keyFile,
			"RELAY_LISTEN": "127.0.0.1:0", "RELAY_ADMIN_LISTEN": "off"}, 2, "RELAY_GRANT_KEY_FILE and RELAY_GRANT_SIGNER_URL are both set; choose one"},
		{"two problems at once", map[string]string{"RELAY_LEASE_MS": "x", "RELAY_BASE_PATH": "y"}, 2, "RELAY_BASE_PATH"},
		{"bad projection file", map[string]string{"RELAY_VALKEY_URL": relaytest.ValkeyURL(), "RELAY_NAMESPACE": namespace(t), "RELAY_PROJECTION_FILE": bad,
			"RELAY_LISTEN": "127.0.0.1:0", "RELAY_ADMIN_LISTEN": "off"}, 1, "consents[0].owner: expected string"},
		{"valkey unreachable", map[string]string{"RELAY_VALKEY_URL": "redis://127.0.0.1:1/0", "RELAY_LISTEN": "127.0.0.1:0", "RELAY_ADMIN_LISTEN": "off"}, 1, "open the store"},
		{"TLS certificate without its key", map[string]string{"RELAY_TLS_CERT_FILE": bad}, 2, "must be set together"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := runBinary(t, tt.env)
			if code != tt.code || !strings.Contains(errs, tt.want) || strings.Contains(out, "ready") {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d mentioning %q", code, out, errs, tt.code, tt.want)
			}
		})
	}
}

// TestEmbeddedDefault: with no Valkey configured the relay starts on the
// embedded store and says so.
func TestEmbeddedDefault(t *testing.T) {
	t.Parallel()
	p := start(t, map[string]string{"RELAY_ADMIN_TOKEN": token})
	// stderr is copied on its own goroutine: give it a moment to catch up
	// with the ready line.
	relaytest.WaitFor(t, 2*time.Second, "no ready log line saying embedded", func() bool {
		return strings.Contains(p.Log(), `"embedded":true`)
	})
	if !strings.Contains(p.Log(), "EMBEDDED") || !strings.Contains(p.Log(), "nothing is durable") {
		t.Fatalf("no warning about the embedded store:\n%s", p.Log())
	}
	file := filepath.Join(t.TempDir(), "p.json")
	os.WriteFile(file, []byte(fixture("alice")), 0o600)
	code, out, errs := runBinary(t, map[string]string{"RELAY_ADMIN_TOKEN": token, "RELAY_ADMIN_URL": "http://" + p.Admin}, "projection", "push", file)
	if code != 0 || !strings.Contains(out, `"version":1`) {
		t.Fatalf("push to the embedded relay: exit %d, %q %q", code, out, errs)
	}
	p.WaitProjection(t, 1, time.Second)
}

// rawAnswer sends req on a new connection to addr and reads one answer.
func rawAnswer(t *testing.T, addr, req string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, req)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to %q: %v", req, err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestBoundedListeners: both listeners of the binary go through
// internal/httpserve: Go-level errors answer in JSON and the connection cap
// holds.
func TestBoundedListeners(t *testing.T) {
	t.Parallel()
	p := start(t, map[string]string{"RELAY_ADMIN_TOKEN": token, "RELAY_MAX_CONNS": "2"})
	for _, addr := range []string{p.Listen, p.Admin} {
		if code, body := rawAnswer(t, addr, "GET / HTTP/3.0\r\nHost: x\r\n\r\n"); code != 505 ||
			body != `{"error":"bad-request","message":"this HTTP version is not supported — send HTTP/1.1"}` {
			t.Fatalf("%s: HTTP/3.0 answered %d %s", addr, code, body)
		}
	}
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", p.Listen)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	if code, body := rawAnswer(t, p.Listen, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); code != 503 || !strings.Contains(body, `"error":"server-error"`) {
		t.Fatalf("a third connection with RELAY_MAX_CONNS=2: %d %s", code, body)
	}
}

// TestTLSListener: with RELAY_TLS_CERT_FILE/KEY_FILE the public listener
// serves only TLS; plaintext is redirected to https.
func TestTLSListener(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	cert := writeCert(t, certFile, keyFile)
	p := start(t, map[string]string{"RELAY_ADMIN_TOKEN": token, "RELAY_TLS_CERT_FILE": certFile, "RELAY_TLS_KEY_FILE": keyFile})
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("https://" + p.Listen + "/nowhere")
	if err != nil {
		t.Fatalf("https: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || string(b) != `{"error":"not-found"}` {
		t.Fatalf("https answer %d %s", resp.StatusCode, b)
	}
	if code, body := rawAnswer(t, p.Listen, "GET /healthz HTTP/1.1\r\nHost: relay.test\r\n\r\n"); code != 308 || strings.Contains(body, "not-found") {
		t.Fatalf("plaintext to the TLS listener: %d %s", code, body)
	}
}

func writeCert(t *testing.T, certFile, keyFile string) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	return cert
}
