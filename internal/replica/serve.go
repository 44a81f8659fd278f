package replica

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/byollm/relay-go/internal/admin"
	"github.com/byollm/relay-go/internal/health"
	"github.com/byollm/relay-go/internal/httpserve"
	"github.com/byollm/relay-go/internal/opsstore"
	"github.com/byollm/relay-go/internal/opsview"
	"github.com/byollm/relay-go/internal/pairings"
	"github.com/byollm/relay-go/internal/relay"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/internal/sweeper"
	"github.com/byollm/relay-go/internal/telemetry"
)

// newChecker builds the health checks /readyz and relay_ready run.
func (r *replica) newChecker() {
	st, proj := r.st, r.proj
	checker := health.New(health.Options{Logger: r.log})
	checker.Add("valkey", health.ValkeyPing(r.client))
	checker.Add("scripts", func(ctx context.Context) error {
		// A read-only operation on an absent key: proves the store's
		// operations run (and loads the functions library, or the script,
		// again after a Valkey restart lost it).
		_, err := st.Presence(ctx, "readyz-probe")
		return err
	})
	checker.Add("projection", func(context.Context) error {
		if !proj.State().Loaded {
			return errors.New("no projection loaded yet")
		}
		return nil
	})
	// relay_ready: the same checks /readyz runs, on each scrape.
	r.metrics.ObserveReady(func(ctx context.Context) bool { return checker.Check(ctx).Ready() })
	r.checker = checker
}

// newPlanes builds the daemon and site planes (internal/relay) with their
// grant authority.
func (r *replica) newPlanes(startCtx context.Context) error {
	cfg, log, st, proj, metrics := r.cfg, r.log, r.st, r.proj, r.metrics
	grants, controlPlanePublic, err := grantAuthority(startCtx, cfg, r.pol, st, log)
	if err != nil {
		return err
	}
	planes, err := relay.New(relay.Config{
		Store: st,
		Work: &workMetrics{m: metrics, act: r.activity,
			siteOfKey: func(keyID string) (string, bool) {
				if p := proj.Current(); p != nil {
					return p.SiteIDForKey(keyID)
				}
				return "", false
			}},
		Projection:      proj,
		BasePath:        cfg.BasePath,
		LeaseMs:         cfg.LeaseMs,
		VerificationURL: cfg.VerificationURL,
		Debug:           cfg.Debug,
		UpdateOffer:     cfg.UpdateOffer,
		DaemonFloor:     cfg.DaemonFloor,
		Bodies:          r.bodies(),
		TrustedProxies:  cfg.TrustedProxies,
		StoreTimeout:    cfg.StoreTimeout,
		Logger:          log,

		Grants:             grants,
		ControlPlanePublic: controlPlanePublic,
		GrantTimeout:       cfg.GrantTimeout,
		GrantBudget:        cfg.GrantBudget,
		GrantRetryAfter:    cfg.GrantRetryAfter,
		FetchWait:          cfg.FetchWait,
		GrantObserver:      metrics,
		LeaseObserver:      metrics,

		// One debug line per refusal.
		Middleware: []echo.MiddlewareFunc{r.tel.Middleware(telemetry.MiddlewareConfig{Logger: log})},
	})
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	r.planes = planes
	return nil
}

// bodies is the one body budget for both listeners: the bytes of request
// bodies held at once, whatever any number of clients send.
func (r *replica) bodies() *httpserve.Budget {
	if r.bodyBudget == nil {
		r.bodyBudget = httpserve.NewBudget(r.cfg.BodyBytesInFlight)
		r.bodyBudget.SetClientShare(r.cfg.ClientBodyShare())
	}
	return r.bodyBudget
}

// listenOptions are the options both listeners share.
func (r *replica) listenOptions(name string, h http.Handler) httpserve.Options {
	cfg := r.cfg
	return httpserve.Options{
		Name:               name,
		Handler:            r.checker.CloseWhileDraining(h),
		MaxConns:           cfg.MaxConns,
		BodyTimeout:        cfg.BodyTimeout,
		MaxConnsPerAddress: cfg.MaxConnsPerAddress,
		TrustedProxies:     cfg.TrustedProxies,
		WriteTimeout:       cfg.WriteTimeout,
		Logger:             r.log,
	}
}

