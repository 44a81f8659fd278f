// Package chaos_test runs three relay replicas and a private redis-server
// under the load generator while it kills and restarts them, records every
// operation of the run with the relay's answers (internal/loadgen's
// History) and checks the history afterwards (test/chaos/history): no job
// under two live leases at once, no result accepted twice, every enqueued
// job accounted for, no result delivered for the wrong job.
//
// Small by default (30 s of load); larger with
//
//	go test -run TestChaos -timeout 30m ./test/chaos -chaos.duration=10m
package chaos_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/loadgen"
	"github.com/byollm/relay-go/test/chaos/history"

	"github.com/byollm/relay-go/test/relaytest"
)

var (
	loadFor    = flag.Duration("chaos.duration", 30*time.Second, "how long the load generator enqueues while faults are injected")
	faultEvery = flag.Duration("chaos.every", 3*time.Second, "mean time between two replica faults (each a SIGKILL or SIGTERM and a restart)")
)

func TestMain(m *testing.M) { relaytest.Main(m) }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// leaseMs is short so a grant lost with a killed replica's answer comes back
// within seconds; it must stay under the relay's 10 s seal window, since
// lease expiry is not applied to a job awaiting its payload and the checker
// takes the lease expiry as the earliest a job may be granted again.
const leaseMs = 5000

// TestChaos injects faults under load: every few seconds one replica is
// SIGKILLed or SIGTERMed and started again, and once the store is SIGKILLed
// and started again on its append-only file. The clients retry what the
// faults refuse (transport errors, 502, 503), as real ones do. Afterwards
// the history of the run must break no rule.
func TestChaos(t *testing.T) {
	vk := relaytest.NewValkeyServer(t)
	if err := vk.Start(); err != nil {
		t.Fatal(err)
	}
	ns := "chaos-" + randomHex(6)
	token := "chaos-" + randomHex(12)
	env := []string{
		"RELAY_VALKEY_URL=" + vk.URL(),
		"RELAY_NAMESPACE=" + ns,
		"RELAY_ADMIN_TOKEN=" + token,
		fmt.Sprintf("RELAY_LEASE_MS=%d", leaseMs),
		"RELAY_SHUTDOWN_TIMEOUT=5s",
		"RELAY_LOG_LEVEL=warn",
	}
	var relays []*relaytest.Relay
	for _, name := range []string{"relay-1", "relay-2", "relay-3"} {
		relays = append(relays, relaytest.NewRelay(t, relaytest.RelayConfig{Name: name, Env: env}))
	}
	urls := make([]string, len(relays))
	for i, r := range relays {
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		urls[i] = r.URL()
	}

	log := &history.Log{}
	cfg := loadgen.Config{
		Replicas:    urls,
		AdminURLs:   []string{relays[0].AdminURL()}, // the replicas share the projection through the store
		StatusURLs:  relaytest.AdminURLs(relays...),
		AdminToken:  token,
		Sites:       3,
		Daemons:     6,
		Rate:        15,
		Duration:    *loadFor,
		Drain:       90 * time.Second,
		TTL:         *loadFor + 5*time.Minute, // nothing expires during the run: every job must be done, cancelled or in the store
		LeaseMs:     leaseMs,
		Heartbeat:   time.Second,
		ClaimPoll:   100 * time.Millisecond,
		PendingPoll: 50 * time.Millisecond,
		ResultsPoll: 200 * time.Millisecond,
		Timeout:     10 * time.Second,
		RetryFor:    30 * time.Second,
		CancelEvery: 10,
		// Daemons that die with a grant in hand, or hand it back: the relay
		// offers those jobs again, which is what the lease rule judges.
		AbandonEvery: 20,
		ReleaseEvery: 20,
		History:      log,
	}
	ctx, cancel := context.WithTimeout(context.Background(), *loadFor+4*time.Minute)
	defer cancel()
	load := loadgen.Start(ctx, cfg)
	// The load generator's set-up and pairing are done, so every fault meets load.
	relaytest.WaitFor(t, 60*time.Second, "10 enqueues accepted", func() bool { return log.Enqueued() >= 10 })
	loadStart := time.Now()

	faults, timeline := injectFaults(t, relays, vk, loadStart, *loadFor)

	rep, err := load.Wait(ctx)
	if err != nil {
		t.Fatalf("load generator: %v", err)
	}
	end := time.Now()
	t.Logf("load generator report:\n%s", rep.Text())

	ops := append(log.Ops(), finalStates(t, vk, ns, log.Ops())...)
	sum := history.Check(ops, history.Options{End: end})
	t.Logf("fault timeline:\n  %s", strings.Join(timeline, "\n  "))
	t.Logf("SUMMARY chaos: %.0fs of load, %d ops recorded | jobs enqueued %d: done %d, cancelled %d, expired %d, still in the store %d | grants %d (%d jobs granted more than once), results accepted %d | faults %s | violations %d",
		loadFor.Seconds(), sum.Ops, sum.Enqueued, sum.Done, sum.Cancelled, sum.Expired, sum.InStore, sum.Grants, sum.Regranted, sum.Accepted, faultLine(faults), len(sum.Violations))

	for i, v := range sum.Violations {
		if i == 10 {
			t.Errorf("... and %d more violations", len(sum.Violations)-i)
			break
		}
		t.Errorf("violation: %v\n  its operations:\n    %s", v, strings.Join(jobOps(ops, v.JobID), "\n    "))
	}
	if sum.Enqueued < 10 || sum.Done == 0 || sum.Regranted == 0 {
		t.Errorf("too little work to judge: %d enqueued, %d done, %d granted again", sum.Enqueued, sum.Done, sum.Regranted)
	}
	if int64(sum.Enqueued) != rep.Jobs.Enqueued {
		t.Errorf("history has %d enqueued jobs, the load generator counted %d", sum.Enqueued, rep.Jobs.Enqueued)
	}
	if j := rep.Jobs; j.Integrity != 0 || j.RunTwice != 0 {
		t.Errorf("load generator: %d integrity failures, %d jobs run twice; problems: %v", j.Integrity, j.RunTwice, rep.Problems)
	}
	checkTheChecker(t, ops, end)
	for _, kind := range []string{faultKill, faultTerm, faultStore} {
		if faults[kind] == 0 {
			t.Errorf("no %s fault was injected (%s): the run was too short for its schedule", kind, faultLine(faults))
		}
	}
}

