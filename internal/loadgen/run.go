package loadgen

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/byollm/relay-go/internal/envelope"
	"github.com/byollm/relay-go/internal/protocol"
)

// maxProblems bounds the problem list kept for the report.
const maxProblems = 20

type runner struct {
	cfg     Config
	cl      *client
	stats   requestStats
	sites   []*site
	daemons []*daemon
	byKeyID map[string]*site
	devices map[string]*daemon // by identity public key
	jobs    sync.Map           // job id -> *job
	// verified holds the device key sets (protocol.PublicIdentity) whose
	// encryption key signature has been checked.
	verified sync.Map
	prompt   string // random text prompts are cut from

	attempted, enqueued, enqueueFailed       atomic.Int64
	collected, integrity, foreign            atomic.Int64
	resultsReads                             atomic.Int64 // answers read, for resultsValidEvery
	duplicates, leasesLost, unexpected       atomic.Int64
	lateSeals, aborted, heartbeats, released atomic.Int64
	cancelled, settled, grantsSeen           atomic.Int64
	abandoned, grantsVerified                atomic.Int64

	// arrivalLag is how late the open loop sent each job after its
	// scheduled arrival: a load generator that cannot keep its schedule is
	// measuring itself.
	arrivalLag samples

	problemsMu sync.Mutex
	problems   []string

	firstEnqueue time.Time
	lastCollect  atomic.Int64 // unix nanos
}

// Run executes one load run and returns its report. progress, if not nil,
// receives a live status line every half second.
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Report, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(ctx); err != nil {
		return nil, err
	}
	if cfg.RunID == "" {
		cfg.RunID = "lg" + strings.ReplaceAll(uuid.NewString(), "-", "")[:8]
	}
	r := &runner{cfg: cfg, byKeyID: map[string]*site{}, devices: map[string]*daemon{}}
	r.cl = newClient(cfg, &r.stats)
	if err := r.setUp(ctx); err != nil {
		return nil, err
	}
	return r.drive(ctx, progress)
}

// setUp makes the parties, registers them in the projection and pairs the
// daemons.
func (r *runner) setUp(ctx context.Context) error {
	now := time.Now().UnixMilli()
	var fx fixture
	for i := range r.cfg.Sites {
		keys, err := newIdentity(now)
		if err != nil {
			return err
		}
		s := &site{id: fmt.Sprintf("%s-site-%d", r.cfg.RunID, i), keys: keys, begun: map[string]bool{}}
		s.sig = signer{header: "x-byollm-site", caller: s.id, key: keys.SigningKey()}
		r.sites = append(r.sites, s)
		r.byKeyID[keys.KeyID()] = s
		fx.Sites = append(fx.Sites, fixtureSite{SiteID: s.id, Site: keys.Public()})
	}
	for o := range r.cfg.Owners {
		for _, s := range r.sites {
			fx.Consents = append(fx.Consents, fixtureConsent{Owner: r.owner(o), SiteID: s.id})
			if r.cfg.Team {
				fx.Consents = append(fx.Consents, fixtureConsent{Owner: r.mate(o), SiteID: s.id})
			}
		}
		if r.cfg.Team {
			fx.Rosters = append(fx.Rosters, fixtureRoster{ID: r.owner(o) + "-team", Owner: r.owner(o), Members: []string{r.mate(o)}})
		}
	}
	for i := range r.cfg.Daemons {
		keys, err := newIdentity(now)
		if err != nil {
			return err
		}
		d := &daemon{runnerID: fmt.Sprintf("%s-runner-%d", r.cfg.RunID, i), owner: r.owner(i % r.cfg.Owners), keys: keys, held: map[string]*holding{}}
		d.sig = signer{header: "x-byollm-runner", caller: d.runnerID, key: keys.SigningKey()}
		r.daemons = append(r.daemons, d)
		r.devices[keys.Stored.IdentityPublic] = d
		fx.Devices = append(fx.Devices, fixtureDevice{Owner: d.owner, RunnerID: d.runnerID, Device: keys.Public()})
	}
	body, err := json.Marshal(fx)
	if err != nil {
		return fmt.Errorf("projection: %w", err)
	}
	version, err := adminSend(ctx, &http.Client{Timeout: r.cfg.Timeout}, r.cfg.AdminURLs, r.cfg.AdminToken, r.cfg.Projection, body)
	if err != nil {
		return err
	}
	if r.cfg.Grants {
		if err := r.pushPolicy(ctx); err != nil {
			return err
		}
	}
	const letters = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	p := make([]byte, 2*r.cfg.PayloadChars)
	for i := range p {
		p[i] = letters[rand.IntN(len(letters))] //nolint:gosec // filler text
	}
	r.prompt = string(p)
	if len(r.cfg.StatusURLs) > 0 {
		if err := r.awaitVersion(ctx, version); err != nil {
			return err
		}
	} else if err := r.awaitProjection(ctx); err != nil {
		return err
	}
	if r.cfg.Pair == PairFixture {
		if err := r.pairAll(ctx); err != nil {
			return err
		}
	}
	if r.cfg.Grants {
		// The engine answers satisfiable at enqueue from what devices
		// advertise; one heartbeat each puts the team offer on record
		// before the first job, as a daemon's start-up heartbeat does.
		for _, d := range r.daemons {
			r.heartbeat(ctx, d)
		}
	}
	return nil
}

// mate is owner o's teammate, whose jobs o's devices run in a Team run.
func (r *runner) mate(o int) string { return r.owner(o) + "-mate" }

// offer is what every simulated daemon advertises.
func (r *runner) offer() []protocol.Capability {
	if r.cfg.Team {
		return teamCapabilities
	}
	return capabilities
}

