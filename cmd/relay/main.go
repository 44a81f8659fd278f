// Command relay runs one replica of the BYOLLM relay: the daemon and site
// planes on RELAY_LISTEN, the admin listener on RELAY_ADMIN_LISTEN, the
// projection follower and the background sweeper, all sharing one Valkey.
//
//	relay [flags]                     serve (see relay -h for every option)
//	relay version                     the version, VCS revision and Go version (also --version)
//	relay projection push|get|status  talk to a running relay's admin listener
//	relay pairing show|approve|deny|unpair  approve a device by its user code, ditto
//	relay policy push|get|status      the same for the grant policy
//	relay migrate                     move a namespace to this version's key layout
//	relay healthcheck                 probe this relay's admin /healthz (exit 0 when up)
//
// With no RELAY_VALKEY_URL it runs on an embedded in-process store: fine for
// trying it out, but a single replica whose state dies with it.
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/byollm/relay-go/internal/admin"
	"github.com/byollm/relay-go/internal/buildinfo"
	"github.com/byollm/relay-go/internal/config"
	"github.com/byollm/relay-go/internal/health"
	"github.com/byollm/relay-go/internal/httpserve"
	"github.com/byollm/relay-go/internal/opsview"
	"github.com/byollm/relay-go/internal/pairings"
	"github.com/byollm/relay-go/internal/policy"
	"github.com/byollm/relay-go/internal/projectionsync"
	"github.com/byollm/relay-go/internal/relay"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/internal/sweeper"
	"github.com/byollm/relay-go/internal/telemetry"
	"github.com/byollm/relay-go/internal/valkeyconn"
)

// Exit codes.
const (
	exitOK      = 0
	exitRuntime = 1 // failed while starting or serving
	exitConfig  = 2 // the configuration was refused
)

// giveBackGrace is how long shutdown waits, after the listeners are done,
// for give-backs of lost claims still being retried (relay.Relay.Close). A
// store that answers takes one in milliseconds; one that does not in this
// long will not in the next minute either, and those leases lapse anyway.
const giveBackGrace = 2 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// After the first signal, restore the default action so a second
	// Ctrl-C ends a shutdown that is taking too long.
	go func() { <-ctx.Done(); stop() }()
	os.Exit(dispatch(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// dispatch runs the subcommand args names, or the server.
func dispatch(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "version", "-version", "--version":
			fmt.Fprintln(stdout, buildinfo.Get().String())
			return exitOK
		case "projection":
			return admin.RunCLI(ctx, args[1:], getenv, stdout, stderr)
		case "pairing":
			return admin.RunPairingCLI(ctx, args[1:], getenv, stdout, stderr)
		case "policy":
			return admin.RunPolicyCLI(ctx, args[1:], getenv, stdout, stderr)
		case "migrate":
			return migrate(ctx, args[1:], getenv, stdout, stderr)
		case "healthcheck":
			return healthcheck(ctx, args[1:], getenv, stdout, stderr)
		}
	}
	return run(ctx, args, getenv, stdout, stderr)
}

// run serves until ctx ends (SIGINT/SIGTERM), then shuts down gracefully.
// stdout carries exactly one line, the ready line; logs go to stderr.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, err := config.Load(args, getenv, stderr)
	if errors.Is(err, config.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "relay: %v\n", err)
		return exitConfig
	}
	log := newLogger(cfg, stderr)
	build := buildinfo.Get()
	log.Info("relay starting", append([]any{slog.String("version", build.Version), slog.String("revision", build.Revision),
		slog.String("goVersion", build.GoVersion)}, cfg.LogAttrs()...)...)
	// A misspelt variable would otherwise be ignored without a word (a
	// RELAY_VALKEY_URI leaves the relay on its embedded store).
	for _, w := range config.UnknownVars(os.Environ()) {
		log.Warn(w)
	}
	if cfg.AdminListen != "" && cfg.AdminToken == "" {
		log.Warn("RELAY_ADMIN_TOKEN is not set: the admin listener refuses every request, so the projection can only come from RELAY_PROJECTION_FILE or another replica")
	}
	if cfg.VerificationURL == "" {
		log.Warn("RELAY_VERIFICATION_URL is not set: device-code pairing answers 501, and real daemons pair only that way")
	}

	if err := serve(ctx, cfg, log, stdout); err != nil {
		log.Error("relay stopped", slog.Any("err", err))
		return exitRuntime
	}
	log.Info("relay stopped")
	return exitOK
}

