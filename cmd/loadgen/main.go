// Command loadgen drives a BYOLLM relay with simulated sites and daemons and
// reports throughput, latency and whether every job ran exactly once.
//
//	go run ./cmd/loadgen -replicas http://127.0.0.1:8080 -admin http://127.0.0.1:8081 -jobs 2000 -concurrency 64
//
// The admin token comes from -admin-token or RELAY_ADMIN_TOKEN. Exit status:
// 0 when the run balanced, 1 when jobs were lost or run twice, 2 on a setup
// error.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/byollm/relay-go/internal/loadgen"
)

func main() {
	// The load generator is the harness: every CPU second it spends on
	// garbage collection is one the relay's figure may be short of when it
	// shares the machine. Memory is not what it is short of, so it collects
	// less often unless GOGC says otherwise.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	os.Exit(run())
}

func run() int {
	var (
		c         loadgen.Config
		replicas  = flag.String("replicas", "http://127.0.0.1:8080", "comma-separated relay base URLs; requests rotate over them")
		admin     = flag.String("admin", "http://127.0.0.1:8081", "comma-separated projection admin base URLs; the projection is sent to each")
		jsonOut   = flag.String("json", "", "also write the report as JSON to this file")
		quiet     = flag.Bool("quiet", false, "no progress line")
		progEvery = flag.Duration("progress-every", 10*time.Second, "when stderr is not a terminal (a log), write a progress line this often")
		failover  = flag.Duration("failover-for", loadgen.DefaultFailoverFor, "with several -replicas: send a request that got no answer at all (connection refused or reset, a timeout) to the other replicas for up to this long; 0 turns it off")
		ramp      = flag.String("ramp", "", "comma-separated ascending rates (jobs/s): one open-loop run of -duration (or -jobs) per rate, stopping after the first the relay does not sustain; the report is the ramp's")
		maxP99    = flag.Duration("max-p99", time.Second, "ramp: a step whose end-to-end p99 is over this is not sustained")
		cpuProf   = flag.String("cpuprofile", "", "write this process's CPU profile (pprof) to this file")
	)
	flag.StringVar(&c.AdminToken, "admin-token", os.Getenv("RELAY_ADMIN_TOKEN"), "admin bearer token (default $RELAY_ADMIN_TOKEN)")
	flag.StringVar(&c.BasePath, "base-path", "/byollm", "daemon plane mount path")
	flag.IntVar(&c.Sites, "sites", 4, "simulated sites")
	flag.IntVar(&c.Daemons, "daemons", 8, "simulated daemons (devices)")
	flag.IntVar(&c.Owners, "owners", 0, "device owners the daemons are spread over (default: one per daemon)")
	flag.IntVar(&c.Jobs, "jobs", 0, "stop after this many jobs (0: bounded by -duration only; both 0: 1000 jobs)")
	flag.DurationVar(&c.Duration, "duration", 0, "stop enqueuing after this long (0: bounded by -jobs only)")
	flag.Float64Var(&c.Rate, "rate", 0, "open loop: jobs per second offered (0: closed loop)")
	flag.IntVar(&c.Concurrency, "concurrency", 0, "closed loop: jobs in flight (default 32 when -rate is 0)")
	flag.DurationVar(&c.Drain, "drain", 0, "after enqueuing stops, wait this long for jobs to finish (default 30s)")
	flag.IntVar(&c.PayloadChars, "payload", 256, "prompt size in characters")
	flag.DurationVar(&c.TTL, "ttl", 0, "job deadline after enqueue; the relay drops the job and its result then (default 60s)")
	flag.Int64Var(&c.LeaseMs, "lease-ms", 0, "expected relay lease in ms; claims echoing another value count as errors (0: not checked)")
	flag.DurationVar(&c.Heartbeat, "heartbeat", 0, "daemon heartbeat period (default 5s)")
	flag.IntVar(&c.DaemonSlots, "slots", 8, "jobs one daemon runs at once (its claim max, 1..64)")
	flag.DurationVar(&c.ClaimPoll, "claim-poll", 0, "idle daemon's pause between empty claims (default 50ms)")
	flag.DurationVar(&c.FetchPoll, "fetch-poll", 0, "daemon's pause between not-ready fetches (default 10ms)")
	flag.DurationVar(&c.PendingPoll, "pending-poll", 0, "site's period for GET pending (default 20ms)")
	flag.DurationVar(&c.ResultsPoll, "results-poll", 0, "site's period for GET results (default 100ms)")
	flag.StringVar(&c.Profile, "profile", loadgen.ProfileAggressive, `"aggressive": poll as fast as -claim-poll, -heartbeat, -pending-poll and -results-poll say; "real": daemons poll like the byollm 0.1.1 Runner (heartbeat+claim per tick, poll ladder up to -heartbeat, default 10s) and sites pump like the @byollm/server 0.1.1 cloud lane every -site-pump`)
	flag.StringVar(&c.Arrivals, "arrivals", loadgen.ArrivalsEven, `open loop: "even" (one job every 1/rate) or "poisson" (exponential gaps)`)
	flag.DurationVar(&c.SitePump, "site-pump", 0, "real profile: pause between a site's pump cycles (pending, seals, results; default 100ms)")
	flag.BoolVar(&c.IdleStart, "idle-start", false, "real profile: daemons start as a long-idle fleet (top rung of the poll ladder, first tick at a random moment of the first heartbeat) instead of all at once")
	flag.StringVar(&c.Pair, "pair", loadgen.PairFixture, `"fixture": fixture-shape POST /byollm/pair per daemon; "none": authenticate from the projection alone`)
	flag.StringVar(&c.Projection, "projection", loadgen.ProjectionMerge, `"merge": POST /projection/merge (leaves other records alone); "put": PUT /projection (replaces everything)`)
	flag.StringVar(&c.RunID, "run-id", "", "prefix of every site, owner and runner id (default: random)")
	flag.DurationVar(&c.RetryFor, "retry-for", 0, "send a request refused by a transport error, 502, 503 or 504 again, to the next replica, for up to this long (0: never; each refusal is an error of the run)")
	flag.IntVar(&c.CancelEvery, "cancel-every", 0, "sites cancel every n-th job right after enqueuing it (0: none)")
	flag.IntVar(&c.AbandonEvery, "abandon-every", 0, "daemons drop every n-th grant without a word, as a crashed daemon does (0: none)")
	flag.IntVar(&c.ReleaseEvery, "release-every", 0, "daemons hand every n-th grant straight back (0: none)")
	flag.BoolVar(&c.Team, "team", false, "every job is a teammate's (audience team, routed by a roster): the routing of -grants with nothing to grant")
	flag.BoolVar(&c.Grants, "grants", false, "like -team against a relay with a grant engine (RELAY_GRANT_KEY_FILE): pushes the policy through POST /policy/merge and requires every claimed job to carry a grant that verifies against the key the pairing handed over")
	flag.BoolVar(&c.AllowRemote, "allow-remote", false, "allow a target that is not this machine (only for relays you operate)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "loadgen: unexpected argument %q (options are flags, see -h)\n", flag.Arg(0))
		return 2
	}
	c.Replicas = splitList(*replicas)
	c.AdminURLs = splitList(*admin)
	c.FailoverFor = *failover
	if *failover <= 0 {
		c.FailoverFor = -1 // off; 0 in Config means the default
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "loadgen: cpu profile: %v\n", err)
			return 2
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	if *ramp != "" {
		return runRamp(ctx, c, *ramp, *maxP99, *jsonOut)
	}
	// A live line on a terminal; a line every -progress-every in a log
	// (CI), so a long run shows it is alive.
	var progress *os.File
	if !*quiet {
		progress = os.Stderr
		if !loadgen.IsTerminal(os.Stderr) {
			c.ProgressEvery = max(*progEvery, time.Second)
		}
	}
	var rep *loadgen.Report
	var err error
	if progress != nil {
		rep, err = loadgen.Run(ctx, c, progress)
	} else {
		rep, err = loadgen.Run(ctx, c, nil)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "loadgen: %v\n", err)
		return 2
	}
	rep.WriteText(os.Stdout)
	if *jsonOut != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err == nil {
			err = os.WriteFile(*jsonOut, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "loadgen: write %s: %v\n", *jsonOut, err)
			return 2
		}
	}
	if !rep.OK() {
		return 1
	}
	return 0
}

// runRamp runs the ramp and prints one line per step and the verdict.
// Exit status 0 when it ran (whatever the highest rate), 2 on a setup error.
func runRamp(ctx context.Context, c loadgen.Config, list string, maxP99 time.Duration, jsonOut string) int {
	var rates []float64
	for _, p := range splitList(list) {
		r, err := strconv.ParseFloat(p, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "loadgen: -ramp: %q is not a rate\n", p)
			return 2
		}
		rates = append(rates, r)
	}
	rep, err := loadgen.Ramp(ctx, c, rates, maxP99, os.Stdout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "loadgen: %v\n", err)
		if rep == nil || len(rep.Steps) == 0 {
			return 2
		}
	}
	fmt.Printf("highest sustained: %g jobs/s (first not sustained: %g; p99 limit %s)\n", rep.Highest, rep.Limit, maxP99)
	if jsonOut != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err == nil {
			err = os.WriteFile(jsonOut, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "loadgen: write %s: %v\n", jsonOut, err)
			return 2
		}
	}
	return 0
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
