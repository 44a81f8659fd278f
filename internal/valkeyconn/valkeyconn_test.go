package valkeyconn_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/valkeyconn"
	"github.com/byollm/relay-go/test/relaytest"
)

// Both backends answer TIME, and the Lua features the store relies on:
// EVALSHA with NOSCRIPT reload, TIME inside a script, cjson, ZRANGEBYLEX.
func TestOpen(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name         string
		url          string
		wantEmbedded bool
	}{
		{"embedded", "", true},
		{"server", relaytest.ValkeyURL(), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var logs bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&logs, nil))
			client, closeFn, embedded, err := valkeyconn.Open(context.Background(), c.url, 0, logger)
			if err != nil {
				t.Fatal(err)
			}
			defer closeFn()
			if embedded != c.wantEmbedded {
				t.Fatalf("embedded = %v", embedded)
			}
			if c.wantEmbedded && !strings.Contains(logs.String(), "EMBEDDED") {
				t.Fatalf("no warning logged: %q", logs.String())
			}
			script := valkey.NewLuaScript(`
local t = redis.call('TIME')
local v = cjson.decode('{"a":[1,2]}')
redis.call('ZADD', KEYS[1], 0, 'ab:x', 0, 'a:y', 0, 'a;z')
local r = redis.call('ZRANGEBYLEX', KEYS[1], '[a:', '(a;')
redis.call('DEL', KEYS[1])
return {t[1], v.a[2], r[1], #r}`)
			key := "valkeyconn-test:{" + c.name + "}"
			got, err := script.Exec(context.Background(), client, []string{key}, nil).ToArray()
			if err != nil {
				t.Fatal(err)
			}
			sec, _ := got[0].ToString()
			two, _ := got[1].AsInt64()
			first, _ := got[2].ToString()
			n, _ := got[3].AsInt64()
			if sec == "" || two != 2 || first != "a:y" || n != 1 {
				t.Fatalf("script answered %q %d %q %d", sec, two, first, n)
			}
		})
	}
}

func TestOpenBadURL(t *testing.T) {
	t.Parallel()
	if _, _, _, err := valkeyconn.Open(context.Background(), "redis://127.0.0.1:1/0", 0, slog.Default()); err == nil {
		t.Fatal("connected to a closed port")
	}
	if _, _, _, err := valkeyconn.Open(context.Background(), "nope://x", 0, slog.Default()); err == nil {
		t.Fatal("accepted a bad scheme")
	}
}

// A cluster URL opens a cluster client; Keys reaches keys on every primary
// (SCAN alone sees one node), once each.
func TestOpenCluster(t *testing.T) {
	t.Parallel()
	u := relaytest.RequireCluster(t)
	ctx := context.Background()
	c, closeFn, embedded, err := valkeyconn.Open(ctx, u, 0, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	if embedded || !valkeyconn.IsCluster(c) {
		t.Fatalf("embedded %v, cluster %v", embedded, valkeyconn.IsCluster(c))
	}
	prefix := "valkeyconn-cluster-test:"
	var keys []string
	for i := range 64 { // 64 tags spread over every primary
		k := prefix + "{" + strings.Repeat("x", i+1) + "}"
		keys = append(keys, k)
		if err := c.Do(ctx, c.B().Set().Key(k).Value("1").Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	owners := map[string]bool{}
	for addr, n := range c.Nodes() {
		if role, _ := n.Do(ctx, n.B().Role().Build()).ToArray(); len(role) > 0 {
			if r, _ := role[0].ToString(); r == "slave" {
				continue
			}
		}
		if got, _ := n.Do(ctx, n.B().Dbsize().Build()).AsInt64(); got > 0 {
			owners[addr] = true
		}
	}
	if len(owners) < 2 {
		t.Fatalf("keys landed on %d primaries, want several", len(owners))
	}
	found, err := valkeyconn.Keys(ctx, c, prefix+"*")
	if err != nil || len(found) != len(keys) {
		t.Fatalf("Keys found %d of %d (%v)", len(found), len(keys), err)
	}
	n, err := relaytest.DeleteKeys(ctx, c, prefix+"*")
	if err != nil || n != len(keys) {
		t.Fatalf("deleted %d of %d (%v)", n, len(keys), err)
	}
}

// Open keeps the connections it is asked for to each server, however many
// calls run at once: one by default, so calls made together reach the
// server in one read. Counted on the server by a client name of the test's
// own (other tests may share the server).
func TestOpenConnections(t *testing.T) {
	t.Parallel()
	urls := map[string]string{"server": relaytest.ValkeyURL()}
	if u := relaytest.ClusterURL(); u != "" {
		urls["cluster"] = u
	}
	for kind, base := range urls {
		for _, conns := range []int{0, 1, 2, 4} {
			t.Run(fmt.Sprintf("%s/%d", kind, conns), func(t *testing.T) {
				t.Parallel()
				name := "valkeyconn-test-" + uuid.NewString()
				u, err := url.Parse(base)
				if err != nil {
					t.Fatal(err)
				}
				q := u.Query()
				q.Set("client_name", name)
				u.RawQuery = q.Encode()
				ctx := context.Background()
				c, closeFn, _, err := valkeyconn.Open(ctx, u.String(), conns, slog.New(slog.DiscardHandler))
				if err != nil {
					t.Fatal(err)
				}
				defer closeFn()
				// Keys of many slots from many goroutines: with more than one
				// connection valkey-go picks one at random for each call.
				var wg sync.WaitGroup
				errs := make(chan error, 256)
				for g := range 32 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := range 8 {
							k := fmt.Sprintf("%s:{%d-%d}", name, g, i)
							errs <- c.Do(ctx, c.B().Set().Key(k).Value("1").PxMilliseconds(60_000).Build()).Error()
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					if err != nil {
						t.Fatal(err)
					}
				}
				want := conns
				if want == 0 {
					want = valkeyconn.DefaultConnections
				}
				primaries := 0
				for addr, node := range c.Nodes() {
					// A cluster's replicas take none of these calls (the
					// client reads the topology from any node).
					role, err := node.Do(ctx, node.B().Role().Build()).ToArray()
					if err != nil {
						t.Fatal(err)
					}
					if r, _ := role[0].ToString(); r != "master" {
						continue
					}
					list, err := node.Do(ctx, node.B().ClientList().Build()).ToString()
					if err != nil {
						t.Fatal(err)
					}
					primaries++
					if got := strings.Count(list, " name="+name+" "); got != want {
						t.Errorf("%s holds %d connections named for this client, want %d", addr, got, want)
					}
				}
				if primaries == 0 {
					t.Fatal("no primary among the client's nodes")
				}
			})
		}
	}
}

func TestOpenRefusesConnectionCounts(t *testing.T) {
	t.Parallel()
	for _, url := range []string{relaytest.ValkeyURL(), ""} { // "": the embedded store
		for _, n := range []int{-1, 3, 6, valkeyconn.MaxConnections * 2} {
			_, closeFn, _, err := valkeyconn.Open(context.Background(), url, n, slog.Default())
			if err == nil {
				closeFn()
			}
			if err == nil || !strings.Contains(err.Error(), "power of two") {
				t.Errorf("Open %q with %d connections: %v, want a refusal naming the rule", url, n, err)
			}
		}
	}
	for _, n := range []int{1, 2, 256} {
		if !valkeyconn.Connections(n) {
			t.Errorf("Connections(%d) = false", n)
		}
	}
}
