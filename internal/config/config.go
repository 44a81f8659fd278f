// Package config reads the relay's configuration from command-line flags and
// RELAY_* environment variables and validates it before anything starts.
//
// Every option has one environment variable and one flag. A flag that is
// given wins over the variable; an empty variable counts as unset, so a
// compose file can list every name with blank values. Validation collects
// every problem at once and each message says how to fix it, because the
// operator reading it is usually looking at a crash-looping container.
package config

import (
	"crypto/ed25519"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/admin"
	"github.com/byollm/relay-go/internal/grantengine"
	"github.com/byollm/relay-go/internal/httpserve"
	"github.com/byollm/relay-go/internal/opsview"
	"github.com/byollm/relay-go/internal/relay"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/internal/sweeper"
	"github.com/byollm/relay-go/internal/valkeyconn"
)

// Config is the validated configuration. Zero values never reach the rest of
// the relay: Load fills defaults and refuses anything it cannot use.
type Config struct {
	// ValkeyURL is the shared store. "" selects the embedded in-process
	// store: one replica only, nothing survives a restart.
	ValkeyURL string
	// ValkeyConnections is how many connections pipeline the store's calls
	// to each Valkey server (valkeyconn.Open).
	ValkeyConnections int
	// Namespace prefixes every key the relay writes, so several relays
	// (or test runs) can share one Valkey.
	Namespace string
	// Listen is the address of the public planes (daemon + site).
	Listen string
	// AdminListen is the address of the admin listener; "" disables it.
	AdminListen string
	// AdminToken is the bearer token the admin listener demands. "" makes
	// the admin listener refuse every authenticated route.
	AdminToken string
	// LeaseMs is the lease granted at claim and renewal (wire §2 leaseMs).
	LeaseMs int64
	// VerificationURL is where a human approves a device code; "" makes
	// device-code start answer 501 (wire §8.1).
	VerificationURL string
	// BasePath mounts the daemon plane, trailing slashes stripped.
	BasePath string
	// Debug serves the /debug page (wire §10).
	Debug bool
	// ProjectionFile, when set, is loaded at start and pushed to Valkey
	// whenever it changes.
	ProjectionFile string
	// GrantKeyFile is the built-in grant engine's signing key (an Ed25519
	// seed, or StoredKeys JSON; grantengine.ParseKey). Checked at start.
	GrantKeyFile string
	// GrantKeyPublic is the public half of GrantKeyFile's key (what devices
	// pin), read when the file was checked; "" without a key file.
	GrantKeyPublic string
	// PolicyFile, when set, is the grant policy document, pushed to Valkey
	// at start and whenever it changes.
	PolicyFile string
	// UpdateOffer is the exact version offered in heartbeat updateTo.
	UpdateOffer string
	// DaemonFloor is the oldest daemon version served (heartbeat 426 below).
	DaemonFloor string
	// SweepInterval is the background sweeper's mean period; 0 disables it.
	SweepInterval time.Duration
	// DeviceRetention is how long a silent device keeps its presence and
	// index entries in Valkey before the sweep forgets them
	// (store.Options.DeviceRetention); at least store.MinDeviceRetention.
	DeviceRetention time.Duration
	// QueueAgeInterval is how often the replica re-reads each projection
	// site's oldest queued job for relay_site_oldest_queued_seconds.
	QueueAgeInterval time.Duration
	// HeartbeatInterval is how often the replica writes its record for the
	// operations view's fleet page (internal/opsview); the record expires
	// after five intervals without one.
	HeartbeatInterval time.Duration
	// SweepBatch is how many due jobs one sweep call settles at most.
	SweepBatch int
	// StoreTimeout bounds each store call the planes make; a slower call
	// is answered with the retryable 503.
	StoreTimeout time.Duration
	// DaemonHeartbeatBatch is how long a daemon heartbeat's presence write
	// may wait to share its Valkey round trip with others
	// (store.Options.HeartbeatBatch); 0 writes each at once.
	DaemonHeartbeatBatch time.Duration
	// DaemonIdleHeartbeatBatch is how long the presence write of an idle
	// heartbeat (no active lease, nothing the work view knows of to claim)
	// may wait (store.Options.HeartbeatIdleBatch); at most the heartbeat
	// window means no separate idle window.
	DaemonIdleHeartbeatBatch time.Duration
	// WorkViewQueues bounds the empty queues this replica's work view
	// remembers per shard (store.Options.WorkViewQueues).
	WorkViewQueues int
	// ShutdownTimeout bounds graceful shutdown after SIGINT/SIGTERM.
	ShutdownTimeout time.Duration
	// DrainPeriod is how long after SIGTERM readiness fails while both
	// listeners keep serving, before shutdown starts; 0 shuts down at once.
	DrainPeriod time.Duration
	// OTLPEndpoint is the OpenTelemetry collector's base URL for traces;
	// "" leaves it to OTEL_EXPORTER_OTLP_ENDPOINT, and tracing off if that
	// is unset too.
	OTLPEndpoint string
	// AdminMaxBody caps admin request bodies, in bytes.
	AdminMaxBody int64
	// UISiteRate is the operations view's sustained pages a second per site
	// token and per client address, on each replica (bursts of 10 s worth).
	UISiteRate float64
	// MaxConns caps open connections on each listener.
	MaxConns int
	// MaxConnsPerAddress caps what one address (IPv4, or IPv6 /64; not a
	// trusted proxy) holds of MaxConns on each listener.
	MaxConnsPerAddress int
	// BodyBytesInFlight caps the request-body bytes held in memory at once,
	// across every connection of both listeners.
	BodyBytesInFlight int64
	// BodyBytesPerClient caps what one client (address, or behind trusted
	// proxies its X-Forwarded-For address) holds of BodyBytesInFlight.
	BodyBytesPerClient int64
	// BodyTimeout is how long each 64 KiB of a request body may take to
	// arrive.
	BodyTimeout time.Duration
	// WriteTimeout is how long a client may take to read each 64 KiB of an
	// answer.
	WriteTimeout time.Duration
	// TLSCertFile and TLSKeyFile, both set or both empty, make the public
	// listener serve only TLS with that certificate (reloaded on change).
	TLSCertFile, TLSKeyFile string
	// TrustedProxies are the networks whose X-Forwarded-For names a
	// request's source address; empty: the peer address is the source.
	TrustedProxies []netip.Prefix
	// PairingsPerAddress bounds the live pairing codes of one source
	// address.
	PairingsPerAddress int
	// PairingsPerNetwork bounds the live pairing codes of one source
	// network (/24, IPv6 /48); never below PairingsPerAddress in effect.
	PairingsPerNetwork int
	// PairingsMax bounds the live pairing codes of the whole relay; a fifth
	// of it is kept for networks holding none.
	PairingsMax int
	// SiteLimits bounds each site's jobs, stored bytes and enqueue rate.
	SiteLimits store.SiteLimits
	// LogFormat is "text", "json" or "auto" (text on a terminal).
	LogFormat string
	// LogLevel is the minimum level logged.
	LogLevel slog.Level

	// ControlPlanePublic is the grant-signing public key handed to devices
	// at pairing (wire §14.1); "" hands none.
	ControlPlanePublic string
	// GrantAuthorityURL is a remote control plane (author-grant and
	// satisfiable); GrantSignerURL a remote signer behind the built-in
	// engine. At most one is set.
	GrantAuthorityURL, GrantSignerURL string
	// GrantAuthorityToken is the bearer token for whichever is set.
	GrantAuthorityToken string
	// GrantTimeout bounds one authority or signer call; GrantBudget all
	// calls of one claim.
	GrantTimeout, GrantBudget time.Duration
	// GrantRetryAfter keeps a transiently declined job from its runner.
	GrantRetryAfter time.Duration
	// FetchWait is how long a fetch of a payload not sealed yet waits for
	// the seal (relay.Config.FetchWait).
	FetchWait time.Duration
}

