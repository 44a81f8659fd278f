// Package upgrade_test proves an upgrade under load: three replicas of the
// previous release share one Valkey behind a balancer while the load
// generator runs through it. When the two releases read the same key
// layout, each replica is drained (SIGTERM) and replaced on its port by
// this tree's relay, one at a time, so both versions serve the same store
// side by side. When this tree's layout is newer, the upgrade is the one
// the README gives operators: every old replica stops, `relay migrate`
// runs once their heartbeat records have expired, and the new replicas
// start, while clients retry through the gap. Either way the history of
// the run (test/chaos/history) must show nothing lost, nothing run twice,
// and no refusal a client cannot retry.
package upgrade_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/layout"
	"github.com/byollm/relay-go/internal/loadgen"
	"github.com/byollm/relay-go/test/chaos/history"
	"github.com/byollm/relay-go/test/relaytest"
)

// previousRelease is the commit of the release an upgrade starts from.
// Until a first release is tagged, main as it stood when issue 28 was
// filed.
var previousRelease = flag.String("upgrade.from", "43b8c31", "commit of the previous release, built from this repository's history")

func TestMain(m *testing.M) { relaytest.Main(m) }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// buildPrevious builds cmd/relay as it was at rev: the tree at that commit
// is exported (git archive, so the repository's worktree list and index
// are left alone) and built with the module cache and build cache this
// tree uses.
func buildPrevious(t *testing.T, rev string) string {
	t.Helper()
	root := relaytest.ModuleRoot()
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", rev+"^{commit}").CombinedOutput(); err != nil {
		t.Fatalf("commit %s is not in this clone's history (%v %s): the upgrade test builds the previous release from it; fetch the full history (git fetch --unshallow)", rev, err, out)
	}
	src := t.TempDir()
	export := exec.Command("sh", "-c", `git -C "$1" archive --format=tar "$2" | tar -x -C "$3"`, "export", root, rev, src)
	if out, err := export.CombinedOutput(); err != nil {
		t.Fatalf("export the tree of %s: %v\n%s", rev, err, out)
	}
	bin := filepath.Join(t.TempDir(), "relay-"+rev)
	// -trimpath: the temporary directory stays out of the build, so a
	// second run finds every package in the build cache.
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/relay")
	cmd.Dir = src
	cmd.Env = os.Environ()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the relay of %s: %v\n%s", rev, err, out)
	}
	return bin
}

const leaseMs = 5000