// pushPolicy writes the grant policy of a Grants run: each teammate has
// consented to every site with the slot mapped to its owner's service, and
// is a member of that owner's team.
func (r *runner) pushPolicy(ctx context.Context) error {
	type mapping struct {
		Purpose string `json:"purpose"`
		Kind    string `json:"kind"`
		Service string `json:"service"`
		Owner   string `json:"owner"`
	}
	type consent struct {
		SiteID   string    `json:"siteId"`
		User     string    `json:"user"`
		Mappings []mapping `json:"mappings"`
	}
	type team struct {
		Owner   string   `json:"owner"`
		Members []string `json:"members"`
	}
	var doc struct {
		Consents []consent `json:"consents"`
		Teams    []team    `json:"teams"`
	}
	for o := range r.cfg.Owners {
		for _, s := range r.sites {
			doc.Consents = append(doc.Consents, consent{SiteID: s.id, User: r.mate(o), Mappings: []mapping{{
				Purpose: "default", Kind: protocol.KindGenerate, Service: capabilities[0].Service, Owner: r.owner(o),
			}}})
		}
		doc.Teams = append(doc.Teams, team{Owner: r.owner(o), Members: []string{r.mate(o)}})
	}
	body, err := json.Marshal(doc)
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	return adminPost(ctx, &http.Client{Timeout: r.cfg.Timeout}, r.cfg.AdminURLs, r.cfg.AdminToken, "/policy/merge", body)
}

// awaitVersion waits until every replica at StatusURLs serves the pushed
// projection version (or a later one), as its /projection/status says.
func (r *runner) awaitVersion(ctx context.Context, version int64) error {
	hc := &http.Client{Timeout: r.cfg.Timeout}
	for _, base := range r.cfg.StatusURLs {
		deadline := time.Now().Add(15 * time.Second)
		for {
			got, err := projectionVersion(ctx, hc, base, r.cfg.AdminToken)
			if err == nil && version > 0 && got >= version {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("replica %s never loaded projection version %d (at %d, %v)", base, version, got, err)
			}
			sleepCtx(ctx, 10*time.Millisecond)
		}
	}
	return nil
}

// awaitProjection waits until every replica knows this run's sites. A
// replicated relay may load a new projection a moment after the admin write
// returns; the probe is a signed site read, so it works on any relay. A
// base URL may be a load balancer over several replicas, so one answer
// proves little: it takes probesInARow successes in a row.
func (r *runner) awaitProjection(ctx context.Context) error {
	const probesInARow = 12
	last := r.sites[len(r.sites)-1]
	for _, base := range r.cl.replicas {
		deadline := time.Now().Add(15 * time.Second)
		for ok := 0; ; {
			res, err := r.cl.siteGetAt(ctx, "probe (setup)", base, last.sig, "pending")
			if err == nil && res.status == http.StatusOK {
				if ok++; ok >= probesInARow {
					break
				}
				sleepCtx(ctx, 20*time.Millisecond)
				continue
			}
			ok = 0
			if time.Now().After(deadline) || ctx.Err() != nil {
				if err != nil {
					return fmt.Errorf("replica %s never accepted site %s from the new projection: %w", base, last.id, err)
				}
				return fmt.Errorf("replica %s never accepted site %s from the new projection: HTTP %d: %.200s", base, last.id, res.status, res.body)
			}
			sleepCtx(ctx, 20*time.Millisecond)
		}
	}
	return nil
}

func (r *runner) owner(i int) string { return fmt.Sprintf("%s-owner-%d", r.cfg.RunID, i) }

func (r *runner) pairAll(ctx context.Context) error {
	sem := make(chan struct{}, 16)
	errs := make(chan error, len(r.daemons))
	var wg sync.WaitGroup
	for _, d := range r.daemons {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			res, err := r.cl.pair(ctx, pairRequest{ProtocolVersion: protocol.ProtocolVersion, Owner: d.owner, Device: d.keys.Public()})
			if err != nil {
				errs <- err
				return
			}
			var pr pairResponse
			if res.status != http.StatusOK || json.Unmarshal(res.body, &pr) != nil || pr.RunnerID != d.runnerID {
				errs <- fmt.Errorf("pair %s: HTTP %d: %s", d.runnerID, res.status, res.body)
				return
			}
			if len(pr.Sites) != len(r.sites) {
				errs <- fmt.Errorf("pair %s: relay pinned %d sites, want %d", d.runnerID, len(pr.Sites), len(r.sites))
			}
			if r.cfg.Grants {
				key, err := base64.RawURLEncoding.DecodeString(pr.ControlPlanePublic)
				if err != nil || len(key) != ed25519.PublicKeySize {
					errs <- fmt.Errorf("pair %s: controlPlanePublic %q is not an Ed25519 key; a grant run needs a relay with a grant engine (RELAY_GRANT_KEY_FILE)", d.runnerID, pr.ControlPlanePublic)
					return
				}
				d.controlPlanePublic = key
			}
		}()
	}
	wg.Wait()
	close(errs)
	return errors.Join(collect(errs)...)
}

func collect(ch <-chan error) []error {
	var out []error
	for e := range ch {
		out = append(out, e)
	}
	return out
}

func (r *runner) problem(format string, a ...any) {
	r.unexpected.Add(1)
	r.problemsMu.Lock()
	if len(r.problems) < maxProblems {
		r.problems = append(r.problems, fmt.Sprintf(format, a...))
	}
	r.problemsMu.Unlock()
}

func (r *runner) integrityFailure(j *job, format string, a ...any) {
	if j != nil {
		j.mu.Lock()
		already := j.bad
		j.bad = true
		j.mu.Unlock()
		if already {
			return
		}
		r.settle(j)
	}
	r.integrity.Add(1)
	r.problem("integrity: "+format, a...)
}

