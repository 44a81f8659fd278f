package loadgen

import (
	"context"
	"strings"
	"testing"
	"time"
)

// The ramp against a real relay: with a limit no step can miss it climbs
// every rate, each step an open-loop run at that rate (the offered rate is
// the asked one, everything collected); with a limit no run can meet it,
// it stops after the first step and says why.
func TestRampAgainstRelay(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	servers := startGoRelays(t, 1)
	cfg := Config{
		Replicas: []string{servers[0].URL()}, AdminURLs: []string{servers[0].AdminURL()}, StatusURLs: []string{servers[0].AdminURL()}, AdminToken: smokeToken,
		Sites: 2, Daemons: 4, Duration: 2 * time.Second, Drain: 30 * time.Second, TTL: 60 * time.Second,
		Arrivals: ArrivalsPoisson, Profile: ProfileReal, Heartbeat: 2 * time.Second, SitePump: 50 * time.Millisecond,
	}
	rep, err := Ramp(ctx, cfg, []float64{10, 20}, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Steps) != 2 || rep.Highest != 20 || rep.Limit != 0 {
		t.Fatalf("generous limit: want both steps sustained (highest 20, no limit), got highest %g limit %g, %d steps: %+v", rep.Highest, rep.Limit, len(rep.Steps), rep.Steps)
	}
	for _, st := range rep.Steps {
		r := st.Report
		if !st.Sustained || st.Why != "" || !r.OK() || r.Settings.Rate != st.Rate || r.Settings.Profile != ProfileReal || r.Settings.Arrivals != ArrivalsPoisson {
			t.Fatalf("step %g: %+v (settings %+v)", st.Rate, st, r.Settings)
		}
		// Poisson arrivals over 2 s: the count varies, the mean is rate×2.
		if r.Jobs.Attempted < int64(st.Rate) || r.Jobs.Attempted > int64(st.Rate*4) || r.Jobs.Collected != r.Jobs.Enqueued {
			t.Fatalf("step %g: %d attempted, %d enqueued, %d collected", st.Rate, r.Jobs.Attempted, r.Jobs.Enqueued, r.Jobs.Collected)
		}
		if r.Requests == 0 || st.LoadgenCPUMsPerJob <= 0 || st.P99Ms < st.P50Ms {
			t.Fatalf("step %g: requests %d, loadgen CPU/job %g, p50 %g p99 %g", st.Rate, r.Requests, st.LoadgenCPUMsPerJob, st.P50Ms, st.P99Ms)
		}
		// The real profile: a heartbeat before every claim, and sites that
		// read pending and results once a pump cycle each.
		e := r.Endpoints
		if e["heartbeat"].Requests < e["claim"].Requests || e["site/pending"].Requests == 0 ||
			abs(e["site/pending"].Requests-e["site/results"].Requests) > cfg.Sites {
			t.Fatalf("step %g: not the real profile's request mix: %+v", st.Rate, e)
		}
	}

	rep, err = Ramp(ctx, cfg, []float64{10, 20}, time.Microsecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Steps) != 1 || rep.Highest != 0 || rep.Limit != 10 || rep.Steps[0].Sustained || !strings.Contains(rep.Steps[0].Why, "p99") {
		t.Fatalf("impossible limit: want one failed step naming p99, got highest %g limit %g: %+v", rep.Highest, rep.Limit, rep.Steps)
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func TestRampRefusesBadRates(t *testing.T) {
	t.Parallel()
	for _, rates := range [][]float64{nil, {0}, {10, 5}, {10, 10}, {-1}} {
		if _, err := Ramp(context.Background(), Config{}, rates, time.Second, nil); err == nil {
			t.Fatalf("rates %v accepted", rates)
		}
	}
	if _, err := Ramp(context.Background(), Config{}, []float64{1}, 0, nil); err == nil {
		t.Fatal("a zero p99 limit accepted")
	}
}

// Sustained names every reason a step fails, and none for a clean one.
func TestSustained(t *testing.T) {
	t.Parallel()
	clean := func() *Report {
		return &Report{
			Settings:         Settings{Rate: 100},
			OfferedPerSecond: 99,
			Jobs:             JobCounts{Attempted: 500, Enqueued: 500, Collected: 500},
			Phases:           map[string]Latency{"end-to-end": {P50Ms: 200, P99Ms: 800}},
		}
	}
	if ok, why := clean().Sustained(time.Second); !ok || why != "" {
		t.Fatalf("clean run: %v %q", ok, why)
	}
	for _, tc := range []struct {
		name, want string
		spoil      func(*Report)
	}{
		{"slow", "p99 1200 ms", func(r *Report) { r.Phases["end-to-end"] = Latency{P99Ms: 1200} }},
		{"lost", "lost 3", func(r *Report) { r.Jobs.Collected, r.Jobs.Lost = 497, 3 }},
		{"refused", "2 enqueues refused", func(r *Report) { r.Jobs.EnqueueFailed = 2 }},
		{"errors", "4 unexpected answers", func(r *Report) { r.Errors = 4 }},
		{"offered short", "offered 90.0 jobs/s of 100.0", func(r *Report) { r.OfferedPerSecond = 90 }},
		{"poisson offered short, on time", "", func(r *Report) { r.OfferedPerSecond, r.Settings.Arrivals = 90, ArrivalsPoisson }},
		{"behind schedule", "fell behind", func(r *Report) { r.ArrivalLag = Latency{P90Ms: 150, P99Ms: 300} }},
		{"one pause", "", func(r *Report) { r.ArrivalLag = Latency{P90Ms: 20, P99Ms: 150} }},
	} {
		r := clean()
		tc.spoil(r)
		if ok, why := r.Sustained(time.Second); tc.want == "" {
			if !ok {
				t.Fatalf("%s: not sustained: %s", tc.name, why)
			}
		} else if ok || !strings.Contains(why, tc.want) {
			t.Fatalf("%s: %v %q, want a reason containing %q", tc.name, ok, why, tc.want)
		}
	}
}

// pollDelay keeps the Runner's ladder: each rung's share of the heartbeat
// plus 200-500 ms below the top, ±15% at the top.
func TestPollDelay(t *testing.T) {
	t.Parallel()
	hb := 10 * time.Second
	for step := range 9 {
		rung := pollLadder[min(step, len(pollLadder)-1)]
		lo, hi := time.Duration(float64(hb)*rung)+200*time.Millisecond, time.Duration(float64(hb)*rung)+500*time.Millisecond
		if rung == 1 {
			lo, hi = time.Duration(float64(hb)*0.85), time.Duration(float64(hb)*1.15)
		}
		for range 200 {
			if d := pollDelay(step, hb); d < lo || d > hi {
				t.Fatalf("step %d: %s outside [%s, %s]", step, d, lo, hi)
			}
		}
	}
}
