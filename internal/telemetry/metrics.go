package telemetry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// latencyBuckets (seconds) span a Valkey round trip on loopback (~100 µs) to
// a request stuck behind a slow store (10 s).
var latencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// gaugeTimeout bounds the store reads behind observable gauges, so a Valkey
// outage cannot hang a scrape.
const gaugeTimeout = 2 * time.Second

// ProjectionState is what the projection gauges report.
type ProjectionState struct {
	Loaded   bool
	Version  int64     // the projection's version as the syncer numbers it
	LoadedAt time.Time // when this version was installed; age = now - LoadedAt
}

// Metrics is the relay's set of instruments. The counters and histograms are
// recorded by the code that knows the event; the gauges are observed on each
// scrape through callbacks that the wiring registers with the Observe*
// methods (an unset callback reports nothing).
type Metrics struct {
	sets attrSets

	requests       metric.Int64Counter
	requestLatency metric.Float64Histogram
	activeRequests metric.Int64UpDownCounter

	claims     metric.Int64Counter
	claimedJob metric.Int64Counter
	sweeps     metric.Int64Counter
	sweptJobs  metric.Int64Counter
	churn      metric.Int64Counter
	unanswered metric.Int64Counter
	givenBack  metric.Int64Counter

	scriptLatency metric.Float64Histogram
	scriptErrors  metric.Int64Counter

	grantCalls   metric.Int64Counter
	grantLatency metric.Float64Histogram

	jobsByState       metric.Int64ObservableGauge
	activeLeases      metric.Int64ObservableGauge
	projectionVersion metric.Int64ObservableGauge
	projectionAge     metric.Float64ObservableGauge
	projectionLoaded  metric.Int64ObservableGauge
	siteJobs          metric.Int64ObservableGauge
	siteBytes         metric.Int64ObservableGauge
	siteRefusals      metric.Int64Counter
	ready             metric.Int64ObservableGauge
	oldestQueued      metric.Float64ObservableGauge
	buildInfo         metric.Int64ObservableGauge
	connsOpen         metric.Int64ObservableGauge
	connsLimit        metric.Int64ObservableGauge
	connsRefused      metric.Int64ObservableCounter

	mu           sync.Mutex
	siteUseFn    func(context.Context) (map[string]SiteUse, error)
	jobsFn       func(context.Context) (map[string]int64, error)
	leasesFn     func(context.Context) (int64, error)
	projectionFn func() ProjectionState
	readyFn      func(context.Context) bool
	// build labels relay_build_info; nil until SetBuildInfo.
	build   []attribute.KeyValue
	connsFn func() []ConnUse
	// queuedSince is, per projection site, when its oldest queued job was
	// enqueued (zero: none queued), as last read by the background refresh;
	// the age itself is taken at scrape time so it keeps growing between
	// refreshes.
	queuedSince map[string]time.Time
	now         func() time.Time
}