// settle marks j as finished with (collected, cancelled or failed), once:
// the closed loop moves on and the drain stops counting it.
func (r *runner) settle(j *job) {
	j.mu.Lock()
	first := !j.settled
	j.settled = true
	j.mu.Unlock()
	if first {
		r.settled.Add(1)
		close(j.done)
	}
}

func (r *runner) lookup(id string) *job {
	v, ok := r.jobs.Load(id)
	if !ok {
		return nil
	}
	return v.(*job)
}

// drive runs the parties and the enqueue loop, drains, and reports.
func (r *runner) drive(ctx context.Context, progress io.Writer) (*Report, error) {
	partyCtx, stopParties := context.WithCancel(ctx)
	defer stopParties()
	var parties sync.WaitGroup
	for _, d := range r.daemons {
		if r.cfg.Profile == ProfileReal {
			parties.Add(1)
			go func() { defer parties.Done(); r.runnerLoop(partyCtx, d) }()
			continue
		}
		parties.Add(2)
		go func() { defer parties.Done(); r.daemonLoop(partyCtx, d) }()
		go func() { defer parties.Done(); r.heartbeatLoop(partyCtx, d) }()
	}
	for _, s := range r.sites {
		if r.cfg.Profile == ProfileReal {
			parties.Add(1)
			go func() { defer parties.Done(); r.pumpLoop(partyCtx, s) }()
			continue
		}
		parties.Add(2)
		go func() { defer parties.Done(); r.pendingLoop(partyCtx, s) }()
		go func() { defer parties.Done(); r.resultsLoop(partyCtx, s) }()
	}

	started := time.Now()
	cpuAtStart := cpuSeconds()
	r.firstEnqueue = started
	stopProgress := r.startProgress(progress, started)

	// Enqueue until the count or the time bound.
	enqCtx := ctx
	if r.cfg.Duration > 0 {
		var cancel context.CancelFunc
		enqCtx, cancel = context.WithTimeout(ctx, r.cfg.Duration)
		defer cancel()
	}
	// The bounds stop new work (enqCtx); requests already sent finish under
	// ctx, so the time bound does not turn in-flight enqueues into failures.
	if r.cfg.Rate > 0 {
		r.openLoop(enqCtx, ctx)
	} else {
		r.closedLoop(enqCtx, ctx)
	}
	enqueueEnded := time.Now()

	// Drain: wait for what was enqueued to be collected.
	drainUntil := time.Now().Add(r.cfg.Drain)
	for time.Now().Before(drainUntil) && ctx.Err() == nil && r.settled.Load() < r.enqueued.Load() {
		time.Sleep(20 * time.Millisecond)
	}
	stopProgress()
	stopParties()
	parties.Wait()
	r.releaseAll(ctx)
	return r.report(started, enqueueEnded, cpuAtStart), nil
}

// ticket numbers the next job, or reports that the count bound is reached.
func (r *runner) ticket() (int, bool) {
	n := r.attempted.Add(1)
	if r.cfg.Jobs > 0 && n > int64(r.cfg.Jobs) {
		r.attempted.Add(-1)
		return 0, false
	}
	return int(n - 1), true
}

func (r *runner) closedLoop(ctx, reqCtx context.Context) {
	var wg sync.WaitGroup
	for range r.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				n, ok := r.ticket()
				if !ok {
					return
				}
				j, ok := r.enqueue(reqCtx, n)
				if !ok {
					continue
				}
				wait := time.Until(time.UnixMilli(j.deadlineAt)) + time.Second
				select {
				case <-j.done:
				case <-time.After(wait):
				case <-ctx.Done():
				}
			}
		}()
	}
	wg.Wait()
}

func (r *runner) openLoop(ctx, reqCtx context.Context) {
	mean := float64(time.Second) / r.cfg.Rate
	start := time.Now()
	var at float64 // nanoseconds after start of the next arrival
	var wg sync.WaitGroup
	for {
		// Schedule from the start time, not from the last send, so a slow
		// enqueue does not lower the offered rate (no coordinated omission).
		if d := time.Until(start.Add(time.Duration(at))); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		n, ok := r.ticket()
		if !ok {
			break
		}
		r.arrivalLag.add(max(0, time.Since(start.Add(time.Duration(at)))))
		wg.Add(1)
		go func() { defer wg.Done(); r.enqueue(reqCtx, n) }()
		if r.cfg.Arrivals == ArrivalsPoisson {
			at += rand.ExpFloat64() * mean //nolint:gosec // arrival process, not a secret
		} else {
			at += mean
		}
	}
	wg.Wait()
}