// Grant modes (Config.GrantMode).
const (
	GrantsOff       = "off"
	GrantsBuiltin   = "builtin"
	GrantsAuthority = "authority"
	GrantsSigner    = "signer"
)

// GrantMode says where grants come from: the built-in engine signing with
// the key file, the built-in engine with a remote signer, or a remote
// authority. grantProblems refuses a start that names more than one.
func (c Config) GrantMode() string {
	switch {
	case c.GrantKeyFile != "":
		return GrantsBuiltin
	case c.GrantAuthorityURL != "":
		return GrantsAuthority
	case c.GrantSignerURL != "":
		return GrantsSigner
	}
	return GrantsOff
}

// grantProblems checks the grant options together: one mode at most, and a
// key for devices exactly when something can author grants.
func grantProblems(c Config) []string {
	var p []string
	if c.GrantAuthorityURL != "" && c.GrantSignerURL != "" {
		p = append(p, "RELAY_GRANT_AUTHORITY_URL and RELAY_GRANT_SIGNER_URL are both set; choose one: the authority URL when your own control plane decides and signs, the signer URL when this relay decides and only the signing is remote")
	}
	if c.GrantKeyFile != "" {
		if c.GrantAuthorityURL != "" {
			p = append(p, "RELAY_GRANT_KEY_FILE and RELAY_GRANT_AUTHORITY_URL are both set; choose one: the key file when this relay decides and signs (built-in engine), the authority URL when your own control plane does")
		}
		if c.GrantSignerURL != "" {
			p = append(p, "RELAY_GRANT_KEY_FILE and RELAY_GRANT_SIGNER_URL are both set; choose one: the key file when this relay holds the key, the signer URL when the key stays in your KMS/HSM")
		}
		if c.ControlPlanePublic != "" && c.GrantKeyPublic != "" && c.ControlPlanePublic != c.GrantKeyPublic {
			p = append(p, fmt.Sprintf("RELAY_CONTROL_PLANE_PUBLIC is %s but the key in RELAY_GRANT_KEY_FILE has the public half %s: devices would pin a key that did not sign their grants and refuse every job; unset RELAY_CONTROL_PLANE_PUBLIC (the relay hands out the key file's public half) or set it to %s", c.ControlPlanePublic, c.GrantKeyPublic, c.GrantKeyPublic))
		}
	} else if c.ControlPlanePublic == "" {
		switch {
		case c.GrantAuthorityURL != "":
			p = append(p, "RELAY_GRANT_AUTHORITY_URL is set but RELAY_CONTROL_PLANE_PUBLIC is not: devices would never learn the key the authority signs with and would ignore its grants; set RELAY_CONTROL_PLANE_PUBLIC to the authority's public key")
		case c.GrantSignerURL != "":
			p = append(p, "RELAY_GRANT_SIGNER_URL is set but RELAY_CONTROL_PLANE_PUBLIC is not: the relay cannot derive the public half of a key it does not hold; set RELAY_CONTROL_PLANE_PUBLIC to the signer's public key")
		}
	} else if c.GrantMode() == GrantsOff {
		// The reference's construction error (wire §2), then the fix.
		p = append(p, "RELAY_CONTROL_PLANE_PUBLIC: controlPlanePublic is set but authorGrant is not: devices would be told to expect signed grants that nothing here can produce, and would refuse every job. Set RELAY_GRANT_KEY_FILE (built-in engine), RELAY_GRANT_AUTHORITY_URL (your control plane) or RELAY_GRANT_SIGNER_URL (remote signer), or unset it so daemons serve their owner's work in direct mode")
	}
	if c.GrantAuthorityToken != "" && c.GrantAuthorityURL == "" && c.GrantSignerURL == "" {
		p = append(p, "RELAY_GRANT_AUTHORITY_TOKEN is set but no remote grant authority or signer is; set RELAY_GRANT_AUTHORITY_URL or RELAY_GRANT_SIGNER_URL, or unset the token")
	}
	return p
}

// grantURL checks a remote grant endpoint's URL ("" allowed: unset).
func grantURL(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%q is not an absolute http(s) URL without query or fragment; write it like https://control-plane.internal/grants, or unset it", redactURL(v))
	}
	return v, nil
}

// Embedded reports whether the relay runs on the in-process store.
func (c Config) Embedded() bool { return c.ValkeyURL == "" }