// TestUpgradeUnderLoad replaces every replica of the previous release with
// this tree's relay while the load generator runs. Within one layout, one
// at a time as a Deployment's rolling update (maxUnavailable 0) does:
// SIGTERM (readiness fails, the balancer stops sending, in-flight requests
// finish), then the new version on the same port, in rotation before the
// next one goes. Across layouts, all of them stop, `relay migrate` moves
// the data, and all of the new ones start.
func TestUpgradeUnderLoad(t *testing.T) {
	began := time.Now()
	oldBin := buildPrevious(t, *previousRelease)
	newBin := relaytest.RelayBinary(t)
	t.Logf("built the relay of %s and of this tree in %v", *previousRelease, time.Since(began).Round(time.Millisecond))

	vk := relaytest.StartServer(t)
	ns := "upgrade-" + randomHex(6)
	token := "upgrade-" + randomHex(12)
	env := []string{
		"RELAY_VALKEY_URL=" + vk.URL(),
		"RELAY_NAMESPACE=" + ns,
		"RELAY_ADMIN_TOKEN=" + token,
		fmt.Sprintf("RELAY_LEASE_MS=%d", leaseMs),
		// As the deploy files: readiness fails at once, requests are
		// still served while the balancer notices, then a bounded wait.
		"RELAY_DRAIN_PERIOD=1s",
		"RELAY_SHUTDOWN_TIMEOUT=5s",
		"RELAY_LOG_LEVEL=warn",
	}
	names := []string{"relay-1", "relay-2", "relay-3"}
	relays := make([]*relaytest.Relay, len(names))
	for i, name := range names {
		relays[i] = relaytest.NewRelay(t, relaytest.RelayConfig{Name: name + "-old", Bin: oldBin, Env: env})
		if err := relays[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	backends := relaytest.Backends(relays...)
	for i := range backends {
		backends[i].Name = names[i] // the backend keeps its name across versions
	}
	bal := relaytest.NewBalancer(t, relaytest.BalancerOptions{Gate: true}, backends...)
	for _, name := range names {
		bal.WaitReady(t, name, 30*time.Second)
	}
	oldLayout := layoutOf(t, vk, ns)
	rolling := oldLayout == layout.Version
	t.Logf("the previous release wrote layout v%d, this tree reads v%d: %s", oldLayout, layout.Version,
		map[bool]string{true: "rolling upgrade", false: "stop, relay migrate, start"}[rolling])

	const loadFor = 24 * time.Second
	// Across layouts every replica is gone until the old ones' heartbeat
	// records expire (15 s) and the migration has run: clients retry
	// through that.
	retryFor := 20 * time.Second
	if !rolling {
		retryFor = 60 * time.Second
	}
	log := &history.Log{}
	cfg := loadgen.Config{
		Replicas:    []string{bal.URL()},
		AdminURLs:   []string{relays[0].AdminURL()},
		StatusURLs:  relaytest.AdminURLs(relays...),
		AdminToken:  token,
		Sites:       3,
		Daemons:     6,
		Rate:        20,
		Duration:    loadFor,
		Drain:       30 * time.Second,
		TTL:         loadFor + 5*time.Minute, // nothing may expire: every job must be collected
		LeaseMs:     leaseMs,
		Heartbeat:   time.Second,
		ClaimPoll:   100 * time.Millisecond,
		PendingPoll: 50 * time.Millisecond,
		ResultsPoll: 200 * time.Millisecond,
		Timeout:     10 * time.Second,
		// Real clients retry what a replica going away refuses
		// (transport errors, 502, 503, 504); anything else is an error.
		RetryFor: retryFor,
		History:  log,
	}
	ctx, cancel := context.WithTimeout(context.Background(), loadFor+2*time.Minute)
	defer cancel()
	load := loadgen.Start(ctx, cfg)
	relaytest.WaitFor(t, 30*time.Second, "10 enqueues accepted through the previous release", func() bool { return log.Enqueued() >= 10 })
	loadStart := time.Now()

	// One replica every 6 s: the fleet runs both versions for most of
	// the load.
	var timeline []string
	event := func(format string, a ...any) {
		line := fmt.Sprintf("%6.2fs ", time.Since(loadStart).Seconds()) + fmt.Sprintf(format, a...)
		timeline = append(timeline, line)
		bal.Event(line)
	}
	servedOld := map[string]int64{}
	if rolling {
		for i, old := range relays {
			time.Sleep(time.Until(loadStart.Add(time.Duration(i+1) * 5 * time.Second)))
			event("SIGTERM %s (%s)", names[i], *previousRelease)
			took, err := old.Stop(syscall.SIGTERM, 20*time.Second)
			if errors.Is(err, relaytest.ErrStillRunning) {
				t.Fatalf("%s: %v", names[i], err)
			}
			if err != nil {
				t.Errorf("%s (previous release) exited with %v after SIGTERM, want status 0", names[i], err)
			}
			servedOld[names[i]] = bal.Served(names[i])
			event("%s drained and exited in %v; starting this tree's relay on %s", names[i], took.Round(time.Millisecond), old.Listen)
			nr := relaytest.NewRelay(t, relaytest.RelayConfig{Name: names[i] + "-new", Bin: newBin,
				Env: append(env, "RELAY_LISTEN="+old.Listen, "RELAY_ADMIN_LISTEN="+old.Admin)})
			if err := nr.Start(); err != nil {
				t.Fatal(err)
			}
			bal.WaitReady(t, names[i], 30*time.Second)
			event("%s (new) in rotation", names[i])
			relays[i] = nr
		}
	} else {
		time.Sleep(time.Until(loadStart.Add(5 * time.Second)))
		offlineUpgrade(t, relays, names, newBin, env, bal, event, servedOld)
	}

	rep, err := load.Wait(ctx)
	if err != nil {
		t.Fatalf("load generator: %v", err)
	}
	end := time.Now()
	t.Logf("load ran %v from the first enqueue to the last collection", end.Sub(loadStart).Round(time.Millisecond))
	t.Logf("load generator report:\n%s", rep.Text())
	t.Logf("balancer: %s", bal.Summary())
	t.Logf("upgrade timeline:\n  %s", strings.Join(timeline, "\n  "))

	ops := append(log.Ops(), finalStates(t, vk, ns, log.Ops())...)
	sum := history.Check(ops, history.Options{End: end})
	t.Logf("SUMMARY upgrade %s (layout v%d) -> this tree (v%d): %.0fs of load, %d ops | jobs enqueued %d: done %d, cancelled %d, expired %d, still in the store %d | grants %d (%d jobs granted more than once), results accepted %d | errors %d | violations %d",
		*previousRelease, oldLayout, layout.Version, loadFor.Seconds(), sum.Ops, sum.Enqueued, sum.Done, sum.Cancelled, sum.Expired, sum.InStore, sum.Grants, sum.Regranted, sum.Accepted, rep.Errors, len(sum.Violations))

	for i, v := range sum.Violations {
		if i == 10 {
			t.Errorf("... and %d more violations", len(sum.Violations)-i)
			break
		}
		t.Errorf("violation: %v", v)
	}
	// Nothing lost: every enqueued job was collected (the TTL is far
	// beyond the run, so none may expire or linger).
	if sum.Enqueued < 100 || sum.Done != sum.Enqueued || int64(sum.Enqueued) != rep.Jobs.Enqueued {
		t.Errorf("enqueued %d (load generator: %d), collected %d: every job must be collected", sum.Enqueued, rep.Jobs.Enqueued, sum.Done)
	}
	// Nothing run twice.
	if j := rep.Jobs; j.Lost != 0 || j.RunTwice != 0 || j.Integrity != 0 {
		t.Errorf("load generator: lost %d, run twice %d, integrity failures %d", j.Lost, j.RunTwice, j.Integrity)
	}
	// No refusal a client cannot retry: with retries on, any answer the
	// protocol does not expect is an error of the run.
	if rep.Errors != 0 {
		t.Errorf("%d requests failed in a way a client does not retry; problems: %v", rep.Errors, rep.Problems)
	}
	statuses, _, _ := bal.Snapshot()
	for code, n := range statuses {
		if code >= 500 && code != 502 && code != 503 && code != 504 {
			t.Errorf("%d answers %d: not a status clients retry", n, code)
		}
	}
	// Both versions served, each replica before and after its upgrade.
	for _, name := range names {
		if servedOld[name] == 0 || bal.Served(name) <= servedOld[name] {
			t.Errorf("%s served %d requests as the previous release and %d as this tree's: both must have served", name, servedOld[name], bal.Served(name)-servedOld[name])
		}
	}
}

// finalStates is the store's final state of every job ops enqueued, as
// ops (history.StoredFinalOps), read from the private server vk.
func finalStates(t *testing.T, vk *relaytest.ValkeyServer, ns string, ops []loadgen.Op) []loadgen.Op {
	t.Helper()
	c, err := vk.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	out, err := history.StoredFinalOps(context.Background(), c, ns, ops)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// offlineUpgrade is the upgrade across layouts: every old replica drains
// and stops, `relay migrate` of this tree runs until the old replicas'
// heartbeat records have expired and it no longer refuses, then the new
// replicas start on the old ones' ports. relays is updated in place.
func offlineUpgrade(t *testing.T, relays []*relaytest.Relay, names []string, newBin string, env []string,
	bal *relaytest.Balancer, event func(string, ...any), servedOld map[string]int64) {
	t.Helper()
	for i, old := range relays {
		event("SIGTERM %s (%s)", names[i], *previousRelease)
		took, err := old.Stop(syscall.SIGTERM, 20*time.Second)
		if errors.Is(err, relaytest.ErrStillRunning) {
			t.Fatalf("%s: %v", names[i], err)
		}
		if err != nil {
			t.Errorf("%s (previous release) exited with %v after SIGTERM, want status 0", names[i], err)
		}
		servedOld[names[i]] = bal.Served(names[i])
		event("%s drained and exited in %v", names[i], took.Round(time.Millisecond))
	}
	refused := 0
	deadline := time.Now().Add(45 * time.Second)
	for {
		cmd := exec.Command(newBin, "migrate")
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err == nil {
			event("relay migrate after %d refusals: %s", refused, strings.TrimSpace(string(out)))
			if !strings.Contains(string(out), "-> v") {
				t.Errorf("relay migrate moved nothing: %s", out)
			}
			break
		}
		// While an old replica's record is live it must refuse, and say why.
		if !strings.Contains(string(out), "cannot read layout") || time.Now().After(deadline) {
			t.Fatalf("relay migrate: %v\n%s", err, out)
		}
		if refused == 0 {
			event("relay migrate refused while the old replicas' records live: %s", strings.TrimSpace(string(out)))
		}
		refused++
		time.Sleep(time.Second)
	}
	if refused == 0 {
		t.Errorf("relay migrate ran at once: the stopped replicas' heartbeat records should have held it back")
	}
	for i, old := range relays {
		nr := relaytest.NewRelay(t, relaytest.RelayConfig{Name: names[i] + "-new", Bin: newBin,
			Env: append(env, "RELAY_LISTEN="+old.Listen, "RELAY_ADMIN_LISTEN="+old.Admin)})
		if err := nr.Start(); err != nil {
			t.Fatal(err)
		}
		relays[i] = nr
	}
	for _, name := range names {
		bal.WaitReady(t, name, 30*time.Second)
		event("%s (new) in rotation", name)
	}
}

// layoutOf is the layout version namespace ns's record names.
func layoutOf(t *testing.T, vk *relaytest.ValkeyServer, ns string) int {
	t.Helper()
	c, err := vk.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	v, err := c.Do(context.Background(), c.B().Hget().Key(ns+":{"+ns+"}:layout").Field("version").Build()).AsInt64()
	if err != nil {
		t.Fatalf("read the layout record: %v", err)
	}
	return int(v)
}
