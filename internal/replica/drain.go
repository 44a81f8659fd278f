package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/byollm/relay-go/internal/health"
)

// drain takes the replica out of service gracefully: readiness fails at
// once (so load balancers move to other replicas), the servers keep serving
// in-flight and arriving requests for drainPeriod (cut short if ctx ends,
// e.g. on a second signal; their handlers are wrapped with
// health.CloseWhileDraining so clients stop reusing connections), then
// every server shuts down, waiting at most deadline for requests still
// running before closing their connections. It returns when all servers
// are down.
func drain(ctx context.Context, checker *health.Checker, log *slog.Logger, drainPeriod, deadline time.Duration, servers ...*http.Server) error {
	checker.SetDraining(true)
	log.InfoContext(ctx, "draining: readiness failing, still serving", slog.Duration("drainPeriod", drainPeriod))
	if drainPeriod > 0 {
		t := time.NewTimer(drainPeriod)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			log.InfoContext(ctx, "drain period cut short")
		}
	}

	log.Info("draining: shutting down listeners", slog.Duration("deadline", deadline))
	// A fresh context: ctx may already be done, and the deadline must still
	// give in-flight requests their chance to finish.
	sctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Shutdown(sctx); err != nil {
				// Past the deadline: cut the connections still open.
				closeErr := srv.Close()
				errs[i] = errors.Join(fmt.Errorf("shutdown %s: %w", srv.Addr, err), closeErr)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		log.Warn("drain deadline passed; remaining connections closed", slog.Any("error", err))
		return err
	}
	log.Info("drained")
	return nil
}
