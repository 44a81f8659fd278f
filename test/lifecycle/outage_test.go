package lifecycle_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/loadgen"
	"github.com/byollm/relay-go/test/relaytest"
)

// failFast bounds how long a request may take to be refused while the
// store is down: clients retry 503 server-error, so hanging on a dead store
// only holds their connections and goroutines.
const failFast = time.Second

// TestValkeyOutageUnderLoad stops the store (a private redis-server with an
// fsynced append-only file) in the middle of a load run and starts it again
// on the same port and directory. While it is down every request through
// the balancer is refused within a second (of its sending, or of the
// store's going away for one already waiting) with the protocol's
// retryable 503 server-error, /readyz fails and /healthz does not; once
// it is back both replicas recover by themselves and every job enqueued
// is collected exactly once.
func TestValkeyOutageUnderLoad(t *testing.T) {
	t.Parallel() // a private Valkey and replicas of its own
	vk := relaytest.NewValkeyServer(t)
	if err := vk.Start(); err != nil {
		t.Fatal(err)
	}
	ns := "lifecycle-outage-" + randomHex(6)
	token := "lifecycle-" + randomHex(12)
	const leaseMs = 5000 // a grant lost to the outage comes back within seconds
	env := []string{
		"RELAY_VALKEY_URL=" + vk.URL(),
		"RELAY_NAMESPACE=" + ns,
		"RELAY_ADMIN_TOKEN=" + token,
		fmt.Sprintf("RELAY_LEASE_MS=%d", leaseMs),
	}
	replicas := []*relaytest.Relay{newReplica(t, "relay-1", env), newReplica(t, "relay-2", env)}
	for _, r := range replicas {
		run(t, r)
	}
	// No readiness gating: with every replica unready a real balancer has
	// nothing to route to; here the clients must see the relay's own answer.
	lb := relaytest.NewBalancer(t, relaytest.BalancerOptions{RetryDial: true}, relaytest.Backends(replicas...)...)

	cfg := loadgen.Config{
		Replicas:    []string{lb.URL()},
		AdminURLs:   []string{replicas[0].AdminURL()},
		StatusURLs:  relaytest.AdminURLs(replicas...),
		AdminToken:  token,
		Sites:       3,
		Daemons:     6,
		Rate:        30,
		Duration:    12 * time.Second,
		Drain:       60 * time.Second,
		TTL:         90 * time.Second,
		LeaseMs:     leaseMs,
		Heartbeat:   time.Second,
		ClaimPoll:   100 * time.Millisecond,
		PendingPoll: 50 * time.Millisecond,
		ResultsPoll: 200 * time.Millisecond,
		Timeout:     20 * time.Second,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()
	started := time.Now()
	load := loadgen.Start(ctx, cfg)
	waitEnqueues(t, lb, 20, 30*time.Second)
	time.Sleep(time.Second)

	// A marker written just before the cut must survive the restart.
	admin, err := vk.Client()
	if err != nil {
		t.Fatal(err)
	}
	marker, markerVal := ns+":lifecycle-marker", randomHex(8)
	if err := admin.Do(ctx, admin.B().Set().Key(marker).Value(markerVal).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	// Pause writes (every script) for a moment before the stop, so the
	// cut is clean: each command either ran and was answered, or never
	// ran. A command that ran but whose answer was lost would be an
	// enqueue the site counts as failed while the job exists, which no
	// relay can prevent and the load generator would flag as foreign work.
	if err := admin.Do(ctx, admin.B().ClientPause().Timeout(10000).Write().Build()).Error(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	paused := time.Now() // from here the store answers no write
	keysAtCut, err := admin.Do(ctx, admin.B().Dbsize().Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	admin.Close()
	time.Sleep(100 * time.Millisecond)
	cut := time.Now()
	lb.Event(fmt.Sprintf("writes paused, %d keys; SIGTERM the store", keysAtCut))
	if _, err := vk.Stop(syscall.SIGTERM, 15*time.Second); err != nil {
		t.Fatalf("store exit after SIGTERM: %v", err)
	}
	down := time.Now()
	lb.Event(fmt.Sprintf("store down (%.0f ms after the pause)", down.Sub(cut).Seconds()*1000))

	// While it is down: readiness fails, liveness holds, and a store-backed
	// request sent straight to each replica is refused fast.
	const outage = 2500 * time.Millisecond
	// How long after the store is gone an empty claim may still be
	// answered from a replica's view of the queues (see below).
	const viewGrace = 250 * time.Millisecond
	var (
		readyzSeen = map[int]int{}
		healthSeen = map[int]int{}
		direct     []string // direct refusals that were not fast 503 server-error
		directMax  time.Duration
		directN    int
		readyzMax  time.Duration
	)
	hc := &http.Client{Timeout: 5 * time.Second}
	for time.Since(down) < outage {
		for _, r := range replicas {
			t0 := time.Now()
			st, _ := probe(ctx, hc, r.AdminURL()+"/readyz")
			readyzMax = max(readyzMax, time.Since(t0))
			hs, _ := probe(ctx, hc, r.AdminURL()+"/healthz")
			t0 = time.Now()
			ds, body := relaytest.Post(ctx, hc, r.URL()+"/byollm/pair", pollBody)
			el := time.Since(t0)
			readyzSeen[st]++
			healthSeen[hs]++
			directN++
			directMax = max(directMax, el)
			if ds != http.StatusServiceUnavailable || relaytest.ErrorCode(body) != "server-error" || el > failFast {
				direct = append(direct, fmt.Sprintf("%s: %d %s after %v", r.Name, ds, strings.TrimSpace(body), el))
			}
		}
		time.Sleep(100 * time.Millisecond)
	}

	up := time.Now() // the relays may reconnect as soon as the server listens
	if err := vk.Start(); err != nil {
		t.Fatal(err)
	}
	lb.Event("store back")
	admin, err = vk.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if got, err := admin.Do(ctx, admin.B().Get().Key(marker).Build()).ToString(); err != nil || got != markerVal {
		t.Fatalf("the store came back without its data: marker %q (%v), want %q", got, err, markerVal)
	}
	var recovered []string
	for _, r := range replicas {
		relaytest.WaitFor(t, 15*time.Second, r.Name+" /readyz not 200 after the store came back", func() bool {
			st, _ := probe(ctx, hc, r.AdminURL()+"/readyz")
			return st == http.StatusOK
		})
		recovered = append(recovered, fmt.Sprintf("%s ready %.0f ms after the store", r.Name, ms(time.Since(up))))
		lb.Event(r.Name + " ready again")
	}

	rep := awaitLoad(t, ctx, load, lb)
	_, recs, _ := lb.Snapshot()

	// What the clients saw through the balancer.
	var (
		refused, inOutage, slow, notRetryable int
		maxRefused                            time.Duration
		examples                              []string
	)
	for _, rec := range recs {
		if rec.Status >= 500 {
			refused++
			// How long the refusal took once the store was going away: a
			// request sent before may have been waiting by design (an idle
			// heartbeat waits up to a second for its batch), not on the
			// dead store.
			from := rec.Start
			if from.Before(paused) {
				from = paused
			}
			maxRefused = max(maxRefused, rec.Start.Add(rec.Elapsed).Sub(from))
			if rec.Status != http.StatusServiceUnavailable || relaytest.ErrorCode(rec.Body) != "server-error" {
				notRetryable++
				if len(examples) < 5 {
					examples = append(examples, fmt.Sprintf("%s %d %s", rec.Path, rec.Status, rec.Body))
				}
			}
		}
		if rec.Start.After(cut) && rec.Start.Before(up) {
			inOutage++
			if rec.Elapsed > failFast {
				slow++
			}
			// Sent after the store was gone and answered before it was
			// back: nothing but a refusal is possible. Except an empty
			// claim sent just after: a replica answers one from its view
			// of the queues, without asking the store, while its
			// subscriptions are live, and it hears they ended only when
			// its connection reports the closed socket, which can come
			// after the process is gone. (A claim that grants needs the
			// store, so a 200 here is an empty one.)
			viewStillLive := rec.Path == "/byollm/claim" && rec.Status == http.StatusOK && rec.Start.Sub(down) < viewGrace
			if rec.Start.After(down) && rec.Start.Add(rec.Elapsed).Before(up) && rec.Status != http.StatusServiceUnavailable && !viewStillLive {
				notRetryable++
				if len(examples) < 5 {
					examples = append(examples, fmt.Sprintf("%s answered %d during the outage", rec.Path, rec.Status))
				}
			}
		}
	}
	j := rep.Jobs
	t.Logf("outage: store down %.2fs; %d requests sent during it through the balancer, %d refused 5xx in the whole run, slowest refusal %.1f ms (from its sending or the pause, whichever was later); direct probes: %d pair polls (max %.1f ms), readyz statuses %v (max %.1f ms), healthz statuses %v; %s",
		up.Sub(down).Seconds(), inOutage, refused, ms(maxRefused), directN, ms(directMax), readyzSeen, ms(readyzMax), healthSeen, strings.Join(recovered, ", "))
	t.Logf("SUMMARY outage: jobs enqueued %d collected %d lost %d run-twice %d enqueue-failed %d (refused during the outage) | %.1fs run | balancer %s",
		j.Enqueued, j.Collected, j.Lost, j.RunTwice, j.EnqueueFailed, time.Since(started).Seconds(), lb.Summary())

	if !rep.OK() || j.Lost != 0 || j.RunTwice != 0 || j.Integrity != 0 || j.Foreign != 0 {
		t.Errorf("jobs did not balance: %+v\nproblems: %v", j, rep.Problems)
	}
	if refused == 0 || inOutage == 0 {
		t.Errorf("the load never met the outage: %d requests during it, %d refused", inOutage, refused)
	}
	if notRetryable > 0 {
		t.Errorf("%d answers were not the retryable 503 server-error: %v", notRetryable, examples)
	}
	if slow > 0 || maxRefused > failFast {
		t.Errorf("%d requests during the outage took over %v; slowest refusal %v", slow, failFast, maxRefused)
	}
	if lb.Own5xx() != 0 {
		t.Errorf("the balancer lost %d connections to the relays", lb.Own5xx())
	}
	if len(direct) > 0 {
		t.Errorf("direct store-backed requests during the outage were not fast 503 server-error: %v", direct)
	}
	if readyzSeen[http.StatusServiceUnavailable] == 0 || len(readyzSeen) != 1 {
		t.Errorf("/readyz during the outage answered %v, want only 503", readyzSeen)
	}
	if len(healthSeen) != 1 || healthSeen[http.StatusOK] == 0 {
		t.Errorf("/healthz during the outage answered %v, want only 200", healthSeen)
	}
	// Each replica counted its refusals.
	for _, r := range replicas {
		_, scrape := probe(ctx, hc, r.AdminURL()+"/metrics")
		if !strings.Contains(scrape, `status="503"`) || !strings.Contains(scrape, "relay_valkey_script_errors_total{") {
			t.Errorf("%s /metrics shows no 503s or script errors:\n%s", r.Name, relayLines(scrape))
		}
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
