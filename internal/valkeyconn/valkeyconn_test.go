package valkeyconn_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

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
			client, closeFn, embedded, err := valkeyconn.Open(context.Background(), c.url, logger)
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
	if _, _, _, err := valkeyconn.Open(context.Background(), "redis://127.0.0.1:1/0", slog.Default()); err == nil {
		t.Fatal("connected to a closed port")
	}
	if _, _, _, err := valkeyconn.Open(context.Background(), "nope://x", slog.Default()); err == nil {
		t.Fatal("accepted a bad scheme")
	}
}

// A cluster URL opens a cluster client; Keys reaches keys on every primary
// (SCAN alone sees one node), once each.
func TestOpenCluster(t *testing.T) {
	t.Parallel()
	u := relaytest.RequireCluster(t)
	ctx := context.Background()
	c, closeFn, embedded, err := valkeyconn.Open(ctx, u, slog.Default())
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
