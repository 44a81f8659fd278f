// Package bench holds the benchmark scripts' smoke tests; the scripts and
// their helper programs (storebench, verifybench) live beside it.
package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCapacitySmoke runs test/bench/capacity.sh with BENCH_SMOKE=1 (this
// tree as both old and new, one replica, one two-step ramp, seconds-long
// cost runs, a floor run after each new one) and checks the report's shape
// and logic, not its speed: a ramp whose highest sustained rate is one of
// its steps and below the first that failed, pinned to its own core when
// there are two, with a spread that is its rounds' min, median and max;
// costs for every profile with jobs and requests behind them, new/old
// ratios that are the quotient of their columns, figures divided by a
// verification time that was measured, and per-request figures divided by
// a floor that served requests of its own.
func TestCapacitySmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the relay and runs it for about a minute")
	}
	for _, tool := range []string{"git", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	md, out := runScript(t, "capacity.sh", 5*time.Minute, "BENCH_SMOKE=1",
		"IDLE_DAEMONS="+strconv.Itoa(smokeIdleDaemons), "CAP_PIN=1", "CAP_RAMPS=", "CAP_RAMP_ONLY=")
	for _, want := range []string{"## Highest sustained rate", "## Cost per unit", "relay CPU per signed request", "Valkey memory per queued job", "new ×1",
		"Spread over the ramps", "## The floor", "new ÷ floor"} {
		if !bytes.Contains(md, []byte(want)) {
			t.Fatalf("capacity.md lacks %q:\n%s", want, md)
		}
	}
	raw, err := os.ReadFile(out + "/capacity.json")
	if err != nil {
		t.Fatal(err)
	}
	type spread struct {
		N          int      `json:"n"`
		Min        float64  `json:"min"`
		Median     float64  `json:"median"`
		Max        float64  `json:"max"`
		MaxOverMin *float64 `json:"maxOverMin"`
	}
	var rep struct {
		VerifyUs float64 `json:"verifyUs"`
		Pinning  struct {
			Pinned    bool   `json:"pinned"`
			TargetCPU *int   `json:"targetCpu"`
			Note      string `json:"note"`
		} `json:"pinning"`
		RampRounds int `json:"rampRounds"`
		Ramps      map[string]struct {
			Rounds []struct {
				Round      int     `json:"round"`
				Highest    float64 `json:"highest"`
				Limit      float64 `json:"limit"`
				TargetCpus string  `json:"targetCpus"`
				ValkeyCpus string  `json:"valkeyCpus"`
				Steps      []struct {
					Rate      float64 `json:"rate"`
					Sustained bool    `json:"sustained"`
					Why       string  `json:"why"`
				} `json:"steps"`
			} `json:"rounds"`
			Highest *spread `json:"highest"`
		} `json:"ramps"`
		Costs map[string]struct {
			Jobs              float64  `json:"jobs"`
			Requests          float64  `json:"requests"`
			RelayUsPerRequest *float64 `json:"relayUsPerRequest"`
			RelayMsPerJob     *float64 `json:"relayMsPerJob"`
			ValkeyMsPerJob    *float64 `json:"valkeyMsPerJob"`
			ScriptsPerJob     *float64 `json:"scriptsPerJob"`
			RelayOverFloor    *float64 `json:"relayOverFloor"`
			// Over the floor that wrote the relay's answer bytes too.
			RelayOverFloorBytes   *float64 `json:"relayOverFloorBytes"`
			AnswerBytesPerRequest *float64 `json:"answerBytesPerRequest"`
		} `json:"costs"`
		Floor map[string]struct {
			Requests           float64  `json:"requests"`
			RateAsked          float64  `json:"rateAsked"`
			Clients            float64  `json:"clients"`
			ServerUsPerRequest *float64 `json:"serverUsPerRequest"`
			ValkeyUsPerRequest *float64 `json:"valkeyUsPerRequest"`
			AnswerBytesAsked   float64  `json:"answerBytesAsked"`
			// What the driver read, ÷ the requests answered.
			AnswerBytesPerRequest *float64 `json:"answerBytesPerRequest"`
		} `json:"floor"`
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
	rt, ok := rep.Ramps["new-1"]
	if !ok || rep.RampRounds != 1 || len(rt.Rounds) != rep.RampRounds {
		t.Fatalf("want one ramp round for new-1 (BENCH_SMOKE), got %d of %d: %s", len(rt.Rounds), rep.RampRounds, raw)
	}
	r := rt.Rounds[0]
	if len(r.Steps) == 0 {
		t.Fatalf("no ramp steps for new-1: %s", raw)
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
	// One round: its spread is that round's rate, max ÷ min 1.
	if h := rt.Highest; r.Highest > 0 && (h == nil || h.N != 1 || h.Min != r.Highest || h.Median != r.Highest || h.Max != r.Highest || h.MaxOverMin == nil || *h.MaxOverMin != 1) {
		t.Fatalf("spread of one ramp at %g: %+v", r.Highest, h)
	}
	// Two cores and taskset: the relay and its Valkey ran on the target's
	// core alone, as read back from /proc while the ramp ran.
	if _, err := exec.LookPath("taskset"); err == nil && runtime.NumCPU() >= 2 {
		if !rep.Pinning.Pinned || rep.Pinning.TargetCPU == nil {
			t.Fatalf("two cores and taskset, ramps not pinned: %+v", rep.Pinning)
		}
		if want := strconv.Itoa(*rep.Pinning.TargetCPU); r.TargetCpus != want || r.ValkeyCpus != want {
			t.Fatalf("ramp not pinned to cpu %s: %+v, relay on %q, Valkey on %q", want, rep.Pinning, r.TargetCpus, r.ValkeyCpus)
		}
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
	// The floor served requests of its own at the rate of the run it copies,
	// and the relay's per-request figure ÷ the floor's is what the report
	// says it is.
	for _, p := range []string{"idle", "aggressive", "real"} {
		fl, ok := rep.Floor[p]
		if !ok || fl.Requests <= 0 || fl.RateAsked <= 0 || fl.Clients <= 0 || fl.ServerUsPerRequest == nil || *fl.ServerUsPerRequest <= 0 || fl.ValkeyUsPerRequest == nil {
			t.Fatalf("floor %s missing or empty: %+v", p, fl)
		}
		c := rep.Costs["new-1-"+p]
		if c.RelayOverFloor == nil {
			t.Fatalf("new-1-%s: no ratio to the floor", p)
		}
		if got, want := *c.RelayOverFloor, *c.RelayUsPerRequest / *fl.ServerUsPerRequest; got < want*0.999 || got > want*1.001 {
			t.Fatalf("new-1-%s: relay ÷ floor %v, want %v", p, got, want)
		}
	}
	// Under load a second floor wrote the relay's answer bytes: each
	// answer padded to the run's mean, which the driver read back.
	for _, p := range []string{"aggressive", "real"} {
		fl, ok := rep.Floor[p+"-bytes"]
		c := rep.Costs["new-1-"+p]
		if !ok || fl.Requests <= 0 || fl.ServerUsPerRequest == nil || fl.AnswerBytesPerRequest == nil || c.AnswerBytesPerRequest == nil {
			t.Fatalf("floor %s-bytes missing or empty: %+v (relay run %+v)", p, fl, c)
		}
		if relay := *c.AnswerBytesPerRequest; relay <= 0 || fl.AnswerBytesAsked < relay-1 || fl.AnswerBytesAsked > relay+1 || *fl.AnswerBytesPerRequest != fl.AnswerBytesAsked {
			t.Fatalf("floor %s-bytes: asked %v bytes an answer, read %v; the relay answered %v", p, fl.AnswerBytesAsked, *fl.AnswerBytesPerRequest, relay)
		}
		if c.RelayOverFloorBytes == nil {
			t.Fatalf("new-1-%s: no ratio to the floor with its answer bytes", p)
		}
		if got, want := *c.RelayOverFloorBytes, *c.RelayUsPerRequest / *fl.ServerUsPerRequest; got < want*0.999 || got > want*1.001 {
			t.Fatalf("new-1-%s: relay ÷ floor with its answer bytes %v, want %v", p, got, want)
		}
	}
	if _, ok := rep.Floor["idle-bytes"]; ok {
		t.Fatal("a floor with the relay's answer bytes for the idle fleet, whose answers are as short as the floor's")
	}
	if want := rep.Floor["idle"].Clients; want != float64(smokeIdleDaemons+1) {
		t.Fatalf("idle floor with %v clients, want the fleet's %d daemons and its site", want, smokeIdleDaemons)
	}
	for _, k := range []string{"old", "new"} {
		s := rep.Store[k]
		if s.Queued <= 0 || s.Env <= 0 || s.Beyond != s.Finished-s.Env {
			t.Fatalf("store %s: %+v", k, s)
		}
	}
	// The markdown's "new ÷ floor" cell of the idle row is the JSON's ratio.
	idleRow := false
	for _, line := range strings.Split(string(md), "\n") {
		if !strings.HasPrefix(line, "| relay CPU per signed request, µs (400 mostly idle daemons) | idle |") {
			continue
		}
		idleRow = true
		var q float64
		cells := strings.Split(line, "|")
		if _, err := fmtSscan(strings.TrimSuffix(strings.TrimSpace(cells[7]), "×"), &q); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if want := *rep.Costs["new-1-idle"].RelayOverFloor; q < want-0.0051 || q > want+0.0051 {
			t.Fatalf("%q: new ÷ floor %v, JSON says %v", line, q, want)
		}
	}
	if !idleRow {
		t.Fatalf("no idle relay row:\n%s", md)
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
		// Each cell is rounded to the digits it shows, so the quotient of
		// the shown columns is known only within what that rounding allows
		// (8.4 and 19.7 allow 2.33 to 2.36).
		do, dn, dq := halfUnit(cells[3]), halfUnit(cells[4]), halfUnit(cells[5])
		if o-do <= 0 || q+dq < (n-dn)/(o+do) || q-dq > (n+dn)/(o-do) {
			t.Fatalf("%q: new/old %v is not %v/%v", line, q, n, o)
		}
		return
	}
	t.Fatalf("no scripts-per-job row:\n%s", md)
}

// halfUnit is half the last digit a table cell shows: how far its rounded
// number may be from the value it was rounded from.
func halfUnit(cell string) float64 {
	cell = strings.TrimSpace(cell)
	d := 0
	if i := strings.IndexByte(cell, '.'); i >= 0 {
		d = len(strings.TrimRight(cell[i+1:], "×% "))
	}
	return 0.5 / math.Pow(10, float64(d))
}

// smokeIdleDaemons is BENCH_SMOKE's idle fleet (capacity.sh's IDLE_DAEMONS).
const smokeIdleDaemons = 20

func fmtSscan(s string, f *float64) (int, error) {
	return fmt.Sscan(strings.ReplaceAll(strings.TrimSpace(s), ",", ""), f)
}