// NewMetrics creates the instruments on meter. Instrument names are OTel
// style; the Prometheus exporter renders them with underscores and the usual
// suffixes (relay.http.requests -> relay_http_requests_total).
func NewMetrics(meter metric.Meter) (*Metrics, error) {
	m := &Metrics{now: time.Now}
	var err error
	wrap := func(name string, e error) {
		if e != nil && err == nil {
			err = fmt.Errorf("telemetry instrument %s: %w", name, e)
		}
	}
	var e error
	m.requests, e = meter.Int64Counter("relay.http.requests",
		metric.WithDescription("HTTP requests served, by route, plane and status."))
	wrap("relay.http.requests", e)
	m.requestLatency, e = meter.Float64Histogram("relay.http.request.duration", metric.WithUnit("s"),
		metric.WithDescription("HTTP request latency, by route, plane and status."),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	wrap("relay.http.request.duration", e)
	m.activeRequests, e = meter.Int64UpDownCounter("relay.http.active_requests",
		metric.WithDescription("HTTP requests in flight (drain watches this fall to zero)."))
	wrap("relay.http.active_requests", e)
	m.claims, e = meter.Int64Counter("relay.claims",
		metric.WithDescription("Claim calls, by outcome: granted (at least one job) or empty."))
	wrap("relay.claims", e)
	m.claimedJob, e = meter.Int64Counter("relay.claimed.jobs",
		metric.WithDescription("Jobs handed out by claim calls."))
	wrap("relay.claimed.jobs", e)
	m.sweeps, e = meter.Int64Counter("relay.sweeps",
		metric.WithDescription("Sweeps that moved at least one job (background sweeper ticks and the planes' read-path sweeps)."))
	wrap("relay.sweeps", e)
	m.sweptJobs, e = meter.Int64Counter("relay.swept.jobs",
		metric.WithDescription("Jobs moved by sweeps, by outcome: requeued or removed."))
	wrap("relay.swept.jobs", e)
	m.churn, e = meter.Int64Counter("relay.unsealed_churn.reports",
		metric.WithDescription("Unsealed-churn reports raised (a site and owner that keep claiming without sealing)."))
	wrap("relay.unsealed_churn.reports", e)
	m.unanswered, e = meter.Int64Counter("relay.claims.unanswered",
		metric.WithDescription("Claims answered 503 after their script may have run (store timeout, client gone), by outcome: given-back (the relay handed their grants back) or abandoned (left to lapse: shutdown, store down for a whole lease, queue full)."))
	wrap("relay.claims.unanswered", e)
	m.givenBack, e = meter.Int64Counter("relay.leases.given_back",
		metric.WithDescription("Leases of unanswered claims the relay handed back, so their jobs were claimable again at once."))
	wrap("relay.leases.given_back", e)
	m.scriptLatency, e = meter.Float64Histogram("relay.valkey.script.duration", metric.WithUnit("s"),
		metric.WithDescription("Valkey store script latency, by script and outcome."),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	wrap("relay.valkey.script.duration", e)
	m.scriptErrors, e = meter.Int64Counter("relay.valkey.script.errors",
		metric.WithDescription("Valkey store scripts that failed (transport or script error), by script and class (timeout, canceled, cluster, busy, script, connection)."))
	wrap("relay.valkey.script.errors", e)
	m.grantCalls, e = meter.Int64Counter("relay.grant.calls",
		metric.WithDescription("grant authority calls (op author|satisfiable) by outcome; failed = error or timeout, skipped = not asked (unknown site, claim budget spent)"))
	wrap("relay.grant.calls", e)
	m.grantLatency, e = meter.Float64Histogram("relay.grant.duration", metric.WithUnit("s"),
		metric.WithDescription("grant authority call latency"), metric.WithExplicitBucketBoundaries(latencyBuckets...))
	wrap("relay.grant.duration", e)
	m.jobsByState, e = meter.Int64ObservableGauge("relay.jobs",
		metric.WithDescription("Jobs in the routing store, by state."))
	wrap("relay.jobs", e)
	m.activeLeases, e = meter.Int64ObservableGauge("relay.leases.active",
		metric.WithDescription("Leases currently held by runners."))
	wrap("relay.leases.active", e)
	m.projectionVersion, e = meter.Int64ObservableGauge("relay.projection.version",
		metric.WithDescription("Version of the projection this replica serves."))
	wrap("relay.projection.version", e)
	m.projectionAge, e = meter.Float64ObservableGauge("relay.projection.age", metric.WithUnit("s"),
		metric.WithDescription("Time since this replica installed its projection."))
	wrap("relay.projection.age", e)
	m.projectionLoaded, e = meter.Int64ObservableGauge("relay.projection.loaded",
		metric.WithDescription("1 when a projection is loaded, else 0."))
	wrap("relay.projection.loaded", e)
	m.siteJobs, e = meter.Int64ObservableGauge("relay.site.jobs.live",
		metric.WithDescription("Jobs of each site not yet done (queued to running, not cancelled), against its jobs limit."))
	wrap("relay.site.jobs.live", e)
	m.siteBytes, e = meter.Int64ObservableGauge("relay.site.stored", metric.WithUnit("By"),
		metric.WithDescription("Bytes of stubs, payloads and results each site has stored, against its bytes limit."))
	wrap("relay.site.stored", e)
	m.siteRefusals, e = meter.Int64Counter("relay.site.limit.refusals",
		metric.WithDescription("Enqueues and payloads refused because the site was at a limit, by site and limit (jobs, bytes, rate)."))
	wrap("relay.site.limit.refusals", e)
	m.ready, e = meter.Int64ObservableGauge("relay.ready",
		metric.WithDescription("1 when this replica's /readyz would answer 200 (checks pass, not draining), else 0."))
	wrap("relay.ready", e)
	m.oldestQueued, e = meter.Float64ObservableGauge("relay.site.oldest_queued", metric.WithUnit("s"),
		metric.WithDescription("Age of each projection site's oldest queued job (0 when none is queued), from a background read every RELAY_QUEUE_AGE_INTERVAL."))
	wrap("relay.site.oldest_queued", e)
	m.buildInfo, e = meter.Int64ObservableGauge("relay.build_info",
		metric.WithDescription("1, labelled with the running build's version, VCS revision and Go version (so a roll shows which replicas run what)."))
	wrap("relay.build_info", e)
	m.connsOpen, e = meter.Int64ObservableGauge("relay.connections.open",
		metric.WithDescription("Open connections on each listener; at relay_connections_limit{kind=\"max\"} new ones are refused (a replica saturated by connections)."))
	wrap("relay.connections.open", e)
	m.connsLimit, e = meter.Int64ObservableGauge("relay.connections.limit",
		metric.WithDescription("Each listener's connection limits: kind=max (RELAY_MAX_CONNS) and kind=per_address (RELAY_MAX_CONNS_PER_ADDRESS)."))
	wrap("relay.connections.limit", e)
	m.connsRefused, e = meter.Int64ObservableCounter("relay.connections.refused",
		metric.WithDescription("Connections refused or closed early on each listener, by reason: full (at RELAY_MAX_CONNS), address (one address at its share), idle_closed (an idle keep-alive closed early at or near the cap)."))
	wrap("relay.connections.refused", e)
	if err != nil {
		return nil, err
	}
	if _, err := meter.RegisterCallback(m.observe,
		m.jobsByState, m.activeLeases, m.projectionVersion, m.projectionAge, m.projectionLoaded,
		m.siteJobs, m.siteBytes, m.ready, m.oldestQueued, m.buildInfo, m.connsOpen, m.connsLimit, m.connsRefused); err != nil {
		return nil, fmt.Errorf("telemetry gauge callback: %w", err)
	}
	return m, nil
}

// ObserveJobsByState registers the reader behind relay_jobs{state}. It runs
// on every scrape with a short deadline, so it must be cheap (counts kept by
// the store, not a scan). An error skips the gauge for that scrape.
func (m *Metrics) ObserveJobsByState(fn func(context.Context) (map[string]int64, error)) {
	m.mu.Lock()
	m.jobsFn = fn
	m.mu.Unlock()
}

// ObserveActiveLeases registers the reader behind relay_leases_active.
func (m *Metrics) ObserveActiveLeases(fn func(context.Context) (int64, error)) {
	m.mu.Lock()
	m.leasesFn = fn
	m.mu.Unlock()
}

// SiteUse is one site's use of the store (relay_site_jobs_live,
// relay_site_stored_bytes).
type SiteUse struct{ LiveJobs, StoredBytes int64 }

// ObserveSiteUse registers the reader behind the per-site gauges. It should
// name only the projection's sites, which bounds the label's cardinality,
// and be O(1) per site.
func (m *Metrics) ObserveSiteUse(fn func(context.Context) (map[string]SiteUse, error)) {
	m.mu.Lock()
	m.siteUseFn = fn
	m.mu.Unlock()
}

// SetBuildInfo labels relay_build_info with the running build.
func (m *Metrics) SetBuildInfo(version, revision, goVersion string) {
	m.mu.Lock()
	m.build = []attribute.KeyValue{attribute.String("version", version), attribute.String("revision", revision), attribute.String("goversion", goVersion)}
	m.mu.Unlock()
}

// ObserveReady registers the readiness reader behind relay_ready; it runs
// the /readyz checks on each scrape.
func (m *Metrics) ObserveReady(fn func(context.Context) bool) {
	m.mu.Lock()
	m.readyFn = fn
	m.mu.Unlock()
}

// SetSiteOldestQueued replaces the per-site enqueue instants behind
// relay_site_oldest_queued_seconds: a site absent from since stops being
// reported (it left the projection), a zero instant reports 0.
func (m *Metrics) SetSiteOldestQueued(since map[string]time.Time) {
	cp := make(map[string]time.Time, len(since))
	for k, v := range since {
		cp[k] = v
	}
	m.mu.Lock()
	m.queuedSince = cp
	m.mu.Unlock()
}

// RecordSiteLimit counts one request refused at a site limit. The site id
// is an authenticated site of the projection, so the label stays bounded.
func (m *Metrics) RecordSiteLimit(ctx context.Context, siteID, limit string) {
	m.siteRefusals.Add(ctx, 1, metric.WithAttributes(attribute.String("site", siteID), attribute.String("limit", limit)))
}

// ObserveProjection registers the reader behind the projection gauges.
func (m *Metrics) ObserveProjection(fn func() ProjectionState) {
	m.mu.Lock()
	m.projectionFn = fn
	m.mu.Unlock()
}

// ConnUse is one listener's connection use (httpserve.Stats).
type ConnUse struct {
	Listener                                string
	Open, Max, MaxPerAddress                int64
	RefusedFull, RefusedAddress, ClosedIdle int64
}

// ObserveConnections registers the reader behind the relay_connections_*
// instruments; it runs on each scrape and must be cheap.
func (m *Metrics) ObserveConnections(fn func() []ConnUse) {
	m.mu.Lock()
	m.connsFn = fn
	m.mu.Unlock()
}

func (m *Metrics) observe(ctx context.Context, o metric.Observer) error {
	m.mu.Lock()
	jobsFn, leasesFn, projectionFn, now := m.jobsFn, m.leasesFn, m.projectionFn, m.now
	siteUseFn, readyFn, queuedSince, build, connsFn := m.siteUseFn, m.readyFn, m.queuedSince, m.build, m.connsFn
	m.mu.Unlock()

	if build != nil {
		o.ObserveInt64(m.buildInfo, 1, metric.WithAttributes(build...))
	}
	if connsFn != nil {
		for _, u := range connsFn() {
			ln := attribute.String("listener", u.Listener)
			o.ObserveInt64(m.connsOpen, u.Open, metric.WithAttributes(ln))
			o.ObserveInt64(m.connsLimit, u.Max, metric.WithAttributes(ln, attribute.String("kind", "max")))
			o.ObserveInt64(m.connsLimit, u.MaxPerAddress, metric.WithAttributes(ln, attribute.String("kind", "per_address")))
			o.ObserveInt64(m.connsRefused, u.RefusedFull, metric.WithAttributes(ln, attribute.String("reason", "full")))
			o.ObserveInt64(m.connsRefused, u.RefusedAddress, metric.WithAttributes(ln, attribute.String("reason", "address")))
			o.ObserveInt64(m.connsRefused, u.ClosedIdle, metric.WithAttributes(ln, attribute.String("reason", "idle_closed")))
		}
	}

	if readyFn != nil {
		// The checks carry their own timeout (health.DefaultTimeout).
		var v int64
		if readyFn(ctx) {
			v = 1
		}
		o.ObserveInt64(m.ready, v)
	}
	if queuedSince != nil {
		t := now()
		for site, at := range queuedSince {
			age := 0.0
			if !at.IsZero() {
				age = max(t.Sub(at).Seconds(), 0)
			}
			o.ObserveFloat64(m.oldestQueued, age, metric.WithAttributes(attribute.String("site", site)))
		}
	}

	// Errors are not returned: the SDK would log them per scrape, and the
	// script-error counter plus /readyz already say the store is down.
	if jobsFn != nil {
		cctx, cancel := context.WithTimeout(ctx, gaugeTimeout)
		counts, err := jobsFn(cctx)
		cancel()
		if err == nil {
			for state, n := range counts {
				o.ObserveInt64(m.jobsByState, n, metric.WithAttributes(attribute.String("state", state)))
			}
		}
	}
	if leasesFn != nil {
		cctx, cancel := context.WithTimeout(ctx, gaugeTimeout)
		n, err := leasesFn(cctx)
		cancel()
		if err == nil {
			o.ObserveInt64(m.activeLeases, n)
		}
	}
	if siteUseFn != nil {
		cctx, cancel := context.WithTimeout(ctx, gaugeTimeout)
		use, err := siteUseFn(cctx)
		cancel()
		if err == nil {
			for site, u := range use {
				attrs := metric.WithAttributes(attribute.String("site", site))
				o.ObserveInt64(m.siteJobs, u.LiveJobs, attrs)
				o.ObserveInt64(m.siteBytes, u.StoredBytes, attrs)
			}
		}
	}
	if projectionFn != nil {
		p := projectionFn()
		if p.Loaded {
			o.ObserveInt64(m.projectionLoaded, 1)
			o.ObserveInt64(m.projectionVersion, p.Version)
			o.ObserveFloat64(m.projectionAge, now().Sub(p.LoadedAt).Seconds())
		} else {
			o.ObserveInt64(m.projectionLoaded, 0)
		}
	}
	return nil
}

// RecordClaim counts one claim call that handed out granted jobs.
func (m *Metrics) RecordClaim(ctx context.Context, granted int) {
	if granted <= 0 {
		m.claims.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", "empty")))
		return
	}
	m.claims.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", "granted")))
	m.claimedJob.Add(ctx, int64(granted))
}

// RecordSweep counts one sweep that moved jobs, and the jobs it moved.
func (m *Metrics) RecordSweep(ctx context.Context, requeued, removed int) {
	m.sweeps.Add(ctx, 1)
	if requeued > 0 {
		m.sweptJobs.Add(ctx, int64(requeued), metric.WithAttributes(attribute.String("outcome", "requeued")))
	}
	if removed > 0 {
		m.sweptJobs.Add(ctx, int64(removed), metric.WithAttributes(attribute.String("outcome", "removed")))
	}
}

// RecordUnansweredClaim counts one claim whose answer was lost, and the
// leases the relay gave back for it (relay.LeaseObserver).
func (m *Metrics) RecordUnansweredClaim(ctx context.Context, given int, abandoned bool) {
	outcome := "given-back"
	if abandoned {
		outcome = "abandoned"
	}
	m.unanswered.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", outcome)))
	if given > 0 {
		m.givenBack.Add(ctx, int64(given))
	}
}

// RecordChurnReport counts one unsealed-churn report.
func (m *Metrics) RecordChurnReport(ctx context.Context) {
	m.churn.Add(ctx, 1)
}

func (m *Metrics) recordRequestWith(ctx context.Context, opt metric.MeasurementOption, elapsed time.Duration) {
	m.requests.Add(ctx, 1, opt)
	m.requestLatency.Record(ctx, elapsed.Seconds(), opt)
}

func (m *Metrics) recordScript(ctx context.Context, op string, elapsed time.Duration, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
		// The store names the class of each failure (timeout, cluster,
		// busy, script, connection); anything else is just "error".
		class := "error"
		var c interface{ ErrorClass() string }
		if errors.As(err, &c) {
			class = c.ErrorClass()
		}
		m.scriptErrors.Add(ctx, 1, metric.WithAttributes(attribute.String("script", op), attribute.String("class", class)))
	}
	m.scriptLatency.Record(ctx, elapsed.Seconds(), m.sets.script(op, outcome))
}

// RecordGrantCall counts one grant authority call (or a decline made
// without one, outcome "skipped") and its latency.
func (m *Metrics) RecordGrantCall(ctx context.Context, op, outcome string, elapsed time.Duration) {
	attrs := metric.WithAttributes(attribute.String("op", op), attribute.String("outcome", outcome))
	m.grantCalls.Add(ctx, 1, attrs)
	if outcome != "skipped" {
		m.grantLatency.Record(ctx, elapsed.Seconds(), attrs)
	}
}