// LogAttrs describes the configuration for the start-up log line, with
// secrets left out.
func (c Config) LogAttrs() []any {
	valkeyURL := "embedded"
	if c.ValkeyURL != "" {
		valkeyURL = redactURL(c.ValkeyURL)
	}
	return []any{
		slog.String("valkey", valkeyURL),
		slog.Int("valkeyConnections", c.ValkeyConnections),
		slog.String("namespace", c.Namespace),
		slog.String("listen", c.Listen),
		slog.String("adminListen", orDash(c.AdminListen)),
		slog.Bool("adminToken", c.AdminToken != ""),
		slog.Int64("leaseMs", c.LeaseMs),
		slog.String("verificationUrl", orDash(c.VerificationURL)),
		slog.String("basePath", c.BasePath),
		slog.Bool("debug", c.Debug),
		slog.String("projectionFile", orDash(c.ProjectionFile)),
		slog.String("grantKeyFile", orDash(c.GrantKeyFile)),
		slog.String("grantKeyPublic", orDash(c.GrantKeyPublic)),
		slog.String("policyFile", orDash(c.PolicyFile)),
		slog.String("updateOffer", orDash(c.UpdateOffer)),
		slog.String("daemonFloor", orDash(c.DaemonFloor)),
		slog.String("sweepInterval", c.SweepInterval.String()),
		slog.Int("sweepBatch", c.SweepBatch),
		slog.Duration("drainPeriod", c.DrainPeriod),
		slog.Duration("storeTimeout", c.StoreTimeout),
		slog.Duration("daemonHeartbeatBatch", c.DaemonHeartbeatBatch),
		slog.Duration("daemonIdleHeartbeatBatch", c.DaemonIdleHeartbeatBatch),
		slog.Duration("deviceRetention", c.DeviceRetention),
		slog.Int("workViewQueues", c.WorkViewQueues),
		slog.String("otlpEndpoint", orDash(redactURL(c.OTLPEndpoint))),
		slog.Int("maxConns", c.MaxConns),
		slog.Int("maxConnsPerAddress", c.MaxConnsPerAddress),
		slog.Int64("bodyBytesInFlight", c.BodyBytesInFlight),
		slog.Int64("bodyBytesPerClient", c.BodyBytesPerClient),
		slog.Duration("bodyTimeout", c.BodyTimeout),
		slog.Duration("writeTimeout", c.WriteTimeout),
		slog.String("tlsCertFile", orDash(c.TLSCertFile)),
		slog.Int("pairingsPerAddress", c.PairingsPerAddress),
		slog.Int("pairingsPerNetwork", c.PairingsPerNetwork),
		slog.Int("pairingsMax", c.PairingsMax),
		slog.Int("trustedProxies", len(c.TrustedProxies)),
		slog.Any("siteLimit", c.SiteLimits.Default),
		slog.Int("siteLimitOverrides", len(c.SiteLimits.Sites)),
		slog.String("grants", c.GrantMode()),
		slog.String("controlPlanePublic", orDash(c.ControlPlanePublic)),
		slog.String("grantAuthorityUrl", orDash(redactURL(c.GrantAuthorityURL))),
		slog.String("grantSignerUrl", orDash(redactURL(c.GrantSignerURL))),
		slog.Bool("grantAuthorityToken", c.GrantAuthorityToken != ""),
		slog.Duration("grantTimeout", c.GrantTimeout),
		slog.Duration("grantBudget", c.GrantBudget),
		slog.Duration("grantRetryAfter", c.GrantRetryAfter),
		slog.Duration("fetchWait", c.FetchWait),
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Problems is every validation failure found, one message per option.
type Problems []string

func (p Problems) Error() string {
	if len(p) == 1 {
		return "invalid configuration: " + p[0]
	}
	return "invalid configuration:\n  - " + strings.Join(p, "\n  - ")
}

// ErrHelp is returned when -h or -help was given; the usage text has
// already been written.
var ErrHelp = flag.ErrHelp

// option is one configurable value: its names, its default and how to apply
// a raw string to Config. apply returns a message without the option's name;
// Load prefixes the name the operator actually used (flag or variable).
type option struct {
	env, flag string
	def       string
	isBool    bool
	usage     string
	apply     func(c *Config, v string) error
	// alias is a second variable read when env is unset: the name the
	// reference host (test/reference/server.mjs) uses, so one harness
	// environment drives both relays. fromAlias converts its value.
	alias     string
	fromAlias func(string) string
}

// Options lists every option in the order the usage text shows them.
var options = []option{
	{env: "RELAY_VALKEY_URL", flag: "valkey-url", usage: "Valkey/Redis URL (redis://, rediss://, valkey://, unix://); unset: embedded in-process store, single replica, not durable", apply: func(c *Config, v string) error {
		if v == "" {
			c.ValkeyURL = ""
			return nil
		}
		if _, err := valkey.ParseURL(v); err != nil {
			return fmt.Errorf("cannot use %q (%v); write it like redis://[user:password@]host:6379/0 (rediss:// for TLS), or unset it to use the embedded store", redactURL(v), err)
		}
		c.ValkeyURL = v
		return nil
	}},
	{env: "RELAY_VALKEY_CONNECTIONS", flag: "valkey-connections", def: strconv.Itoa(valkeyconn.DefaultConnections), usage: "connections that pipeline this replica's calls to each Valkey server: a power of two up to 256. One gathers calls made at the same moment into one server read, which costs the server least; more spread a busy replica's reply decoding", apply: func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || !valkeyconn.Connections(n) {
			return fmt.Errorf("%q is not a connection count; use a power of two from 1 to %d, e.g. 1 (the default) or 4", v, valkeyconn.MaxConnections)
		}
		c.ValkeyConnections = n
		return nil
	}},
	{env: "RELAY_NAMESPACE", flag: "namespace", def: store.DefaultNamespace, usage: "prefix of every Valkey key this relay writes; replicas of one relay share it", apply: func(c *Config, v string) error {
		if !store.NamespacePattern.MatchString(v) {
			return fmt.Errorf("%q is not a usable namespace; use 1-64 letters, digits, '.', '_' or '-' starting with a letter or digit (it is part of every key name, so braces and colons would break the hash tags)", v)
		}
		c.Namespace = v
		return nil
	}},
	{env: "RELAY_LISTEN", flag: "listen", def: ":8080", usage: "address of the public planes (daemon + site); the default listens on every interface, as a container needs", apply: func(c *Config, v string) error {
		if err := checkAddr(v); err != nil {
			return fmt.Errorf("%q is not a listen address (%v); write host:port, e.g. :8080 or 127.0.0.1:8080", v, err)
		}
		c.Listen = v
		return nil
	}},
	{env: "RELAY_ADMIN_LISTEN", flag: "admin-listen", def: "127.0.0.1:8081", usage: `address of the admin listener (projection, policy and pairing APIs, /healthz, /readyz, /metrics, the operations view at /ui/); "off" disables it`, apply: func(c *Config, v string) error {
		if strings.EqualFold(v, "off") {
			c.AdminListen = ""
			return nil
		}
		if err := checkAddr(v); err != nil {
			return fmt.Errorf(`%q is not a listen address (%v); write host:port, e.g. 127.0.0.1:8081, or "off" to disable the admin listener`, v, err)
		}
		c.AdminListen = v
		return nil
	}},
	{env: "RELAY_ADMIN_TOKEN", flag: "admin-token", usage: "bearer token the admin listener requires; unset: the admin listener refuses every request (prefer the variable: flags show up in ps)", apply: func(c *Config, v string) error {
		if v == "" {
			c.AdminToken = ""
			return nil
		}
		if len(v) < minTokenLen {
			return fmt.Errorf("is %d characters long; use at least %d random characters, e.g. the output of `openssl rand -hex 32`", len(v), minTokenLen)
		}
		if strings.ContainsFunc(v, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			return errors.New("contains whitespace or control characters, which cannot travel in an Authorization header; generate one with `openssl rand -hex 32`")
		}
		c.AdminToken = v
		return nil
	}},
	{env: "RELAY_LEASE_MS", flag: "lease-ms", def: strconv.Itoa(relay.DefaultLeaseMs), usage: "lease granted to a device at claim and renewal, in milliseconds (1000 to 3600000; a daemon renews its leases with every heartbeat, about every 10 s)", apply: func(c *Config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < minLeaseMs || n > maxLeaseMs {
			return fmt.Errorf("%q is not a usable lease; use a positive whole number of milliseconds from %d (1 s) to %d (1 h), e.g. 60000 (one minute): a job held by a daemon that died waits this long before it is offered again", v, minLeaseMs, maxLeaseMs)
		}
		c.LeaseMs = n
		return nil
	}},
	{env: "RELAY_VERIFICATION_URL", flag: "verification-url", usage: "where a human approves a device code (http/https); unset: device-code pairing answers 501, and real daemons cannot pair", apply: func(c *Config, v string) error {
		if v == "" {
			c.VerificationURL = ""
			return nil
		}
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%q is not an absolute http(s) URL; write it like https://example.com/activate, or unset it", v)
		}
		c.VerificationURL = v
		return nil
	}},
	{env: "RELAY_BASE_PATH", flag: "base-path", def: relay.DefaultBasePath, usage: "where the daemon plane is mounted; trailing slashes are stripped. Real daemons always call {origin}/byollm/...", apply: func(c *Config, v string) error {
		if !strings.HasPrefix(v, "/") {
			return fmt.Errorf("%q must start with '/', e.g. /byollm", v)
		}
		if strings.ContainsAny(v, "?#% \t") {
			return fmt.Errorf("%q must be a plain path without '?', '#', '%%' or spaces, e.g. /byollm", v)
		}
		c.BasePath = strings.TrimRight(v, "/")
		return nil
	}},
	{env: "RELAY_DEBUG", flag: "debug", def: "false", isBool: true, usage: "serve the /debug page (shows routing state; keep off in production)", apply: func(c *Config, v string) error {
		b, err := parseBool(v)
		if err != nil {
			return err
		}
		c.Debug = b
		return nil
	}},
	{env: "RELAY_PROJECTION_FILE", flag: "projection-file", alias: "RELAY_FIXTURE_FILE", usage: "projection (RelayFixture JSON) loaded at start and pushed to Valkey whenever the file changes", apply: func(c *Config, v string) error {
		if v == "" {
			c.ProjectionFile = ""
			return nil
		}
		if err := checkReadable(v, "JSON"); err != nil {
			return err
		}
		c.ProjectionFile = v
		return nil
	}},
	{env: "RELAY_GRANT_KEY_FILE", flag: "grant-key-file", usage: "the built-in grant engine's Ed25519 signing key: the 32-byte seed in base64url, or a StoredKeys JSON of @byollm/protocol; its public half is what paired devices pin", apply: func(c *Config, v string) error {
		if v == "" {
			c.GrantKeyFile, c.GrantKeyPublic = "", ""
			return nil
		}
		k, err := grantengine.LoadKeyFile(v)
		if err != nil {
			return fmt.Errorf("%v; write a key with `head -c 32 /dev/urandom | base64 > grant.key` (keep it private) or unset it", err)
		}
		c.GrantKeyFile = v
		c.GrantKeyPublic = k.Public()
		return nil
	}},
	{env: "RELAY_POLICY_FILE", flag: "policy-file", usage: "grant policy document (JSON) pushed to Valkey at start and whenever the file changes", apply: func(c *Config, v string) error {
		if v == "" {
			c.PolicyFile = ""
			return nil
		}
		if err := checkReadable(v, "JSON"); err != nil {
			return err
		}
		c.PolicyFile = v
		return nil
	}},
	{env: "RELAY_UPDATE_OFFER", flag: "update-offer", usage: "exact daemon version offered in heartbeat updateTo, e.g. 0.1.2", apply: func(c *Config, v string) error {
		if v != "" && !updateOfferRE.MatchString(v) {
			return fmt.Errorf("%q is not an exact version; write major.minor.patch with an optional -prerelease, e.g. 0.1.2 or 0.2.0-beta.1 (the relay would never offer it otherwise)", v)
		}
		c.UpdateOffer = v
		return nil
	}},
	{env: "RELAY_DAEMON_FLOOR", flag: "daemon-floor", usage: "oldest daemon version served; older daemons get 426 at heartbeat", apply: func(c *Config, v string) error {
		if v != "" && !versionRE.MatchString(v) {
			return fmt.Errorf("%q is not a version; write major.minor.patch with an optional -prerelease, e.g. 0.1.0 (an unparsable floor would never refuse anything)", v)
		}
		c.DaemonFloor = v
		return nil
	}},
	{env: "RELAY_SWEEP_INTERVAL", flag: "sweep-interval", def: sweeper.DefaultInterval.String(), alias: "RELAY_SWEEP_MS", fromAlias: msToDuration, usage: `mean period of the background sweeper (jittered); "off" or 0 disables it (the planes still sweep on claim, heartbeat and pending)`, apply: func(c *Config, v string) error {
		if strings.EqualFold(v, "off") || v == "0" || v == "0ms" {
			c.SweepInterval = 0
			return nil
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < minSweepInterval || d > maxSweepInterval {
			return fmt.Errorf(`%q is not a usable interval; write a Go duration of at least %v and at most %v, e.g. 1s or 500ms, or "off"`, v, minSweepInterval, maxSweepInterval)
		}
		c.SweepInterval = d
		return nil
	}},
	{env: "RELAY_DEVICE_RETENTION", flag: "device-retention", def: "168h", usage: "how long a device that stops sending heartbeats keeps its presence record and index entries in Valkey; after it the background sweep forgets them (the device, if still paired, is recorded again by its next heartbeat). A Go duration or whole days (e.g. 7d), from 24h to 3650d", apply: func(c *Config, v string) error {
		d, err := parseDays(v)
		if err != nil || d < store.MinDeviceRetention || d > maxDeviceRetention {
			return fmt.Errorf("%q is not a usable device retention; write a Go duration or whole days from 24h to 3650d, e.g. 7d or 168h (shorter would forget a laptop asleep overnight)", v)
		}
		c.DeviceRetention = d
		return nil
	}},
	{env: "RELAY_QUEUE_AGE_INTERVAL", flag: "queue-age-interval", def: "30s", usage: "how often this replica reads each projection site's oldest queued job for relay_site_oldest_queued_seconds (one or a few ops_site script calls per site)", apply: func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < 100*time.Millisecond || d > time.Hour {
			return fmt.Errorf("%q is not a queue-age interval; write a Go duration from 100ms to 1h, e.g. 30s", v)
		}
		c.QueueAgeInterval = d
		return nil
	}},
	{env: "RELAY_OPS_HEARTBEAT", flag: "ops-heartbeat", def: "3s", usage: "how often this replica writes its record for the operations view at /ui/ (one script call); it expires after five intervals without one", apply: func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < 100*time.Millisecond || d > time.Minute {
			return fmt.Errorf("%q is not a heartbeat interval; write a Go duration from 100ms to 1m, e.g. 3s", v)
		}
		c.HeartbeatInterval = d
		return nil
	}},
	{env: "RELAY_SWEEP_BATCH", flag: "sweep-batch", def: strconv.Itoa(store.DefaultSweepBatch), usage: "due jobs settled per sweep call (one Lua script run); 24 keeps each call under about 1 ms", apply: func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			return fmt.Errorf("%q is not a batch size; use a whole number from 1 to 10000, e.g. 24", v)
		}
		c.SweepBatch = n
		return nil
	}},
	{env: "RELAY_STORE_TIMEOUT", flag: "store-timeout", def: relay.DefaultStoreTimeout.String(), usage: "longest a plane waits on one store call before answering the retryable 503 server-error (a frozen or failing-over Valkey)", apply: func(c *Config, v string) error {
		d, err := boundedDuration(v, "store timeout", minStoreTimeout, maxStoreTimeout, "500ms (a healthy store answers in about a millisecond)")
		if err == nil {
			c.StoreTimeout = d
		}
		return err
	}},
	{env: "RELAY_DAEMON_HEARTBEAT_BATCH", flag: "daemon-heartbeat-batch", def: DefaultDaemonHeartbeatBatch.String(), usage: `longest a daemon heartbeat's presence write waits to share one Valkey round trip with other heartbeats (an idle fleet costs the server about one round trip per batch instead of one per heartbeat); "off" or 0 writes each at once`, apply: func(c *Config, v string) error {
		if v == "off" || v == "0" {
			c.DaemonHeartbeatBatch = 0
			return nil
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > maxDaemonHeartbeatBatch {
			return fmt.Errorf(`%q is not a usable batch window; write a Go duration up to %v, e.g. 100ms, or "off"`, v, maxDaemonHeartbeatBatch)
		}
		c.DaemonHeartbeatBatch = d
		return nil
	}},
	{env: "RELAY_DAEMON_IDLE_HEARTBEAT_BATCH", flag: "daemon-idle-heartbeat-batch", def: DefaultDaemonIdleHeartbeatBatch.String(), usage: `longest the presence write of an idle daemon's heartbeat (no active lease, and this replica's work view knows its next claim would find nothing) waits to share a Valkey call with others; such an answer can be late without delaying any work, and on a cluster a longer window fills the per-shard calls; "off" or 0 gives idle heartbeats the RELAY_DAEMON_HEARTBEAT_BATCH window`, apply: func(c *Config, v string) error {
		if v == "off" || v == "0" {
			c.DaemonIdleHeartbeatBatch = 0
			return nil
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > maxDaemonIdleHeartbeatBatch {
			return fmt.Errorf(`%q is not a usable idle batch window; write a Go duration up to %v, e.g. 1s, or "off"`, v, maxDaemonIdleHeartbeatBatch)
		}
		c.DaemonIdleHeartbeatBatch = d
		return nil
	}},
	{env: "RELAY_WORK_VIEW_QUEUES", flag: "work-view-queues", def: strconv.Itoa(store.DefaultWorkViewQueues), usage: "empty queues this replica remembers per shard so an idle claim asks Valkey nothing (about 80 B each; a device adds about three per site it serves); a shard with more forgets some and sends their claims to Valkey", apply: func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1024 || n > 1<<24 {
			return fmt.Errorf("%q is not a queue count; use a whole number from 1024 to 16777216, e.g. 65536 (about 5 MB a shard)", v)
		}
		c.WorkViewQueues = n
		return nil
	}},
	{env: "RELAY_SHUTDOWN_TIMEOUT", flag: "shutdown-timeout", def: "15s", usage: "how long SIGINT/SIGTERM waits for in-flight requests before closing them", apply: func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > 10*time.Minute {
			return fmt.Errorf("%q is not a usable shutdown timeout; write a positive Go duration of at most 10m, e.g. 15s", v)
		}
		c.ShutdownTimeout = d
		return nil
	}},
	{env: "RELAY_DRAIN_PERIOD", flag: "drain-period", def: "0s", usage: "after SIGTERM, how long /readyz fails while the listeners keep serving, so load balancers move away before shutdown starts (5s behind Kubernetes or HAProxy)", apply: func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > 10*time.Minute {
			return fmt.Errorf("%q is not a drain period; write a Go duration from 0s to 10m, e.g. 5s", v)
		}
		c.DrainPeriod = d
		return nil
	}},
	{env: "RELAY_OTLP_ENDPOINT", flag: "otlp-endpoint", usage: "OpenTelemetry collector base URL for traces (OTLP/HTTP), e.g. http://otel-collector:4318; unset: OTEL_EXPORTER_OTLP_ENDPOINT decides, else no tracing", apply: func(c *Config, v string) error {
		if v == "" {
			c.OTLPEndpoint = ""
			return nil
		}
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%q is not an absolute http(s) URL; write the collector's base URL like http://otel-collector:4318 (/v1/traces is appended), or unset it", redactURL(v))
		}
		c.OTLPEndpoint = v
		return nil
	}},
	{env: "RELAY_ADMIN_MAX_BODY", flag: "admin-max-body", def: strconv.Itoa(admin.DefaultMaxBody), usage: "largest admin request body accepted, in bytes (projection documents)", apply: func(c *Config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1024 || n > maxAdminBody {
			return fmt.Errorf("%q is not a byte count; use a whole number of at least 1024 and at most %d (1 GiB), e.g. 16777216 (16 MiB)", v, maxAdminBody)
		}
		c.AdminMaxBody = n
		return nil
	}},
	{env: "RELAY_UI_SITE_RATE", flag: "ui-site-rate", def: strconv.FormatFloat(opsview.DefaultSiteRate, 'f', -1, 64), usage: "operations view: sustained pages a second per site token and per client address, on each replica, with bursts of ten seconds' worth; more is answered 429 with Retry-After (the admin token is never limited)", apply: func(c *Config, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f >= 0.01 && f <= 10000) {
			return fmt.Errorf("%q is not a usable page rate; write pages a second from 0.01 to 10000, e.g. 2 (a page refreshes itself every 5 s, so 2 serves ten open pages)", v)
		}
		c.UISiteRate = f
		return nil
	}},
	{env: "RELAY_MAX_CONNS", flag: "max-conns", def: strconv.Itoa(httpserve.DefaultMaxConns), usage: "open connections allowed on each listener; one more is answered 503 (retryable) and closed, or just closed on a TLS listener", apply: func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1_000_000 {
			return fmt.Errorf("%q is not a connection count; use a whole number from 1 to 1000000, e.g. 2048", v)
		}
		c.MaxConns = n
		return nil
	}},
	{env: "RELAY_MAX_CONNS_PER_ADDRESS", flag: "max-conns-per-address", def: "0", usage: "open connections one address (IPv4, or IPv6 /64) may hold on each listener; one more is answered 503 (retryable). A trusted proxy (RELAY_TRUSTED_PROXIES) is not counted. 0: a quarter of RELAY_MAX_CONNS (512 of 2048)", apply: func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1_000_000 {
			return fmt.Errorf("%q is not a connection count; use a whole number from 1 to RELAY_MAX_CONNS, e.g. 512, or 0 for a quarter of RELAY_MAX_CONNS", v)
		}
		c.MaxConnsPerAddress = n
		return nil
	}},
	{env: "RELAY_BODY_BYTES_IN_FLIGHT", flag: "body-bytes-in-flight", def: strconv.Itoa(httpserve.DefaultBodyBytesInFlight), usage: "request-body bytes held in memory at once across all connections of both listeners; a request past it is answered 503 (retryable)", apply: func(c *Config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 || n > maxBodyBytesInFlight {
			return fmt.Errorf("%q is not a byte count; use a whole number of at most %d (64 GiB), e.g. 134217728 (128 MiB)", v, maxBodyBytesInFlight)
		}
		c.BodyBytesInFlight = n
		return nil
	}},
	{env: "RELAY_BODY_BYTES_PER_CLIENT", flag: "body-bytes-per-client", def: "0", usage: "request-body bytes one client (address, or behind RELAY_TRUSTED_PROXIES its X-Forwarded-For address) may hold of RELAY_BODY_BYTES_IN_FLIGHT; past it its requests are answered 503 (retryable), and a body that alone could never fit 400 (too large). 0: a quarter of the budget, at least one largest body", apply: func(c *Config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("%q is not a byte count; use a whole number, e.g. 33554432 (32 MiB), or 0 for a quarter of RELAY_BODY_BYTES_IN_FLIGHT", v)
		}
		c.BodyBytesPerClient = n
		return nil
	}},
	{env: "RELAY_WRITE_TIMEOUT", flag: "write-timeout", def: httpserve.DefaultWriteTimeout.String(), usage: "how long a client may take to read each 64 KiB of an answer (6.4 KiB/s at the default); a client that stops reading is cut off and the answer released", apply: func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second || d > 10*time.Minute {
			return fmt.Errorf("%q is not a write timeout; write a Go duration from 1s to 10m, e.g. 10s", v)
		}
		c.WriteTimeout = d
		return nil
	}},
	{env: "RELAY_BODY_TIMEOUT", flag: "body-timeout", def: httpserve.DefaultBodyTimeout.String(), usage: "how long each 64 KiB of a request body (or all of a smaller one) may take to arrive: 6.4 KiB/s at the default; a stalled or trickling body is cut off with 400", apply: func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second || d > 10*time.Minute {
			return fmt.Errorf("%q is not a body timeout; write a Go duration from 1s to 10m, e.g. 10s", v)
		}
		c.BodyTimeout = d
		return nil
	}},
	{env: "RELAY_TLS_CERT_FILE", flag: "tls-cert-file", usage: "PEM certificate (chain) for the public listener; with RELAY_TLS_KEY_FILE it serves only TLS 1.2+, reloading both files when they change. Unset: plaintext (behind a balancer that terminates TLS)", apply: func(c *Config, v string) error {
		if err := checkReadable(v, "PEM"); err != nil {
			return err
		}
		c.TLSCertFile = v
		return nil
	}},
	{env: "RELAY_TLS_KEY_FILE", flag: "tls-key-file", usage: "PEM private key matching RELAY_TLS_CERT_FILE", apply: func(c *Config, v string) error {
		if err := checkReadable(v, "PEM"); err != nil {
			return err
		}
		c.TLSKeyFile = v
		return nil
	}},
	{env: "RELAY_TRUSTED_PROXIES", flag: "trusted-proxies", usage: "comma-separated CIDRs of load balancers whose X-Forwarded-For names the client (per-address pairing limit); unset: the connection's peer address is the client", apply: func(c *Config, v string) error {
		c.TrustedProxies = nil
		if v == "" {
			return nil
		}
		for _, part := range strings.Split(v, ",") {
			part = strings.TrimSpace(part)
			p, err := netip.ParsePrefix(part)
			if err != nil {
				a, aerr := netip.ParseAddr(part)
				if aerr != nil {
					return fmt.Errorf("%q is not a network; write CIDRs separated by commas, e.g. 10.0.0.0/8,fd00::/8 (a bare address means just that host)", part)
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			c.TrustedProxies = append(c.TrustedProxies, p.Masked())
		}
		return nil
	}},
	{env: "RELAY_PAIRINGS_PER_ADDRESS", flag: "pairings-per-address", def: strconv.Itoa(store.DefaultPairingsPerSource), usage: "live device-code pairings one client address may hold (of RELAY_PAIRINGS_MAX); IPv6 clients count per /64", apply: func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 500 {
			return fmt.Errorf("%q is not a count; use a whole number from 1 to 500, e.g. 5", v)
		}
		c.PairingsPerAddress = n
		return nil
	}},
	{env: "RELAY_PAIRINGS_PER_NETWORK", flag: "pairings-per-network", def: strconv.Itoa(store.DefaultPairingsPerNetwork), usage: "live device-code pairings the client addresses of one network (IPv4 /24, IPv6 /48) may hold together; never less than RELAY_PAIRINGS_PER_ADDRESS in effect", apply: func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100_000 {
			return fmt.Errorf("%q is not a count; use a whole number from 1 to 100000, e.g. 20", v)
		}
		c.PairingsPerNetwork = n
		return nil
	}},
	{env: "RELAY_PAIRINGS_MAX", flag: "pairings-max", def: strconv.Itoa(DefaultPairingsMax), usage: "live device-code pairings the whole relay holds (each up to about 83 KB of Valkey memory, 1.4 KB for a typical start); the last fifth only for networks holding none, so a new network still gets a code", apply: func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 10 || n > 100_000 {
			return fmt.Errorf("%q is not a count; use a whole number from 10 to 100000, e.g. 1000", v)
		}
		c.PairingsMax = n
		return nil
	}},
	{env: "RELAY_SITE_LIMITS", flag: "site-limits", def: "", usage: "per-site limits: entries site=jobs:N,bytes:SIZE,rate:R,burst:B separated by ';', the site * changing the default for every site (default *=jobs:10000,bytes:1GiB,rate:200,burst:400); a field left out keeps the default, off lifts it", apply: func(c *Config, v string) error {
		l, err := ParseSiteLimits(v)
		if err != nil {
			return err
		}
		c.SiteLimits = l
		return nil
	}},
	{env: "RELAY_LOG_FORMAT", flag: "log-format", def: "auto", usage: `log format: "text", "json", or "auto" (text on a terminal, JSON otherwise)`, apply: func(c *Config, v string) error {
		switch strings.ToLower(v) {
		case "auto", "text", "json":
			c.LogFormat = strings.ToLower(v)
			return nil
		}
		return fmt.Errorf(`%q is not a log format; use "text", "json" or "auto"`, v)
	}},
	{env: "RELAY_LOG_LEVEL", flag: "log-level", def: "info", usage: `minimum log level: "debug", "info", "warn" or "error"`, apply: func(c *Config, v string) error {
		var l slog.Level
		if err := l.UnmarshalText([]byte(v)); err != nil {
			return fmt.Errorf(`%q is not a log level; use "debug", "info", "warn" or "error"`, v)
		}
		c.LogLevel = l
		return nil
	}},
	{env: "RELAY_CONTROL_PLANE_PUBLIC", flag: "control-plane-public", usage: "grant-signing public key (base64url Ed25519) handed to devices at pairing; needs a grant authority (RELAY_GRANT_AUTHORITY_URL or RELAY_GRANT_SIGNER_URL); with RELAY_GRANT_KEY_FILE it is derived from the key, and if set must match it", apply: func(c *Config, v string) error {
		if v == "" {
			c.ControlPlanePublic = ""
			return nil
		}
		if b, err := base64.RawURLEncoding.DecodeString(v); err != nil || len(b) != ed25519.PublicKeySize {
			return fmt.Errorf("%q is not a base64url Ed25519 public key (43 characters, no padding); use the control plane's publicKey exactly as it prints it", v)
		}
		c.ControlPlanePublic = v
		return nil
	}},
	{env: "RELAY_GRANT_AUTHORITY_URL", flag: "grant-authority-url", usage: "remote grant authority (your control plane): the relay POSTs <url>/author-grant per claimed job and <url>/satisfiable per enqueue; needs RELAY_CONTROL_PLANE_PUBLIC", apply: func(c *Config, v string) error {
		u, err := grantURL(v)
		if err != nil {
			return err
		}
		c.GrantAuthorityURL = u
		return nil
	}},
	{env: "RELAY_GRANT_SIGNER_URL", flag: "grant-signer-url", usage: "remote grant signer (KMS/HSM front): the built-in engine decides and POSTs each grant statement here to be signed; needs RELAY_CONTROL_PLANE_PUBLIC", apply: func(c *Config, v string) error {
		u, err := grantURL(v)
		if err != nil {
			return err
		}
		c.GrantSignerURL = u
		return nil
	}},
	{env: "RELAY_GRANT_AUTHORITY_TOKEN", flag: "grant-authority-token", usage: "bearer token sent to the remote grant authority or signer (prefer the variable: flags show up in ps)", apply: func(c *Config, v string) error {
		if strings.ContainsFunc(v, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			return errors.New("contains whitespace or control characters, which cannot travel in an Authorization header")
		}
		c.GrantAuthorityToken = v
		return nil
	}},
	{env: "RELAY_GRANT_TIMEOUT", flag: "grant-timeout", def: relay.DefaultGrantTimeout.String(), usage: "longest one grant authority or signer call may take; a slower one is a transient decline at claim (the job is offered to that device again after RELAY_GRANT_RETRY_AFTER) and a retryable 503 at enqueue", apply: func(c *Config, v string) error {
		d, err := boundedDuration(v, "grant timeout", minGrantTimeout, maxGrantTimeout, "2s")
		if err == nil {
			c.GrantTimeout = d
		}
		return err
	}},
	{env: "RELAY_GRANT_BUDGET", flag: "grant-budget", def: relay.DefaultGrantBudget.String(), usage: "longest all grant calls of one claim may take together; jobs left when it is spent are transient declines, so a claim always answers", apply: func(c *Config, v string) error {
		d, err := boundedDuration(v, "grant budget", minGrantTimeout, maxGrantTimeout, "5s (keep it well under the daemon's 30 s request timeout)")
		if err == nil {
			c.GrantBudget = d
		}
		return err
	}},
	{env: "RELAY_GRANT_RETRY_AFTER", flag: "grant-retry-after", def: relay.DefaultGrantRetryAfter.String(), usage: "how long a transiently declined job (paused consent, authority error or timeout, spent budget) stays away from the device it was declined for; other devices may claim it meanwhile", apply: func(c *Config, v string) error {
		d, err := boundedDuration(v, "grant retry-after", minGrantRetryAfter, maxGrantRetryAfter, "30s (the reference's)")
		if err == nil {
			c.GrantRetryAfter = d
		}
		return err
	}},
	{env: "RELAY_FETCH_WAIT", flag: "fetch-wait", def: relay.DefaultFetchWait.String(), usage: "how long a daemon's fetch of a payload its site has not sealed yet waits for the seal before answering not-ready (0s: at once, as the reference); the daemon asks again after 50 ms to 1 s, so a wait answers it the moment the site seals and saves its repeated fetches", apply: func(c *Config, v string) error {
		d, err := boundedDuration(v, "fetch wait", 0, maxFetchWait, "2s, or 0s to answer at once")
		if err == nil {
			c.FetchWait = d
		}
		return err
	}},
}

