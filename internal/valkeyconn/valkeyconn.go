// Package valkeyconn opens the relay's Valkey connection: a real server from
// a URL, or, with no URL, an embedded in-process server (miniredis) running
// the same Lua scripts. The embedded backend is for a single replica trying
// the relay out: it keeps everything in memory and loses it on exit.
package valkeyconn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/valkey-io/valkey-go"
)

// Open connects to url (valkey-go ParseURL form, e.g.
// redis://127.0.0.1:6379/0) and pings it. A Valkey Cluster is found by
// itself: valkey-go asks the first reachable address for CLUSTER SLOTS and
// opens a cluster client when it answers, following MOVED and ASK; list
// more seed nodes with repeated addr= parameters, and leave out the
// database (a cluster has only 0), e.g.
// redis://10.0.0.1:6379?addr=10.0.0.2:6379&addr=10.0.0.3:6379. An empty url starts an embedded
// server on a loopback port instead and reports embedded=true. conns is how
// many connections pipeline the calls to each server (Connections; 0 takes
// DefaultConnections). closeFn releases the client and, when embedded,
// stops the server; call it once.
func Open(ctx context.Context, url string, conns int, logger *slog.Logger) (c valkey.Client, closeFn func(), embedded bool, err error) {
	if logger == nil {
		logger = slog.Default()
	}
	mux, err := multiplex(conns)
	if err != nil {
		return nil, nil, false, err
	}
	if url == "" {
		return openEmbedded(ctx, mux, logger)
	}
	opt, err := valkey.ParseURL(url)
	if err != nil {
		return nil, nil, false, fmt.Errorf("valkey url: %w", err)
	}
	// The store never reads through the client-side cache, and without it
	// any RESP2 server (older Redis, Valkey forks) works too.
	opt.DisableCache = true
	opt.RetryDelay = quickRetries
	// By default a MOVED or ASK is followed for as long as the context
	// allows; during a slot migration or a failover a few hops reach the
	// owner, and a slot bouncing between nodes beyond that (a storm) is
	// better answered with the retryable 503 at once than after the whole
	// store timeout.
	opt.ClusterOption.MaxMovedRedirections = maxRedirects
	opt.PipelineMultiplex = mux
	c, err = valkey.NewClient(opt)
	if err != nil {
		return nil, nil, false, fmt.Errorf("valkey connect %s: %w", redact(opt), err)
	}
	if err := Ping(ctx, c); err != nil {
		c.Close()
		return nil, nil, false, fmt.Errorf("valkey ping %s: %w", redact(opt), err)
	}
	return c, c.Close, false, nil
}

// DefaultConnections is one pipelined connection to each server. Calls that
// replicas' requests make at the same moment then reach the server in one
// read, and a read event is a large part of what a call costs a server
// (test/bench/results/2026-12-07-one-connection-a-server.md: 5-24% fewer
// read events a job than valkey-go's default of two connections on two
// cores, four on four or more). More connections spread a busy replica's
// reply decoding over more goroutines.
const DefaultConnections = 1

// MaxConnections is the most pipelined connections to one server that
// valkey-go opens (2^valkey.MaxPipelineMultiplex).
const MaxConnections = 1 << valkey.MaxPipelineMultiplex

// Connections reports whether n is a usable count of pipelined connections
// a server: a power of two from 1 to MaxConnections.
func Connections(n int) bool {
	return n >= 1 && n <= MaxConnections && n&(n-1) == 0
}

