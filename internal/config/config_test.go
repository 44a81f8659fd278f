package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/admin"
	"github.com/byollm/relay-go/internal/httpserve"
	"github.com/byollm/relay-go/internal/relay"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/internal/sweeper"
	"github.com/byollm/relay-go/internal/valkeyconn"
)

// writeCert writes a fresh self-signed certificate and its key as PEM files.
func writeCert(t *testing.T) (certFile, keyFile string) {
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
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// The budget floor must be the planes' real limit.
func TestPlanesMaxBodyMatchesRelay(t *testing.T) {
	t.Parallel()
	if PlanesMaxBody != relay.MaxBodyBytes {
		t.Fatalf("config.PlanesMaxBody = %d, relay.MaxBodyBytes = %d", PlanesMaxBody, relay.MaxBodyBytes)
	}
}

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	c, err := Load(nil, envOf(nil), io.Discard)
	if err != nil {
		t.Fatalf("Load with nothing set: %v", err)
	}
	want := Config{
		ValkeyConnections:        1,
		Namespace:                "byollm",
		Listen:                   ":8080",
		AdminListen:              "127.0.0.1:8081",
		LeaseMs:                  60000,
		BasePath:                 "/byollm",
		SweepInterval:            time.Second,
		HeartbeatInterval:        3 * time.Second,
		QueueAgeInterval:         30 * time.Second,
		DeviceRetention:          7 * 24 * time.Hour,
		SweepBatch:               24,
		StoreTimeout:             500 * time.Millisecond,
		DaemonHeartbeatBatch:     100 * time.Millisecond,
		DaemonIdleHeartbeatBatch: time.Second,
		WorkViewQueues:           65536,
		ShutdownTimeout:          15 * time.Second,
		AdminMaxBody:             16 << 20,
		UISiteRate:               2,
		PairingsPerAddress:       5,
		PairingsPerNetwork:       20,
		PairingsMax:              1000,
		SiteLimits:               store.SiteLimits{Default: DefaultSiteLimit},
		LogFormat:                "auto",
		LogLevel:                 slog.LevelInfo,

		MaxConns:          2048,
		BodyBytesInFlight: 128 << 20,
		BodyTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		GrantTimeout:      2 * time.Second,
		GrantBudget:       5 * time.Second,
		GrantRetryAfter:   30 * time.Second,
		FetchWait:         2 * time.Second,
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("defaults:\n got %+v\nwant %+v", c, want)
	}
	if !c.Embedded() {
		t.Fatal("no RELAY_VALKEY_URL must mean the embedded store")
	}
}

