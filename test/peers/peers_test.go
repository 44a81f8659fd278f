// Package peers runs the real peers against several relay replicas over real
// HTTP: the published byollm daemon (device-code pairing, Runner) and the
// published @byollm/server cloud lane, driven by the vitest suite in this
// directory. This file is the entry point `go test ./...` reaches. It builds
// the relay, starts three replicas on one Valkey namespace, puts a balancer
// in front that sends the requests round robin over the replicas (the real
// clients take one origin), runs the suite and asserts every scenario passed.
//
// PEERS_RELAY=reference runs the same suite against one replica of the
// reference relay (test/reference/server.mjs). The reference keeps state in
// memory, so it cannot share state across replicas and the replica-kill
// scenario is not registered there.
package peers

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/byollm/relay-go/test/relaytest"
	"github.com/valkey-io/valkey-go"
)

const (
	replicaCount = 3
	// leaseMs is short so the lease-expiry scenario finishes in seconds; the
	// daemons heartbeat every 400-600 ms, well inside it.
	leaseMs    = 4000
	adminToken = "peers-admin-token"
	// suiteTimeout bounds the whole JS run, pairing included.
	suiteTimeout = 8 * time.Minute
)

// scenarios are the test titles the suite must report as passed. A title
// missing from the report fails the run as surely as a failed one.
var scenarios = []struct {
	title        string
	needsReplica bool // needs more than one replica sharing state
}{
	{"S1 round trip of many jobs through CloudLane and a device-code-paired Runner", false},
	{"S2 cancel mid-flight reaches the running daemon", false},
	{"S3 lease expiry requeues to a second daemon", false},
	{"S4 two daemons competing: no job granted twice", false},
	{"S5 a refused release is not re-offered to that runner", false},
	{"S6 a replayed result is answered as a duplicate", false},
	{"S7 bad signatures are refused", false},
	{"S8 a replica killed with SIGKILL mid-run: every job completes exactly once", true},
	// Approval by user code through the admin API (Go relay only: the
	// reference leaves it to an in-process control plane).
	{"P1 approved knowing only the user code: started on one replica, shown on a second, approved on a third, then runs a job", true},
	{"P2 an expired code cannot be shown or approved, and the daemon gives up", true},
	{"P3 a denied code: the daemon's next poll is expired and it gives up cleanly", true},
	{"P4 a code approved twice: the second approval is a conflict", true},
	{"P5 an approval racing the code's expiry is all or nothing", true},
	{"P6 lower-case and padded codes are the same code", true},
	{"P7 a code minted on a replica killed before approval is approved through the survivors", true},
}

func TestMain(m *testing.M) { relaytest.Main(m) }

func TestPeers(t *testing.T) {
	t.Parallel() // its own namespace, replicas, ports, proxy and daemon homes
	runPeers(t, relaytest.ValkeyURL(), nil)
}

// clusterScenarios are what TestPeersCluster runs: a round trip, two
// daemons competing and a replica killed, which between them exercise every
// store operation the daemon and the cloud lane use, in a fraction of the
// whole suite's time.
var clusterScenarios = []string{"S1", "S4", "S8"}

// TestPeersCluster runs part of the suite with the three replicas on the
// Valkey Cluster at RELAY_TEST_VALKEY_CLUSTER_URL (.ci/run starts one).
func TestPeersCluster(t *testing.T) {
	t.Parallel() // its own namespace, replicas, ports, proxy and daemon homes
	u := relaytest.ClusterURL()
	if u == "" {
		t.Skip("RELAY_TEST_VALKEY_CLUSTER_URL is unset: no cluster to run the peers on (start one with .ci/cluster start)")
	}
	if os.Getenv("PEERS_RELAY") == "reference" {
		t.Skip("PEERS_RELAY=reference: the reference has no store to put on a cluster")
	}
	runPeers(t, u, clusterScenarios)
}