// Fault kinds.
const (
	faultKill  = "replica-sigkill"
	faultTerm  = "replica-sigterm"
	faultStore = "store-sigkill"
)

// injectFaults kills replicas in turn, at random, alternating SIGKILL and
// SIGTERM, each started again within a second, and the store once, 40% of the way
// through, until the load stops enqueuing. One fault at a time: two
// replicas always serve.
func injectFaults(t *testing.T, relays []*relaytest.Relay, vk *relaytest.ValkeyServer, loadStart time.Time, loadFor time.Duration) (map[string]int, []string) {
	t.Helper()
	faults := map[string]int{}
	var timeline []string
	event := func(format string, a ...any) {
		timeline = append(timeline, fmt.Sprintf("%6.2fs ", time.Since(loadStart).Seconds())+fmt.Sprintf(format, a...))
	}
	storeAt := loadStart.Add(loadFor * 2 / 5)
	until := loadStart.Add(loadFor - time.Second)
	storeDone := false
	for n := 0; ; n++ {
		pause := *faultEvery/2 + mrand.N(*faultEvery) //nolint:gosec // schedule
		next := time.Now().Add(pause)
		if !storeDone && next.After(storeAt) {
			next = storeAt
		}
		if next.After(until) {
			break
		}
		time.Sleep(time.Until(next))
		if !storeDone && !time.Now().Before(storeAt) {
			storeDone = true
			event("SIGKILL store")
			if _, err := vk.Stop(syscall.SIGKILL, 10*time.Second); errors.Is(err, relaytest.ErrStillRunning) {
				t.Fatalf("store: %v", err)
			}
			time.Sleep(1500 * time.Millisecond)
			if err := vk.Start(); err != nil {
				t.Fatalf("store restart: %v", err)
			}
			faults[faultStore]++
			event("store back")
			continue
		}
		r := relays[mrand.IntN(len(relays))] //nolint:gosec // schedule
		sig, kind := syscall.SIGKILL, faultKill
		if n%2 == 1 {
			sig, kind = syscall.SIGTERM, faultTerm
		}
		event("%v %s", sig, r.Name)
		_, exitErr := r.Stop(sig, 20*time.Second)
		if errors.Is(exitErr, relaytest.ErrStillRunning) {
			t.Fatalf("%s: %v", r.Name, exitErr)
		}
		if sig == syscall.SIGTERM && exitErr != nil {
			t.Errorf("%s exited with %v after SIGTERM, want status 0", r.Name, exitErr)
		}
		// Down for a moment, as a process supervisor takes to notice:
		// requests meet a refused port, not only a reset connection.
		down := time.Duration(mrand.IntN(1000)) * time.Millisecond //nolint:gosec // schedule
		event("%s exited; down for %v", r.Name, down)
		time.Sleep(down)
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		faults[kind]++
		event("%s back", r.Name)
	}
	return faults, timeline
}