func TestValues(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "projection.json")
	if err := os.WriteFile(file, []byte(`{"consents":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := writeCert(t)
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		check func(Config) bool
	}{
		{"valkey url from env", nil, map[string]string{"RELAY_VALKEY_URL": "redis://10.0.0.1:6379/2"},
			func(c Config) bool { return c.ValkeyURL == "redis://10.0.0.1:6379/2" && !c.Embedded() }},
		{"valkey connections", nil, map[string]string{"RELAY_VALKEY_CONNECTIONS": "4"},
			func(c Config) bool { return c.ValkeyConnections == 4 }},
		{"valkey connections at valkey-go's most", []string{"-valkey-connections", "256"}, nil,
			func(c Config) bool { return c.ValkeyConnections == 256 }},
		{"flag wins over env", []string{"-lease-ms", "5000"}, map[string]string{"RELAY_LEASE_MS": "9000"},
			func(c Config) bool { return c.LeaseMs == 5000 }},
		{"flag equal to default still wins", []string{"-namespace=byollm"}, map[string]string{"RELAY_NAMESPACE": "other"},
			func(c Config) bool { return c.Namespace == "byollm" }},
		{"empty env counts as unset", nil, map[string]string{"RELAY_LEASE_MS": ""},
			func(c Config) bool { return c.LeaseMs == 60000 }},
		{"base path trailing slashes stripped", nil, map[string]string{"RELAY_BASE_PATH": "/relay//"},
			func(c Config) bool { return c.BasePath == "/relay" }},
		{"base path root becomes empty", []string{"-base-path", "/"}, nil,
			func(c Config) bool { return c.BasePath == "" }},
		{"bare bool flag", []string{"-debug"}, nil, func(c Config) bool { return c.Debug }},
		{"bool env words", nil, map[string]string{"RELAY_DEBUG": "yes"}, func(c Config) bool { return c.Debug }},
		{"admin off", nil, map[string]string{"RELAY_ADMIN_LISTEN": "off"}, func(c Config) bool { return c.AdminListen == "" }},
		{"retention in days", nil, map[string]string{"RELAY_DEVICE_RETENTION": "30d"}, func(c Config) bool { return c.DeviceRetention == 30*24*time.Hour }},
		{"retention at the floor", []string{"-device-retention", "24h"}, nil, func(c Config) bool { return c.DeviceRetention == 24*time.Hour }},
		{"sweep off", nil, map[string]string{"RELAY_SWEEP_INTERVAL": "off"}, func(c Config) bool { return c.SweepInterval == 0 }},
		{"sweep duration", nil, map[string]string{"RELAY_SWEEP_INTERVAL": "250ms"}, func(c Config) bool { return c.SweepInterval == 250*time.Millisecond }},
		{"versions", nil, map[string]string{"RELAY_UPDATE_OFFER": "0.2.0-beta.1", "RELAY_DAEMON_FLOOR": "0.1.0+build.5"},
			func(c Config) bool { return c.UpdateOffer == "0.2.0-beta.1" && c.DaemonFloor == "0.1.0+build.5" }},
		{"verification url", nil, map[string]string{"RELAY_VERIFICATION_URL": "https://example.com/activate"},
			func(c Config) bool { return c.VerificationURL == "https://example.com/activate" }},
		{"projection file", nil, map[string]string{"RELAY_PROJECTION_FILE": file},
			func(c Config) bool { return c.ProjectionFile == file }},
		{"token", nil, map[string]string{"RELAY_ADMIN_TOKEN": "0123456789abcdef"},
			func(c Config) bool { return c.AdminToken == "0123456789abcdef" }},
		{"reference alias RELAY_SWEEP_MS", nil, map[string]string{"RELAY_SWEEP_MS": "250"},
			func(c Config) bool { return c.SweepInterval == 250*time.Millisecond }},
		{"reference alias RELAY_SWEEP_MS=0 turns the sweeper off", nil, map[string]string{"RELAY_SWEEP_MS": "0"},
			func(c Config) bool { return c.SweepInterval == 0 }},
		{"primary name beats alias", nil, map[string]string{"RELAY_SWEEP_MS": "250", "RELAY_SWEEP_INTERVAL": "2s"},
			func(c Config) bool { return c.SweepInterval == 2*time.Second }},
		{"reference alias RELAY_FIXTURE_FILE", nil, map[string]string{"RELAY_FIXTURE_FILE": file},
			func(c Config) bool { return c.ProjectionFile == file }},
		{"listen port 0", nil, map[string]string{"RELAY_LISTEN": "127.0.0.1:0", "RELAY_ADMIN_LISTEN": "127.0.0.1:0"},
			func(c Config) bool { return c.Listen == "127.0.0.1:0" && c.AdminListen == "127.0.0.1:0" }},
		{"store timeout", nil, map[string]string{"RELAY_STORE_TIMEOUT": "2s"},
			func(c Config) bool { return c.StoreTimeout == 2*time.Second }},
		{"heartbeat batch window", nil, map[string]string{"RELAY_DAEMON_HEARTBEAT_BATCH": "250ms"},
			func(c Config) bool { return c.DaemonHeartbeatBatch == 250*time.Millisecond }},
		{"heartbeat batch off", []string{"-daemon-heartbeat-batch", "off"}, nil,
			func(c Config) bool { return c.DaemonHeartbeatBatch == 0 }},
		{"heartbeat batch 0", nil, map[string]string{"RELAY_DAEMON_HEARTBEAT_BATCH": "0"},
			func(c Config) bool { return c.DaemonHeartbeatBatch == 0 }},
		{"heartbeat batch at half the store timeout", nil, map[string]string{"RELAY_DAEMON_HEARTBEAT_BATCH": "1s", "RELAY_STORE_TIMEOUT": "2s"},
			func(c Config) bool { return c.DaemonHeartbeatBatch == time.Second }},
		{"idle heartbeat batch window", nil, map[string]string{"RELAY_DAEMON_IDLE_HEARTBEAT_BATCH": "2s"},
			func(c Config) bool { return c.DaemonIdleHeartbeatBatch == 2*time.Second }},
		{"idle heartbeat batch off", []string{"-daemon-idle-heartbeat-batch", "off"}, nil,
			func(c Config) bool { return c.DaemonIdleHeartbeatBatch == 0 }},
		{"idle heartbeat batch longer than the store timeout", nil, map[string]string{"RELAY_DAEMON_IDLE_HEARTBEAT_BATCH": "1500ms", "RELAY_STORE_TIMEOUT": "100ms", "RELAY_DAEMON_HEARTBEAT_BATCH": "50ms"},
			func(c Config) bool { return c.DaemonIdleHeartbeatBatch == 1500*time.Millisecond }},
		{"work view queues", nil, map[string]string{"RELAY_WORK_VIEW_QUEUES": "1048576"},
			func(c Config) bool { return c.WorkViewQueues == 1<<20 }},
		{"work view queues, smallest and largest", []string{"-work-view-queues", "1024"}, map[string]string{"RELAY_WORK_VIEW_QUEUES": "16777216"},
			func(c Config) bool { return c.WorkViewQueues == 1024 }},
		{"log level", nil, map[string]string{"RELAY_LOG_LEVEL": "DEBUG", "RELAY_LOG_FORMAT": "JSON"},
			func(c Config) bool { return c.LogLevel == slog.LevelDebug && c.LogFormat == "json" }},
		{"connection and body bounds", []string{"-max-conns", "10"}, map[string]string{"RELAY_BODY_BYTES_IN_FLIGHT": "33554432", "RELAY_BODY_TIMEOUT": "3s"},
			func(c Config) bool {
				return c.MaxConns == 10 && c.BodyBytesInFlight == 32<<20 && c.BodyTimeout == 3*time.Second
			}},
		{"per-client bounds", []string{"-max-conns-per-address", "64"}, map[string]string{"RELAY_BODY_BYTES_PER_CLIENT": "20971520", "RELAY_WRITE_TIMEOUT": "30s"},
			func(c Config) bool {
				return c.MaxConnsPerAddress == 64 && c.BodyBytesPerClient == 20<<20 && c.ClientBodyShare() == 20<<20 && c.WriteTimeout == 30*time.Second
			}},
		{"per-client body share by default: a quarter, at least one largest body", nil, map[string]string{"RELAY_BODY_BYTES_IN_FLIGHT": "33554432"},
			func(c Config) bool { return c.ClientBodyShare() == 16<<20+1 }},
		{"TLS pair", nil, map[string]string{"RELAY_TLS_CERT_FILE": certFile, "RELAY_TLS_KEY_FILE": keyFile},
			func(c Config) bool { return c.TLSCertFile == certFile && c.TLSKeyFile == keyFile }},
		{"grants off by default", nil, nil, func(c Config) bool {
			return c.GrantMode() == GrantsOff && c.GrantTimeout == 2*time.Second && c.GrantBudget == 5*time.Second
		}},
		{"remote authority", nil, map[string]string{"RELAY_GRANT_AUTHORITY_URL": "https://cp.internal/grants", "RELAY_CONTROL_PLANE_PUBLIC": testCPKey, "RELAY_GRANT_AUTHORITY_TOKEN": "t0ken", "RELAY_GRANT_TIMEOUT": "250ms"},
			func(c Config) bool {
				return c.GrantMode() == GrantsAuthority && c.ControlPlanePublic == testCPKey && c.GrantAuthorityToken == "t0ken" && c.GrantTimeout == 250*time.Millisecond
			}},
		{"remote signer", nil, map[string]string{"RELAY_GRANT_SIGNER_URL": "http://kms:9000/sign", "RELAY_CONTROL_PLANE_PUBLIC": testCPKey},
			func(c Config) bool {
				return c.GrantMode() == GrantsSigner && c.GrantSignerURL == "http://kms:9000/sign"
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(tt.args, envOf(tt.env), io.Discard)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if !tt.check(c) {
				t.Fatalf("unexpected config %+v", c)
			}
		})
	}
}

// unreadableFile is a regular file this process cannot read: mode 000 for a
// user, and for root (who reads any mode) /proc/self/mem, a regular file
// whose first byte is unmapped, so reading it fails.
func unreadableFile(t *testing.T) string {
	t.Helper()
	if os.Getuid() == 0 {
		return "/proc/self/mem"
	}
	f := filepath.Join(t.TempDir(), "unreadable.json")
	if err := os.WriteFile(f, []byte(`{"consents":[]}`), 0o000); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestProblems pins the messages: each names the option as the operator set
// it and says what to write instead.
func TestProblems(t *testing.T) {
	t.Parallel()
	certFile, keyFile := writeCert(t)
	otherCert, _ := writeCert(t)
	unreadable := unreadableFile(t)
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want []string // substrings of the single problem reported
	}{
		{"control plane public without an authority", nil, map[string]string{"RELAY_CONTROL_PLANE_PUBLIC": testCPKey},
			[]string{"RELAY_CONTROL_PLANE_PUBLIC: controlPlanePublic is set but authorGrant is not: devices would be told to expect signed grants that nothing here can produce, and would refuse every job.",
				"Set RELAY_GRANT_KEY_FILE (built-in engine), RELAY_GRANT_AUTHORITY_URL", "or unset it"}},
		{"control plane public not a key", nil, map[string]string{"RELAY_CONTROL_PLANE_PUBLIC": "abc", "RELAY_GRANT_AUTHORITY_URL": "http://cp:8080"},
			[]string{`RELAY_CONTROL_PLANE_PUBLIC: "abc" is not a base64url Ed25519 public key`}},
		{"authority without a key", nil, map[string]string{"RELAY_GRANT_AUTHORITY_URL": "http://cp:8080"},
			[]string{"RELAY_GRANT_AUTHORITY_URL is set but RELAY_CONTROL_PLANE_PUBLIC is not", "set RELAY_CONTROL_PLANE_PUBLIC"}},
		{"signer without a key", nil, map[string]string{"RELAY_GRANT_SIGNER_URL": "http://kms:8080/sign"},
			[]string{"RELAY_GRANT_SIGNER_URL is set but RELAY_CONTROL_PLANE_PUBLIC is not"}},
		{"authority and signer", nil, map[string]string{"RELAY_GRANT_SIGNER_URL": "http://kms/sign", "RELAY_GRANT_AUTHORITY_URL": "http://cp", "RELAY_CONTROL_PLANE_PUBLIC": testCPKey},
			[]string{"both set; choose one"}},
		{"authority url relative", nil, map[string]string{"RELAY_GRANT_AUTHORITY_URL": "cp:8080/grants"},
			[]string{"RELAY_GRANT_AUTHORITY_URL", "absolute http(s) URL"}},
		{"signer url with query", nil, map[string]string{"RELAY_GRANT_SIGNER_URL": "https://kms/sign?x=1"},
			[]string{"RELAY_GRANT_SIGNER_URL", "without query"}},
		{"token without a url", nil, map[string]string{"RELAY_GRANT_AUTHORITY_TOKEN": "t0ken"},
			[]string{"RELAY_GRANT_AUTHORITY_TOKEN is set but no remote"}},
		{"grant timeout too long", nil, map[string]string{"RELAY_GRANT_TIMEOUT": "1m"},
			[]string{`RELAY_GRANT_TIMEOUT: "1m" is not a usable grant timeout`, "e.g. 2s"}},
		{"grant retry-after too short", nil, map[string]string{"RELAY_GRANT_RETRY_AFTER": "100ms"},
			[]string{`RELAY_GRANT_RETRY_AFTER: "100ms" is not a usable grant retry-after`, "from 1s to 1h0m0s"}},
		{"grant retry-after not a duration", nil, map[string]string{"RELAY_GRANT_RETRY_AFTER": "30"},
			[]string{`RELAY_GRANT_RETRY_AFTER: "30" is not a usable grant retry-after`, "e.g. 30s"}},
		{"fetch wait too long", nil, map[string]string{"RELAY_FETCH_WAIT": "11s"},
			[]string{`RELAY_FETCH_WAIT: "11s" is not a usable fetch wait`, "from 0s to 10s"}},
		{"fetch wait negative", nil, map[string]string{"RELAY_FETCH_WAIT": "-1s"},
			[]string{`RELAY_FETCH_WAIT: "-1s" is not a usable fetch wait`, "0s to answer at once"}},
		{"retention below the floor", nil, map[string]string{"RELAY_DEVICE_RETENTION": "23h"},
			[]string{`RELAY_DEVICE_RETENTION: "23h" is not a usable device retention`, "from 24h to 3650d", "e.g. 7d"}},
		{"retention not a duration", nil, map[string]string{"RELAY_DEVICE_RETENTION": "1.5d"},
			[]string{`RELAY_DEVICE_RETENTION: "1.5d" is not a usable device retention`}},
		{"retention too long", nil, map[string]string{"RELAY_DEVICE_RETENTION": "4000d"},
			[]string{`RELAY_DEVICE_RETENTION: "4000d" is not a usable device retention`}},
		{"lease not a number", nil, map[string]string{"RELAY_LEASE_MS": "1m"},
			[]string{`RELAY_LEASE_MS: "1m" is not a usable lease; use a positive whole number of milliseconds`, "e.g. 60000"}},
		{"heartbeat batch negative", nil, map[string]string{"RELAY_DAEMON_HEARTBEAT_BATCH": "-1ms"},
			[]string{`RELAY_DAEMON_HEARTBEAT_BATCH: "-1ms" is not a usable batch window`, `"off"`}},
		{"heartbeat batch past 1s", nil, map[string]string{"RELAY_DAEMON_HEARTBEAT_BATCH": "2s", "RELAY_STORE_TIMEOUT": "10s"},
			[]string{`"2s" is not a usable batch window`, "up to 1s"}},
		{"heartbeat batch not a duration", nil, map[string]string{"RELAY_DAEMON_HEARTBEAT_BATCH": "100"},
			[]string{`"100" is not a usable batch window`}},
		{"heartbeat batch eats the store timeout", nil, map[string]string{"RELAY_DAEMON_HEARTBEAT_BATCH": "300ms"},
			[]string{"RELAY_DAEMON_HEARTBEAT_BATCH (300ms) is more than half of RELAY_STORE_TIMEOUT (500ms)"}},
		{"idle heartbeat batch past 2s", nil, map[string]string{"RELAY_DAEMON_IDLE_HEARTBEAT_BATCH": "2001ms"},
			[]string{`RELAY_DAEMON_IDLE_HEARTBEAT_BATCH: "2001ms" is not a usable idle batch window`, "up to 2s", `"off"`}},
		{"idle heartbeat batch negative", nil, map[string]string{"RELAY_DAEMON_IDLE_HEARTBEAT_BATCH": "-1s"},
			[]string{`"-1s" is not a usable idle batch window`}},
		{"idle heartbeat batch not a duration", nil, map[string]string{"RELAY_DAEMON_IDLE_HEARTBEAT_BATCH": "1"},
			[]string{`"1" is not a usable idle batch window`}},
		{"work view queues too few", nil, map[string]string{"RELAY_WORK_VIEW_QUEUES": "1023"},
			[]string{`RELAY_WORK_VIEW_QUEUES: "1023" is not a queue count`, "from 1024 to 16777216"}},
		{"work view queues too many", nil, map[string]string{"RELAY_WORK_VIEW_QUEUES": "16777217"},
			[]string{`"16777217" is not a queue count`}},
		{"work view queues not a number", nil, map[string]string{"RELAY_WORK_VIEW_QUEUES": "64k"},
			[]string{`"64k" is not a queue count`, "e.g. 65536"}},
		{"store timeout too short", nil, map[string]string{"RELAY_STORE_TIMEOUT": "1ms"},
			[]string{`RELAY_STORE_TIMEOUT: "1ms" is not a usable store timeout`, "from 10ms to 1m0s", "e.g. 500ms"}},
		{"store timeout not a duration", nil, map[string]string{"RELAY_STORE_TIMEOUT": "500"},
			[]string{`RELAY_STORE_TIMEOUT: "500" is not a usable store timeout`}},
		{"lease zero", nil, map[string]string{"RELAY_LEASE_MS": "0"}, []string{"RELAY_LEASE_MS", "positive"}},
		{"lease of 31 years", nil, map[string]string{"RELAY_LEASE_MS": "999999999999"}, []string{`RELAY_LEASE_MS: "999999999999" is not a usable lease`, "from 1000 (1 s) to 3600000 (1 h)"}},
		{"lease under a second", nil, map[string]string{"RELAY_LEASE_MS": "999"}, []string{"RELAY_LEASE_MS", "from 1000"}},
		{"sweep interval too long", nil, map[string]string{"RELAY_SWEEP_INTERVAL": "2m"}, []string{"RELAY_SWEEP_INTERVAL", "at most 1m0s"}},
		{"shutdown timeout too long", nil, map[string]string{"RELAY_SHUTDOWN_TIMEOUT": "2h"}, []string{"RELAY_SHUTDOWN_TIMEOUT", "at most 10m"}},
		{"admin max body too large", nil, map[string]string{"RELAY_ADMIN_MAX_BODY": "1099511627776"}, []string{"RELAY_ADMIN_MAX_BODY", "at most 1073741824"}},
		{"body bytes too large", nil, map[string]string{"RELAY_BODY_BYTES_IN_FLIGHT": "9223372036854775807"}, []string{"RELAY_BODY_BYTES_IN_FLIGHT", "at most"}},
		{"projection file unreadable", nil, map[string]string{"RELAY_PROJECTION_FILE": unreadable}, []string{"RELAY_PROJECTION_FILE: cannot read", "readable by the relay's user"}},
		{"policy file unreadable", nil, map[string]string{"RELAY_POLICY_FILE": unreadable}, []string{"RELAY_POLICY_FILE: cannot read", "readable by the relay's user"}},
		{"TLS cert unreadable", nil, map[string]string{"RELAY_TLS_CERT_FILE": unreadable, "RELAY_TLS_KEY_FILE": keyFile}, []string{"RELAY_TLS_CERT_FILE: cannot read", "readable by the relay's user"}},
		{"lease beyond safe integer", nil, map[string]string{"RELAY_LEASE_MS": "9007199254740992"}, []string{"RELAY_LEASE_MS"}},
		{"lease via flag names the flag", []string{"-lease-ms", "-5"}, nil, []string{`-lease-ms: "-5"`}},
		{"base path relative", nil, map[string]string{"RELAY_BASE_PATH": "byollm"}, []string{`RELAY_BASE_PATH: "byollm" must start with '/'`}},
		{"base path query", nil, map[string]string{"RELAY_BASE_PATH": "/a?b"}, []string{"RELAY_BASE_PATH", "without '?'"}},
		{"verification url relative", nil, map[string]string{"RELAY_VERIFICATION_URL": "/activate"},
			[]string{"RELAY_VERIFICATION_URL", "absolute http(s) URL", "https://example.com/activate"}},
		{"verification url ftp", nil, map[string]string{"RELAY_VERIFICATION_URL": "ftp://x/y"}, []string{"RELAY_VERIFICATION_URL"}},
		{"valkey scheme", nil, map[string]string{"RELAY_VALKEY_URL": "http://user:hunter2@host:6379"},
			[]string{"RELAY_VALKEY_URL", "redis://", "unset it to use the embedded store", "xxxxx"}},
		{"namespace with braces", nil, map[string]string{"RELAY_NAMESPACE": "a{b}"}, []string{"RELAY_NAMESPACE", "hash tags"}},
		{"namespace empty via flag", []string{"-namespace="}, nil, []string{"-namespace", "not a usable namespace"}},
		{"listen without port", nil, map[string]string{"RELAY_LISTEN": "localhost"}, []string{"RELAY_LISTEN", "host:port"}},
		{"admin listen bad port", nil, map[string]string{"RELAY_ADMIN_LISTEN": "127.0.0.1:99999"}, []string{"RELAY_ADMIN_LISTEN", "65535", `"off"`}},
		{"same listen twice", nil, map[string]string{"RELAY_LISTEN": "127.0.0.1:9000", "RELAY_ADMIN_LISTEN": "127.0.0.1:9000"},
			[]string{"RELAY_LISTEN and RELAY_ADMIN_LISTEN are both"}},
		{"token too short", nil, map[string]string{"RELAY_ADMIN_TOKEN": "secret"}, []string{"RELAY_ADMIN_TOKEN: is 6 characters long", "openssl rand -hex 32"}},
		{"token with space", nil, map[string]string{"RELAY_ADMIN_TOKEN": "0123456789 abcdef"}, []string{"RELAY_ADMIN_TOKEN", "whitespace"}},
		{"debug not bool", nil, map[string]string{"RELAY_DEBUG": "maybe"}, []string{`RELAY_DEBUG: "maybe" is not a boolean`}},
		{"projection file missing", nil, map[string]string{"RELAY_PROJECTION_FILE": "/nonexistent/p.json"},
			[]string{`RELAY_PROJECTION_FILE: cannot read "/nonexistent/p.json"`, "no such file"}},
		{"projection file is a directory", nil, map[string]string{"RELAY_PROJECTION_FILE": os.TempDir()}, []string{"not a regular file"}},
		{"update offer range", nil, map[string]string{"RELAY_UPDATE_OFFER": "^0.2.0"}, []string{"RELAY_UPDATE_OFFER", "exact version"}},
		{"daemon floor garbage", nil, map[string]string{"RELAY_DAEMON_FLOOR": "v1"}, []string{"RELAY_DAEMON_FLOOR", "never refuse"}},
		{"sweep interval too small", nil, map[string]string{"RELAY_SWEEP_INTERVAL": "1ms"}, []string{"RELAY_SWEEP_INTERVAL", "at least 50ms"}},
		{"ops heartbeat out of range", nil, map[string]string{"RELAY_OPS_HEARTBEAT": "10ms"}, []string{"RELAY_OPS_HEARTBEAT", "from 100ms to 1m"}},
		{"alias named in message", nil, map[string]string{"RELAY_SWEEP_MS": "-3"}, []string{`RELAY_SWEEP_MS: "-3"`}},
		{"sweep batch zero", nil, map[string]string{"RELAY_SWEEP_BATCH": "0"}, []string{"RELAY_SWEEP_BATCH", "1 to 10000"}},
		{"shutdown timeout", nil, map[string]string{"RELAY_SHUTDOWN_TIMEOUT": "soon"}, []string{"RELAY_SHUTDOWN_TIMEOUT"}},
		{"admin max body", nil, map[string]string{"RELAY_ADMIN_MAX_BODY": "10"}, []string{"RELAY_ADMIN_MAX_BODY", "at least 1024"}},
		{"ui site rate zero", nil, map[string]string{"RELAY_UI_SITE_RATE": "0"}, []string{"RELAY_UI_SITE_RATE", "from 0.01 to 10000"}},
		{"ui site rate NaN", nil, map[string]string{"RELAY_UI_SITE_RATE": "NaN"}, []string{"RELAY_UI_SITE_RATE", "e.g. 2"}},
		{"log format", nil, map[string]string{"RELAY_LOG_FORMAT": "xml"}, []string{"RELAY_LOG_FORMAT", `"json"`}},
		{"max conns zero", nil, map[string]string{"RELAY_MAX_CONNS": "0"}, []string{`RELAY_MAX_CONNS: "0" is not a connection count`, "e.g. 2048"}},
		{"max conns words", []string{"-max-conns", "lots"}, nil, []string{"-max-conns", "1 to 1000000"}},
		{"connections per address over the cap", nil, map[string]string{"RELAY_MAX_CONNS": "100", "RELAY_MAX_CONNS_PER_ADDRESS": "200"},
			[]string{"RELAY_MAX_CONNS_PER_ADDRESS (200) is more than RELAY_MAX_CONNS (100)"}},
		{"valkey connections zero", nil, map[string]string{"RELAY_VALKEY_CONNECTIONS": "0"}, []string{"RELAY_VALKEY_CONNECTIONS", `"0" is not a connection count`, "power of two from 1 to 256"}},
		{"valkey connections not a power of two", nil, map[string]string{"RELAY_VALKEY_CONNECTIONS": "3"}, []string{"RELAY_VALKEY_CONNECTIONS", `"3" is not a connection count`}},
		{"valkey connections past valkey-go's most", nil, map[string]string{"RELAY_VALKEY_CONNECTIONS": "512"}, []string{"RELAY_VALKEY_CONNECTIONS", `"512"`}},
		{"valkey connections not a number", nil, map[string]string{"RELAY_VALKEY_CONNECTIONS": "two"}, []string{"RELAY_VALKEY_CONNECTIONS", `"two"`}},
		{"connections per address negative", nil, map[string]string{"RELAY_MAX_CONNS_PER_ADDRESS": "-1"}, []string{"RELAY_MAX_CONNS_PER_ADDRESS", "0 for a quarter"}},
		{"body share below one body", nil, map[string]string{"RELAY_BODY_BYTES_PER_CLIENT": "1048576"}, []string{"RELAY_BODY_BYTES_PER_CLIENT is 1048576", "at most RELAY_BODY_BYTES_IN_FLIGHT"}},
		{"body share over the budget", nil, map[string]string{"RELAY_BODY_BYTES_PER_CLIENT": "268435456"}, []string{"RELAY_BODY_BYTES_PER_CLIENT is 268435456"}},
		{"write timeout too short", nil, map[string]string{"RELAY_WRITE_TIMEOUT": "10ms"}, []string{"RELAY_WRITE_TIMEOUT", "1s to 10m"}},
		{"body bytes not a number", nil, map[string]string{"RELAY_BODY_BYTES_IN_FLIGHT": "128MiB"}, []string{"RELAY_BODY_BYTES_IN_FLIGHT", "134217728"}},
		{"body bytes below one planes body", nil, map[string]string{"RELAY_BODY_BYTES_IN_FLIGHT": "1048576", "RELAY_ADMIN_MAX_BODY": "1024"},
			[]string{"RELAY_BODY_BYTES_IN_FLIGHT is 1048576", "13631489", "raise it"}},
		{"body bytes below one admin body", nil, map[string]string{"RELAY_BODY_BYTES_IN_FLIGHT": "33554432", "RELAY_ADMIN_MAX_BODY": "67108864"},
			[]string{"RELAY_BODY_BYTES_IN_FLIGHT is 33554432", "67108865", "RELAY_ADMIN_MAX_BODY"}},
		{"body timeout too short", nil, map[string]string{"RELAY_BODY_TIMEOUT": "100ms"}, []string{"RELAY_BODY_TIMEOUT", "from 1s to 10m"}},
		{"body timeout not a duration", nil, map[string]string{"RELAY_BODY_TIMEOUT": "10"}, []string{`RELAY_BODY_TIMEOUT: "10"`}},
		{"TLS cert without key", nil, map[string]string{"RELAY_TLS_CERT_FILE": certFile}, []string{"RELAY_TLS_CERT_FILE and RELAY_TLS_KEY_FILE must be set together"}},
		{"TLS key without cert", nil, map[string]string{"RELAY_TLS_KEY_FILE": keyFile}, []string{"must be set together"}},
		{"TLS cert missing", nil, map[string]string{"RELAY_TLS_CERT_FILE": "/nonexistent/c.pem", "RELAY_TLS_KEY_FILE": keyFile},
			[]string{`RELAY_TLS_CERT_FILE: cannot read "/nonexistent/c.pem"`}},
		{"TLS key of another certificate", nil, map[string]string{"RELAY_TLS_CERT_FILE": otherCert, "RELAY_TLS_KEY_FILE": keyFile},
			[]string{"do not load as a certificate and its key", "PEM files of one pair"}},
		{"log level", nil, map[string]string{"RELAY_LOG_LEVEL": "loud"}, []string{"RELAY_LOG_LEVEL"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.args, envOf(tt.env), io.Discard)
			var p Problems
			if !errors.As(err, &p) {
				t.Fatalf("want Problems, got %v", err)
			}
			if len(p) != 1 {
				t.Fatalf("want exactly one problem, got %q", p)
			}
			for _, w := range tt.want {
				if !strings.Contains(p[0], w) {
					t.Errorf("problem %q does not contain %q", p[0], w)
				}
			}
			if strings.Contains(p[0], "hunter2") {
				t.Errorf("problem %q leaks a password", p[0])
			}
		})
	}
}

// testCPKey is a well-formed control-plane public key (32 zero bytes).
const testCPKey = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"

func TestAllProblemsReportedAtOnce(t *testing.T) {
	t.Parallel()
	_, err := Load(nil, envOf(map[string]string{
		"RELAY_LEASE_MS":             "x",
		"RELAY_BASE_PATH":            "x",
		"RELAY_CONTROL_PLANE_PUBLIC": "x",
	}), io.Discard)
	var p Problems
	if !errors.As(err, &p) || len(p) != 3 {
		t.Fatalf("want three problems, got %v", err)
	}
	if !strings.HasPrefix(err.Error(), "invalid configuration:\n  - ") {
		t.Fatalf("multi-problem message shape: %q", err.Error())
	}
}

func TestFlagErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want error
	}{
		{"help", []string{"-h"}, ErrHelp},
		{"unknown flag", []string{"-nope"}, nil},
		{"positional", []string{"serve"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			_, err := Load(tt.args, envOf(nil), &out)
			if err == nil {
				t.Fatal("want an error")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("want %v, got %v", tt.want, err)
			}
			var p Problems
			if errors.As(err, &p) {
				t.Fatalf("flag errors are not validation problems: %v", err)
			}
		})
	}
	var out strings.Builder
	Load([]string{"-h"}, envOf(nil), &out)
	for _, w := range []string{"RELAY_VALKEY_URL", "-admin-token", "127.0.0.1:8081", "relay projection push"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("usage lacks %q:\n%s", w, out.String())
		}
	}
}

func TestLogAttrsHideSecrets(t *testing.T) {
	t.Parallel()
	c, err := Load(nil, envOf(map[string]string{
		"RELAY_VALKEY_URL":  "redis://u:hunter2@h:6379/0",
		"RELAY_ADMIN_TOKEN": "topsecret-topsecret",
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	slog.New(slog.NewTextHandler(&b, nil)).Info("config", c.LogAttrs()...)
	if strings.Contains(b.String(), "hunter2") || strings.Contains(b.String(), "topsecret") {
		t.Fatalf("secret in log line: %s", b.String())
	}
	if !strings.Contains(b.String(), "adminToken=true") {
		t.Fatalf("log line should say a token is set: %s", b.String())
	}
}

// Every default comes from the package that owns the value: the
// configuration with nothing set is the owners' defaults, so a default
// changed in its package cannot disagree with what the binary runs.
func TestDefaultsComeFromOwners(t *testing.T) {
	t.Parallel()
	cfg, err := Load(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"RELAY_NAMESPACE", cfg.Namespace, store.DefaultNamespace},
		{"RELAY_VALKEY_CONNECTIONS", cfg.ValkeyConnections, valkeyconn.DefaultConnections},
		{"RELAY_LEASE_MS", cfg.LeaseMs, int64(relay.DefaultLeaseMs)},
		{"RELAY_BASE_PATH", cfg.BasePath, relay.DefaultBasePath},
		{"RELAY_SWEEP_INTERVAL", cfg.SweepInterval, sweeper.DefaultInterval},
		{"RELAY_SWEEP_BATCH", cfg.SweepBatch, store.DefaultSweepBatch},
		{"RELAY_DEVICE_RETENTION", cfg.DeviceRetention, store.DefaultDeviceRetention},
		{"sweeper.DefaultBatch", sweeper.DefaultBatch, store.DefaultSweepBatch},
		{"RELAY_STORE_TIMEOUT", cfg.StoreTimeout, relay.DefaultStoreTimeout},
		{"RELAY_ADMIN_MAX_BODY", cfg.AdminMaxBody, int64(admin.DefaultMaxBody)},
		{"RELAY_MAX_CONNS", cfg.MaxConns, httpserve.DefaultMaxConns},
		{"RELAY_BODY_BYTES_IN_FLIGHT", cfg.BodyBytesInFlight, int64(httpserve.DefaultBodyBytesInFlight)},
		{"RELAY_BODY_TIMEOUT", cfg.BodyTimeout, httpserve.DefaultBodyTimeout},
		{"RELAY_WRITE_TIMEOUT", cfg.WriteTimeout, httpserve.DefaultWriteTimeout},
		{"RELAY_PAIRINGS_PER_ADDRESS", cfg.PairingsPerAddress, store.DefaultPairingsPerSource},
		{"RELAY_PAIRINGS_PER_NETWORK", cfg.PairingsPerNetwork, store.DefaultPairingsPerNetwork},
		{"RELAY_SITE_LIMITS", cfg.SiteLimits.Default, store.DefaultSiteLimit},
		{"RELAY_GRANT_TIMEOUT", cfg.GrantTimeout, relay.DefaultGrantTimeout},
		{"RELAY_GRANT_BUDGET", cfg.GrantBudget, relay.DefaultGrantBudget},
		{"RELAY_GRANT_RETRY_AFTER", cfg.GrantRetryAfter, relay.DefaultGrantRetryAfter},
		{"RELAY_FETCH_WAIT", cfg.FetchWait, relay.DefaultFetchWait},
	} {
		if c.got != c.want {
			t.Errorf("%s defaults to %v (%T), its owner's default is %v (%T)", c.name, c.got, c.got, c.want, c.want)
		}
	}
}

// The namespace rule is one regular expression (store.NamespacePattern):
// what configuration accepts is exactly what the store accepts.
func TestNamespaceRuleIsTheStores(t *testing.T) {
	t.Parallel()
	for _, ns := range []string{"byollm", "a", "A9", "a.b_c-d", strings.Repeat("n", 64),
		"", "_x", "-x", ".x", "a:b", "{a}", "a b", strings.Repeat("n", 65)} {
		_, err := Load([]string{"-namespace", ns}, func(string) string { return "" }, io.Discard)
		if (err == nil) != (store.CheckNamespace(ns) == nil) {
			t.Errorf("namespace %q: configuration says %v, the store says %v", ns, err, store.CheckNamespace(ns))
		}
	}
}