// enqueue creates one job and publishes its stub.
func (r *runner) enqueue(ctx context.Context, n int) (*job, bool) {
	s := r.sites[n%len(r.sites)]
	owner := r.owner((n / len(r.sites)) % r.cfg.Owners)
	audience := protocol.AudiencePrivate
	if r.cfg.Team {
		owner, audience = r.mate((n/len(r.sites))%r.cfg.Owners), protocol.AudienceTeam
	}
	off := rand.IntN(len(r.prompt) - r.cfg.PayloadChars + 1) //nolint:gosec // filler text
	prompt := r.prompt[off : off+r.cfg.PayloadChars]
	id := uuid.NewString()
	now := time.Now()
	j := &job{
		id: id, site: s, owner: owner,
		plaintext: `{"prompt":` + envelope.JSString(prompt) + `}`,
		want:      resultText(id, prompt),
		createdAt: now.UnixMilli(),
		// The stub's TTL: the relay drops the job, result included, then.
		deadlineAt: now.Add(r.cfg.TTL).UnixMilli(),
		done:       make(chan struct{}),
		leases:     map[string]bool{},
		enqStart:   now,
	}
	r.jobs.Store(id, j)
	stub := protocol.JobStub{
		ID: id, Kind: protocol.KindGenerate, Owner: owner, Site: s.keys.KeyID(),
		Audience: audience, SizeClass: envelope.SizeClassOf(envelope.JSLength(prompt)),
		DeadlineAt: j.deadlineAt,
	}
	res, err := r.cl.sitePost(ctx, s.sig, "enqueue", enqueueRequest{ProtocolVersion: protocol.ProtocolVersion, SiteID: s.id, Stub: stub})
	op := Op{Kind: OpEnqueue, Start: now, End: time.Now(), JobID: id, Site: s.id, DeadlineAt: j.deadlineAt, Status: res.status}
	var er struct {
		JobID string `json:"jobId"`
		State string `json:"state"`
	}
	switch {
	case err != nil:
		op.Outcome, op.Detail = OutcomeUnknown, err.Error()
		if ctx.Err() == nil {
			r.problem("enqueue: %v", err)
		}
	case res.status != http.StatusOK || json.Unmarshal(res.body, &er) != nil || er.JobID != id || !r.enqueuedState(er.State):
		op.Outcome, op.Detail = answerOutcome(res, nil), string(res.body)
		r.problem("enqueue: HTTP %d: %.200s", res.status, res.body)
	default:
		op.Outcome = OutcomeOK
		r.record(op)
		j.stamp(&j.enqDone, time.Now())
		r.enqueued.Add(1)
		if r.cfg.CancelEvery > 0 && n%r.cfg.CancelEvery == r.cfg.CancelEvery-1 {
			r.cancel(ctx, j)
		}
		return j, true
	}
	r.record(op)
	r.jobs.Delete(id)
	r.enqueueFailed.Add(1)
	return nil, false
}

// enqueuedState reports whether a 200 to an enqueue names a state a new job
// may be in. With retries a first attempt may have landed before its answer
// was lost; the retry then reports where the job has got to since.
func (r *runner) enqueuedState(state string) bool {
	if state == "queued" {
		return true
	}
	if r.cfg.RetryFor == 0 && r.cfg.FailoverFor == 0 {
		return false
	}
	switch state {
	case "awaiting-payload", "ready", "running", "done":
		return true
	}
	return false
}

// cancel is the site taking a job back a moment after publishing it, so
// some cancels meet a queued job and some a granted one.
func (r *runner) cancel(ctx context.Context, j *job) {
	sleepCtx(ctx, time.Duration(rand.IntN(300))*time.Millisecond) //nolint:gosec // spread
	start := time.Now()
	res, err := r.cl.sitePost(ctx, j.site.sig, "cancel", cancelRequest{ProtocolVersion: protocol.ProtocolVersion, SiteID: j.site.id, JobID: j.id})
	op := Op{Kind: OpCancel, Start: start, End: time.Now(), JobID: j.id, Site: j.site.id, Status: res.status}
	var cr struct {
		Cancelled *bool `json:"cancelled"`
	}
	switch {
	case err != nil || res.status != http.StatusOK || json.Unmarshal(res.body, &cr) != nil || cr.Cancelled == nil:
		op.Outcome = answerOutcome(res, err)
		if ctx.Err() == nil {
			r.problem("cancel: HTTP %d: %.200s (%v)", res.status, res.body, err)
		}
	case *cr.Cancelled:
		op.Outcome = OutcomeOK
		j.mu.Lock()
		j.cancelled = true
		j.mu.Unlock()
		r.cancelled.Add(1)
		r.settle(j)
	default:
		op.Outcome = OutcomeNotFound
		r.problem("cancel: relay does not know job %s", j.id)
	}
	r.record(op)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// daemonLoop claims work whenever a slot is free and runs each job.
func (r *runner) daemonLoop(ctx context.Context, d *daemon) {
	slots := make(chan struct{}, r.cfg.DaemonSlots)
	var wg sync.WaitGroup
	defer wg.Wait()
	for ctx.Err() == nil {
		// Take one slot (waiting if all are busy), then every other free one.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		n := 1
		for n < r.cfg.DaemonSlots {
			select {
			case slots <- struct{}{}:
				n++
				continue
			default:
			}
			break
		}
		jobs := r.claim(ctx, d, n)
		for _, cs := range jobs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				r.runJob(ctx, d, cs)
			}()
		}
		for range n - len(jobs) {
			<-slots
		}
		if len(jobs) == 0 {
			sleepCtx(ctx, r.cfg.ClaimPoll)
		}
	}
}

// pollLadder is the byollm Runner's POLL_LADDER: after a tick, the pause is
// this fraction of the heartbeat period (the rung), first rung after a tick
// that claimed work, one rung up after one that did not.
var pollLadder = [...]float64{0, 0.1, 0.2, 0.4, 0.6, 0.8, 1}

// pollDelay is the Runner's pollDelay: the rung's share of the heartbeat,
// plus 200-500 ms below the top rung (so racing daemons tie by luck), or
// ×0.85-1.15 on the top rung (so idle daemons do not synchronise).
func pollDelay(step int, heartbeat time.Duration) time.Duration {
	rung := pollLadder[min(step, len(pollLadder)-1)]
	base := float64(heartbeat) * rung
	if rung == 1 {
		return time.Duration(base * (0.85 + rand.Float64()*0.3)) //nolint:gosec // jitter
	}
	return time.Duration(base + float64(200*time.Millisecond) + rand.Float64()*float64(300*time.Millisecond)) //nolint:gosec // jitter
}