func serve(ctx context.Context, cfg config.Config, log *slog.Logger, stdout io.Writer) error {
	// Background work runs until shutdown has drained the listeners, not
	// merely until the signal, so in-flight requests still find the store.
	bg, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBackground()

	tel, err := telemetry.Setup(bg, telemetry.Config{OTLPEndpoint: cfg.OTLPEndpoint})
	if err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	defer func() {
		// Flush buffered spans; a collector that is down must not hold
		// the exit for long.
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tel.Shutdown(fctx); err != nil {
			log.Warn("telemetry flush failed", slog.Any("err", err))
		}
	}()
	metrics := tel.Metrics()
	build := buildinfo.Get()
	metrics.SetBuildInfo(build.Version, build.Revision, build.GoVersion)
	// Per-site activity for the operations view, counted in memory and
	// published in this replica's heartbeat record (internal/opsview).
	// Only the projection's sites are counted; proj is set just below.
	var proj *projectionsync.Sync
	activity := opsview.NewActivity(func(siteID string) bool {
		p := proj.Current()
		return p != nil && p.SiteFor(siteID) != nil
	})

	client, closeStore, embedded, err := valkeyconn.Open(bg, cfg.ValkeyURL, log)
	if err != nil {
		return fmt.Errorf("open the store: %w", err)
	}
	defer closeStore()
	// valkeyconn has said loudly that an embedded store is not durable; the
	// ready line repeats embedded=true. A server's durability is what it
	// says it does, asked of every primary (the ready line's durable and
	// appendfsync).
	durable, fsync := false, "-"
	if !embedded {
		pctx, cancel := context.WithTimeout(bg, 5*time.Second)
		p, err := valkeyconn.ReadPersistence(pctx, client)
		cancel()
		switch {
		case err != nil:
			fsync = "unknown"
			log.Warn("valkey: could not read its persistence settings; durable is reported false", slog.Any("err", err))
		case !p.AOF:
			fsync = p.Fsync
			log.Warn("valkey: the append-only file is off, so a Valkey restart loses every job, lease and pairing it holds; "+
				"set appendonly yes (appendfsync everysec, or always to lose nothing acknowledged)", slog.Any("primaries", p.Off))
		default:
			durable, fsync = true, p.Fsync
		}
	}

	st, err := store.New(bg, client, store.Options{
		Namespace:          cfg.Namespace,
		ObserveScript:      tel.ScriptObserver(),
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
		OnChurn: func(r store.ChurnReport) {
			metrics.RecordChurnReport(bg)
			activity.Churned(r)
			log.Warn("unsealed churn: a site keeps letting grants expire unsealed", slog.Any("report", r))
		},
	})
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	tel.SetScriptCommand(st.ScriptCommand())
	if !embedded {
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
	pol, err := policy.NewStoreOn(st.Runner(), cfg.Namespace)
	if err != nil {
		return fmt.Errorf("policy store: %w", err)
	}

	proj = projectionsync.New(client, projectionsync.Options{Namespace: cfg.Namespace, Logger: log, Runner: st.Runner()})
	startCtx, cancelStart := context.WithTimeout(ctx, 10*time.Second)
	defer cancelStart()
	if err := proj.Refresh(startCtx); err != nil {
		return fmt.Errorf("load the projection from Valkey: %w", err)
	}
	var file *projectionsync.FileSource
	if cfg.ProjectionFile != "" {
		file = projectionsync.NewFileSource(proj, cfg.ProjectionFile, log)
		res, err := file.Push(startCtx)
		if err != nil {
			// At start a bad file is fatal: the operator is watching now,
			// and the projection already in Valkey stays untouched.
			return err
		}
		log.Info("projection file pushed", slog.String("file", cfg.ProjectionFile),
			slog.Int64("version", res.Version), slog.Bool("changed", res.Changed))
	}
	var policyFile *policy.FileSource
	if cfg.PolicyFile != "" {
		policyFile = policy.NewFileSource(pol, cfg.PolicyFile, log)
		version, changed, err := policyFile.Push(startCtx)
		if err != nil {
			// As with the projection file: fatal at start, and the policy
			// already in Valkey stays untouched.
			return err
		}
		log.Info("policy file pushed", slog.String("file", cfg.PolicyFile),
			slog.Int64("version", version), slog.Bool("changed", changed))
	}

	metrics.ObserveProjection(func() telemetry.ProjectionState {
		ps := proj.State()
		return telemetry.ProjectionState{Loaded: ps.Loaded, Version: ps.Version, LoadedAt: ps.LoadedAt}
	})
	// Job and lease gauges: one O(1) read-only script per scrape.
	metrics.ObserveJobsByState(func(ctx context.Context) (map[string]int64, error) {
		c, err := st.Counts(ctx)
		return c.ByState(), err
	})
	metrics.ObserveActiveLeases(func(ctx context.Context) (int64, error) {
		c, err := st.Counts(ctx)
		return c.ActiveLeases(), err
	})
	// Per-site use: the projection's sites only (bounded labels), O(1) each.
	metrics.ObserveSiteUse(func(ctx context.Context) (map[string]telemetry.SiteUse, error) {
		p := proj.Current()
		if p == nil {
			return nil, nil
		}
		var ids []string
		for _, s := range p.Fixture().Sites {
			ids = append(ids, s.SiteID)
		}
		use, err := st.SiteUse(ctx, ids)
		if err != nil {
			return nil, err
		}
		out := make(map[string]telemetry.SiteUse, len(use))
		for id, u := range use {
			out[id] = telemetry.SiteUse{LiveJobs: u.LiveJobs, StoredBytes: u.StoredBytes}
		}
		return out, nil
	})
	checker := health.New(health.Options{Logger: log})
	checker.Add("valkey", health.ValkeyPing(client))
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
	metrics.ObserveReady(func(ctx context.Context) bool { return checker.Check(ctx).Ready() })

	// One body budget for both listeners: the bytes of request bodies held
	// at once, whatever any number of clients send.
	bodies := httpserve.NewBudget(cfg.BodyBytesInFlight)
	bodies.SetClientShare(cfg.ClientBodyShare())
	grants, controlPlanePublic, err := grantAuthority(startCtx, cfg, pol, st, log)
	if err != nil {
		return err
	}
	planes, err := relay.New(relay.Config{
		Store: st,
		Work: &workMetrics{m: metrics, act: activity,
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
		Bodies:          bodies,
		TrustedProxies:  cfg.TrustedProxies,
		StoreTimeout:    cfg.StoreTimeout,
		Logger:          log,

		Grants:             grants,
		ControlPlanePublic: controlPlanePublic,
		GrantTimeout:       cfg.GrantTimeout,
		GrantBudget:        cfg.GrantBudget,
		GrantObserver:      metrics,
		LeaseObserver:      metrics,

		// One debug line per refusal.
		Middleware: []echo.MiddlewareFunc{tel.Middleware(telemetry.MiddlewareConfig{Logger: log})},
	})
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}

	var certs *httpserve.CertReloader
	if cfg.TLSCertFile != "" {
		if certs, err = httpserve.LoadCert(cfg.TLSCertFile, cfg.TLSKeyFile, log); err != nil {
			return fmt.Errorf("RELAY_TLS_CERT_FILE/RELAY_TLS_KEY_FILE: %w", err)
		}
	}
	planesSrv, err := httpserve.Listen(cfg.Listen, httpserve.Options{
		Name:               "planes",
		Handler:            checker.CloseWhileDraining(activity.Refusals(planes.Handler())),
		MaxConns:           cfg.MaxConns,
		BodyTimeout:        cfg.BodyTimeout,
		MaxConnsPerAddress: cfg.MaxConnsPerAddress,
		TrustedProxies:     cfg.TrustedProxies,
		WriteTimeout:       cfg.WriteTimeout,
		TLS:                certs,
		Logger:             log,
	})
	if err != nil {
		return fmt.Errorf("RELAY_LISTEN: %w", err)
	}
	servers := []*namedServer{{name: "planes", srv: planesSrv}}
	adminAddr := ""
	if cfg.AdminListen != "" {
		adm := admin.New(admin.Options{Token: cfg.AdminToken, Projections: proj, Pairings: pairings.New(st, proj), Policies: pol, Placement: st,
			MaxBody: cfg.AdminMaxBody, Bodies: bodies, StoreTimeout: cfg.StoreTimeout, Logger: log,
			Middleware: []echo.MiddlewareFunc{tel.Middleware(telemetry.MiddlewareConfig{Plane: telemetry.PlaneAdmin})}})
		// Probes and Prometheus carry no token; these reveal nothing secret.
		adm.HandleOpen(http.MethodGet, "/healthz", checker.Healthz())
		adm.HandleOpen(http.MethodGet, "/readyz", checker.Readyz())
		adm.HandleOpen(http.MethodGet, "/metrics", tel.MetricsHandler())
		// The operations view checks tokens itself (the admin token, or a
		// read-only site token), so it is mounted on the open side.
		ui := opsview.New(opsview.Options{
			Source:     opsview.StoreSource{Store: st, Client: client, Proj: proj.Current, Version: proj.Version},
			AdminToken: cfg.AdminToken, StoreTimeout: cfg.StoreTimeout, SiteRate: cfg.UISiteRate, Logger: log,
		})
		for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
			adm.HandleOpen(method, "/ui", ui)
			adm.HandleOpen(method, "/ui/*", ui)
		}
		adminSrv, err := httpserve.Listen(cfg.AdminListen, httpserve.Options{
			Name:               "admin",
			Handler:            checker.CloseWhileDraining(adm),
			MaxConns:           cfg.MaxConns,
			BodyTimeout:        cfg.BodyTimeout,
			MaxConnsPerAddress: cfg.MaxConnsPerAddress,
			TrustedProxies:     cfg.TrustedProxies,
			WriteTimeout:       cfg.WriteTimeout,
			Logger:             log,
		})
		if err != nil {
			planesSrv.HTTP.Close()
			return fmt.Errorf("RELAY_ADMIN_LISTEN: %w", err)
		}
		adminAddr = adminSrv.Addr().String()
		servers = append(servers, &namedServer{name: "admin", srv: adminSrv})
	}
	// relay_connections_*: how near each listener is to its cap (a replica
	// saturated by connections), and what was refused or closed early.
	// Readiness is left alone: a load balancer taking a replica out because
	// one client filled it would hand that client the next replica.
	metrics.ObserveConnections(func() []telemetry.ConnUse {
		out := make([]telemetry.ConnUse, 0, len(servers))
		for _, s := range servers {
			st := s.srv.Stats()
			out = append(out, telemetry.ConnUse{Listener: s.name, Open: int64(st.Open), Max: int64(st.Max), MaxPerAddress: int64(st.MaxPerAddress),
				RefusedFull: st.RefusedFull, RefusedAddress: st.RefusedAddress, ClosedIdle: st.ClosedIdle})
		}
		return out
	})

	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); proj.Run(bg) }()
	if policyFile != nil {
		wg.Add(1)
		go func() { defer wg.Done(); policyFile.Watch(bg, time.Second) }()
	}
	if file != nil {
		wg.Add(1)
		go func() { defer wg.Done(); file.Watch(bg, time.Second) }()
	}
	if cfg.SweepInterval > 0 {
		removed := &removedDevices{current: proj.Current}
		sw := sweeper.New(st, sweeper.Options{Interval: cfg.SweepInterval, Batch: cfg.SweepBatch, Logger: log,
			Devices: st, Removed: removed.take,
			OnSweep: func(requeued, removed int) {
				metrics.RecordSweep(bg, requeued, removed)
				activity.Swept(requeued, removed)
			}})
		wg.Add(1)
		go func() { defer wg.Done(); sw.Run(bg) }()
	}
	// relay_site_oldest_queued_seconds: read in the background (see queueAge).
	qa := &queueAge{log: log,
		read: func(ctx context.Context, siteID string) (store.SiteStates, error) {
			return st.OpsSiteStates(ctx, siteID, queueAgePageSize, queueAgePages)
		},
		sites: func() []string {
			p := proj.Current()
			if p == nil {
				return nil
			}
			var ids []string
			for _, s := range p.Fixture().Sites {
				ids = append(ids, s.SiteID)
			}
			return ids
		}}
	wg.Add(1)
	go func() { defer wg.Done(); qa.run(bg, cfg.QueueAgeInterval, metrics.SetSiteOldestQueued) }()
	// This replica's heartbeat record for the operations view's fleet page.
	replicaID := replicaName()
	startedAt := time.Now().UnixMilli()
	wg.Add(1)
	go func() {
		defer wg.Done()
		opsview.Heartbeat(bg, opsview.HeartbeatOptions{Store: st, Activity: activity, Logger: log,
			Interval: cfg.HeartbeatInterval,
			Fill: func(ctx context.Context, r *opsview.Replica) {
				ps := proj.State()
				r.ID, r.Version, r.StartedAt, r.Layout = replicaID, build.Short(), startedAt, store.LayoutVersion
				r.Draining = checker.Draining()
				r.Ready = ps.Loaded && !r.Draining
				if !ps.Loaded {
					r.NotReady = []string{"projection"}
				}
				r.ProjectionVersion = ps.Version
				if !ps.LoadedAt.IsZero() {
					r.ProjectionAgeSec = time.Since(ps.LoadedAt).Seconds()
				}
				r.Listen = planesSrv.Addr().String()
			}})
	}()
	defer wg.Wait()
	defer stopBackground()

	failed := make(chan error, len(servers))
	for _, s := range servers {
		go func() {
			if err := s.srv.Serve(); !errors.Is(err, http.ErrServerClosed) {
				failed <- fmt.Errorf("%s listener: %w", s.name, err)
			}
		}()
	}
	planesAddr := planesSrv.Addr().String()
	log.Info("relay ready", slog.String("listen", planesAddr), slog.String("admin", orOff(adminAddr)),
		slog.Bool("tls", certs != nil), slog.Bool("embedded", embedded), slog.Bool("durable", durable), slog.String("appendfsync", fsync),
		slog.String("operations", st.ScriptCommand()))
	// One machine-readable line on stdout, the same shape as the reference
	// host's (test/reference/server.mjs), for harnesses that bind port 0.
	ready, _ := json.Marshal(map[string]any{"ready": true, "listen": planesAddr, "admin": adminAddr, "pid": os.Getpid()})
	fmt.Fprintf(stdout, "%s\n", ready)

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
	httpServers := make([]*http.Server, len(servers))
	for i, s := range servers {
		httpServers[i] = s.srv.HTTP
	}
	if err := drain(context.Background(), checker, log, drainPeriod, cfg.ShutdownTimeout, httpServers...); err != nil {
		log.Warn("graceful shutdown cut short; connections closed", slog.Any("err", err))
	}
	// Give-backs of lost claims still under way get a short while (the
	// store is still open); what is left is logged and lapses by itself.
	closeCtx, cancelClose := context.WithTimeout(context.Background(), giveBackGrace)
	planes.Close(closeCtx)
	cancelClose()
	return serveErr
}

