package httpserve

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byollm/relay-go/test/relaytest"
)

// selfSigned makes a certificate for localhost and 127.0.0.1 and returns its
// PEM files' contents and the certificate.
func selfSigned(t *testing.T, serial int64) (certPEM, keyPEM []byte, cert *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ = x509.ParseCertificate(der)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), cert
}

// replaceFile swaps a file in by rename, as cert-manager and Kubernetes do.
func replaceFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func tlsServer(t *testing.T) (addr, certFile, keyFile string, reloader *CertReloader, first *x509.Certificate) {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	c, k, first := selfSigned(t, 1)
	replaceFile(t, certFile, c)
	replaceFile(t, keyFile, k)
	reloader, err := LoadCert(certFile, keyFile, relaytest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	_, addr = serve(t, Options{TLS: reloader, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "secure "+r.URL.Path)
	})})
	return addr, certFile, keyFile, reloader, first
}

// servedCert completes a handshake trusting only trust and returns the
// certificate the server presented.
func servedCert(t *testing.T, addr string, trust *x509.Certificate) (*x509.Certificate, error) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(trust)
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost"})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0], nil
}

func TestTLSServesAndReloads(t *testing.T) {
	t.Parallel()
	addr, certFile, keyFile, reloader, first := tlsServer(t)
	reloader.mu.Lock()
	reloader.every = 0 // look at the files on every handshake
	reloader.mu.Unlock()

	pool := x509.NewCertPool()
	pool.AddCert(first)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("https://" + addr + "/x")
	if err != nil {
		t.Fatalf("https request: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "secure /x" || resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
		t.Fatalf("answer %d %q", resp.StatusCode, b)
	}

	// Replace both files: the next handshake serves the new certificate.
	c2, k2, second := selfSigned(t, 2)
	replaceFile(t, certFile, c2)
	replaceFile(t, keyFile, k2)
	got, err := servedCert(t, addr, second)
	if err != nil {
		t.Fatalf("handshake after replacing the files: %v", err)
	}
	if got.SerialNumber.Int64() != 2 {
		t.Fatalf("served serial %v after the reload, want 2", got.SerialNumber)
	}

	// A half-replaced pair (new certificate, old key) does not load: the
	// pair in service stays.
	c3, _, _ := selfSigned(t, 3)
	replaceFile(t, certFile, c3)
	if got, err := servedCert(t, addr, second); err != nil || got.SerialNumber.Int64() != 2 {
		t.Fatalf("after a mismatched replacement: %v %v, want serial 2 still", got, err)
	}
}

func TestTLSRefusesOldVersions(t *testing.T) {
	t.Parallel()
	addr, _, _, _, first := tlsServer(t)
	pool := x509.NewCertPool()
	pool.AddCert(first)
	for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11} {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: v, MaxVersion: v})
		if err == nil {
			c.Close()
			t.Fatalf("a TLS %x handshake succeeded", v)
		}
	}
	if _, err := servedCert(t, addr, first); err != nil {
		t.Fatalf("TLS 1.2+ handshake: %v", err)
	}
}

// Plaintext HTTP to the TLS port is never served: it is redirected to the
// same URL over https (which the deployment audit's D007 accepts), and
// anything that is not HTTP is just closed.
func TestPlaintextToTLSPort(t *testing.T) {
	t.Parallel()
	addr, _, _, _, _ := tlsServer(t)
	resp, body := rawExchange(t, addr, "GET /healthz?x=1 HTTP/1.1\r\nHost: relay.example:8443\r\n\r\n")
	if resp.StatusCode != http.StatusPermanentRedirect || resp.Header.Get("Location") != "https://relay.example:8443/healthz?x=1" {
		t.Fatalf("plaintext GET: %d Location %q %s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	if !strings.Contains(body, `"error":"bad-request"`) || strings.Contains(body, "secure") {
		t.Fatalf("plaintext GET body %s", body)
	}

	// A Host that could bend the Location header is not echoed.
	resp, body = rawExchange(t, addr, "POST /byollm/claim HTTP/1.1\r\nHost: evil\"<x>\r\nContent-Length: 2\r\n\r\n{}")
	if resp.StatusCode != 400 || resp.Header.Get("Location") != "" {
		t.Fatalf("plaintext POST with a bad Host: %d %q %s", resp.StatusCode, resp.Header.Get("Location"), body)
	}

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "\x00\x01garbage that is neither TLS nor HTTP\r\n\r\n")
	if b, err := io.ReadAll(bufio.NewReader(c)); err != nil || len(b) != 0 {
		t.Fatalf("garbage got %q, %v; want the connection closed", b, err)
	}
}