const (
	// DefaultPairingsMax: twice the reference's 500 live codes. With the
	// per-network bound (20) and the reserve (a fifth), filling it takes
	// 40 networks and then 200 more fresh ones, where 500 took 100
	// addresses of one /24. A code is at most about 83 KB of Valkey memory
	// (a 64 KiB start; 1.4 KB for a typical one, TestPairingMemoryPerCode),
	// so the worst case is about 83 MB.
	DefaultPairingsMax = 1000

	minTokenLen = 16
	// A lease is renewed by each heartbeat (about every 10 s); under a
	// second a busy daemon loses its jobs, and past an hour a crashed one
	// holds them that long.
	minLeaseMs, maxLeaseMs = 1000, 3_600_000
	minSweepInterval       = 50 * time.Millisecond
	// The planes settle what they touch, so the sweeper is a backstop; a
	// minute is the longest a lapsed lease waits for it.
	maxSweepInterval     = time.Minute
	maxAdminBody         = 1 << 30
	maxBodyBytesInFlight = 64 << 30
	// A store call takes about a millisecond; below 10 ms a busy but
	// healthy Valkey would be refused. Above a minute a frozen one holds
	// requests longer than any client waits.
	minStoreTimeout = 10 * time.Millisecond
	// DefaultDaemonHeartbeatBatch: a daemon heartbeats every ~10 s and
	// waits seconds for the answer, so a tenth of a second is invisible to
	// it; see test/bench/results/2026-12-01-idle-devices-batched.md for what it saves.
	DefaultDaemonHeartbeatBatch = 100 * time.Millisecond
	maxDaemonHeartbeatBatch     = time.Second
	// DefaultDaemonIdleHeartbeatBatch: an idle daemon's next tick is
	// about 10 s away, and its answer says only that nothing changed; a
	// second fills a replica's per-shard calls (test/bench/results/2026-12-03-idle-ticks-cluster-window.md, "Idle ticks on a
	// cluster: a longer window for idle heartbeats").
	DefaultDaemonIdleHeartbeatBatch = time.Second
	maxDaemonIdleHeartbeatBatch     = 2 * time.Second
	maxDeviceRetention              = 3650 * 24 * time.Hour
	maxStoreTimeout                 = time.Minute
	// A grant is one policy read and one signature; 10 ms is the least a
	// remote one on a LAN needs, and a claim held over 30 s is abandoned
	// by the daemon.
	minGrantTimeout = 10 * time.Millisecond
	maxGrantTimeout = 30 * time.Second
	// A transient decline shorter than a second would have the device
	// claim the job straight back; longer than an hour strands it.
	minGrantRetryAfter = time.Second
	maxGrantRetryAfter = time.Hour
	// A held fetch keeps its connection and delays a drain; the daemon
	// gives a request 30 s.
	maxFetchWait = 10 * time.Second
)

