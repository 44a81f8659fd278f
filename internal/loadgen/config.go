// Package loadgen drives a BYOLLM relay with simulated sites and daemons that
// do everything real ones do on the wire: Ed25519-signed requests, device and
// site key sets, payloads sealed to the claiming device, results sealed back
// to the site, and every collected result opened and checked. It reports
// throughput, latency per phase and per endpoint, status counts, and the two
// numbers that must stay zero: jobs lost and jobs run twice.
//
// It works against any relay speaking protocol 2 with the projection admin
// interface (PUT /projection, POST /projection/merge): the Go relay, or the
// reference relay hosted by test/reference/server.mjs.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Pairing modes.
const (
	PairFixture = "fixture" // POST {basePath}/pair with the fixture shape before work starts
	PairNone    = "none"    // no pair call; the relay rebuilds presence from the projection
)

// Client profiles: how often the simulated parties ask.
const (
	// ProfileAggressive polls as fast as the settings say: daemons claim
	// every ClaimPoll while idle and heartbeat every Heartbeat on their
	// own timer; sites read pending every PendingPoll and results every
	// ResultsPoll, concurrently, sealing in parallel.
	ProfileAggressive = "aggressive"
	// ProfileReal polls like the published clients. A daemon is the byollm
	// 0.1.1 Runner: every tick is a heartbeat and then, if a slot is free,
	// a claim; after a tick it sleeps a rung of the poll ladder (0, 0.1,
	// 0.2, 0.4, 0.6, 0.8, 1 × Heartbeat, plus 200-500 ms on every rung
	// below the top, ×0.85-1.15 at the top), back to the first rung when
	// it claimed something, one rung up when it did not, and a job that
	// ends wakes a sleeping daemon; a not-ready fetch is retried after 50
	// ms, doubling to 1 s. A site is the @byollm/server 0.1.1 cloud lane's
	// pump: one cycle reads pending, seals each claimed job in turn, then
	// reads results, and the next cycle starts SitePump after it ended.
	ProfileReal = "real"
)

// Arrival processes of the open loop.
const (
	ArrivalsEven    = "even"    // one job every 1/Rate seconds
	ArrivalsPoisson = "poisson" // exponential gaps with mean 1/Rate
)

// Projection modes.
const (
	ProjectionMerge = "merge" // POST /projection/merge: leaves other tenants' records alone
	ProjectionPut   = "put"   // PUT /projection: replaces the whole projection
)

