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
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/byollm/relay-go/internal/admin"
	"github.com/byollm/relay-go/internal/buildinfo"
	"github.com/byollm/relay-go/internal/config"
	"github.com/byollm/relay-go/internal/health"
	"github.com/byollm/relay-go/internal/replica"
	"github.com/byollm/relay-go/internal/telemetry"
)

// Exit codes.
const (
	exitOK      = 0
	exitRuntime = 1 // failed while starting or serving
	exitConfig  = 2 // the configuration was refused
)

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

	if err := replica.Run(ctx, cfg, log, stdout); err != nil {
		log.Error("relay stopped", slog.Any("err", err))
		return exitRuntime
	}
	log.Info("relay stopped")
	return exitOK
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
