package loadgen

import (
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// Phases in the order a job passes through them.
var phaseOrder = []string{"enqueue", "queue-wait", "seal", "fetch", "result", "collect", "end-to-end"}

// Report is the outcome of a run; its JSON form is what -json writes.
type Report struct {
	RunID     string    `json:"runId"`
	StartedAt time.Time `json:"startedAt"`
	Settings  Settings  `json:"settings"`

	EnqueueSeconds float64 `json:"enqueueSeconds"` // until the count or time bound stopped new work
	ElapsedSeconds float64 `json:"elapsedSeconds"` // first enqueue to last collection
	Throughput     float64 `json:"jobsPerSecond"`  // collected / elapsed
	// OfferedPerSecond is the enqueue attempts per second of the enqueue
	// window: in an open loop, the rate the load generator managed to
	// offer (it falls short of Settings.Rate when it is itself the
	// bottleneck, or when enqueues back up).
	OfferedPerSecond float64 `json:"offeredPerSecond"`
	// ArrivalLag is how late the open loop sent jobs after their scheduled
	// arrival times (open loop only).
	ArrivalLag Latency `json:"arrivalLag"`
	// Requests is every relay request of the run (all endpoints, all
	// statuses): the denominator of a cost per signed request.
	Requests int64 `json:"requests"`
	// AnswerBytes is the answer bodies of those requests, headers not
	// counted: what a service answering the same requests writes at least.
	AnswerBytes int64 `json:"answerBytes"`

	Jobs      JobCounts                 `json:"jobs"`
	Phases    map[string]Latency        `json:"phases"`
	Endpoints map[string]EndpointReport `json:"endpoints"`
	Errors    int64                     `json:"errors"` // unexpected responses, transport failures, integrity failures
	// LoadgenCPUSeconds is this process's own user+system CPU over the run:
	// on a shared machine the load generator competes with the relay.
	LoadgenCPUSeconds float64  `json:"loadgenCpuSeconds"`
	Problems          []string `json:"problems"` // the first few, verbatim
}

// Settings echoes what the run was asked to do.
type Settings struct {
	Replicas     []string `json:"replicas"`
	Admin        []string `json:"admin"`
	Sites        int      `json:"sites"`
	Daemons      int      `json:"daemons"`
	Owners       int      `json:"owners"`
	Jobs         int      `json:"jobs"`
	Duration     string   `json:"duration"`
	Rate         float64  `json:"rate"`
	Concurrency  int      `json:"concurrency"`
	PayloadChars int      `json:"payloadChars"`
	TTL          string   `json:"ttl"`
	LeaseMs      int64    `json:"leaseMs"`
	Heartbeat    string   `json:"heartbeat"`
	DaemonSlots  int      `json:"daemonSlots"`
	Pair         string   `json:"pair"`
	Profile      string   `json:"profile"`
	IdleStart    bool     `json:"idleStart"`
	Arrivals     string   `json:"arrivals"`
	Team         bool     `json:"team"`
	Grants       bool     `json:"grants"`
	RetryFor     string   `json:"retryFor"`    // retryable refusals retried this long
	FailoverFor  string   `json:"failoverFor"` // no answer retried on the other replicas this long
}

// JobCounts is the accounting every run must balance. Lost and RunTwice
// must be zero for a correct relay under a load it can carry.
type JobCounts struct {
	Attempted     int64 `json:"attempted"`
	Enqueued      int64 `json:"enqueued"`
	EnqueueFailed int64 `json:"enqueueFailed"`
	Collected     int64 `json:"collected"`   // result opened and checked by the site
	Cancelled     int64 `json:"cancelled"`   // cancelled by the site (CancelEvery) and never collected
	Lost          int64 `json:"lost"`        // enqueued, never collected, no integrity failure
	LostExpired   int64 `json:"lostExpired"` // of Lost: stub deadline passed before the end (relay dropped it by TTL)
	RunTwice      int64 `json:"runTwice"`    // more than one result accepted for one job
	Integrity     int64 `json:"integrity"`   // a payload or result failed to open or check
	Foreign       int64 `json:"foreign"`     // work for jobs this run never enqueued
	Reclaimed     int64 `json:"reclaimed"`   // claimed under more than one lease (allowed after a requeue)
	DupResults    int64 `json:"dupResults"`  // result posts answered duplicate:true
	LateSeals     int64 `json:"lateSeals"`   // payload posts answered 409
	Aborted       int64 `json:"aborted"`     // daemon gave a job up (grant lost)
	LeasesLost    int64 `json:"leasesLost"`  // heartbeat said lost or cancel for a lease in hand
	Heartbeats    int64 `json:"heartbeats"`  // heartbeats answered 200
	// Unreached counts requests (not jobs) given up with no HTTP answer
	// after every retry the run allowed: they never reached a relay, or
	// its answer never came back (a replica down, a network fault). A job
	// such a request carried can be counted lost by the load generator's
	// own transport, which is not a loss by the relay.
	Unreached int64 `json:"unreached"`
	// FailedOver counts requests sent again to another replica after one
	// gave no answer. A claim or result whose answer was lost with its
	// replica holds its job until the lease ends.
	FailedOver    int64 `json:"failedOver"`
	Released      int64 `json:"released"`      // leases handed back at shutdown or refused
	Abandoned     int64 `json:"abandoned"`     // grants dropped without a word (AbandonEvery)
	StillInFlight int64 `json:"stillInFlight"` // of Lost: deadline not yet passed when the drain ended
	// GrantsVerified counts claimed jobs whose grant the simulated daemon
	// verified (Grants runs).
	GrantsVerified int64 `json:"grantsVerified"`
}

func (r *runner) report(started, enqueueEnded time.Time, cpuAtStart float64) *Report {
	phases := map[string]*samples{}
	for _, p := range phaseOrder {
		phases[p] = &samples{}
	}
	var jc JobCounts
	now := time.Now()
	r.jobs.Range(func(_, v any) bool {
		j := v.(*job)
		j.mu.Lock()
		defer j.mu.Unlock()
		if len(j.leases) > 1 {
			jc.Reclaimed++
		}
		if j.accepted > 1 {
			jc.RunTwice++
		}
		if j.enqDone.IsZero() {
			return true
		}
		if j.collected.IsZero() {
			if j.cancelled {
				jc.Cancelled++
				return true
			}
			if !j.bad {
				jc.Lost++
				if now.UnixMilli() >= j.deadlineAt {
					jc.LostExpired++
				} else {
					jc.StillInFlight++
				}
			}
			return true
		}
		span := func(name string, from, to time.Time) {
			if !from.IsZero() && !to.IsZero() {
				phases[name].add(max(0, to.Sub(from)))
			}
		}
		span("enqueue", j.enqStart, j.enqDone)
		span("queue-wait", j.enqDone, j.claimed)
		span("seal", j.claimed, j.sealed)
		span("fetch", j.sealed, j.fetched)
		span("result", j.fetched, j.resulted)
		span("collect", j.resulted, j.collected)
		span("end-to-end", j.enqStart, j.collected)
		return true
	})
	jc.Attempted = r.attempted.Load()
	jc.Enqueued = r.enqueued.Load()
	jc.EnqueueFailed = r.enqueueFailed.Load()
	jc.Collected = r.collected.Load()
	jc.Integrity = r.integrity.Load()
	jc.Foreign = r.foreign.Load()
	jc.GrantsVerified = r.grantsVerified.Load()
	jc.DupResults = r.duplicates.Load()
	jc.LateSeals = r.lateSeals.Load()
	jc.Aborted = r.aborted.Load()
	jc.LeasesLost = r.leasesLost.Load()
	jc.Heartbeats = r.heartbeats.Load()
	jc.Unreached = r.cl.unreached.Load()
	jc.FailedOver = r.cl.failedOver.Load()
	jc.Released = r.released.Load()
	jc.Abandoned = r.abandoned.Load()

	rep := &Report{
		RunID:     r.cfg.RunID,
		StartedAt: started,
		Settings: Settings{
			Replicas: r.cfg.Replicas, Admin: r.cfg.AdminURLs, Sites: r.cfg.Sites, Daemons: r.cfg.Daemons, Owners: r.cfg.Owners,
			Jobs: r.cfg.Jobs, Duration: r.cfg.Duration.String(), Rate: r.cfg.Rate, Concurrency: r.cfg.Concurrency,
			PayloadChars: r.cfg.PayloadChars, TTL: r.cfg.TTL.String(), LeaseMs: r.cfg.LeaseMs, Heartbeat: r.cfg.Heartbeat.String(),
			DaemonSlots: r.cfg.DaemonSlots, Pair: r.cfg.Pair, Team: r.cfg.Team, Grants: r.cfg.Grants,
			Profile: r.cfg.Profile, Arrivals: r.cfg.Arrivals, IdleStart: r.cfg.IdleStart,
			RetryFor: r.cfg.RetryFor.String(), FailoverFor: r.cfg.FailoverFor.String(),
		},
		EnqueueSeconds: round3(enqueueEnded.Sub(started).Seconds()),
		Jobs:           jc,
		Phases:         map[string]Latency{},
		Endpoints:      r.stats.report(),
		Errors:         r.unexpected.Load(),

		LoadgenCPUSeconds: round3(cpuSeconds() - cpuAtStart),
	}
	if last := r.lastCollect.Load(); last > 0 {
		el := time.Unix(0, last).Sub(started).Seconds()
		rep.ElapsedSeconds = round3(el)
		if el > 0 {
			rep.Throughput = round3(float64(jc.Collected) / el)
		}
	}
	for name, s := range phases {
		rep.Phases[name] = s.summary()
	}
	rep.ArrivalLag = r.arrivalLag.summary()
	if rep.EnqueueSeconds > 0 {
		rep.OfferedPerSecond = round3(float64(jc.Attempted) / rep.EnqueueSeconds)
	}
	for _, e := range rep.Endpoints {
		rep.Requests += int64(e.Requests)
		rep.AnswerBytes += e.AnswerBytes
	}
	r.problemsMu.Lock()
	rep.Problems = slices.Clone(r.problems)
	r.problemsMu.Unlock()
	if rep.Problems == nil {
		rep.Problems = []string{}
	}
	return rep
}

// cpuSeconds is this process's user+system CPU time so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

// OK reports whether the run balanced: nothing lost, nothing run twice, no
// integrity failure, no foreign work.
func (rep *Report) OK() bool {
	j := rep.Jobs
	return j.Lost == 0 && j.RunTwice == 0 && j.Integrity == 0 && j.Foreign == 0 && j.Collected+j.Cancelled == j.Enqueued && j.Enqueued > 0
}

// maxArrivalLagMs is how late (p90) the open loop may send jobs after their
// scheduled arrival before a step counts as not offered. p90, not p99: one
// pause of the whole process (the machine busy elsewhere) delays only the
// few arrivals due during it, while a load generator short of CPU falls
// behind on most of them.
const maxArrivalLagMs = 100

// Sustained reports whether an open-loop run kept up with what it was
// offered, and if not, why: every enqueued job collected with nothing lost,
// run twice or refused, no unexpected answer, end-to-end p99 within maxP99,
// and the offered rate achieved: within 5% for even arrivals, and for both
// processes jobs sent no more than maxArrivalLagMs late (p90).
func (rep *Report) Sustained(maxP99 time.Duration) (bool, string) {
	j := rep.Jobs
	var why []string
	if !rep.OK() {
		why = append(why, fmt.Sprintf("did not balance (enqueued %d, collected %d, lost %d, run twice %d, integrity %d)", j.Enqueued, j.Collected, j.Lost, j.RunTwice, j.Integrity))
	}
	if j.EnqueueFailed > 0 {
		why = append(why, fmt.Sprintf("%d enqueues refused", j.EnqueueFailed))
	}
	if rep.Errors > 0 {
		why = append(why, fmt.Sprintf("%d unexpected answers", rep.Errors))
	}
	if p99 := rep.Phases["end-to-end"].P99Ms; p99 > float64(maxP99)/float64(time.Millisecond) {
		why = append(why, fmt.Sprintf("end-to-end p99 %.0f ms over %s", p99, maxP99))
	}
	// Poisson arrivals over a few seconds miss the mean rate by chance;
	// what says the schedule was kept is how late the jobs went out.
	if rate := rep.Settings.Rate; rate > 0 && rep.Settings.Arrivals != ArrivalsPoisson && rep.OfferedPerSecond < 0.95*rate {
		why = append(why, fmt.Sprintf("offered %.1f jobs/s of %.1f asked", rep.OfferedPerSecond, rate))
	}
	if rep.ArrivalLag.P90Ms > maxArrivalLagMs {
		why = append(why, fmt.Sprintf("jobs sent %.0f ms late (p90) after their scheduled arrival: the load generator fell behind", rep.ArrivalLag.P90Ms))
	}
	if len(why) > 0 {
		return false, strings.Join(why, "; ")
	}
	return true, ""
}

// Text is WriteText's rendering as a string.
func (rep *Report) Text() string {
	var b strings.Builder
	rep.WriteText(&b)
	return b.String()
}

// WriteText renders the report for a person.
func (rep *Report) WriteText(w io.Writer) {
	j := rep.Jobs
	fmt.Fprintf(w, "loadgen run %s against %s\n", rep.RunID, strings.Join(rep.Settings.Replicas, ", "))
	mode := fmt.Sprintf("closed loop, %d in flight", rep.Settings.Concurrency)
	if rep.Settings.Rate > 0 {
		mode = fmt.Sprintf("open loop, %.1f jobs/s asked (%s arrivals), %.1f offered", rep.Settings.Rate, rep.Settings.Arrivals, rep.OfferedPerSecond)
	}
	mode += ", " + rep.Settings.Profile + " profile"
	fmt.Fprintf(w, "  %d sites, %d daemons (%d owners, %d slots each), %s, payload %d chars, ttl %s, pair %s\n",
		rep.Settings.Sites, rep.Settings.Daemons, rep.Settings.Owners, rep.Settings.DaemonSlots, mode, rep.Settings.PayloadChars, rep.Settings.TTL, rep.Settings.Pair)
	fmt.Fprintf(w, "\nthroughput  %.1f jobs/s  (%d collected in %.2fs; enqueuing ran %.2fs; loadgen used %.1f CPU s, %d requests)\n", rep.Throughput, j.Collected, rep.ElapsedSeconds, rep.EnqueueSeconds, rep.LoadgenCPUSeconds, rep.Requests)
	fmt.Fprintf(w, "jobs        attempted %d  enqueued %d  collected %d  cancelled %d  enqueue-failed %d\n", j.Attempted, j.Enqueued, j.Collected, j.Cancelled, j.EnqueueFailed)
	fmt.Fprintf(w, "must be 0   lost %d (expired %d, in flight %d)  run-twice %d  integrity %d  foreign %d\n", j.Lost, j.LostExpired, j.StillInFlight, j.RunTwice, j.Integrity, j.Foreign)
	fmt.Fprintf(w, "other       reclaimed %d  dup-results %d  late-seals %d  aborted %d  leases-lost %d  heartbeats %d  released %d  abandoned %d  errors %d\n",
		j.Reclaimed, j.DupResults, j.LateSeals, j.Aborted, j.LeasesLost, j.Heartbeats, j.Released, j.Abandoned, rep.Errors)
	fmt.Fprintf(w, "transport   unreached %d  failed-over %d (unreached: given up without any answer from a relay; failed-over: sent again to another replica after none%s)\n", j.Unreached, j.FailedOver, retryNote(rep.Settings))
	if rep.Settings.Grants {
		fmt.Fprintf(w, "grants      every job a teammate's; %d grants verified against the pinned key\n", j.GrantsVerified)
	} else if rep.Settings.Team {
		fmt.Fprintf(w, "team        every job a teammate's (audience team), no grants asked for\n")
	}

	fmt.Fprintf(w, "\n%-14s %8s %9s %9s %9s %9s %9s\n", "phase (ms)", "count", "mean", "p50", "p90", "p99", "max")
	for _, p := range phaseOrder {
		l := rep.Phases[p]
		fmt.Fprintf(w, "%-14s %8d %9.2f %9.2f %9.2f %9.2f %9.2f\n", p, l.Count, l.MeanMs, l.P50Ms, l.P90Ms, l.P99Ms, l.MaxMs)
	}
	names := make([]string, 0, len(rep.Endpoints))
	for n := range rep.Endpoints {
		names = append(names, n)
	}
	slices.Sort(names)
	fmt.Fprintf(w, "\n%-14s %8s %9s %9s %9s %9s  %s\n", "request (ms)", "count", "p50", "p90", "p99", "max", "statuses")
	for _, n := range names {
		e := rep.Endpoints[n]
		codes := make([]int, 0, len(e.Statuses))
		for c := range e.Statuses {
			codes = append(codes, c)
		}
		slices.Sort(codes)
		var st []string
		for _, c := range codes {
			label := fmt.Sprint(c)
			if c == 0 {
				label = "neterr"
			}
			st = append(st, fmt.Sprintf("%s:%d", label, e.Statuses[c]))
		}
		fmt.Fprintf(w, "%-14s %8d %9.2f %9.2f %9.2f %9.2f  %s\n", n, e.Requests, e.Latency.P50Ms, e.Latency.P90Ms, e.Latency.P99Ms, e.Latency.MaxMs, strings.Join(st, " "))
	}
	if len(rep.Problems) > 0 {
		fmt.Fprintf(w, "\nfirst problems:\n")
		for _, p := range rep.Problems {
			fmt.Fprintf(w, "  %s\n", p)
		}
	}
	verdict := "OK: nothing lost, nothing run twice"
	switch {
	case !rep.OK() && j.Unreached > 0:
		verdict = fmt.Sprintf("FAILED: the run did not balance (see must-be-0 line); %d requests never reached a relay, so jobs they carried "+
			"may be lost by the load generator's own transport rather than by the relay: check every replica is up, or rerun with -retry-for 10s", j.Unreached)
	case !rep.OK() && j.FailedOver > 0 && j.RunTwice == 0 && j.Integrity == 0 && j.Foreign == 0:
		verdict = fmt.Sprintf("FAILED: the run did not balance (see must-be-0 line): %d jobs not collected (expired %d, in flight %d) after %d requests "+
			"failed over from a replica that stopped answering; a claim whose answer was lost with its replica holds its job for a whole lease "+
			"(RELAY_LEASE_MS), so give jobs a -ttl and a -drain longer than the lease to tell such jobs from lost ones", j.Lost, j.LostExpired, j.StillInFlight, j.FailedOver)
	case !rep.OK():
		verdict = "FAILED: the run did not balance (see must-be-0 line): jobs the relay accepted were lost or run twice"
	case j.Unreached > 0:
		verdict += fmt.Sprintf(" (%d requests never reached a relay and were given up)", j.Unreached)
	}
	fmt.Fprintf(w, "\n%s\n", verdict)
}

// IsTerminal reports whether f is a character device (a live terminal).
func IsTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// retryNote says what the run retried before giving a request up.
func retryNote(s Settings) string {
	var parts []string
	if s.FailoverFor != "" && s.FailoverFor != "0s" {
		parts = append(parts, fmt.Sprintf("no answer retried on the other replicas for %s", s.FailoverFor))
	}
	if s.RetryFor != "" && s.RetryFor != "0s" {
		parts = append(parts, fmt.Sprintf("transport errors, 502, 503 and 504 retried for %s", s.RetryFor))
	}
	if len(parts) == 0 {
		return "; nothing retried"
	}
	return "; " + strings.Join(parts, ", ")
}

// startProgress prints a status line until stopped: redrawn every half
// second on a terminal, or a new line every cfg.ProgressEvery for a log.
func (r *runner) startProgress(w io.Writer, started time.Time) func() {
	if w == nil {
		return func() {}
	}
	if every := r.cfg.ProgressEvery; every > 0 {
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			t := time.NewTicker(every)
			defer t.Stop()
			var lastN int64
			last := started
			for {
				select {
				case <-stop:
					return
				case now := <-t.C:
					n := r.collected.Load()
					rate := float64(n-lastN) / now.Sub(last).Seconds()
					lastN, last = n, now
					fmt.Fprintf(w, "progress %6.1fs  enqueued %d  done %d  %.0f jobs/s  in flight %d  errors %d  unreached %d\n",
						now.Sub(started).Seconds(), r.enqueued.Load(), n, rate, r.enqueued.Load()-n, r.unexpected.Load(), r.cl.unreached.Load())
				}
			}
		}()
		return func() { close(stop); <-done }
	}
	var stopped atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		var lastN int64
		last := started
		for range t.C {
			if stopped.Load() {
				fmt.Fprint(w, "\r\033[K")
				return
			}
			n := r.collected.Load()
			now := time.Now()
			rate := float64(n-lastN) / now.Sub(last).Seconds()
			lastN, last = n, now
			fmt.Fprintf(w, "\r\033[K%6.1fs  enqueued %d  done %d  %.0f jobs/s  in flight %d  errors %d",
				now.Sub(started).Seconds(), r.enqueued.Load(), n, rate, r.enqueued.Load()-n, r.unexpected.Load())
		}
	}()
	return func() { stopped.Store(true); <-done }
}
