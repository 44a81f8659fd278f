package loadgen

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/byollm/relay-go/test/relaytest"
)

// TestFailoverPastADeadReplica: one of two replicas refuses connections (a
// port nobody listens on). By default every request that got no answer is
// sent to the other replica, so the run balances and nothing counts as
// unreached; with failover off the same run reports the requests that never
// reached a relay apart from jobs a relay lost, and says so in its verdict.
// A progress line comes every ProgressEvery, one per line (a log, not a
// terminal).
func TestFailoverPastADeadReplica(t *testing.T) {
	t.Parallel()
	// The two runs are independent (runs of their own ids on one relay),
	// so they overlap; the context outlives this function for them.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	live := startGoRelays(t, 1)[0]
	dead := "http://" + relaytest.FixedPort(t) // nothing listens there

	base := Config{Sites: 2, Daemons: 4, Jobs: 120, Concurrency: 8, AdminToken: smokeToken,
		Drain: 20 * time.Second, TTL: 60 * time.Second,
		Replicas: []string{live.URL(), dead}, AdminURLs: []string{live.AdminURL()}, StatusURLs: []string{live.AdminURL()}}

	t.Run("default failover", func(t *testing.T) {
		t.Parallel()
		cfg := base
		cfg.ProgressEvery = 200 * time.Millisecond
		var progress bytes.Buffer
		rep, err := Run(ctx, cfg, &progress)
		if err != nil {
			t.Fatal(err)
		}
		text := rep.Text()
		t.Logf("\n%s", text)
		j := rep.Jobs
		if !rep.OK() || j.Collected != int64(cfg.Jobs) || j.Unreached != 0 {
			t.Fatalf("want every job collected and nothing unreached past a dead replica; got %+v", j)
		}
		neterr := 0
		for _, e := range rep.Endpoints {
			neterr += e.Statuses[0]
		}
		if neterr == 0 {
			t.Fatal("no request went to the dead replica: the test proves nothing")
		}
		if rep.Settings.FailoverFor != DefaultFailoverFor.String() || !strings.Contains(text, "OK: nothing lost") {
			t.Errorf("settings %+v / verdict:\n%s", rep.Settings, text)
		}
		lines := strings.Split(strings.TrimSpace(progress.String()), "\n")
		if len(lines) == 0 || !strings.HasPrefix(lines[0], "progress ") || strings.Contains(progress.String(), "\r") {
			t.Errorf("progress in a log must be whole lines starting \"progress \", got %q", progress.String())
		}
	})

	t.Run("failover off", func(t *testing.T) {
		t.Parallel()
		cfg := base
		cfg.FailoverFor = -1
		// Pairing through the rotation would stop setup at the dead
		// replica; devices authenticate from the projection instead.
		cfg.Pair = PairNone
		// Open loop and short deadlines: jobs stranded by the dead replica
		// must not hold the run.
		cfg.Jobs, cfg.Concurrency, cfg.Rate, cfg.Duration, cfg.Drain, cfg.TTL = 0, 0, 20, 3*time.Second, 5*time.Second, 5*time.Second
		rep, err := Run(ctx, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		text := rep.Text()
		t.Logf("\n%s", text)
		if rep.Jobs.Unreached == 0 {
			t.Fatalf("half the requests went to a dead replica, yet none is counted unreached:\n%s", text)
		}
		if !strings.Contains(text, "transport   unreached") || !strings.Contains(text, "never reached a relay") {
			t.Errorf("the report does not set unreached requests apart:\n%s", text)
		}
	})
}
