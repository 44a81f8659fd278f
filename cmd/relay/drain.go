package main

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/byollm/relay-go/internal/health"
)

// closeWhileDraining answers every request that arrives during the drain
// with "Connection: close": the client gets its answer and then a closed
// connection, which it knows not to reuse. Closing idle keep-alive
// connections at SIGTERM instead (what SetKeepAlivesEnabled(false) does)
// races with a load balancer that has not yet seen /readyz fail: it sends
// a request on a pooled connection the relay is closing at that instant and
// gets EOF with no answer, which it must turn into a 502 because the request
// may not be idempotent. test/lifecycle's rolling restart caught exactly
// that.
func closeWhileDraining(c *health.Checker, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.Draining() {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}

// drain takes the replica out of service: readiness fails at once, both
// listeners go on serving for drainPeriod (each answer closing its
// connection, see closeWhileDraining) while idle connections are left
// alone, so load balancers stop routing here before anything is closed
// under them; then health.Drain shuts the servers down within deadline. ctx
// ending (a second signal) cuts the drain period short.
func drain(ctx context.Context, c *health.Checker, log *slog.Logger, drainPeriod, deadline time.Duration, servers ...*http.Server) error {
	c.SetDraining(true)
	if drainPeriod > 0 {
		log.Info("draining: readiness failing, still serving", slog.Duration("drainPeriod", drainPeriod))
		t := time.NewTimer(drainPeriod)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			log.Info("drain period cut short")
		}
	}
	return c.Drain(ctx, 0, deadline, servers...)
}