func faultLine(faults map[string]int) string {
	return fmt.Sprintf("%s %d, %s %d, %s %d", faultKill, faults[faultKill], faultTerm, faults[faultTerm], faultStore, faults[faultStore])
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

// jobOps renders one job's operations in time order, for a violation's
// report.
func jobOps(ops []loadgen.Op, jobID string) []string {
	var mine []loadgen.Op
	for _, op := range ops {
		if op.JobID == jobID {
			mine = append(mine, op)
		}
	}
	sort.SliceStable(mine, func(i, j int) bool { return mine[i].Start.Before(mine[j].Start) })
	out := make([]string, 0, len(mine))
	for _, op := range mine {
		line := fmt.Sprintf("%s..%s %-7s %s site=%s runner=%s lease=%s", op.Start.UTC().Format("15:04:05.000"), op.End.UTC().Format("15:04:05.000"),
			op.Kind, op.Outcome, op.Site, op.Runner, op.LeaseID)
		if op.LeaseExpiresAt > 0 {
			line += fmt.Sprintf(" granted=%s expires=%s", time.UnixMilli(op.LeaseExpiresAt-op.LeaseMs).UTC().Format("15:04:05.000"),
				time.UnixMilli(op.LeaseExpiresAt).UTC().Format("15:04:05.000"))
		}
		if op.Detail != "" {
			line += " (" + op.Detail + ")"
		}
		out = append(out, line)
	}
	return out
}

// checkTheChecker plants one fault of each kind into the real history of
// this run and requires the checker to find exactly those: a clean verdict
// must come from a checker that sees faults in histories of this shape.
func checkTheChecker(t *testing.T, ops []loadgen.Op, end time.Time) {
	t.Helper()
	var grant, accepted *loadgen.Op
	collected := ""
	cancelled := map[string]bool{}
	for _, op := range ops {
		if op.Kind == loadgen.OpCancel {
			cancelled[op.JobID] = true
		}
	}
	for i := range ops {
		op := &ops[i]
		switch {
		case grant == nil && op.Kind == loadgen.OpGrant:
			grant = op
		case accepted == nil && op.Kind == loadgen.OpResult && op.Outcome == loadgen.OutcomeAccepted:
			accepted = op
		case collected == "" && op.Kind == loadgen.OpCollect && op.Outcome == loadgen.OutcomeOK && grant != nil && op.JobID != grant.JobID && !cancelled[op.JobID]:
			collected = op.JobID
		}
	}
	if grant == nil || accepted == nil || collected == "" {
		t.Errorf("history too thin to plant faults in")
		return
	}
	planted := slices.Clone(ops)
	// A second runner granted the first grant's job 1 ms after it.
	second := *grant
	second.Runner, second.LeaseID = "planted-runner", "planted-lease"
	second.LeaseExpiresAt++
	// A second result accepted for the same job.
	again := *accepted
	again.Start, again.End = again.Start.Add(time.Millisecond), again.End.Add(time.Millisecond)
	planted = append(planted, second, again)
	// A job whose collection never happened and which left the store.
	kept := planted[:0]
	for _, op := range planted {
		if op.JobID == collected && (op.Kind == loadgen.OpCollect || op.Kind == loadgen.OpFinal) {
			continue
		}
		kept = append(kept, op)
	}
	kept = append(kept, loadgen.Op{Kind: loadgen.OpFinal, JobID: collected, Outcome: loadgen.OutcomeAbsent})
	got := map[string]string{}
	for _, v := range history.Check(kept, history.Options{End: end}).Violations {
		got[v.Rule] += v.JobID + " "
	}
	want := map[string]string{
		history.RuleTwoLiveLeases: grant.JobID + " ",
		history.RuleAcceptedTwice: accepted.JobID + " ",
		history.RuleUnaccounted:   collected + " ",
	}
	if !maps.Equal(got, want) {
		t.Errorf("faults planted in this run's history: checker found %v, want %v", got, want)
	}
}