// runPeers runs the suite against replicas on valkeyURL; only, if not nil,
// names the scenarios to run (by their S/P number) and the rest are skipped.
func runPeers(t *testing.T, valkeyURL string, only []string) {
	wanted := func(title string) bool {
		if only == nil {
			return true
		}
		for _, id := range only {
			if strings.HasPrefix(title, id+" ") {
				return true
			}
		}
		return false
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("getwd: %v", err)
	}
	root := relaytest.ModuleRoot()
	tmp := t.TempDir()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))

	relaytest.NodeModules(t, dir, filepath.Join("node_modules", ".package-lock.json"))

	target := os.Getenv("PEERS_RELAY")
	if target == "" {
		target = "go"
	}

	var (
		replicas  []*relaytest.Relay
		namespace string
	)
	switch target {
	case "go":
		namespace = relaytest.Namespace(t, relaytest.Open(t, valkeyURL))
		replicas = startReplicas(t, map[string]string{"RELAY_VALKEY_URL": valkeyURL, "RELAY_NAMESPACE": namespace})
	case "reference":
		refDir := filepath.Join(root, "test", "reference")
		relaytest.NodeModules(t, refDir, filepath.Join("node_modules", ".package-lock.json"))
		replicas = append(replicas, relaytest.StartRelay(t, relaytest.RelayConfig{
			Name: "replica-0", Bin: "node", Args: []string{filepath.Join(refDir, "server.mjs")}, Env: replicaEnv(nil), Token: adminToken,
		}))
	default:
		t.Fatalf("PEERS_RELAY=%q: want go or reference", target)
	}

	px := newProxy(t, replicas, logger)
	if target == "go" {
		px.expire = codeExpirer(t, valkeyURL, namespace)
	}
	origin := px.lb.URL()
	control := serve(t, px.controlHandler())

	admins := make([]string, len(replicas))
	planes := make([]string, len(replicas))
	for i, r := range replicas {
		admins[i] = r.AdminURL()
		planes[i] = r.URL()
	}
	report := filepath.Join(tmp, "report.json")
	figures := filepath.Join(tmp, "figures.jsonl")

	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	defer cancel()
	args := []string{filepath.Join("node_modules", "vitest", "vitest.mjs"), "run",
		"--reporter=default", "--reporter=json", "--outputFile.json=" + report}
	if only != nil {
		args = append(args, "--testNamePattern", " ("+strings.Join(only, "|")+") ")
	}
	suite := exec.CommandContext(ctx, "node", args...)
	suite.Dir = dir
	suite.Env = append(os.Environ(),
		"PEERS_ORIGIN="+origin,
		"PEERS_ADMINS="+strings.Join(admins, ","),
		"PEERS_PLANES="+strings.Join(planes, ","),
		"PEERS_ADMIN_TOKEN="+adminToken,
		"PEERS_CONTROL="+control,
		"PEERS_LEASE_MS="+strconv.Itoa(leaseMs),
		"PEERS_REPLICAS="+strconv.Itoa(len(replicas)),
		"PEERS_FIGURES="+figures,
		"PEERS_TARGET="+target,
		"NO_COLOR=1",
	)
	suite.Stdout = &testWriter{t: t, prefix: "suite: "}
	suite.Stderr = &testWriter{t: t, prefix: "suite: "}
	suite.WaitDelay = 10 * time.Second
	started := time.Now()
	runErr := suite.Run()
	t.Logf("suite finished in %s (exit: %v)", time.Since(started).Round(time.Millisecond), runErr)

	logFigures(t, figures)
	stats, _ := json.Marshal(px.stats())
	t.Logf("proxy: %s", stats)
	if px.totalRequests() == 0 {
		t.Errorf("the proxy forwarded no requests: the suite never reached the relay")
	}
	if len(replicas) > 1 {
		for _, s := range px.stats().Replicas {
			if s.Requests == 0 {
				t.Errorf("replica %d received no requests: the proxy did not spread load", s.Index)
			}
		}
	}

	results, err := readReport(report)
	if err != nil {
		t.Fatalf("read vitest report: %v (suite exit: %v)", err, runErr)
	}
	for _, sc := range scenarios {
		if (sc.needsReplica && len(replicas) < 2) || !wanted(sc.title) {
			continue
		}
		res, ok := results[sc.title]
		switch {
		case !ok:
			t.Errorf("%s: not reported by the suite", sc.title)
		case res.Status != "passed":
			t.Errorf("%s: %s\n%s", sc.title, res.Status, strings.Join(res.FailureMessages, "\n"))
		default:
			t.Logf("%s: passed in %.1fs", sc.title, res.Duration/1000)
		}
	}
	for title, res := range results {
		if only != nil && (res.Status == "skipped" || res.Status == "pending") {
			continue // filtered out by --testNamePattern
		}
		if res.Status != "passed" && !isScenario(title) {
			t.Errorf("%s: %s\n%s", title, res.Status, strings.Join(res.FailureMessages, "\n"))
		}
	}
	if runErr != nil && !t.Failed() {
		t.Errorf("suite exited with %v although every scenario passed", runErr)
	}
}