var (
	// Same patterns as the reference's heartbeat (wire §14.4).
	updateOfferRE = regexp.MustCompile(`^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$`)
	versionRE     = regexp.MustCompile(`^(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$`)
)

// rawValue is a flag.Value that remembers whether it was given at all, so an
// explicit flag can beat the environment even when it equals the default.
type rawValue struct {
	s      string
	set    bool
	isBool bool
}

func (r *rawValue) String() string   { return r.s }
func (r *rawValue) IsBoolFlag() bool { return r.isBool }
func (r *rawValue) Set(s string) error {
	r.s, r.set = s, true
	return nil
}

// Load parses args (without the program name) and the environment seen
// through getenv, and validates the result. On -h it writes usage to out and
// returns ErrHelp. Otherwise a non-nil error is Problems or a flag error.
func Load(args []string, getenv func(string) string, out io.Writer) (Config, error) {
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	fs.SetOutput(out)
	raws := make([]*rawValue, len(options))
	for i, o := range options {
		raws[i] = &rawValue{isBool: o.isBool}
		fs.Var(raws[i], o.flag, o.usage)
	}
	fs.Usage = func() { Usage(out) }
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q; options are flags (-listen :8080) or RELAY_* variables, see -h", fs.Arg(0))
	}

	var c Config
	var problems Problems
	for i, o := range options {
		v, source := o.def, "default of "+o.env
		if raws[i].set {
			v, source = raws[i].s, "-"+o.flag
		} else if e := getenv(o.env); e != "" {
			v, source = e, o.env
		} else if o.alias != "" && getenv(o.alias) != "" {
			v, source = getenv(o.alias), o.alias
			if o.fromAlias != nil {
				v = o.fromAlias(strings.TrimSpace(v))
			}
		}
		if err := o.apply(&c, strings.TrimSpace(v)); err != nil {
			problems = append(problems, source+": "+err.Error())
		}
	}
	if len(problems) == 0 {
		problems = append(problems, grantProblems(c)...)
	}
	if len(problems) == 0 && c.AdminListen != "" && c.AdminListen == c.Listen && !strings.HasSuffix(c.Listen, ":0") {
		problems = append(problems, fmt.Sprintf("RELAY_LISTEN and RELAY_ADMIN_LISTEN are both %q; give the admin listener its own address (default 127.0.0.1:8081) or turn it off", c.Listen))
	}
	if len(problems) == 0 {
		problems = append(problems, c.crossChecks()...)
	}
	if len(problems) > 0 {
		return Config{}, problems
	}
	return c, nil
}

