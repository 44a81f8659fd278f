package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/byollm/relay-go/test/relaytest"
)

// TestRoundtripsSmoke runs test/bench/roundtrips.sh at two rates, two
// rounds of seconds-long runs, and checks the slope report's arithmetic
// against the runs' own totals, not the figures: each round's slope is
// the change in a total over the change in jobs between its two rates,
// and the median lies within the rounds' range.
func TestRoundtripsSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the relay and runs it for about half a minute")
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not installed")
	}
	md, out := runScript(t, "roundtrips.sh", 4*time.Minute,
		"RT_RATES=5 20", "RT_FOR=3s", "RT_ROUNDS=2", "RT_PROFILES=aggressive", "RT_VARIANTS=tree:", "RT_OLD_REV=", "RT_RATE=")
	if want := "## What a job adds, by slope (5 → 20 jobs/s)"; !bytes.Contains(md, []byte(want)) {
		t.Fatalf("roundtrips.md lacks %q:\n%s", want, md)
	}

	// A run's totals over its window, and a slope (their change per job),
	// have the same fields but jobs.
	type figures struct {
		ValkeyMs float64 `json:"valkeyMs"`
		RelayMs  float64 `json:"relayMs"`
		Reads    float64 `json:"reads"`
		Scripts  float64 `json:"scripts"`
		Commands float64 `json:"commands"`
	}
	type totals struct {
		figures
		Jobs float64 `json:"jobs"`
	}
	var runs []struct {
		Name   string `json:"name"`
		Round  int    `json:"round"`
		Rate   int    `json:"rate"`
		Lost   int    `json:"lost"`
		Totals totals `json:"totals"`
	}
	readJSON(t, out+"/roundtrips.json", &runs)
	if len(runs) != 4 {
		t.Fatalf("%d runs, want 2 rates × 2 rounds", len(runs))
	}
	byRound := map[int]map[int]totals{}
	for _, r := range runs {
		if r.Lost != 0 || r.Totals.Jobs == 0 || r.Totals.ValkeyMs <= 0 || r.Totals.Scripts <= 0 {
			t.Fatalf("run %s: lost %d, totals %+v", r.Name, r.Lost, r.Totals)
		}
		if byRound[r.Round] == nil {
			byRound[r.Round] = map[int]totals{}
		}
		byRound[r.Round][r.Rate] = r.Totals
	}

	var slopes []struct {
		Label   string `json:"label"`
		Profile string `json:"profile"`
		Rounds  []struct {
			figures
			Round int   `json:"round"`
			Rates []int `json:"rates"`
		} `json:"rounds"`
		Median figures `json:"median"`
		Min    figures `json:"min"`
		Max    figures `json:"max"`
	}
	readJSON(t, out+"/roundtrips-slope.json", &slopes)
	if len(slopes) != 1 || slopes[0].Label != "tree" || slopes[0].Profile != "aggressive" || len(slopes[0].Rounds) != 2 {
		t.Fatalf("slopes: %+v, want one variant and profile with two rounds", slopes)
	}
	s := slopes[0]
	for _, p := range s.Rounds {
		lo, hi := byRound[p.Round][5], byRound[p.Round][20]
		if len(p.Rates) != 2 || p.Rates[0] != 5 || p.Rates[1] != 20 {
			t.Fatalf("round %d between rates %v, want [5 20]", p.Round, p.Rates)
		}
		if hi.Jobs <= lo.Jobs {
			t.Fatalf("round %d: %v jobs at 20/s, not more than %v at 5/s", p.Round, hi.Jobs, lo.Jobs)
		}
		dj := hi.Jobs - lo.Jobs
		for _, c := range []struct {
			name      string
			got, want float64
		}{
			{"valkeyMs", p.ValkeyMs, (hi.ValkeyMs - lo.ValkeyMs) / dj},
			{"relayMs", p.RelayMs, (hi.RelayMs - lo.RelayMs) / dj},
			{"reads", p.Reads, (hi.Reads - lo.Reads) / dj},
			{"scripts", p.Scripts, (hi.Scripts - lo.Scripts) / dj},
			{"commands", p.Commands, (hi.Commands - lo.Commands) / dj},
		} {
			if math.Abs(c.got-c.want) > 1e-9*math.Max(1, math.Abs(c.want)) {
				t.Fatalf("round %d %s slope %v, want %v from the runs' totals", p.Round, c.name, c.got, c.want)
			}
		}
	}
	for _, c := range []struct {
		name          string
		med, lo, hi   float64
		first, second float64
	}{
		{"valkeyMs", s.Median.ValkeyMs, s.Min.ValkeyMs, s.Max.ValkeyMs, s.Rounds[0].ValkeyMs, s.Rounds[1].ValkeyMs},
		{"scripts", s.Median.Scripts, s.Min.Scripts, s.Max.Scripts, s.Rounds[0].Scripts, s.Rounds[1].Scripts},
	} {
		if c.lo != math.Min(c.first, c.second) || c.hi != math.Max(c.first, c.second) || c.med < c.lo || c.med > c.hi {
			t.Fatalf("%s: median %v, range %v–%v, rounds %v and %v", c.name, c.med, c.lo, c.hi, c.first, c.second)
		}
	}
}

// TestRoundtripsRefusesRates checks that a rate that is not a whole number
// of jobs a second stops the script before it builds or starts anything.
func TestRoundtripsRefusesRates(t *testing.T) {
	server := relaytest.ServerBinary(t)
	for _, rates := range []string{"fast", "50 0", "50 -1", "1.5"} {
		cmd := exec.Command("bash", "roundtrips.sh")
		cmd.Env = append(os.Environ(), "BENCH_OUT="+t.TempDir(), "BENCH_SERVER="+server, "RT_RATES="+rates)
		got, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !bytes.Contains(got, []byte("RT_RATES")) {
			t.Fatalf("RT_RATES=%q: %v\n%s", rates, err, got)
		}
		if bytes.Contains(got, []byte("building")) {
			t.Fatalf("RT_RATES=%q: built before refusing:\n%s", rates, got)
		}
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