func isScenario(title string) bool {
	for _, sc := range scenarios {
		if sc.title == title {
			return true
		}
	}
	return false
}

// ---------------------------------------------------------------------------
// node_modules

// ---------------------------------------------------------------------------
// Replicas

// replicaEnv is what every replica runs with, extra added.
func replicaEnv(extra map[string]string) []string {
	env := []string{
		"RELAY_LEASE_MS=" + strconv.Itoa(leaseMs),
		"RELAY_VERIFICATION_URL=http://127.0.0.1/verify",
	}
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

// startReplicas starts replicaCount relay replicas with extra in their
// environment and waits for their ready lines.
func startReplicas(t *testing.T, extra map[string]string) []*relaytest.Relay {
	t.Helper()
	var out []*relaytest.Relay
	for i := range replicaCount {
		out = append(out, relaytest.StartRelay(t, relaytest.RelayConfig{
			Name: fmt.Sprintf("replica-%d", i), Env: replicaEnv(extra), Token: adminToken,
		}))
	}
	return out
}

// ---------------------------------------------------------------------------
// The proxy

// proxy is the balancer the real clients take as their one origin
// (relaytest.Balancer: round robin over the replicas in rotation, no retry:
// a POST that fails mid-flight is the client's to retry, exactly as behind
// a real load balancer; its own failures carry X-Balancer-Error, so the
// suite can tell them from the relay's), plus the suite's levers.
type proxy struct {
	lb       *relaytest.Balancer
	replicas []*relaytest.Relay
	logger   *slog.Logger
	killMu   sync.Mutex
	// expire moves a pending code's expiry (go target only; nil otherwise).
	expire func(ctx context.Context, userCode string, inMs int64) (int64, error)
}

func newProxy(t *testing.T, replicas []*relaytest.Relay, logger *slog.Logger) *proxy {
	return &proxy{
		lb:       relaytest.NewBalancer(t, relaytest.BalancerOptions{}, relaytest.Backends(replicas...)...),
		replicas: replicas,
		logger:   logger,
	}
}

type replicaStats struct {
	Index    int    `json:"index"`
	Addr     string `json:"addr"`
	Live     bool   `json:"live"`
	Requests int64  `json:"requests"`
	Inflight int64  `json:"inflight"`
	Failures int64  `json:"failures"`
}

type proxyStats struct {
	Replicas []replicaStats `json:"replicas"`
}

func statsOf(i int, r *relaytest.Relay, s relaytest.BackendStats) replicaStats {
	return replicaStats{Index: i, Addr: r.Listen, Live: s.Live, Requests: s.Requests, Inflight: s.Inflight, Failures: s.Failures}
}

func (p *proxy) stats() proxyStats {
	var s proxyStats
	for i, b := range p.lb.Stats() {
		s.Replicas = append(s.Replicas, statsOf(i, p.replicas[i], b))
	}
	return s
}

func (p *proxy) totalRequests() int64 {
	var n int64
	for _, b := range p.lb.Stats() {
		n += b.Requests
	}
	return n
}

// controlHandler serves the suite's levers: GET /stats, and POST
// /kill?replica=N, which takes replica N out of rotation and SIGKILLs it. The
// order matters only for new requests: whatever was in flight to N at that
// moment fails with the process, as it would in production.
func (p *proxy) controlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, p.stats())
	})
	mux.HandleFunc("POST /kill", func(w http.ResponseWriter, req *http.Request) {
		index, err := strconv.Atoi(req.URL.Query().Get("replica"))
		if err != nil || index < 0 || index >= len(p.replicas) {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "replica must be an index"})
			return
		}
		p.killMu.Lock()
		defer p.killMu.Unlock()
		all := p.lb.Stats()
		alive := 0
		for _, s := range all {
			if s.Live {
				alive++
			}
		}
		if !all[index].Live || alive < 2 {
			writeJSON(w, http.StatusConflict, map[string]string{"error": "replica is dead or is the last one alive"})
			return
		}
		r := p.replicas[index]
		at := p.lb.SetLive(r.Name, false)
		inflight, requests := at.Inflight, at.Requests
		started := time.Now()
		pid := r.Pid()
		if _, err := r.Stop(syscall.SIGKILL, 5*time.Second); errors.Is(err, relaytest.ErrStillRunning) {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		p.logger.Info("proxy: replica killed", "replica", index, "inflight", inflight)
		writeJSON(w, http.StatusOK, map[string]any{
			"killed": index, "pid": pid,
			"inflightAtKill": inflight, "requestsAtKill": requests, "killMs": time.Since(started).Milliseconds(),
		})
	})
	mux.HandleFunc("POST /expire", func(w http.ResponseWriter, req *http.Request) {
		inMs, err := strconv.ParseInt(req.URL.Query().Get("inMs"), 10, 64)
		if p.expire == nil || err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "needs the go target and inMs"})
			return
		}
		at, err := p.expire(req.Context(), req.URL.Query().Get("userCode"), inMs)
		if err != nil {
			writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]int64{"expiresAt": at})
	})
	return mux
}