// ClientBodyShare is the body bytes one client may hold: BodyBytesPerClient,
// or by default a quarter of the budget but at least one largest body.
func (c Config) ClientBodyShare() int64 {
	if c.BodyBytesPerClient > 0 {
		return c.BodyBytesPerClient
	}
	need := max(PlanesMaxBody, c.AdminMaxBody) + 1
	return min(c.BodyBytesInFlight, max(c.BodyBytesInFlight/httpserve.DefaultClientShareDivisor, need))
}

// PlanesMaxBody is the planes' largest body (relay.MaxBodyBytes; a test
// checks they agree), which the body budget must be able to hold.
const PlanesMaxBody = 13 << 20

// crossChecks validates options against each other.
func (c Config) crossChecks() Problems {
	var problems Problems
	if need := max(PlanesMaxBody, c.AdminMaxBody) + 1; c.BodyBytesInFlight < need {
		problems = append(problems, fmt.Sprintf("RELAY_BODY_BYTES_IN_FLIGHT is %d, smaller than one largest request body (%d bytes: the planes' 13 MiB or RELAY_ADMIN_MAX_BODY, whichever is larger); raise it to at least that, e.g. 134217728 (128 MiB)", c.BodyBytesInFlight, need))
	}
	if c.MaxConnsPerAddress > c.MaxConns {
		problems = append(problems, fmt.Sprintf("RELAY_MAX_CONNS_PER_ADDRESS (%d) is more than RELAY_MAX_CONNS (%d); lower it, or 0 for a quarter of RELAY_MAX_CONNS", c.MaxConnsPerAddress, c.MaxConns))
	}
	if need := max(PlanesMaxBody, c.AdminMaxBody) + 1; c.BodyBytesPerClient != 0 && (c.BodyBytesPerClient < need || c.BodyBytesPerClient > c.BodyBytesInFlight) {
		problems = append(problems, fmt.Sprintf("RELAY_BODY_BYTES_PER_CLIENT is %d; it must hold one largest request body (%d bytes) and be at most RELAY_BODY_BYTES_IN_FLIGHT (%d); set it in that range, or 0 for a quarter of the budget", c.BodyBytesPerClient, need, c.BodyBytesInFlight))
	}
	if c.DaemonHeartbeatBatch > 0 && 2*c.DaemonHeartbeatBatch > c.StoreTimeout {
		problems = append(problems, fmt.Sprintf("RELAY_DAEMON_HEARTBEAT_BATCH (%v) is more than half of RELAY_STORE_TIMEOUT (%v): a batched heartbeat would spend its timeout waiting; lower the batch window or raise the store timeout", c.DaemonHeartbeatBatch, c.StoreTimeout))
	}
	switch {
	case (c.TLSCertFile == "") != (c.TLSKeyFile == ""):
		problems = append(problems, "RELAY_TLS_CERT_FILE and RELAY_TLS_KEY_FILE must be set together (the certificate and its private key) or both left unset for plaintext")
	case c.TLSCertFile != "":
		if _, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile); err != nil {
			problems = append(problems, fmt.Sprintf("RELAY_TLS_CERT_FILE %q and RELAY_TLS_KEY_FILE %q do not load as a certificate and its key (%v); point them at PEM files of one pair", c.TLSCertFile, c.TLSKeyFile, err))
		}
	}
	return problems
}

