// Package bench holds the benchmark scripts' smoke test; the scripts and
// their helper programs (storebench, verifybench) live beside it.
package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/byollm/relay-go/test/relaytest"
)

// TestCapacitySmoke runs test/bench/capacity.sh with BENCH_SMOKE=1 (this
// tree as both old and new, one replica, a two-step ramp, seconds-long cost
// runs) and checks the report's shape and logic, not its speed: a ramp
// whose highest sustained rate is one of its steps and below the first that
// failed, costs for every profile with jobs and requests behind them,
// new/old ratios that are the quotient of their columns, and figures
// divided by a verification time that was measured.
func TestCapacitySmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the relay and runs it for about a minute")
	}
	server := relaytest.ServerBinary(t) // the suite's server: the smoke runs on it too
	for _, tool := range []string{"git", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out := t.TempDir()
	cmd := exec.CommandContext(ctx, "bash", "capacity.sh")
	cmd.Env = append(os.Environ(), "BENCH_SMOKE=1", "BENCH_OUT="+out, "BENCH_SERVER="+server)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	md, err := cmd.Output()
	if err != nil {
		t.Fatalf("capacity.sh: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{"## Highest sustained rate", "## Cost per unit", "relay CPU per signed request", "Valkey memory per queued job", "new ×1"} {
		if !bytes.Contains(md, []byte(want)) {
			t.Fatalf("capacity.md lacks %q:\n%s", want, md)
		}
	}
	raw, err := os.ReadFile(out + "/capacity.json")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		VerifyUs float64 `json:"verifyUs"`
		Ramps    map[string]struct {
			Highest float64 `json:"highest"`
			Limit   float64 `json:"limit"`
			Steps   []struct {
				Rate      float64 `json:"rate"`
				Sustained bool    `json:"sustained"`
				Why       string  `json:"why"`
			} `json:"steps"`
		} `json:"ramps"`
		Costs map[string]struct {
			Jobs              float64  `json:"jobs"`
			Requests          float64  `json:"requests"`
			RelayUsPerRequest *float64 `json:"relayUsPerRequest"`
			RelayMsPerJob     *float64 `json:"relayMsPerJob"`
			ValkeyMsPerJob    *float64 `json:"valkeyMsPerJob"`
			ScriptsPerJob     *float64 `json:"scriptsPerJob"`
		} `json:"costs"`
		Store map[string]struct {
			Queued   float64 `json:"memPerQueuedJobBytes"`
			Finished float64 `json:"memPerFinishedJobBytes"`
			Beyond   float64 `json:"beyondEnvelopes"`
			Env      float64 `json:"finishedJobEnvelopeBytes"`
		} `json:"store"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.VerifyUs <= 0 {
		t.Fatalf("no verification time: %v", rep.VerifyUs)
	}
	r, ok := rep.Ramps["new-1"]
	if !ok || len(r.Steps) == 0 {
		t.Fatalf("no ramp for new-1: %s", raw)
	}
	for i, st := range r.Steps {
		if st.Sustained == (st.Why != "") {
			t.Fatalf("step %g: sustained %v with reason %q", st.Rate, st.Sustained, st.Why)
		}
		if !st.Sustained && i < len(r.Steps)-1 && st.Rate != r.Limit {
			t.Fatalf("the ramp went on after step %g failed", st.Rate)
		}
	}
	if r.Highest != 0 && (r.Limit != 0 && r.Highest >= r.Limit) {
		t.Fatalf("highest sustained %g not below the first failure %g", r.Highest, r.Limit)
	}
	for _, name := range []string{"old-1-aggressive", "new-1-aggressive", "old-1-real", "new-1-real", "old-1-idle", "new-1-idle"} {
		c, ok := rep.Costs[name]
		if !ok || c.Jobs == 0 || c.Requests <= c.Jobs || c.RelayUsPerRequest == nil || c.RelayMsPerJob == nil || c.ValkeyMsPerJob == nil || c.ScriptsPerJob == nil {
			t.Fatalf("cost run %s missing or empty: %+v", name, c)
		}
		if *c.RelayMsPerJob <= 0 || *c.ScriptsPerJob <= 0 {
			t.Fatalf("cost run %s: relay %v ms/job, %v scripts/job", name, *c.RelayMsPerJob, *c.ScriptsPerJob)
		}
		// Per request and per job are the same CPU over different counts.
		if got, want := *c.RelayUsPerRequest*c.Requests, *c.RelayMsPerJob*1000*c.Jobs; got < want*0.999 || got > want*1.001 {
			t.Fatalf("cost run %s: per-request and per-job figures disagree (%v vs %v µs)", name, got, want)
		}
	}
	for _, k := range []string{"old", "new"} {
		s := rep.Store[k]
		if s.Queued <= 0 || s.Env <= 0 || s.Beyond != s.Finished-s.Env {
			t.Fatalf("store %s: %+v", k, s)
		}
	}
	// The markdown's new/old column is the quotient of the two before it.
	for _, line := range strings.Split(string(md), "\n") {
		if !strings.HasPrefix(line, "| Lua scripts per job | aggressive |") {
			continue
		}
		var o, n, q float64
		cells := strings.Split(line, "|")
		if _, err := fmtSscan(cells[3], &o); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		_, _ = fmtSscan(cells[4], &n)
		_, _ = fmtSscan(cells[5], &q)
		if o == 0 || q < n/o-0.011 || q > n/o+0.011 {
			t.Fatalf("%q: new/old %v is not %v/%v", line, q, n, o)
		}
		return
	}
	t.Fatalf("no scripts-per-job row:\n%s", md)
}

func fmtSscan(s string, f *float64) (int, error) {
	return fmt.Sscan(strings.ReplaceAll(strings.TrimSpace(s), ",", ""), f)
}
