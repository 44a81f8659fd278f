package peers

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/byollm/relay-go/test/relaytest"
)

// grantScenarios are the titles grants.test.mjs must report as passed.
var grantScenarios = []string{
	"G1 a device-code-paired Runner pins the control-plane key; a teammate's job is granted, verified by the daemon and run",
	"G2 the owner's own job still runs",
	"G3 a non-member's job is declined permanently and never offered to that device again",
	"G4 a paused consent is declined transiently and runs once resumed",
	"G5 a grant aged past 120 s is refused by the daemon",
	"G6 a replayed grant is refused by the daemon",
	"G7 the authority stopped mid-run: claims keep answering, no job is lost, jobs run once it is back",
}

// TestGrantPeers runs the grant scenarios: three replicas in remote-authority
// mode (RELAY_GRANT_AUTHORITY_URL + RELAY_CONTROL_PLANE_PUBLIC) in front of a
// small authority built on the published @byollm/control-plane
// (lib/authority.mjs), the real byollm daemon and the real cloud lane, every
// request through the random-spreading proxy.
func TestGrantPeers(t *testing.T) {
	t.Parallel() // its own namespace, replicas, ports, proxy and daemon homes
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("getwd: %v", err)
	}
	if os.Getenv("PEERS_RELAY") == "reference" {
		// The reference host has no authority wiring; these scenarios are
		// about this relay's.
		t.Skip("PEERS_RELAY=reference: the grant scenarios run against the Go relay only")
	}
	relaytest.NodeModules(t, dir, filepath.Join("node_modules", ".package-lock.json"))

	auth := startAuthority(t, dir)
	t.Logf("authority at %s (admin %s), key %s", auth.URL, auth.Admin, auth.PublicKey)
	runGrantSuite(t, dir, "vitest.grants.config.mjs", grantScenarios, map[string]string{
		"RELAY_GRANT_AUTHORITY_URL":  auth.URL,
		"RELAY_CONTROL_PLANE_PUBLIC": auth.PublicKey,
		"RELAY_GRANT_TIMEOUT":        "1s",
	}, []string{
		"PEERS_AUTHORITY_ADMIN=" + auth.Admin,
		"PEERS_CONTROL_PLANE_PUBLIC=" + auth.PublicKey,
	})
}

// grantRetryAfter is the replicas' RELAY_GRANT_RETRY_AFTER: the scenarios
// of a transient decline (G4, B4) wait it out, and the reference's 30 s
// would be most of the suite's time; they check the job comes back after
// it and not before, whatever its length.
const grantRetryAfter = 5 * time.Second

// runGrantSuite builds the relay, starts three replicas on a fresh
// namespace with relayEnv, puts the random-spreading proxy in front, runs
// the vitest config with suiteEnv added, and requires every title passed.
func runGrantSuite(t *testing.T, dir, config string, titles []string, relayEnv map[string]string, suiteEnv []string) {
	t.Helper()
	tmp := t.TempDir()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	valkeyURL := relaytest.ValkeyURL()
	env := map[string]string{"RELAY_VALKEY_URL": valkeyURL, "RELAY_NAMESPACE": relaytest.Namespace(t, relaytest.Open(t, valkeyURL)),
		"RELAY_GRANT_RETRY_AFTER": grantRetryAfter.String()}
	for k, v := range relayEnv {
		env[k] = v
	}
	replicas := startReplicas(t, env)
	px := newProxy(t, replicas, logger)
	origin := px.lb.URL()
	control := serve(t, px.controlHandler())
	admins := make([]string, len(replicas))
	for i, r := range replicas {
		admins[i] = r.AdminURL()
	}
	report := filepath.Join(tmp, "report.json")
	figures := filepath.Join(tmp, "figures.jsonl")

	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	defer cancel()
	suite := exec.CommandContext(ctx, "node", filepath.Join("node_modules", "vitest", "vitest.mjs"), "run",
		"--config", config, "--reporter=default", "--reporter=json", "--outputFile.json="+report)
	suite.Dir = dir
	suite.Env = append(os.Environ(),
		"PEERS_ORIGIN="+origin,
		"PEERS_ADMINS="+strings.Join(admins, ","),
		"PEERS_ADMIN_TOKEN="+adminToken,
		"PEERS_CONTROL="+control,
		"PEERS_LEASE_MS="+strconv.Itoa(leaseMs),
		"PEERS_REPLICAS="+strconv.Itoa(len(replicas)),
		"PEERS_FIGURES="+figures,
		"PEERS_TARGET=go",
		"PEERS_GRANT_RETRY_AFTER_MS="+strconv.FormatInt(grantRetryAfter.Milliseconds(), 10),
		"NO_COLOR=1",
	)
	suite.Env = append(suite.Env, suiteEnv...)
	suite.Stdout = &testWriter{t: t, prefix: "suite: "}
	suite.Stderr = &testWriter{t: t, prefix: "suite: "}
	suite.WaitDelay = 10 * time.Second
	started := time.Now()
	runErr := suite.Run()
	t.Logf("suite finished in %s (exit: %v)", time.Since(started).Round(time.Millisecond), runErr)
	logFigures(t, figures)

	results, err := readReport(report)
	if err != nil {
		t.Fatalf("read vitest report: %v (suite exit: %v)", err, runErr)
	}
	for _, title := range titles {
		res, ok := results[title]
		switch {
		case !ok:
			t.Errorf("%s: not reported by the suite", title)
		case res.Status != "passed":
			t.Errorf("%s: %s\n%s", title, res.Status, strings.Join(res.FailureMessages, "\n"))
		default:
			t.Logf("%s: passed in %.1fs", title, res.Duration/1000)
		}
	}
	// One test file serves several modes; what a mode does not run is
	// reported skipped.
	ran := 0
	for _, res := range results {
		if res.Status != "skipped" && res.Status != "pending" {
			ran++
		}
	}
	if ran != len(titles) {
		t.Errorf("the suite ran %d tests, want %d", ran, len(titles))
	}
	if runErr != nil && !t.Failed() {
		t.Errorf("suite exited with %v although every scenario passed", runErr)
	}
}

type authority struct {
	URL       string `json:"url"`
	Admin     string `json:"admin"`
	PublicKey string `json:"publicKey"`
}

// startAuthority runs lib/authority.mjs and reads its one line of
// addresses and key.
func startAuthority(t *testing.T, dir string) authority {
	t.Helper()
	p := relaytest.NewProcess(t, "authority", "node", filepath.Join("lib", "authority.mjs"))
	p.Dir, p.Env = dir, os.Environ()
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	l, err := p.FirstLine(30 * time.Second)
	if err != nil {
		t.Fatalf("the authority did not start: %v", err)
	}
	var a authority
	if json.Unmarshal([]byte(l), &a) != nil || a.URL == "" || a.PublicKey == "" {
		t.Fatalf("the authority did not announce itself: %q", l)
	}
	return a
}