// checkReadable accepts "" (unset) or a regular file this process can
// read: it opens the file and reads a byte, so a file the relay's user may
// not read is refused now, with the fix, rather than when it is first used.
func checkReadable(v, kind string) error {
	if v == "" {
		return nil
	}
	fi, err := os.Stat(v)
	if err != nil {
		return fmt.Errorf("cannot read %q (%v); point it at an existing %s file or unset it", v, unwrapPathError(err), kind)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%q is not a regular file; point it at a %s file", v, kind)
	}
	f, err := os.Open(v)
	if err == nil {
		_, err = f.Read(make([]byte, 1))
		f.Close()
		if errors.Is(err, io.EOF) {
			err = nil // empty: its parser says what is wrong with it
		}
	}
	if err != nil {
		return fmt.Errorf("cannot read %q (%v); make it readable by the relay's user (uid %d), e.g. chmod a+r, or unset it", v, unwrapPathError(err), os.Getuid())
	}
	return nil
}

// EnvVars lists every environment variable Load reads (aliases included),
// for deployment files and the tests that check them.
func EnvVars() []string {
	var out []string
	for _, o := range options {
		out = append(out, o.env)
		if o.alias != "" {
			out = append(out, o.alias)
		}
	}
	return out
}

// subcommandUsage heads relay -h: every subcommand, each with its own -h.
const subcommandUsage = `Usage:
  relay [flags]                                    serve (the flags and variables below)
  relay version                                    the version, VCS revision and Go version (also --version)
  relay projection push [--merge] FILE|get|status  a running relay's projection, over its admin listener
  relay policy push [--merge] FILE|get|status      the same for the grant policy
  relay pairing show|approve|deny|unpair ...       approve a device by the code it shows
  relay migrate                                    move a namespace to this version's key layout
  relay healthcheck                                probe this relay's admin /healthz (exit 0 when up)
Each subcommand takes -h for its own options.

`