// listen opens the planes listener (with TLS when configured) and the admin
// listener unless it is off.
func (r *replica) listen() error {
	cfg := r.cfg
	if cfg.TLSCertFile != "" {
		var err error
		if r.certs, err = httpserve.LoadCert(cfg.TLSCertFile, cfg.TLSKeyFile, r.log); err != nil {
			return fmt.Errorf("RELAY_TLS_CERT_FILE/RELAY_TLS_KEY_FILE: %w", err)
		}
	}
	opts := r.listenOptions("planes", r.activity.Refusals(r.planes.Handler()))
	opts.TLS = r.certs
	planesSrv, err := httpserve.Listen(cfg.Listen, opts)
	if err != nil {
		return fmt.Errorf("RELAY_LISTEN: %w", err)
	}
	r.planesSrv = planesSrv
	r.servers = []*namedServer{{name: "planes", srv: planesSrv}}
	if cfg.AdminListen == "" {
		return nil
	}
	adminSrv, err := httpserve.Listen(cfg.AdminListen, r.listenOptions("admin", r.newAdmin()))
	if err != nil {
		planesSrv.HTTP.Close()
		return fmt.Errorf("RELAY_ADMIN_LISTEN: %w", err)
	}
	r.adminAddr = adminSrv.Addr().String()
	r.servers = append(r.servers, &namedServer{name: "admin", srv: adminSrv})
	return nil
}

// newAdmin builds the admin listener's handler: the token-guarded admin API,
// the open probes and /metrics, and the operations view.
func (r *replica) newAdmin() http.Handler {
	cfg, log, st, proj, tel := r.cfg, r.log, r.st, r.proj, r.tel
	adm := admin.New(admin.Options{Token: cfg.AdminToken, Projections: proj, Pairings: pairings.New(st, proj), Policies: r.pol, Placement: st,
		MaxBody: cfg.AdminMaxBody, Bodies: r.bodies(), StoreTimeout: cfg.StoreTimeout, Logger: log,
		Middleware: []echo.MiddlewareFunc{tel.Middleware(telemetry.MiddlewareConfig{Plane: telemetry.PlaneAdmin})}})
	// Probes and Prometheus carry no token; these reveal nothing secret.
	adm.HandleOpen(http.MethodGet, "/healthz", r.checker.Healthz())
	adm.HandleOpen(http.MethodGet, "/readyz", r.checker.Readyz())
	adm.HandleOpen(http.MethodGet, "/metrics", tel.MetricsHandler())
	// The operations view checks tokens itself (the admin token, or a
	// read-only site token), so it is mounted on the open side.
	ui := opsview.New(opsview.Options{
		Source:     opsview.StoreSource{Store: st, Client: r.client, Proj: proj.Current, Version: proj.Version},
		AdminToken: cfg.AdminToken, StoreTimeout: cfg.StoreTimeout, SiteRate: cfg.UISiteRate, Logger: log,
	})
	for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
		adm.HandleOpen(method, "/ui", ui)
		adm.HandleOpen(method, "/ui/*", ui)
	}
	return adm
}

// observeConnections registers relay_connections_*: how near each listener
// is to its cap (a replica saturated by connections), and what was refused
// or closed early. Readiness is left alone: a load balancer taking a replica
// out because one client filled it would hand that client the next replica.
func (r *replica) observeConnections() {
	servers := r.servers
	r.metrics.ObserveConnections(func() []telemetry.ConnUse {
		out := make([]telemetry.ConnUse, 0, len(servers))
		for _, s := range servers {
			st := s.srv.Stats()
			out = append(out, telemetry.ConnUse{Listener: s.name, Open: int64(st.Open), Max: int64(st.Max), MaxPerAddress: int64(st.MaxPerAddress),
				RefusedFull: st.RefusedFull, RefusedAddress: st.RefusedAddress, ClosedIdle: st.ClosedIdle})
		}
		return out
	})
}

// goBackground runs f on the background context until it ends; Run waits
// for every such f before it closes the store.
func (r *replica) goBackground(f func(context.Context)) {
	r.background.Add(1)
	go func() { defer r.background.Done(); f(r.bg) }()
}

// startBackground starts the projection follower, the file watchers, the
// sweeper, the queue-age reads and the fleet heartbeat.
func (r *replica) startBackground() {
	cfg, st, metrics, activity := r.cfg, r.st, r.metrics, r.activity
	r.goBackground(r.proj.Run)
	if r.policyFile != nil {
		r.goBackground(func(ctx context.Context) { r.policyFile.Watch(ctx, time.Second) })
	}
	if r.projFile != nil {
		r.goBackground(func(ctx context.Context) { r.projFile.Watch(ctx, time.Second) })
	}
	if cfg.SweepInterval > 0 {
		removed := &removedDevices{current: r.proj.Current}
		sw := sweeper.New(st, sweeper.Options{Interval: cfg.SweepInterval, Batch: cfg.SweepBatch, Logger: r.log,
			Devices: st, Sites: st, Removed: removed.take,
			OnSweep: func(requeued, removed int) {
				metrics.RecordSweep(r.bg, requeued, removed)
				activity.Swept(requeued, removed)
			}})
		r.goBackground(sw.Run)
	}
	// relay_site_oldest_queued_seconds: read in the background (see queueAge).
	ops := opsstore.New(st)
	qa := &queueAge{log: r.log,
		read: func(ctx context.Context, siteID string) (opsstore.SiteStates, error) {
			return ops.SiteStates(ctx, siteID, queueAgePageSize, queueAgePages)
		},
		sites: r.projectionSites}
	r.goBackground(func(ctx context.Context) { qa.run(ctx, cfg.QueueAgeInterval, metrics.SetSiteOldestQueued) })
	r.goBackground(r.heartbeat)
}