// multiplex is valkey-go's PipelineMultiplex for n connections a server
// (2^PipelineMultiplex of them; a negative one means a single connection
// on every kind of client, where 0 means a count from GOMAXPROCS on a
// client of one server).
func multiplex(n int) (int, error) {
	if n == 0 {
		n = DefaultConnections
	}
	if !Connections(n) {
		return 0, fmt.Errorf("valkey connections: %d is not a power of two from 1 to %d", n, MaxConnections)
	}
	if n == 1 {
		return -1, nil
	}
	return bits.TrailingZeros(uint(n)), nil
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

// maxRedirects is how many MOVED/ASK hops one command may take: a migrating
// slot costs at most a MOVED to the new owner and an ASK back (or the other
// way round), and a failover one MOVED more.
const maxRedirects = 4

// Ping checks that the store answers. A keyless PING on a cluster goes to
// any node the client knows, a failed one included (a primary that has
// just been replaced stays in the map as a failed replica), so on a
// cluster one answering node is enough: the slots are the cluster's
// business, and each command finds its own node.
func Ping(ctx context.Context, c valkey.Client) error {
	if !IsCluster(c) {
		return c.Do(ctx, c.B().Ping().Build()).Error()
	}
	var last error
	for _, n := range c.Nodes() {
		if last = n.Do(ctx, n.B().Ping().Build()).Error(); last == nil {
			return nil
		}
	}
	return last
}

// IsCluster reports whether c talks to a Valkey Cluster.
func IsCluster(c valkey.Client) bool { return c.Mode() == valkey.ClientModeCluster }

func redact(opt valkey.ClientOption) string { return fmt.Sprint(opt.InitAddress) }

func openEmbedded(ctx context.Context, mux int, logger *slog.Logger) (valkey.Client, func(), bool, error) {
	srv := miniredis.NewMiniRedis()
	if err := srv.StartAddr("127.0.0.1:0"); err != nil {
		return nil, nil, false, fmt.Errorf("embedded valkey: %w", err)
	}
	c, err := valkey.NewClient(valkey.ClientOption{
		InitAddress: []string{srv.Addr()},
		// miniredis has no client-side caching (CLIENT TRACKING).
		DisableCache:      true,
		PipelineMultiplex: mux,
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

// Keys lists every key matching pattern (a SCAN MATCH glob). On a cluster
// walks every primary's keyspace (SCAN sees one node's); replicas are left
// out, since they may still hold a key their primary has just deleted.
func Keys(ctx context.Context, c valkey.Client, pattern string) ([]string, error) {
	nodes := map[string]valkey.Client{"": c}
	if IsCluster(c) {
		nodes = c.Nodes()
	}
	seen := map[string]bool{}
	var out []string
	for addr, n := range nodes {
		if addr != "" && isReplica(ctx, n) {
			continue
		}
		var cursor uint64
		for {
			e, err := n.Do(ctx, n.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
			if err != nil {
				return out, fmt.Errorf("scan %s on %q: %w", pattern, addr, err)
			}
			for _, k := range e.Elements {
				if !seen[k] {
					seen[k] = true
					out = append(out, k)
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return out, nil
}

// isReplica reports whether n says it is a replica. The embedded miniredis
// answers CLUSTER SLOTS (so valkey-go treats it as a one-node cluster) but
// not ROLE: a node that cannot say is taken for a primary.
func isReplica(ctx context.Context, n valkey.Client) bool {
	role, err := n.Do(ctx, n.B().Role().Build()).ToArray()
	if err != nil || len(role) == 0 {
		return false
	}
	r, _ := role[0].ToString()
	return r == "slave"
}

// Persistence is what the server does with a write it has acknowledged,
// read from the server itself (on a cluster, from every primary).
type Persistence struct {
	// AOF is true when the append-only file is on at every primary.
	AOF bool
	// Fsync is the primaries' appendfsync ("always", "everysec", "no"),
	// several values joined when they differ, "unknown" when CONFIG GET
	// is refused (a managed server may rename or forbid it).
	Fsync string
	// Off names the primaries with the append-only file off.
	Off []string
}

// ReadPersistence asks each primary for aof_enabled (INFO persistence,
// which every server answers) and appendfsync (CONFIG GET).
func ReadPersistence(ctx context.Context, c valkey.Client) (Persistence, error) {
	nodes := map[string]valkey.Client{"": c}
	if IsCluster(c) {
		nodes = c.Nodes()
	}
	out := Persistence{AOF: true}
	fsyncs := map[string]bool{}
	primaries := 0
	for addr, n := range nodes {
		if addr != "" && isReplica(ctx, n) {
			continue
		}
		primaries++
		info, err := n.Do(ctx, n.B().Info().Section("persistence").Build()).ToString()
		if err != nil {
			return Persistence{}, fmt.Errorf("INFO persistence on %q: %w", addr, err)
		}
		if !strings.Contains(info, "aof_enabled:1") {
			out.AOF = false
			name := addr
			if name == "" {
				name = "the server"
			}
			out.Off = append(out.Off, name)
		}
		fsync := "unknown"
		if kv, err := n.Do(ctx, n.B().ConfigGet().Parameter("appendfsync").Build()).AsStrMap(); err == nil && kv["appendfsync"] != "" {
			fsync = kv["appendfsync"]
		}
		fsyncs[fsync] = true
	}
	if primaries == 0 {
		return Persistence{}, errors.New("no primary answered")
	}
	var list []string
	for f := range fsyncs {
		list = append(list, f)
	}
	slices.Sort(list)
	slices.Sort(out.Off)
	out.Fsync = strings.Join(list, ",")
	return out, nil
}
