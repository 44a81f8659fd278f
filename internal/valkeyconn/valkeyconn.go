// Package valkeyconn opens the relay's Valkey connection: a real server from
// a URL, or, with no URL, an embedded in-process server (miniredis) running
// the same Lua scripts. The embedded backend is for a single replica trying
// the relay out: it keeps everything in memory and loses it on exit.
package valkeyconn

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/valkey-io/valkey-go"
)

// Open connects to url (valkey-go ParseURL form, e.g.
// redis://127.0.0.1:6379/0) and pings it. An empty url starts an embedded
// server on a loopback port instead and reports embedded=true. closeFn
// releases the client and, when embedded, stops the server; call it once.
func Open(ctx context.Context, url string, logger *slog.Logger) (c valkey.Client, closeFn func(), embedded bool, err error) {
	if logger == nil {
		logger = slog.Default()
	}
	if url == "" {
		return openEmbedded(ctx, logger)
	}
	opt, err := valkey.ParseURL(url)
	if err != nil {
		return nil, nil, false, fmt.Errorf("valkey url: %w", err)
	}
	// The store never reads through the client-side cache, and without it
	// any RESP2 server (older Redis, Valkey forks) works too.
	opt.DisableCache = true
	opt.RetryDelay = quickRetries
	c, err = valkey.NewClient(opt)
	if err != nil {
		return nil, nil, false, fmt.Errorf("valkey connect %s: %w", redact(opt), err)
	}
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		c.Close()
		return nil, nil, false, fmt.Errorf("valkey ping %s: %w", redact(opt), err)
	}
	return c, c.Close, false, nil
}

// quickRetries bounds valkey-go's retries of read-only commands (PING,
// EVALSHA_RO) after a network error. By default it retries them with
// backoff for as long as the context allows, and a request context has no
// deadline: during an outage every request whose first store call is a
// read (signature checks look up presence) hung until Valkey was back,
// instead of failing fast with the retryable 503 (test/lifecycle's outage
// test). Two quick retries still ride over one reset connection.
func quickRetries(attempts int, _ valkey.Completed, _ error) time.Duration {
	if attempts > 2 {
		return -1
	}
	return time.Duration(attempts) * 5 * time.Millisecond
}

func redact(opt valkey.ClientOption) string { return fmt.Sprint(opt.InitAddress) }

func openEmbedded(ctx context.Context, logger *slog.Logger) (valkey.Client, func(), bool, error) {
	srv := miniredis.NewMiniRedis()
	if err := srv.StartAddr("127.0.0.1:0"); err != nil {
		return nil, nil, false, fmt.Errorf("embedded valkey: %w", err)
	}
	c, err := valkey.NewClient(valkey.ClientOption{
		InitAddress: []string{srv.Addr()},
		// miniredis has no client-side caching (CLIENT TRACKING).
		DisableCache: true,
	})
	if err != nil {
		srv.Close()
		return nil, nil, false, fmt.Errorf("embedded valkey connect: %w", err)
	}
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		c.Close()
		srv.Close()
		return nil, nil, false, fmt.Errorf("embedded valkey ping: %w", err)
	}
	logger.Warn("valkey: using the EMBEDDED in-process store (no RELAY_VALKEY_URL): single replica only, nothing is durable, all routing state is lost on exit",
		"addr", srv.Addr())

	// miniredis only ages key TTLs when told to; keep them on wall time so
	// backstop expiries (presence TTL, churn keys) behave as on a server.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				srv.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	var once sync.Once
	closeFn := func() {
		once.Do(func() {
			close(stop)
			wg.Wait()
			c.Close()
			srv.Close()
		})
	}
	return c, closeFn, true, nil
}

// DeleteMatching deletes every key matching pattern (a SCAN MATCH glob, for
// example a store's KeyPattern) in batches and reports how many it deleted.
// Tests use it to leave a shared server as they found it; it walks one
// node's keyspace. One UNLINK per key, pipelined: a namespace's keys lie on
// many slots, and a multi-key command must stay within one.
func DeleteMatching(ctx context.Context, c valkey.Client, pattern string) (int, error) {
	deleted := 0
	var cursor uint64
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
		if err != nil {
			return deleted, fmt.Errorf("delete %s: scan: %w", pattern, err)
		}
		if len(e.Elements) > 0 {
			cmds := make([]valkey.Completed, len(e.Elements))
			for i, k := range e.Elements {
				cmds[i] = c.B().Unlink().Key(k).Build()
			}
			for _, r := range c.DoMulti(ctx, cmds...) {
				if err := r.Error(); err != nil {
					return deleted, fmt.Errorf("delete %s: %w", pattern, err)
				}
			}
			deleted += len(e.Elements)
		}
		if cursor = e.Cursor; cursor == 0 {
			return deleted, nil
		}
	}
}
