// Package replica assembles and runs one relay replica: the store, the
// policy and the projection on one Valkey, the daemon and site planes, the
// admin listener with the operations view, telemetry, the background work
// (projection follower, file watchers, sweeper, queue-age reads, the fleet
// heartbeat) and the graceful drain. cmd/relay parses the configuration and
// calls Run.
package replica

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/buildinfo"
	"github.com/byollm/relay-go/internal/config"
	"github.com/byollm/relay-go/internal/health"
	"github.com/byollm/relay-go/internal/httpserve"
	"github.com/byollm/relay-go/internal/opsview"
	"github.com/byollm/relay-go/internal/policy"
	"github.com/byollm/relay-go/internal/projectionsync"
	"github.com/byollm/relay-go/internal/relay"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/internal/telemetry"
	"github.com/byollm/relay-go/internal/valkeyconn"
)

// giveBackGrace is how long shutdown waits, after the listeners are done,
// for give-backs of lost claims still being retried (relay.Relay.Close). A
// store that answers takes one in milliseconds; one that does not in this
// long will not in the next minute either, and those leases lapse anyway.
const giveBackGrace = 2 * time.Second

// replica is what Run assembles, in the order it assembles it.
type replica struct {
	cfg config.Config
	log *slog.Logger
	// bg is the background context: it ends after the listeners have
	// drained, not at the signal, so in-flight requests still find the store.
	bg    context.Context
	build buildinfo.Info

	tel      *telemetry.Telemetry
	metrics  *telemetry.Metrics
	activity *opsview.Activity

	client            valkey.Client
	embedded, durable bool
	fsync             string
	st                *store.Store
	pol               *policy.Store
	proj              *projectionsync.Sync
	projFile          *projectionsync.FileSource
	policyFile        *policy.FileSource
	checker           *health.Checker
	bodyBudget        *httpserve.Budget
	planes            *relay.Relay
	certs             *httpserve.CertReloader
	planesSrv         *httpserve.Server
	servers           []*namedServer
	adminAddr         string
	background        sync.WaitGroup
}

type namedServer struct {
	name string
	srv  *httpserve.Server
}

// Run serves until ctx ends (SIGINT/SIGTERM in cmd/relay), then drains and
// shuts down gracefully. stdout carries exactly one line, the ready line.
// It returns an error when the replica could not start or a listener failed.
func Run(ctx context.Context, cfg config.Config, log *slog.Logger, stdout io.Writer) error {
	bg, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBackground()
	r := &replica{cfg: cfg, log: log, bg: bg, build: buildinfo.Get()}

	flush, err := r.openTelemetry()
	if err != nil {
		return err
	}
	defer flush()
	closeStore, err := r.openValkey()
	if err != nil {
		return err
	}
	defer closeStore()
	if err := r.openStore(); err != nil {
		return err
	}
	startCtx, cancelStart := context.WithTimeout(ctx, 10*time.Second)
	defer cancelStart()
	if err := r.loadProjectionAndPolicy(startCtx); err != nil {
		return err
	}
	r.observeStore()
	r.newChecker()
	if err := r.newPlanes(startCtx); err != nil {
		return err
	}
	if err := r.listen(); err != nil {
		return err
	}
	r.observeConnections()
	r.startBackground()
	defer r.background.Wait()
	defer stopBackground()

	failed := r.serve()
	r.announceReady(stdout)
	return r.shutdown(ctx, failed)
}

// openTelemetry sets up traces and metrics; flush sends what is buffered.
func (r *replica) openTelemetry() (flush func(), err error) {
	tel, err := telemetry.Setup(r.bg, telemetry.Config{OTLPEndpoint: r.cfg.OTLPEndpoint})
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	r.tel, r.metrics = tel, tel.Metrics()
	r.metrics.SetBuildInfo(r.build.Version, r.build.Revision, r.build.GoVersion)
	// Per-site activity for the operations view, counted in memory and
	// published in this replica's heartbeat record (internal/opsview).
	// Only the projection's sites are counted; r.proj is set later.
	r.activity = opsview.NewActivity(func(siteID string) bool {
		p := r.proj.Current()
		return p != nil && p.SiteFor(siteID) != nil
	})
	return func() {
		// Flush buffered spans; a collector that is down must not hold
		// the exit for long.
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tel.Shutdown(fctx); err != nil {
			r.log.Warn("telemetry flush failed", slog.Any("err", err))
		}
	}, nil
}

// openValkey connects to RELAY_VALKEY_URL (or the embedded store) and reads
// how durable the server says it is.
func (r *replica) openValkey() (closeStore func(), err error) {
	client, closeStore, embedded, err := valkeyconn.Open(r.bg, r.cfg.ValkeyURL, r.cfg.ValkeyConnections, r.log)
	if err != nil {
		return nil, fmt.Errorf("open the store: %w", err)
	}
	r.client, r.embedded = client, embedded
	// valkeyconn has said loudly that an embedded store is not durable; the
	// ready line repeats embedded=true. A server's durability is what it
	// says it does, asked of every primary (the ready line's durable and
	// appendfsync).
	r.durable, r.fsync = false, "-"
	if !embedded {
		pctx, cancel := context.WithTimeout(r.bg, 5*time.Second)
		p, err := valkeyconn.ReadPersistence(pctx, client)
		cancel()
		switch {
		case err != nil:
			r.fsync = "unknown"
			r.log.Warn("valkey: could not read its persistence settings; durable is reported false", slog.Any("err", err))
		case !p.AOF:
			r.fsync = p.Fsync
			r.log.Warn("valkey: the append-only file is off, so a Valkey restart loses every job, lease and pairing it holds; "+
				"set appendonly yes (appendfsync everysec, or always to lose nothing acknowledged)", slog.Any("primaries", p.Off))
		default:
			r.durable, r.fsync = true, p.Fsync
		}
	}
	return closeStore, nil
}