// heartbeat writes this replica's record for the operations view's fleet
// page until ctx ends.
func (r *replica) heartbeat(ctx context.Context) {
	replicaID := replicaName()
	startedAt := time.Now().UnixMilli()
	opsview.Heartbeat(ctx, opsview.HeartbeatOptions{Store: opsstore.New(r.st), Activity: r.activity, Logger: r.log,
		Interval: r.cfg.HeartbeatInterval,
		Fill: func(ctx context.Context, rec *opsview.Replica) {
			ps := r.proj.State()
			rec.ID, rec.Version, rec.StartedAt, rec.Layout = replicaID, r.build.Short(), startedAt, store.LayoutVersion
			rec.Draining = r.checker.Draining()
			rec.Ready = ps.Loaded && !rec.Draining
			if !ps.Loaded {
				rec.NotReady = []string{"projection"}
			}
			rec.ProjectionVersion = ps.Version
			if !ps.LoadedAt.IsZero() {
				rec.ProjectionAgeSec = time.Since(ps.LoadedAt).Seconds()
			}
			rec.Listen = r.planesSrv.Addr().String()
		}})
}

// serve starts serving on every listener; a listener that fails says so
// on the channel.
func (r *replica) serve() <-chan error {
	failed := make(chan error, len(r.servers))
	for _, s := range r.servers {
		go func() {
			if err := s.srv.Serve(); !errors.Is(err, http.ErrServerClosed) {
				failed <- fmt.Errorf("%s listener: %w", s.name, err)
			}
		}()
	}
	return failed
}

// announceReady logs the ready line and writes its machine-readable twin.
func (r *replica) announceReady(stdout io.Writer) {
	planesAddr := r.planesSrv.Addr().String()
	r.log.Info("relay ready", slog.String("listen", planesAddr), slog.String("admin", orOff(r.adminAddr)),
		slog.Bool("tls", r.certs != nil), slog.Bool("embedded", r.embedded), slog.Bool("durable", r.durable), slog.String("appendfsync", r.fsync),
		slog.String("operations", r.st.ScriptCommand()))
	// One machine-readable line on stdout, the same shape as the reference
	// host's (test/reference/server.mjs), for harnesses that bind port 0.
	ready, _ := json.Marshal(map[string]any{"ready": true, "listen": planesAddr, "admin": r.adminAddr, "pid": os.Getpid()})
	fmt.Fprintf(stdout, "%s\n", ready)
}

// shutdown waits for ctx to end or a listener to fail, then drains both
// listeners and gives lost claims back. It returns the listener's failure.
func (r *replica) shutdown(ctx context.Context, failed <-chan error) error {
	cfg, log := r.cfg, r.log
	var serveErr error
	drainPeriod := cfg.DrainPeriod
	select {
	case <-ctx.Done():
		log.Info("shutting down: draining in-flight requests", slog.Duration("drainPeriod", drainPeriod), slog.Duration("timeout", cfg.ShutdownTimeout))
	case serveErr = <-failed:
		drainPeriod = 0 // a listener is gone: nothing to drain towards
	}
	// Readiness fails at once; both listeners keep serving for the drain
	// period, then shut down within the timeout.
	httpServers := make([]*http.Server, len(r.servers))
	for i, s := range r.servers {
		httpServers[i] = s.srv.HTTP
	}
	if err := drain(context.Background(), r.checker, log, drainPeriod, cfg.ShutdownTimeout, httpServers...); err != nil {
		log.Warn("graceful shutdown cut short; connections closed", slog.Any("err", err))
	}
	// Give-backs of lost claims still under way get a short while (the
	// store is still open); what is left is logged and lapses by itself.
	closeCtx, cancelClose := context.WithTimeout(context.Background(), giveBackGrace)
	r.planes.Close(closeCtx)
	cancelClose()
	return serveErr
}

func orOff(s string) string {
	if s == "" {
		return "off"
	}
	return s
}