// runnerLoop is a daemon polling like the byollm 0.1.1 Runner (real
// profile): each tick a heartbeat carrying the leases held, then a claim
// for the free slots, then a pause from the poll ladder that a job ending
// cuts short.
func (r *runner) runnerLoop(ctx context.Context, d *daemon) {
	var running atomic.Int64
	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	step := 0
	if r.cfg.IdleStart {
		step = len(pollLadder) - 1
		sleepCtx(ctx, rand.N(r.cfg.Heartbeat)) //nolint:gosec // phase
	}
	for ctx.Err() == nil {
		r.heartbeat(ctx, d)
		claimed := 0
		if free := r.cfg.DaemonSlots - int(running.Load()); free > 0 {
			jobs := r.claim(ctx, d, free)
			claimed = len(jobs)
			for _, cs := range jobs {
				running.Add(1)
				wg.Add(1)
				go func() {
					defer wg.Done()
					r.runJob(ctx, d, cs)
					running.Add(-1)
					select {
					case wake <- struct{}{}:
					default:
					}
				}()
			}
		}
		if claimed > 0 {
			step = 0
		} else {
			step = min(step+1, len(pollLadder)-1)
		}
		// The Runner listens for a freed slot only while it sleeps: a job
		// that ended during the tick does not cut the next pause short.
		select {
		case <-wake:
		default:
		}
		t := time.NewTimer(pollDelay(step, r.cfg.Heartbeat))
		select {
		case <-t.C:
		case <-wake:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
		}
	}
}

// claim asks for up to n jobs for d and returns what it was granted (never
// more than n), each grant recorded in the history.
func (r *runner) claim(ctx context.Context, d *daemon, n int) []claimedStub {
	claimStart := time.Now()
	res, err := r.cl.daemon(ctx, d.sig, "claim", claimRequest{ProtocolVersion: protocol.ProtocolVersion, RunnerID: d.runnerID, Capabilities: r.offer(), Max: n})
	claimEnd := time.Now()
	var cr claimResponse
	switch {
	case err != nil:
		if ctx.Err() == nil {
			r.problem("claim: %v", err)
		}
	case res.status != http.StatusOK || json.Unmarshal(res.body, &cr) != nil:
		r.problem("claim: HTTP %d: %.200s", res.status, res.body)
	case r.cfg.LeaseMs > 0 && cr.LeaseMs != r.cfg.LeaseMs:
		r.problem("claim: relay grants leaseMs %d, run expects %d", cr.LeaseMs, r.cfg.LeaseMs)
	}
	if len(cr.Jobs) > n {
		r.problem("claim: asked for %d jobs, got %d", n, len(cr.Jobs))
	}
	for _, cs := range cr.Jobs {
		r.record(Op{Kind: OpGrant, Start: claimStart, End: claimEnd, JobID: cs.ID, Runner: cs.Lease.RunnerID,
			LeaseID: cs.Lease.ID, LeaseExpiresAt: cs.Lease.ExpiresAt, LeaseMs: cr.LeaseMs, Status: res.status, Outcome: OutcomeOK})
	}
	if len(cr.Jobs) > n {
		cr.Jobs = cr.Jobs[:n]
	}
	return cr.Jobs
}