// openStore builds the job store and the policy store and starts the work
// view.
func (r *replica) openStore() error {
	cfg, log, bg := r.cfg, r.log, r.bg
	st, err := store.New(bg, r.client, store.Options{
		Namespace:          cfg.Namespace,
		ObserveScript:      r.tel.ScriptObserver(),
		CallTimeout:        cfg.StoreTimeout,
		Logger:             log,
		PairingsPerSource:  cfg.PairingsPerAddress,
		PairingsPerNetwork: cfg.PairingsPerNetwork,
		PairingCapacity:    cfg.PairingsMax,
		SiteLimits:         cfg.SiteLimits,
		HeartbeatBatch:     cfg.DaemonHeartbeatBatch,
		HeartbeatIdleBatch: cfg.DaemonIdleHeartbeatBatch,
		WorkViewQueues:     cfg.WorkViewQueues,
		DeviceRetention:    cfg.DeviceRetention,
		OnChurn: func(rep store.ChurnReport) {
			r.metrics.RecordChurnReport(bg)
			r.activity.Churned(rep)
			log.Warn("unsealed churn: a site keeps letting grants expire unsealed", slog.Any("report", rep))
		},
	})
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	r.st = st
	r.tel.SetScriptCommand(st.ScriptCommand())
	if !r.embedded {
		// A per-site byte limit the server cannot hold is worth a word.
		warnings, err := st.SiteLimitWarnings(bg)
		if err != nil {
			log.Warn("could not check RELAY_SITE_LIMITS against Valkey's maxmemory", slog.Any("err", err))
		}
		for _, w := range warnings {
			log.Warn(w)
		}
	}
	// The work view: idle claims and sweeps ask Valkey nothing while every
	// shard's announcements reach this replica (store.RunWorkView).
	go st.RunWorkView(bg)

	// The built-in grant engine's policy, beside the projection. The admin
	// listener writes it; the engine (grantAuthority) reads it, and what
	// devices advertise from st's presence records.
	if r.pol, err = policy.NewStoreOn(st.Runner(), cfg.Namespace); err != nil {
		return fmt.Errorf("policy store: %w", err)
	}
	return nil
}

// loadProjectionAndPolicy reads the projection from Valkey, then pushes
// RELAY_PROJECTION_FILE and RELAY_POLICY_FILE when they are set.
func (r *replica) loadProjectionAndPolicy(startCtx context.Context) error {
	cfg, log := r.cfg, r.log
	r.proj = projectionsync.New(r.client, projectionsync.Options{Namespace: cfg.Namespace, Logger: log, Runner: r.st.Runner()})
	if err := r.proj.Refresh(startCtx); err != nil {
		return fmt.Errorf("load the projection from Valkey: %w", err)
	}
	if cfg.ProjectionFile != "" {
		r.projFile = projectionsync.NewFileSource(r.proj, cfg.ProjectionFile, log)
		res, err := r.projFile.Push(startCtx)
		if err != nil {
			// At start a bad file is fatal: the operator is watching now,
			// and the projection already in Valkey stays untouched.
			return err
		}
		log.Info("projection file pushed", slog.String("file", cfg.ProjectionFile),
			slog.Int64("version", res.Version), slog.Bool("changed", res.Changed))
	}
	if cfg.PolicyFile != "" {
		r.policyFile = policy.NewFileSource(r.pol, cfg.PolicyFile, log)
		version, changed, err := r.policyFile.Push(startCtx)
		if err != nil {
			// As with the projection file: fatal at start, and the policy
			// already in Valkey stays untouched.
			return err
		}
		log.Info("policy file pushed", slog.String("file", cfg.PolicyFile),
			slog.Int64("version", version), slog.Bool("changed", changed))
	}
	return nil
}

// projectionSites lists the projection's site ids (none before one loads).
func (r *replica) projectionSites() []string {
	p := r.proj.Current()
	if p == nil {
		return nil
	}
	var ids []string
	for _, s := range p.Fixture().Sites {
		ids = append(ids, s.SiteID)
	}
	return ids
}

// observeStore registers the gauges read from the projection and the store.
func (r *replica) observeStore() {
	proj, st := r.proj, r.st
	r.metrics.ObserveProjection(func() telemetry.ProjectionState {
		ps := proj.State()
		return telemetry.ProjectionState{Loaded: ps.Loaded, Version: ps.Version, LoadedAt: ps.LoadedAt}
	})
	// Job and lease gauges: one O(1) read-only script per scrape.
	r.metrics.ObserveJobsByState(func(ctx context.Context) (map[string]int64, error) {
		c, err := st.Counts(ctx)
		return c.ByState(), err
	})
	r.metrics.ObserveActiveLeases(func(ctx context.Context) (int64, error) {
		c, err := st.Counts(ctx)
		return c.ActiveLeases(), err
	})
	// Per-site use: the projection's sites only (bounded labels), O(1) each.
	r.metrics.ObserveSiteUse(func(ctx context.Context) (map[string]telemetry.SiteUse, error) {
		if proj.Current() == nil {
			return nil, nil
		}
		use, err := st.SiteUse(ctx, r.projectionSites())
		if err != nil {
			return nil, err
		}
		out := make(map[string]telemetry.SiteUse, len(use))
		for id, u := range use {
			out[id] = telemetry.SiteUse{LiveJobs: u.LiveJobs, StoredBytes: u.StoredBytes}
		}
		return out, nil
	})
}

// replicaName names this replica in the fleet view: host and process, plus
// a few random bytes so a restart on the same host is a new record.
func replicaName() string {
	host, _ := os.Hostname()
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s/%d/%x", host, os.Getpid(), b)
}