// expireScript rewrites one pending code's expiry, in the index every read
// checks (pc:x) and in the stored pairing whose expiresAt the planes compare
// too, to Valkey TIME + ARGV[2] ms. It reaches into the store's key layout
// (internal/store/doc.go) on purpose: it stands in for ten minutes passing,
// which no relay API should offer.
const expireScript = `
local dc = redis.call('HGET', KEYS[1], ARGV[1])
if not dc or not redis.call('ZSCORE', KEYS[2], dc) then return false end
local t = redis.call('TIME')
local at = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2]))
redis.call('ZADD', KEYS[2], 'XX', at, dc)
local raw = redis.call('HGET', KEYS[3], dc)
redis.call('HSET', KEYS[3], dc, (string.gsub(raw, '"expiresAt":%d+', '"expiresAt":' .. at)))
return at`

func codeExpirer(t *testing.T, valkeyURL, namespace string) func(context.Context, string, int64) (int64, error) {
	opt, err := valkey.ParseURL(valkeyURL)
	if err != nil {
		t.Fatalf("parse %s: %v", valkeyURL, err)
	}
	opt.DisableCache = true
	client, err := valkey.NewClient(opt)
	if err != nil {
		t.Fatalf("connect %s: %v", valkeyURL, err)
	}
	t.Cleanup(client.Close)
	script := valkey.NewLuaScript(expireScript)
	prefix := namespace + ":{" + namespace + "}:pc:"
	return func(ctx context.Context, userCode string, inMs int64) (int64, error) {
		at, err := script.Exec(ctx, client, []string{prefix + "u", prefix + "x", prefix + "d"},
			[]string{strings.ToUpper(strings.TrimSpace(userCode)), strconv.FormatInt(inMs, 10)}).AsInt64()
		if valkey.IsValkeyNil(err) {
			return 0, fmt.Errorf("no pending code %q", userCode)
		}
		return at, err
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("content-type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// serve runs h on a loopback port until the test ends and returns its origin.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return "http://" + l.Addr().String()
}

// ---------------------------------------------------------------------------
// Report and figures

type assertion struct {
	Title           string   `json:"title"`
	FullName        string   `json:"fullName"`
	Status          string   `json:"status"`
	Duration        float64  `json:"duration"`
	FailureMessages []string `json:"failureMessages"`
}

func readReport(path string) (map[string]assertion, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var report struct {
		TestResults []struct {
			Name             string      `json:"name"`
			Status           string      `json:"status"`
			Message          string      `json:"message"`
			AssertionResults []assertion `json:"assertionResults"`
		} `json:"testResults"`
	}
	if err := json.Unmarshal(data, &report); err != nil {
		return nil, fmt.Errorf("decode %s: %w", path, err)
	}
	out := map[string]assertion{}
	for _, file := range report.TestResults {
		if file.Status == "failed" && len(file.AssertionResults) == 0 {
			return nil, fmt.Errorf("%s failed before any test ran: %s", file.Name, file.Message)
		}
		for _, a := range file.AssertionResults {
			out[a.Title] = a
		}
	}
	if len(out) == 0 {
		return nil, errors.New("the report lists no tests")
	}
	return out, nil
}

func logFigures(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Logf("no figures: %v", err)
		return
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		t.Logf("figures: %s", scanner.Text())
	}
}

type testWriter struct {
	t      *testing.T
	prefix string
	mu     sync.Mutex
	buf    []byte
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			break
		}
		w.t.Log(w.prefix + string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	return len(p), nil
}

var _ io.Writer = (*testWriter)(nil)

// ---------------------------------------------------------------------------
// Valkey

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