// Usage writes the option list: flag, variable, default and meaning.
func Usage(out io.Writer) {
	fmt.Fprint(out, subcommandUsage)
	fmt.Fprintf(out, "Every flag has a RELAY_* variable; a flag wins over its variable, and an empty variable counts as unset.\n\n")
	for _, o := range options {
		def := o.def
		if def == "" {
			def = "unset"
		}
		fmt.Fprintf(out, "  -%s, %s (default: %s)\n      %s\n", o.flag, o.env, def, o.usage)
		if o.alias != "" {
			fmt.Fprintf(out, "      Also read from %s when %s is unset.\n", o.alias, o.env)
		}
	}
}

// msToDuration reads RELAY_SWEEP_MS (whole milliseconds, 0 = off) as a
// duration string; anything else passes through to fail validation.
// boundedDuration reads v as a Go duration from lo to hi; otherwise it
// says what to write, with example.
func boundedDuration(v, what string, lo, hi time.Duration, example string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d < lo || d > hi {
		return 0, fmt.Errorf("%q is not a usable %s; write a Go duration from %v to %v, e.g. %s", v, what, lo, hi, example)
	}
	return d, nil
}

func msToDuration(v string) string {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
		return strconv.FormatInt(n, 10) + "ms"
	}
	return v
}

func checkAddr(v string) error {
	_, port, err := net.SplitHostPort(v)
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > math.MaxUint16 {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}

func parseBool(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off", "":
		return false, nil
	}
	return false, fmt.Errorf("%q is not a boolean; use true or false", v)
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// redactURL hides a password so a URL can be logged or echoed in an error.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		if i := strings.LastIndex(s, "@"); i >= 0 {
			return "***" + s[i:]
		}
		return s
	}
	return u.Redacted()
}

// DefaultSiteLimit is every site's limit unless RELAY_SITE_LIMITS says
// otherwise (store.DefaultSiteLimit, which says why these figures).
var DefaultSiteLimit = store.DefaultSiteLimit

// ParseSiteLimits reads RELAY_SITE_LIMITS: entries "site=field:value,..."
// separated by ';'. The site "*" changes the default; a named site starts
// from the default (after "*") and changes the fields it names. Fields:
// jobs, bytes (a count with an optional KiB/MiB/GiB suffix), rate (per
// second, may be fractional), burst; "off" (or 0) lifts that limit. A site
// id is everything before the entry's last '=', trimmed, so it cannot hold
// ';' or start or end with spaces.
func ParseSiteLimits(v string) (store.SiteLimits, error) {
	out := store.SiteLimits{Default: DefaultSiteLimit}
	type entry struct {
		site   string
		fields string
	}
	var entries []entry
	for _, part := range strings.Split(v, ";") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		i := strings.LastIndexByte(part, '=')
		if i < 0 {
			return out, fmt.Errorf("entry %q has no '='; write site=jobs:N,bytes:SIZE,rate:R,burst:B (use * for every site)", strings.TrimSpace(part))
		}
		site := strings.TrimSpace(part[:i])
		if site == "" {
			return out, fmt.Errorf("entry %q names no site; write the site id before '=' (or * for every site)", strings.TrimSpace(part))
		}
		entries = append(entries, entry{site, part[i+1:]})
	}
	apply := func(l *store.SiteLimit, fields string) error {
		for _, f := range strings.Split(fields, ",") {
			f = strings.TrimSpace(f)
			if f == "" {
				continue
			}
			name, val, ok := strings.Cut(f, ":")
			name, val = strings.TrimSpace(name), strings.TrimSpace(val)
			if !ok {
				return fmt.Errorf("%q is not field:value; use jobs:N, bytes:SIZE, rate:R or burst:B", f)
			}
			off := strings.EqualFold(val, "off")
			switch name {
			case "jobs", "burst":
				n := int64(0)
				if !off {
					var err error
					if n, err = strconv.ParseInt(val, 10, 64); err != nil || n < 0 {
						return fmt.Errorf("%s:%s is not a whole number; use e.g. %s:100, or %s:off", name, val, name, name)
					}
				}
				if name == "jobs" {
					l.Jobs = n
				} else {
					l.Burst = n
				}
			case "bytes":
				n := int64(0)
				if !off {
					var err error
					if n, err = parseSize(val); err != nil {
						return fmt.Errorf("bytes:%s is not a size; use e.g. bytes:512MiB or bytes:1GiB (KiB, MiB, GiB, or a plain byte count), or bytes:off", val)
					}
				}
				l.Bytes = n
			case "rate":
				r := 0.0
				if !off {
					var err error
					if r, err = strconv.ParseFloat(val, 64); err != nil || r < 0 || math.IsInf(r, 0) || math.IsNaN(r) {
						return fmt.Errorf("rate:%s is not a rate; use enqueues per second, e.g. rate:50 or rate:0.5, or rate:off", val)
					}
				}
				l.Rate = r
			default:
				return fmt.Errorf("unknown field %q; use jobs, bytes, rate or burst", name)
			}
		}
		if l.Rate > 0 && l.Burst < 1 {
			return errors.New("a rate needs a burst of at least 1 (how many enqueues may come at once); add burst:N")
		}
		return nil
	}
	for _, e := range entries {
		if e.site == "*" {
			if err := apply(&out.Default, e.fields); err != nil {
				return out, fmt.Errorf("*: %w", err)
			}
		}
	}
	for _, e := range entries {
		if e.site == "*" {
			continue
		}
		if out.Sites == nil {
			out.Sites = map[string]store.SiteLimit{}
		}
		l, seen := out.Sites[e.site]
		if !seen {
			l = out.Default
		}
		if err := apply(&l, e.fields); err != nil {
			return out, fmt.Errorf("site %q: %w", e.site, err)
		}
		out.Sites[e.site] = l
	}
	return out, nil
}

func parseSize(v string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(v, u.suffix) {
			v, mult = strings.TrimSpace(strings.TrimSuffix(v, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, errors.New("not a size")
	}
	return n * mult, nil
}

// parseDays is a Go duration, or a whole number of days written "<n>d".
func parseDays(v string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(v, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 0 || days > 1<<20 {
			return 0, fmt.Errorf("%q: not a whole number of days", v)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	return time.ParseDuration(v)
}