type namedServer struct {
	name string
	srv  *httpserve.Server
}

func orOff(s string) string {
	if s == "" {
		return "off"
	}
	return s
}

// newLogger writes text on a terminal and JSON otherwise, unless
// RELAY_LOG_FORMAT says which.
func newLogger(cfg config.Config, w io.Writer) *slog.Logger {
	jsonFormat := cfg.LogFormat == "json"
	if cfg.LogFormat == "auto" {
		jsonFormat = !isTerminal(w)
	}
	return telemetry.NewLogger(w, jsonFormat, cfg.LogLevel)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// healthcheckUsage is relay healthcheck -h.
const healthcheckUsage = `Usage: relay healthcheck [-admin-listen ADDR]

Probes GET /healthz on this relay's admin listener (RELAY_ADMIN_LISTEN, or
-admin-listen; a wildcard address is probed on loopback) and exits 0 when it
answers 200 within 3 s, 1 otherwise: a container HEALTHCHECK for an image
that has no shell or curl. It reads the relay's own RELAY_* variables and
flags, so the probe finds the listener the server opened.
`

// healthcheck probes the admin listener's /healthz of the relay configured
// by the same flags and variables, for container HEALTHCHECKs in an image
// that has no shell or curl. Exit 0 when it answers 200, 1 otherwise.
func healthcheck(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			fmt.Fprint(stdout, healthcheckUsage)
			return exitOK
		}
	}
	cfg, err := config.Load(args, getenv, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "relay healthcheck: %v\n", err)
		return exitConfig
	}
	if cfg.AdminListen == "" {
		fmt.Fprintln(stderr, "relay healthcheck: the admin listener is off (RELAY_ADMIN_LISTEN=off); nothing to probe")
		return exitRuntime
	}
	host, port, err := net.SplitHostPort(cfg.AdminListen)
	if err != nil {
		fmt.Fprintf(stderr, "relay healthcheck: %v\n", err)
		return exitConfig
	}
	// A wildcard listener is reached on loopback.
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := health.Probe(pctx, "http://"+net.JoinHostPort(host, port)+"/healthz"); err != nil {
		fmt.Fprintf(stderr, "relay healthcheck: %v\n", err)
		return exitRuntime
	}
	return exitOK
}

// replicaName names this replica in the fleet view: host and process, plus
// a few random bytes so a restart on the same host is a new record.
func replicaName() string {
	host, _ := os.Hostname()
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s/%d/%x", host, os.Getpid(), b)
}
