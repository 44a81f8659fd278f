package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/loadgen"
	"github.com/byollm/relay-go/test/relaytest"
)

// Drain timings of the replicas under test. The balancer polls readiness
// every 100 ms, so a 2 s drain period leaves it ample time to take a
// draining replica out of rotation before its listeners close.
const (
	drainPeriod     = 2 * time.Second
	shutdownTimeout = 5 * time.Second
)

// TestRollingRestartUnderLoad restarts two of three replicas, one after the
// other, while the load generator drives jobs through a readiness-checking
// balancer. A graceful drain must be invisible to clients: every job is
// collected exactly once, no client sees a 5xx, and each stopped replica
// exits 0 within its drain period plus its shutdown timeout.
func TestRollingRestartUnderLoad(t *testing.T) {
	t.Parallel() // its own namespace and replicas
	url := relaytest.ValkeyURL()
	ns := relaytest.Namespace(t, relaytest.Open(t, url))
	token := "lifecycle-" + randomHex(12)
	env := []string{
		"RELAY_VALKEY_URL=" + url,
		"RELAY_NAMESPACE=" + ns,
		"RELAY_ADMIN_TOKEN=" + token,
		"RELAY_DRAIN_PERIOD=" + drainPeriod.String(),
		"RELAY_SHUTDOWN_TIMEOUT=" + shutdownTimeout.String(),
	}
	replicas := []*relaytest.Relay{newReplica(t, "relay-1", env), newReplica(t, "relay-2", env), newReplica(t, "relay-3", env)}
	for _, r := range replicas {
		run(t, r)
	}
	lb := relaytest.NewBalancer(t, relaytest.BalancerOptions{Gate: true, RetryDial: true}, relaytest.Backends(replicas...)...)
	for _, r := range replicas {
		lb.WaitReady(t, r.Name, 10*time.Second)
	}

	// Load for long enough to cover both restarts with room to spare on a
	// slow machine; the test fails if the restarts outlast it.
	const loadFor = 18 * time.Second
	cfg := loadgen.Config{
		Replicas:    []string{lb.URL()},
		AdminURLs:   []string{replicas[0].AdminURL()}, // the replicas share the projection through Valkey
		StatusURLs:  relaytest.AdminURLs(replicas...),
		AdminToken:  token,
		Sites:       3,
		Daemons:     6,
		Rate:        30,
		Duration:    loadFor,
		Drain:       40 * time.Second,
		TTL:         90 * time.Second,
		Heartbeat:   2 * time.Second,
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
	loadOn := time.Now()

	// Extra unsigned traffic (device-code polls, one store call each) keeps
	// many pooled connections busy on every replica, so a drain that closes
	// connections under the balancer is far more likely to show up as 502s
	// (before internal/replica/drain.go it did in each of two runs, against one
	// run in two without this traffic).
	chatCtx, stopChat := context.WithCancel(ctx)
	chatDone := chatter(chatCtx, lb.URL(), 8)

	// Restart relay-1, then relay-2, as a rolling update does.
	exitLimit := drainPeriod + shutdownTimeout + 3*time.Second
	type restart struct {
		name             string
		exit, back       time.Duration
		servedWhileDrain int64
	}
	var restarts []restart
	for _, r := range replicas[:2] {
		time.Sleep(time.Second)
		before := lb.Served(r.Name)
		lb.Event("SIGTERM " + r.Name)
		took, err := r.Stop(syscall.SIGTERM, exitLimit)
		lb.Event(fmt.Sprintf("%s exited after %.2fs (%v)", r.Name, took.Seconds(), err))
		if errors.Is(err, relaytest.ErrStillRunning) {
			t.Fatalf("%s did not exit within %v of SIGTERM\n%s", r.Name, exitLimit, r.Tail(40))
		}
		if err != nil {
			t.Errorf("%s exit after SIGTERM: %v, want status 0\n%s", r.Name, err, r.Tail(30))
		}
		if took < drainPeriod {
			t.Errorf("%s exited %v after SIGTERM, before its %v drain period", r.Name, took, drainPeriod)
		}
		served := lb.Served(r.Name) - before
		backStart := time.Now()
		run(t, r)
		lb.WaitReady(t, r.Name, 15*time.Second)
		lb.Event(r.Name + " back in rotation")
		restarts = append(restarts, restart{name: r.Name, exit: took, back: time.Since(backStart), servedWhileDrain: served})
	}
	choreography := time.Since(loadOn)
	stopChat()
	chats := <-chatDone
	if elapsed := time.Since(started); elapsed > loadFor {
		t.Errorf("the restarts ended %v after the load started, after the load generator stopped enqueuing (%v): they did not all happen under load", elapsed, loadFor)
	}

	rep := awaitLoad(t, ctx, load, lb)
	for _, rs := range restarts {
		t.Logf("%s: exit %.2fs after SIGTERM (drain %v, timeout %v), back in rotation %.2fs after exit, %d requests served between SIGTERM and exit",
			rs.name, rs.exit.Seconds(), drainPeriod, shutdownTimeout, rs.back.Seconds(), rs.servedWhileDrain)
	}
	j := rep.Jobs
	t.Logf("SUMMARY drain: jobs enqueued %d collected %d lost %d run-twice %d enqueue-failed %d errors %d | %.1fs load, restarts took %.1fs, %d device-code polls beside | balancer %s",
		j.Enqueued, j.Collected, j.Lost, j.RunTwice, j.EnqueueFailed, rep.Errors, time.Since(started).Seconds(), choreography.Seconds(), chats.sent, lb.Summary())
	if chats.sent == 0 || chats.failed != 0 {
		t.Errorf("device-code polls: %d sent, %d not answered 200 expired (first: %s)", chats.sent, chats.failed, chats.first)
	}

	// Every job that was attempted was enqueued and collected exactly once.
	if !rep.OK() || j.Lost != 0 || j.RunTwice != 0 || j.EnqueueFailed != 0 || j.Collected != j.Attempted {
		t.Errorf("jobs did not balance: %+v", j)
	}
	if rep.Errors != 0 {
		t.Errorf("load generator saw %d unexpected responses or transport failures: %v", rep.Errors, rep.Problems)
	}
	for name, e := range rep.Endpoints {
		for code, n := range e.Statuses {
			if code == 0 || code >= 500 {
				t.Errorf("%s: %d responses with status %d (0 = transport failure)", name, n, code)
			}
		}
	}
	st, recs, _ := lb.Snapshot()
	for code, n := range st {
		if code >= 500 {
			t.Errorf("clients got %d responses with status %d", n, code)
		}
	}
	shown := 0
	for _, rec := range recs {
		if rec.Status >= 500 && shown < 5 {
			shown++
			t.Logf("5xx: %s via %q %d after %v: %s", rec.Path, rec.Backend, rec.Status, rec.Elapsed, rec.Body)
		}
	}
	for _, r := range replicas {
		if n := lb.Served(r.Name); n == 0 {
			t.Errorf("%s served no requests", r.Name)
		}
	}

	// One sample scrape of a replica that ran through the whole test.
	if testing.Verbose() {
		_, scrape := probe(context.Background(), http.DefaultClient, replicas[2].AdminURL()+"/metrics")
		t.Logf("relay-3 /metrics (relay_* lines):\n%s", relayLines(scrape))
	}
}

// awaitLoad waits for the load generator's outcome, fails t if it did not
// finish or failed, and logs its report and the balancer's timeline.
func awaitLoad(t *testing.T, ctx context.Context, load *loadgen.Background, lb *relaytest.Balancer) *loadgen.Report {
	t.Helper()
	rep, err := load.Wait(ctx)
	if err != nil {
		t.Fatalf("load generator: %v", err)
	}
	t.Logf("load generator report:\n%s", rep.Text())
	_, _, events := lb.Snapshot()
	t.Logf("timeline:\n  %s", strings.Join(events, "\n  "))
	return rep
}

// waitEnqueues waits until the balancer has answered n enqueues 200.
func waitEnqueues(t *testing.T, lb *relaytest.Balancer, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		_, recs, _ := lb.Snapshot()
		got := 0
		for _, r := range recs {
			if r.Path == "/relay/site/enqueue" && r.Status == 200 {
				got++
			}
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			// Say what the balancer did see, so a slow start can be told
			// from a refusing relay.
			seen := map[string]int{}
			for _, r := range recs {
				seen[fmt.Sprintf("%s %d", r.Path, r.Status)]++
			}
			t.Fatalf("only %d enqueues after %v; balancer saw %v", got, within, seen)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pollBody is an unsigned device-code poll for a code nobody issued: the
// relay reads the store and answers 200 {"status":"expired"}.
const pollBody = `{"protocolVersion":"2","action":"poll","deviceCode":"abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG"}`

type chatResult struct {
	sent, failed int
	first        string
}

// chatter runs n clients that post device-code polls through base until ctx
// ends, and reports how many were sent and how many were not answered
// 200 expired.
func chatter(ctx context.Context, base string, n int) <-chan chatResult {
	out := make(chan chatResult, 1)
	results := make(chan chatResult, n)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	for range n {
		go func() {
			var r chatResult
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodPost, base+"/byollm/pair", strings.NewReader(pollBody))
				req.Header.Set("content-type", "application/json")
				res, err := hc.Do(req)
				r.sent++
				msg := ""
				if err != nil {
					msg = err.Error()
				} else {
					b, _ := io.ReadAll(res.Body)
					res.Body.Close()
					if res.StatusCode != http.StatusOK || !strings.Contains(string(b), `"expired"`) {
						msg = fmt.Sprintf("%d %s", res.StatusCode, b)
					}
				}
				if msg != "" {
					r.failed++
					if r.first == "" {
						r.first = msg
					}
				}
				time.Sleep(2 * time.Millisecond)
			}
			results <- r
		}()
	}
	go func() {
		var total chatResult
		for range n {
			r := <-results
			total.sent += r.sent
			total.failed += r.failed
			if total.first == "" {
				total.first = r.first
			}
		}
		hc.CloseIdleConnections()
		out <- total
	}()
	return out
}
