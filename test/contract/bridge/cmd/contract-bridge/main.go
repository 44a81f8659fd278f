// Command contract-bridge serves the store bridge on loopback for running the
// published store contract by hand (go test ./test/contract/ does all of this
// itself):
//
//	go run ./test/contract/bridge/cmd/contract-bridge -valkey redis://127.0.0.1:6379/0
//	cd test/contract && RELAY_CONTRACT_BRIDGE_URL=http://127.0.0.1:PORT npx vitest run
//
// -valkey "" uses the embedded miniredis. Interrupt to stop; the keys of
// stores the suite did not dispose of are deleted on the way out.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/byollm/relay-go/internal/valkeyconn"
	"github.com/byollm/relay-go/test/contract/bridge"
)

func main() {
	url := flag.String("valkey", os.Getenv("RELAY_TEST_VALKEY_URL"), `Valkey URL; "" for the embedded miniredis`)
	addr := flag.String("addr", "127.0.0.1:0", "loopback listen address")
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*url, *addr, logger); err != nil {
		logger.Error("contract-bridge", "err", err)
		os.Exit(1)
	}
}

func run(url, addr string, logger *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	client, closeClient, _, err := valkeyconn.Open(ctx, url, 0, logger)
	if err != nil {
		return fmt.Errorf("open backend: %w", err)
	}
	defer closeClient()

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	b := bridge.New(client, logger)
	srv := &http.Server{Handler: b, ReadHeaderTimeout: 5 * time.Second}
	fmt.Printf("RELAY_CONTRACT_BRIDGE_URL=http://%s\n", ln.Addr())
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	if err := b.Close(shutdownCtx); err != nil {
		return fmt.Errorf("clean up: %w", err)
	}
	return nil
}