// runJob is what a daemon does with one claimed stub: fetch the sealed
// payload, open it, "run" it, seal the result back to the site.
func (r *runner) runJob(ctx context.Context, d *daemon, cs claimedStub) {
	j := r.lookup(cs.ID)
	if j == nil || cs.Owner != d.owner && cs.Audience == protocol.AudiencePrivate {
		r.foreign.Add(1)
		r.problem("claim: %s got job %s it never enqueued or may not run", d.runnerID, cs.ID)
		r.release(ctx, d, []protocol.GrantRef{{JobID: cs.ID, LeaseID: cs.Lease.ID}}, "refused")
		return
	}
	now := time.Now()
	j.mu.Lock()
	j.leases[cs.Lease.ID] = true
	if j.claimed.IsZero() {
		j.claimed = now
	}
	j.mu.Unlock()
	if cs.Lease.RunnerID != d.runnerID || cs.Site != j.site.keys.KeyID() || cs.Owner != j.owner {
		r.integrityFailure(j, "claim of %s: stub or lease altered (runner %s site %s owner %s)", cs.ID, cs.Lease.RunnerID, cs.Site, cs.Owner)
	}
	if r.cfg.Grants {
		// What the daemon does before it runs anybody's job: a grant for
		// this job, this device's owner, signed with the pinned key.
		if err := checkGrant(cs, d, time.Now().UnixMilli()); err != nil {
			r.integrityFailure(j, "claim of %s: %v", cs.ID, err)
			r.release(ctx, d, []protocol.GrantRef{{JobID: cs.ID, LeaseID: cs.Lease.ID}}, "refused")
			return
		}
		r.grantsVerified.Add(1)
	}
	n := r.grantsSeen.Add(1)
	if every := int64(r.cfg.AbandonEvery); every > 0 && n%every == 0 {
		r.abandoned.Add(1)
		return
	}
	if every := int64(r.cfg.ReleaseEvery); every > 0 && n%every == every/2 {
		r.release(ctx, d, []protocol.GrantRef{{JobID: cs.ID, LeaseID: cs.Lease.ID}}, "shutdown")
		return
	}
	jctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d.hold(cs.ID, cs.Lease.ID, cancel)
	defer d.drop(cs.ID, cs.Lease.ID)
	grant := grantRequest{ProtocolVersion: protocol.ProtocolVersion, RunnerID: d.runnerID, JobID: cs.ID, LeaseID: cs.Lease.ID}

	var env protocol.SealedEnvelope
	fetchStart := time.Now()
	fetchOp := func(res response, err error, outcome string) {
		if outcome == "" {
			outcome = answerOutcome(res, err)
		}
		r.record(Op{Kind: OpFetch, Start: fetchStart, End: time.Now(), JobID: cs.ID, Runner: d.runnerID, LeaseID: cs.Lease.ID, Status: res.status, Outcome: outcome})
	}
	fetchPause := r.cfg.FetchPoll
	if r.cfg.Profile == ProfileReal {
		fetchPause = 50 * time.Millisecond // the Runner's first not-ready pause, doubling to 1 s
	}
	for {
		res, err := r.cl.daemon(jctx, d.sig, "fetch", grant)
		if err != nil {
			if jctx.Err() == nil {
				r.problem("fetch: %v", err)
				sleepCtx(jctx, fetchPause)
				continue
			}
			fetchOp(res, err, "")
			r.aborted.Add(1)
			return
		}
		if res.status == http.StatusConflict && res.errorCode() == "not-ready" {
			sleepCtx(jctx, fetchPause)
			if r.cfg.Profile == ProfileReal {
				fetchPause = min(2*fetchPause, time.Second)
			}
			if jctx.Err() != nil {
				fetchOp(res, err, "")
				r.aborted.Add(1)
				return
			}
			continue
		}
		var fr fetchResponse
		if res.status != http.StatusOK || json.Unmarshal(res.body, &fr) != nil {
			fetchOp(res, nil, "")
			// Lost the grant (requeued after the seal window, or swept):
			// the daemon drops the job, as the real one does.
			r.aborted.Add(1)
			if res.status >= 500 {
				r.problem("fetch: HTTP %d: %.200s", res.status, res.body)
			}
			return
		}
		env = fr.Envelope
		fetchOp(res, nil, OutcomeOK)
		break
	}
	j.stamp(&j.fetched, time.Now())

	// The daemon's checks before opening: the payload names the stub's site,
	// and it is opened against that site's pinned key.
	s := r.byKeyID[cs.Site]
	if s == nil || env.SenderKeyID != cs.Site {
		r.integrityFailure(j, "payload of %s not from the stub's site (%s)", cs.ID, env.SenderKeyID)
		return
	}
	plaintext, err := envelope.Open(env, d.keys, s.keys.Stored.IdentityPublic, envelope.Expected{
		JobID: cs.ID, SenderKeyID: cs.Site, RecipientKeyID: d.keys.KeyID(), Direction: envelope.DirectionPayload,
	})
	if err != nil {
		r.integrityFailure(j, "open payload of %s: %v", cs.ID, err)
		return
	}
	prompt, err := promptOf(plaintext)
	if err != nil {
		r.integrityFailure(j, "payload of %s: %v", cs.ID, err)
		return
	}
	renv, err := envelope.Seal(outcomePlaintext(resultText(cs.ID, prompt)), d.keys, s.keys.Stored.EncryptionPublic, envelope.Context{
		JobID: cs.ID, SenderKeyID: d.keys.KeyID(), RecipientKeyID: cs.Site,
		DeadlineAt: time.Now().UnixMilli() + envelope.MaxAgeMs, Direction: envelope.DirectionResult,
	}, nil)
	if err != nil {
		r.problem("seal result: %v", err)
		return
	}
	resultStart := time.Now()
	res, err := r.cl.daemon(jctx, d.sig, "result", resultRequest{
		ProtocolVersion: protocol.ProtocolVersion, RunnerID: d.runnerID, JobID: cs.ID, LeaseID: cs.Lease.ID, Envelope: renv, Disposition: "ok",
	})
	op := Op{Kind: OpResult, Start: resultStart, End: time.Now(), JobID: cs.ID, Runner: d.runnerID, LeaseID: cs.Lease.ID, Status: res.status, Outcome: answerOutcome(res, err)}
	defer func() { r.record(op) }()
	var rr resultResponse
	switch {
	case err != nil:
		if jctx.Err() == nil {
			r.problem("result: %v", err)
		}
		r.aborted.Add(1)
	case res.status != http.StatusOK || json.Unmarshal(res.body, &rr) != nil:
		r.aborted.Add(1)
		if res.status >= 500 {
			r.problem("result: HTTP %d: %.200s", res.status, res.body)
		}
	case rr.Accepted:
		op.Outcome = OutcomeAccepted
		j.mu.Lock()
		j.accepted++
		if j.resulted.IsZero() {
			j.resulted = time.Now()
		}
		j.mu.Unlock()
	case rr.Duplicate:
		op.Outcome = OutcomeDuplicate
		r.duplicates.Add(1)
	default:
		r.problem("result: unexpected answer %.200s", res.body)
	}
}

