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
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/byollm/relay-go/test/relaytest"
	"github.com/valkey-io/valkey-go"
)

const token = "e2e-admin-token-0123456789"

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "relay-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "relay")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func valkeyURL() string {
	if u := os.Getenv("RELAY_TEST_VALKEY_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// namespace returns a fresh namespace whose keys are deleted after the test.
func namespace(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	rand.Read(b)
	ns := "e2e-" + hex.EncodeToString(b)
	t.Cleanup(func() {
		opt, err := valkey.ParseURL(valkeyURL())
		if err != nil {
			return
		}
		c, err := valkey.NewClient(opt)
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := relaytest.DeleteKeys(context.Background(), c, ns+":*"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return ns
}

type proc struct {
	cmd    *exec.Cmd
	listen string
	admin  string
	mu     sync.Mutex
	logs   bytes.Buffer
	exited chan struct{}
	code   int
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.Write(b)
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// start runs the binary with env (on top of a minimal base) and, unless
// expectExit, waits for its ready line.
func start(t *testing.T, env map[string]string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(binary, args...), exited: make(chan struct{})}
	p.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "RELAY_LISTEN=127.0.0.1:0", "RELAY_ADMIN_LISTEN=127.0.0.1:0", "RELAY_LOG_FORMAT=json"}
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	p.cmd.Stderr = p
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
		if t.Failed() {
			t.Logf("relay log:\n%s", p.log())
		}
	})
	select {
	case line := <-lines:
		var ready struct {
			Ready  bool   `json:"ready"`
			Listen string `json:"listen"`
			Admin  string `json:"admin"`
			Pid    int    `json:"pid"`
		}
		if err := json.Unmarshal([]byte(line), &ready); err != nil || !ready.Ready || ready.Pid != p.cmd.Process.Pid {
			t.Fatalf("ready line %q (%v)", line, err)
		}
		p.listen, p.admin = ready.Listen, ready.Admin
	case <-p.exited:
		t.Fatalf("relay exited (%d) before it was ready:\n%s", p.code, p.log())
	case <-time.After(20 * time.Second):
		t.Fatalf("relay not ready after 20s:\n%s", p.log())
	}
	return p
}

// runBinary runs the binary to completion and returns its exit code and output.
func runBinary(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
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

type projectionStatus struct {
	Version int64 `json:"version"`
	Replica struct {
		Loaded  bool  `json:"loaded"`
		Version int64 `json:"version"`
	} `json:"replica"`
}

func status(t *testing.T, p *proc) projectionStatus {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+p.admin+"/projection/status", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s projectionStatus
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&s) != nil {
		t.Fatalf("status answered %d", resp.StatusCode)
	}
	return s
}

func waitVersion(t *testing.T, p *proc, v int64, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		if s := status(t, p); s.Replica.Version == v {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("replica at %s not at version %d within %v", p.admin, v, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
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
	ns := namespace(t)
	env := map[string]string{"RELAY_VALKEY_URL": valkeyURL(), "RELAY_NAMESPACE": ns, "RELAY_ADMIN_TOKEN": token}
	a, b := start(t, env), start(t, env)
	dir := t.TempDir()
	file := filepath.Join(dir, "p.json")
	patch := filepath.Join(dir, "patch.json")
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(file, []byte(fixture("alice")), 0o600)
	os.WriteFile(patch, []byte(`{"consents":[{"owner":"bob","siteId":"site-1"}]}`), 0o600)
	os.WriteFile(bad, []byte(`{"consents":[],"sites":[{"siteId":"s"}]}`), 0o600)
	cli := map[string]string{"RELAY_ADMIN_TOKEN": token}

	code, out, errs := runBinary(t, cli, "projection", "push", "--admin", "http://"+a.admin, file)
	if code != 0 || !strings.Contains(out, `"version":1`) {
		t.Fatalf("push: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	t.Logf("replace followed by the other replica in %v", waitVersion(t, b, 1, time.Second))

	code, out, errs = runBinary(t, cli, "projection", "push", "--merge", "--admin", "http://"+b.admin, patch)
	if code != 0 || !strings.Contains(out, `"consents":2`) {
		t.Fatalf("push --merge: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	t.Logf("merge followed by the other replica in %v", waitVersion(t, a, 2, time.Second))

	code, out, errs = runBinary(t, cli, "projection", "push", "--admin", "http://"+a.admin, bad)
	if code != 1 || !strings.Contains(errs, "sites[0].site: required") {
		t.Fatalf("bad push: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if sa, sb := status(t, a), status(t, b); sa.Version != 2 || sa.Replica.Version != 2 || sb.Replica.Version != 2 {
		t.Fatalf("a refused push moved the projection: %+v %+v", sa, sb)
	}

	// The planes answer on the other listener (an unsigned claim is refused
	// by the relay, not by a missing route).
	resp, err := http.Post("http://"+b.listen+"/byollm/claim", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == 404 || resp.StatusCode >= 500 || !strings.Contains(string(body), `"error"`) {
		t.Fatalf("claim on the planes: %d %s", resp.StatusCode, body)
	}

	// SIGTERM: graceful, exit 0.
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("no exit 10s after SIGTERM")
	}
	if a.code != 0 || !strings.Contains(a.log(), "relay stopped") {
		t.Fatalf("SIGTERM exit %d", a.code)
	}
}

// TestProjectionFile: a replica started with RELAY_PROJECTION_FILE pushes it,
// and edits reach a replica without the file.
func TestProjectionFile(t *testing.T) {
	ns := namespace(t)
	file := filepath.Join(t.TempDir(), "projection.json")
	os.WriteFile(file, []byte(fixture("alice")), 0o600)
	env := map[string]string{"RELAY_VALKEY_URL": valkeyURL(), "RELAY_NAMESPACE": ns, "RELAY_ADMIN_TOKEN": token}
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
	t.Logf("file edit in force on the other replica after %v", waitVersion(t, b, 2, 3*time.Second))
	os.WriteFile(file, []byte(`{"consents":[{"owner":"x"}]}`), 0o600)
	time.Sleep(1500 * time.Millisecond)
	if s := status(t, b); s.Version != 2 || s.Replica.Version != 2 {
		t.Fatalf("a bad file changed the projection: %+v", s)
	}
	if !strings.Contains(a.log(), "consents[0].siteId: required") { // logged a second ago
		t.Fatalf("the bad file's field is not in the log:\n%s", a.log())
	}
}

func TestStartRefusals(t *testing.T) {
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
		{"bad projection file", map[string]string{"RELAY_VALKEY_URL": valkeyURL(), "RELAY_NAMESPACE": namespace(t), "RELAY_PROJECTION_FILE": bad,
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
	p := start(t, map[string]string{"RELAY_ADMIN_TOKEN": token})
	// stderr is copied on its own goroutine: give it a moment to catch up
	// with the ready line.
	for deadline := time.Now().Add(2 * time.Second); !strings.Contains(p.log(), `"embedded":true`); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no ready log line saying embedded:\n%s", p.log())
		}
	}
	if !strings.Contains(p.log(), "EMBEDDED") || !strings.Contains(p.log(), "nothing is durable") {
		t.Fatalf("no warning about the embedded store:\n%s", p.log())
	}
	file := filepath.Join(t.TempDir(), "p.json")
	os.WriteFile(file, []byte(fixture("alice")), 0o600)
	code, out, errs := runBinary(t, map[string]string{"RELAY_ADMIN_TOKEN": token, "RELAY_ADMIN_URL": "http://" + p.admin}, "projection", "push", file)
	if code != 0 || !strings.Contains(out, `"version":1`) {
		t.Fatalf("push to the embedded relay: exit %d, %q %q", code, out, errs)
	}
	waitVersion(t, p, 1, time.Second)
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
	p := start(t, map[string]string{"RELAY_ADMIN_TOKEN": token, "RELAY_MAX_CONNS": "2"})
	for _, addr := range []string{p.listen, p.admin} {
		if code, body := rawAnswer(t, addr, "GET / HTTP/3.0\r\nHost: x\r\n\r\n"); code != 505 ||
			body != `{"error":"bad-request","message":"this HTTP version is not supported — send HTTP/1.1"}` {
			t.Fatalf("%s: HTTP/3.0 answered %d %s", addr, code, body)
		}
	}
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", p.listen)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	if code, body := rawAnswer(t, p.listen, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); code != 503 || !strings.Contains(body, `"error":"server-error"`) {
		t.Fatalf("a third connection with RELAY_MAX_CONNS=2: %d %s", code, body)
	}
}

// TestTLSListener: with RELAY_TLS_CERT_FILE/KEY_FILE the public listener
// serves only TLS; plaintext is redirected to https.
func TestTLSListener(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	cert := writeCert(t, certFile, keyFile)
	p := start(t, map[string]string{"RELAY_ADMIN_TOKEN": token, "RELAY_TLS_CERT_FILE": certFile, "RELAY_TLS_KEY_FILE": keyFile})
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("https://" + p.listen + "/nowhere")
	if err != nil {
		t.Fatalf("https: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || string(b) != `{"error":"not-found"}` {
		t.Fatalf("https answer %d %s", resp.StatusCode, b)
	}
	if code, body := rawAnswer(t, p.listen, "GET /healthz HTTP/1.1\r\nHost: relay.test\r\n\r\n"); code != 308 || strings.Contains(body, "not-found") {
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
