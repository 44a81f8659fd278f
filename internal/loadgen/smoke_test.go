package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/byollm/relay-go/test/reference"
	"github.com/byollm/relay-go/test/relaytest"
)

const smokeToken = "smoke-admin-token-0123456789"

// TestSmokeAgainstRelay pushes a few hundred jobs through real relays (the
// Go relay on the test Valkey, one and two replicas sharing a namespace, and
// the reference relay under Node) with full signing and sealing, and
// requires every job to be collected exactly once.
func TestSmokeAgainstRelay(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name     string
		replicas int // 0: the reference relay
		cfg      Config
	}{
		{"reference", 0, Config{Jobs: 200, Concurrency: 16}},
		{"go 1 replica", 1, Config{Jobs: 300, Concurrency: 24}},
		{"go 2 replicas open loop", 2, Config{Jobs: 300, Rate: 150, Pair: PairNone}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var servers []*relaytest.Relay
			if tc.replicas == 0 {
				servers = append(servers, reference.Start(t, reference.Config{AdminToken: smokeToken}))
			} else {
				servers = startGoRelays(t, tc.replicas)
			}
			cfg := tc.cfg
			cfg.Sites, cfg.Daemons = 3, 6
			cfg.AdminToken = smokeToken
			cfg.Drain = 30 * time.Second
			cfg.TTL = 60 * time.Second
			for _, s := range servers {
				cfg.Replicas = append(cfg.Replicas, s.URL())
				cfg.AdminURLs = append(cfg.AdminURLs, s.AdminURL())
			}
			if tc.replicas > 0 { // the reference relay has no /projection/status
				cfg.StatusURLs = cfg.AdminURLs
			}
			cfg.AdminURLs = cfg.AdminURLs[:1] // one write; the replicas share the projection
			rep, err := Run(ctx, cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			var text bytes.Buffer
			rep.WriteText(&text)
			t.Logf("\n%s", text.String())
			j := rep.Jobs
			if !rep.OK() || j.Collected != int64(cfg.Jobs) || j.Lost != 0 || j.RunTwice != 0 {
				t.Fatalf("run did not balance: want %d collected, 0 lost, 0 run twice; got %+v", cfg.Jobs, j)
			}
			if rep.Endpoints["site/results"].Requests == 0 || rep.Endpoints["fetch"].Statuses[200] != cfg.Jobs {
				t.Fatalf("jobs did not take the whole path: %+v", rep.Endpoints)
			}
			// Each fetch answer carries a sealed envelope of at least the
			// payload's length, and the total is the endpoints' sum.
			var sum int64
			for _, e := range rep.Endpoints {
				sum += e.AnswerBytes
			}
			chars := rep.Settings.PayloadChars
			if f := rep.Endpoints["fetch"].AnswerBytes; chars < 1 || f < int64(cfg.Jobs*chars) || sum != rep.AnswerBytes {
				t.Fatalf("answer bytes: fetch %d for %d jobs of %d characters; endpoints %d, total %d", f, cfg.Jobs, chars, sum, rep.AnswerBytes)
			}
		})
	}
}

// startGoRelays starts n replicas of cmd/relay on one fresh namespace of
// the test Valkey.
func startGoRelays(t *testing.T, n int) []*relaytest.Relay {
	t.Helper()
	url := relaytest.ValkeyURL()
	ns := relaytest.Namespace(t, relaytest.Open(t, url))
	var out []*relaytest.Relay
	for i := range n {
		out = append(out, relaytest.StartRelay(t, relaytest.RelayConfig{
			Name:  fmt.Sprintf("relay-%d", i+1),
			Env:   []string{"RELAY_VALKEY_URL=" + url, "RELAY_NAMESPACE=" + ns, "RELAY_LOG_LEVEL=warn"},
			Token: smokeToken,
		}))
	}
	return out
}

func TestMain(m *testing.M) { relaytest.Main(m) }

func TestValidateRefusesRemoteTargets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"loopback ok", Config{Replicas: []string{"http://127.0.0.1:1"}, AdminURLs: []string{"http://[::1]:2"}, AdminToken: "t"}, ""},
		{"localhost ok", Config{Replicas: []string{"http://localhost:1"}, AdminToken: "t"}, ""},
		{"remote replica refused", Config{Replicas: []string{"http://192.0.2.10:8080"}, AdminToken: "t"}, "-allow-remote"},
		{"remote admin refused", Config{AdminURLs: []string{"http://10.1.2.3:8081"}, AdminToken: "t"}, "not a loopback address"},
		{"remote allowed when asked", Config{Replicas: []string{"http://192.0.2.10:8080"}, AdminToken: "t", AllowRemote: true}, ""},
		{"no token", Config{}, "no admin token"},
		{"rate and concurrency", Config{AdminToken: "t", Rate: 5, Concurrency: 5}, "not both"},
		{"more owners than daemons", Config{AdminToken: "t", Daemons: 2, Owners: 3}, "owners must be"},
		{"slots over protocol max", Config{AdminToken: "t", DaemonSlots: 65}, "1..64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.WithDefaults().Validate(ctx)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestSummarise(t *testing.T) {
	t.Parallel()
	var v []time.Duration
	for i := 1; i <= 100; i++ {
		v = append(v, time.Duration(i)*time.Millisecond)
	}
	got := summarise(v)
	want := Latency{Count: 100, MeanMs: 50.5, P50Ms: 50, P90Ms: 90, P99Ms: 99, MaxMs: 100}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if summarise(nil) != (Latency{}) {
		t.Fatal("empty summary")
	}
}

func TestOutcomeRoundTrip(t *testing.T) {
	t.Parallel()
	want := resultText("job-1", "a prompt")
	for _, tc := range []struct {
		name        string
		plaintext   string
		disposition string
		ok          bool
	}{
		{"ok", outcomePlaintext(want), "ok", true},
		{"disposition differs", outcomePlaintext(want), "error", false},
		{"other job's text", outcomePlaintext(resultText("job-2", "a prompt")), "ok", false},
		{"not json", "nope", "ok", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := checkOutcome(tc.plaintext, tc.disposition, want); (err == nil) != tc.ok {
				t.Fatalf("checkOutcome: %v", err)
			}
		})
	}
}