func (r *runner) heartbeatLoop(ctx context.Context, d *daemon) {
	t := time.NewTicker(r.cfg.Heartbeat)
	defer t.Stop()
	for {
		r.heartbeat(ctx, d)
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// heartbeat sends one heartbeat and acts on its answer.
func (r *runner) heartbeat(ctx context.Context, d *daemon) {
	res, err := r.cl.daemon(ctx, d.sig, "heartbeat", heartbeatRequest{
		ProtocolVersion: protocol.ProtocolVersion, RunnerID: d.runnerID, DaemonVersion: "0.1.1",
		Capabilities: r.offer(), ActiveLeases: d.activeLeases(),
	})
	var hr heartbeatResponse
	switch {
	case err != nil:
		if ctx.Err() == nil {
			r.problem("heartbeat: %v", err)
		}
	case res.status != http.StatusOK || json.Unmarshal(res.body, &hr) != nil:
		r.problem("heartbeat: HTTP %d: %.200s", res.status, res.body)
	default:
		r.heartbeats.Add(1)
		if len(hr.Sites) != len(r.sites) {
			r.problem("heartbeat: %s pinned %d sites, want %d", d.runnerID, len(hr.Sites), len(r.sites))
		}
		at := time.Now()
		for i, g := range append(hr.Lost, hr.Cancel...) {
			kind := OpLost
			if i >= len(hr.Lost) {
				kind = OpNotice
			}
			r.record(Op{Kind: kind, Start: at, End: at, JobID: g.JobID, Runner: d.runnerID, LeaseID: g.LeaseID, Status: res.status, Outcome: OutcomeOK})
			if d.abort(g) {
				r.leasesLost.Add(1)
			}
		}
	}
}

// pendingLoop is the site's pump (aggressive profile): seal every job a
// device has claimed, up to 16 seals at once.
func (r *runner) pendingLoop(ctx context.Context, s *site) {
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	defer wg.Wait()
	parallel := func(f func()) {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f()
		}()
	}
	t := time.NewTicker(r.cfg.PendingPoll)
	defer t.Stop()
	for ctx.Err() == nil {
		r.pendingOnce(ctx, s, parallel)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

// pumpLoop is the real cloud lane's pump: pending, each seal in turn,
// results; then a pause of SitePump.
func (r *runner) pumpLoop(ctx context.Context, s *site) {
	inTurn := func(f func()) { f() }
	for ctx.Err() == nil {
		r.pendingOnce(ctx, s, inTurn)
		r.resultsOnce(ctx, s)
		sleepCtx(ctx, r.cfg.SitePump)
	}
}

// pendingOnce reads the site's pending list once and hands every seal it
// has not begun yet to seal.
func (r *runner) pendingOnce(ctx context.Context, s *site, seal func(func())) {
	res, err := r.cl.siteGet(ctx, s.sig, "pending")
	var pr pendingResponse
	switch {
	case err != nil:
		if ctx.Err() == nil {
			r.problem("pending: %v", err)
		}
	case res.status != http.StatusOK || json.Unmarshal(res.body, &pr) != nil:
		r.problem("pending: HTTP %d: %.200s", res.status, res.body)
	}
	for _, p := range pr.Jobs {
		key := p.JobID + "\x00" + p.LeaseID
		s.mu.Lock()
		begun := s.begun[key]
		s.begun[key] = true
		s.mu.Unlock()
		if begun {
			continue
		}
		j := r.lookup(p.JobID)
		if j == nil {
			r.foreign.Add(1)
			r.problem("pending: site %s asked to seal %s it never enqueued", s.id, p.JobID)
			continue
		}
		d := r.devices[p.Device.Identity]
		if d == nil || d.runnerID != p.RunnerID || !r.deviceVerified(p.Device) {
			r.integrityFailure(j, "pending: %s names device %s (runner %s) that is not the paired one", p.JobID, envelope.KeyID(p.Device.Identity), p.RunnerID)
			continue
		}
		seal(func() { r.seal(ctx, s, j, p.Device, p.RunnerID, p.LeaseID) })
	}
}

// deviceVerified checks the key set a pending entry names, once per
// distinct key set: a site that has checked a device's encryption key
// signature need not check the same bytes again for every job (it was one
// Ed25519 verification per job of the load generator's own CPU).
func (r *runner) deviceVerified(p protocol.PublicIdentity) bool {
	if _, ok := r.verified.Load(p); ok {
		return true
	}
	if !envelope.VerifyPublicIdentity(p) {
		return false
	}
	r.verified.Store(p, true)
	return true
}

func (r *runner) seal(ctx context.Context, s *site, j *job, device protocol.PublicIdentity, runnerID, leaseID string) {
	env, err := envelope.Seal(j.plaintext, s.keys, device.Encryption, envelope.Context{
		JobID: j.id, SenderKeyID: s.keys.KeyID(), RecipientKeyID: envelope.KeyID(device.Identity),
		DeadlineAt: j.createdAt + envelope.MaxAgeMs, Direction: envelope.DirectionPayload,
	}, nil)
	if err != nil {
		r.problem("seal payload: %v", err)
		return
	}
	start := time.Now()
	res, err := r.cl.sitePost(ctx, s.sig, "payload", payloadRequest{ProtocolVersion: protocol.ProtocolVersion, SiteID: s.id, JobID: j.id, Envelope: env})
	op := Op{Kind: OpSeal, Start: start, End: time.Now(), JobID: j.id, Site: s.id, Runner: runnerID, LeaseID: leaseID, Status: res.status, Outcome: answerOutcome(res, err)}
	if err == nil && res.status == http.StatusOK {
		op.Outcome = OutcomeOK
	}
	r.record(op)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			r.problem("payload: %v", err)
		}
	case res.status == http.StatusOK:
		j.stamp(&j.sealed, time.Now())
	case res.status == http.StatusConflict:
		// The seal window closed (requeued) or the job moved on: a late
		// seal, which the protocol answers too-late.
		r.lateSeals.Add(1)
	default:
		r.problem("payload: HTTP %d: %.200s", res.status, res.body)
	}
}

// resultsLoop collects, opens and checks every result for the site
// (aggressive profile).
func (r *runner) resultsLoop(ctx context.Context, s *site) {
	t := time.NewTicker(r.cfg.ResultsPoll)
	defer t.Stop()
	for ctx.Err() == nil {
		r.resultsOnce(ctx, s)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

// resultsOnce reads the site's results once and opens and checks each new one.
func (r *runner) resultsOnce(ctx context.Context, s *site) {
	res, err := r.cl.siteGet(ctx, s.sig, "results")
	// Every entry read below is copied out of the answer (json.Unmarshal,
	// problem's formatting), so its buffer can go back to the pool.
	defer releaseBody(res.body)
	var refs []resultRef
	switch {
	case err != nil:
		if ctx.Err() == nil {
			r.problem("results: %v", err)
		}
	case res.status != http.StatusOK:
		r.problem("results: HTTP %d: %.200s", res.status, res.body)
	default:
		if refs, err = scanResults(res.body); err != nil {
			r.problem("results: %v: %.200s", err, res.body)
		} else if r.resultsReads.Add(1)%resultsValidEvery == 1 && !json.Valid(res.body) {
			r.problem("results: not valid JSON: %.200s", res.body)
			refs = nil
		}
	}
	for _, ref := range refs {
		raw := ref.raw
		j := r.lookup(ref.jobID)
		if j != nil {
			j.mu.Lock()
			seen := !j.collected.IsZero() || j.bad
			j.mu.Unlock()
			if seen {
				continue // results are re-sent on every poll until the deadline
			}
		}
		var x resultEntry
		if err := json.Unmarshal(raw, &x); err != nil {
			r.problem("results: entry %.200s: %v", raw, err)
			continue
		}
		at := time.Now()
		wrong := func(format string, a ...any) {
			r.record(Op{Kind: OpCollect, Start: at, End: at, JobID: x.JobID, Site: s.id, Runner: x.RunnerID, Status: res.status, Outcome: OutcomeMismatch, Detail: fmt.Sprintf(format, a...)})
		}
		if j == nil {
			wrong("never enqueued by this run")
			r.foreign.Add(1)
			r.problem("results: site %s got a result for %s it never enqueued", s.id, x.JobID)
			continue
		}
		j.mu.Lock()
		seen := !j.collected.IsZero() || j.bad
		j.mu.Unlock()
		if seen {
			continue // results are re-sent on every poll until the deadline
		}
		if j.site != s {
			wrong("enqueued by site %s", j.site.id)
			r.integrityFailure(j, "results: %s delivered to site %s, enqueued by %s", x.JobID, s.id, j.site.id)
			continue
		}
		if d := r.devices[x.Device.Identity]; d == nil || d.runnerID != x.RunnerID || x.RunnerOwner != d.owner {
			wrong("names runner %s owner %s", x.RunnerID, x.RunnerOwner)
			r.integrityFailure(j, "results: %s names runner %s owner %s that did not claim it", x.JobID, x.RunnerID, x.RunnerOwner)
			continue
		}
		plaintext, err := envelope.Open(x.Envelope, s.keys, x.Device.Identity, envelope.Expected{
			JobID: x.JobID, SenderKeyID: envelope.KeyID(x.Device.Identity), RecipientKeyID: s.keys.KeyID(), Direction: envelope.DirectionResult,
		})
		if err != nil {
			wrong("open: %v", err)
			r.integrityFailure(j, "open result of %s: %v", x.JobID, err)
			continue
		}
		if err := checkOutcome(plaintext, x.Disposition, j.want); err != nil {
			wrong("%v", err)
			r.integrityFailure(j, "result of %s: %v", x.JobID, err)
			continue
		}
		now := time.Now()
		j.mu.Lock()
		first := j.collected.IsZero()
		if first {
			j.collected = now
		}
		j.mu.Unlock()
		if first {
			r.record(Op{Kind: OpCollect, Start: at, End: now, JobID: x.JobID, Site: s.id, Runner: x.RunnerID, Status: res.status, Outcome: OutcomeOK})
			r.collected.Add(1)
			r.lastCollect.Store(now.UnixNano())
			r.settle(j)
		}
	}
}

func (r *runner) release(ctx context.Context, d *daemon, leases []protocol.GrantRef, reason string) {
	if len(leases) == 0 {
		return
	}
	start := time.Now()
	res, err := r.cl.daemon(ctx, d.sig, "release", releaseRequest{ProtocolVersion: protocol.ProtocolVersion, RunnerID: d.runnerID, Leases: leases, Reason: reason})
	outcome := answerOutcome(res, err)
	if err == nil && res.status == http.StatusOK {
		outcome = OutcomeOK
		r.released.Add(int64(len(leases)))
	}
	for _, g := range leases {
		r.record(Op{Kind: OpRelease, Start: start, End: time.Now(), JobID: g.JobID, Runner: d.runnerID, LeaseID: g.LeaseID, Status: res.status, Outcome: outcome, Detail: reason})
	}
}

// releaseAll hands back whatever the daemons still hold, as a daemon does at
// shutdown, so a run leaves nothing leased behind.
func (r *runner) releaseAll(ctx context.Context) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for _, d := range r.daemons {
		r.release(rctx, d, d.activeLeases(), "shutdown")
	}
}

// Background is a Run in its own goroutine, for callers (the fault tests)
// that act on the relays while the load runs.
type Background struct {
	done chan struct{}
	rep  *Report
	err  error
}

// Start begins Run(ctx, cfg, nil) in the background.
func Start(ctx context.Context, cfg Config) *Background {
	b := &Background{done: make(chan struct{})}
	go func() {
		defer close(b.done)
		b.rep, b.err = Run(ctx, cfg, nil)
	}()
	return b
}

// Wait returns the run's report once it has ended, or an error if wait
// ends first (the run itself stops with the context Start was given).
func (b *Background) Wait(wait context.Context) (*Report, error) {
	select {
	case <-b.done:
		return b.rep, b.err
	case <-wait.Done():
		return nil, fmt.Errorf("load generator did not finish: %w", wait.Err())
	}
}