// Config is one run. Zero values take the defaults of WithDefaults.
type Config struct {
	Replicas  []string // relay base URLs; requests rotate over them
	AdminURLs []string // projection admin base URLs; the projection goes to each
	// StatusURLs are the admin base URLs of every replica behind Replicas
	// (Go relays). When set, the run waits until each one's
	// /projection/status shows the version it pushed, instead of probing
	// the planes with signed reads until enough succeed in a row.
	StatusURLs []string
	AdminToken string
	BasePath   string // daemon plane mount, default /byollm

	Sites   int
	Daemons int
	Owners  int // distinct device owners; daemons are spread over them (default: one per daemon)

	Jobs        int           // stop enqueuing after this many (0: no count bound)
	Duration    time.Duration // stop enqueuing after this long (0: no time bound)
	Rate        float64       // open loop: jobs enqueued per second
	Concurrency int           // closed loop: jobs in flight (used when Rate is 0)
	Drain       time.Duration // after enqueuing stops, wait this long for jobs to finish

	PayloadChars int           // prompt length in characters
	TTL          time.Duration // stub deadlineAt = enqueue time + TTL
	LeaseMs      int64         // if set, claims must echo exactly this leaseMs
	Heartbeat    time.Duration // daemon heartbeat period
	DaemonSlots  int           // jobs one daemon runs at once (claim max)

	ClaimPoll   time.Duration // idle daemon's pause between empty claims
	FetchPoll   time.Duration // pause between fetches answered not-ready
	PendingPoll time.Duration // site's period for GET pending
	ResultsPoll time.Duration // site's period for GET results

	// Profile is ProfileAggressive (default) or ProfileReal.
	Profile string
	// Arrivals is the open loop's arrival process (default ArrivalsEven).
	Arrivals string
	// SitePump is the pause between a real site's pump cycles.
	SitePump time.Duration
	// IdleStart starts the real profile's daemons as a fleet that has been
	// idle a while: each on the ladder's top rung, its first tick at a
	// random moment of the first heartbeat period, rather than all at once
	// on the first rung as daemons that have just started.
	IdleStart bool

	Pair        string // PairFixture or PairNone
	Projection  string // ProjectionMerge or ProjectionPut
	RunID       string // prefix of every id this run creates (default: random)
	AllowRemote bool
	Timeout     time.Duration // per HTTP request

	// RetryFor is how long a request refused by a transport error, 502, 503
	// or 504 is sent again (to the next replica); 0 never retries, so every
	// such refusal is a problem of the run.
	RetryFor time.Duration
	// FailoverFor is how long a request that got no HTTP answer at all
	// (connection refused or reset, a timeout: a replica down) is sent
	// again to the other replicas; it applies only with several Replicas,
	// where a refusing replica is a gap in the test rig, not a relay that
	// lost work. 0 means DefaultFailoverFor; negative turns it off.
	FailoverFor time.Duration
	// ProgressEvery, when set, writes a progress line every ProgressEvery
	// to Run's progress writer (for a log); 0 redraws one live line on a
	// terminal instead.
	ProgressEvery time.Duration
	// CancelEvery makes the site cancel every n-th job it enqueues, right
	// after the enqueue; 0 cancels none.
	CancelEvery int
	// AbandonEvery makes daemons drop every n-th grant they receive without
	// a word, as a daemon that crashed does, so the lease runs out and the
	// relay offers the job again; 0 abandons none.
	AbandonEvery int
	// ReleaseEvery makes daemons hand every n-th grant straight back
	// (reason "shutdown"), so the job is offered again at once; 0 releases
	// none.
	ReleaseEvery int
	// History, if set, receives every operation with the relay's answer.
	History History
	// Team makes every job a teammate's: owner O's jobs are enqueued for
	// O-mate with audience "team", routed to O's devices by a roster, and
	// the devices offer their service to the team. Alone it is the
	// baseline of a grant run: the same routing with nothing to grant.
	Team bool
	// Grants (implies Team) runs the team load against a relay with a grant
	// engine: the policy that grants O-mate's jobs on O's devices is pushed
	// through POST /policy/merge, every device pins the controlPlanePublic
	// its pairing hands over, and every claimed job must carry a grant that
	// verifies against it (anything else is an integrity failure).
	Grants bool
}

// DefaultFailoverFor is how long a request with no answer is retried on the
// other replicas when there are several: long enough for a replica's
// restart, short against a job's deadline.
const DefaultFailoverFor = 10 * time.Second

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	if len(c.Replicas) == 0 {
		c.Replicas = []string{"http://127.0.0.1:8080"}
	}
	if len(c.AdminURLs) == 0 {
		c.AdminURLs = []string{"http://127.0.0.1:8081"}
	}
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	defD := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	if c.BasePath == "" {
		c.BasePath = "/byollm"
	}
	c.BasePath = "/" + strings.Trim(c.BasePath, "/")
	def(&c.Sites, 4)
	def(&c.Daemons, 8)
	def(&c.Owners, c.Daemons)
	if c.Rate == 0 {
		def(&c.Concurrency, 32)
	}
	if c.Jobs == 0 && c.Duration == 0 {
		c.Jobs = 1000
	}
	defD(&c.Drain, 30*time.Second)
	def(&c.PayloadChars, 256)
	defD(&c.TTL, 60*time.Second)
	if c.Profile == ProfileReal {
		defD(&c.Heartbeat, 10*time.Second) // the byollm Runner's DEFAULT_HEARTBEAT_MS
	}
	defD(&c.Heartbeat, 5*time.Second)
	def(&c.DaemonSlots, 8)
	defD(&c.ClaimPoll, 50*time.Millisecond)
	defD(&c.FetchPoll, 10*time.Millisecond)
	defD(&c.PendingPoll, 20*time.Millisecond)
	defD(&c.ResultsPoll, 100*time.Millisecond)
	if c.Pair == "" {
		c.Pair = PairFixture
	}
	if c.Profile == "" {
		c.Profile = ProfileAggressive
	}
	if c.Arrivals == "" {
		c.Arrivals = ArrivalsEven
	}
	defD(&c.SitePump, 100*time.Millisecond)
	if c.Projection == "" {
		c.Projection = ProjectionMerge
	}
	defD(&c.Timeout, 30*time.Second)
	switch {
	case c.FailoverFor < 0 || len(c.Replicas) < 2:
		c.FailoverFor = 0
	case c.FailoverFor == 0:
		c.FailoverFor = DefaultFailoverFor
	}
	if c.Grants {
		c.Team = true
	}
	return c
}

// Validate reports every problem at once.
func (c Config) Validate(ctx context.Context) error {
	var problems []string
	add := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	if c.Sites < 1 || c.Daemons < 1 {
		add("need at least one site and one daemon (have %d sites, %d daemons)", c.Sites, c.Daemons)
	}
	if c.Owners < 1 || c.Owners > c.Daemons {
		add("owners must be between 1 and the number of daemons (%d), have %d: every owner needs a device to run its jobs", c.Daemons, c.Owners)
	}
	if c.Rate < 0 || c.Concurrency < 0 || c.Jobs < 0 || c.Duration < 0 || c.RetryFor < 0 || c.CancelEvery < 0 || c.AbandonEvery < 0 || c.ReleaseEvery < 0 {
		add("rate, concurrency, jobs, duration, retry time, cancel-every, abandon-every and release-every must not be negative")
	}
	if c.Rate > 0 && c.Concurrency > 0 {
		add("give either -rate (open loop) or -concurrency (closed loop), not both")
	}
	if c.DaemonSlots < 1 || c.DaemonSlots > 64 {
		add("daemon slots must be 1..64 (the claim max the protocol allows), have %d", c.DaemonSlots)
	}
	if c.PayloadChars < 1 || c.PayloadChars > 1_000_000 {
		add("payload size must be 1..1000000 characters (the llm.generate prompt limit), have %d", c.PayloadChars)
	}
	if c.TTL < time.Second {
		add("ttl %s is too short for a job to make the round trip", c.TTL)
	}
	if c.Pair != PairFixture && c.Pair != PairNone {
		add("pair mode %q: want %q or %q", c.Pair, PairFixture, PairNone)
	}
	if c.Profile != ProfileAggressive && c.Profile != ProfileReal {
		add("profile %q: want %q or %q", c.Profile, ProfileAggressive, ProfileReal)
	}
	if c.Arrivals != ArrivalsEven && c.Arrivals != ArrivalsPoisson {
		add("arrivals %q: want %q or %q", c.Arrivals, ArrivalsEven, ArrivalsPoisson)
	}
	if c.Projection != ProjectionMerge && c.Projection != ProjectionPut {
		add("projection mode %q: want %q or %q", c.Projection, ProjectionMerge, ProjectionPut)
	}
	if c.Grants && c.Pair != PairFixture {
		add("grants need pair mode %q: the pair response is where a device learns the key grants are signed with", PairFixture)
	}
	if c.AdminToken == "" {
		add("no admin token: the projection admin interface refuses every request without one (set -admin-token or RELAY_ADMIN_TOKEN)")
	}
	for _, raw := range slices.Concat(c.Replicas, c.AdminURLs, c.StatusURLs) {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("%q is not an http(s) base URL", raw)
			continue
		}
		if c.AllowRemote {
			continue
		}
		if ok, why := loopback(ctx, u.Hostname()); !ok {
			add("refusing to load %s: %s. A load test saturates its target on purpose; against a relay you do not run it is an attack. Pass -allow-remote if you operate it", raw, why)
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}

// loopback reports whether host names only this machine.
func loopback(ctx context.Context, host string) (bool, string) {
	if ip := net.ParseIP(host); ip != nil {
		if ip.IsLoopback() {
			return true, ""
		}
		return false, host + " is not a loopback address"
	}
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil || len(addrs) == 0 {
		return false, fmt.Sprintf("%s does not resolve here (%v), so it cannot be shown to be loopback", host, err)
	}
	for _, a := range addrs {
		if !a.IP.IsLoopback() {
			return false, fmt.Sprintf("%s resolves to %s, which is not loopback", host, a.IP)
		}
	}
	return true, ""
}
