package opsview

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/test/relaytest"
)

// TestValkeyInfoReadsTheServer: the fleet page's server facts agree with
// what the server says of itself, on whichever server the suite runs
// (Valkey 8 names itself with valkey_version and still carries a
// redis_version for compatibility; Redis only the latter), on its cluster,
// and on the embedded store, which answers INFO with almost nothing.
func TestValkeyInfoReadsTheServer(t *testing.T) {
	t.Parallel()
	t.Run("single node", func(t *testing.T) {
		t.Parallel()
		c := relaytest.Client(t)
		info := readInfo(t, c)
		want := expectedVersion(t, c)
		if info.Version != want || info.Clustered || info.Topology != "single node" {
			t.Errorf("got version %q, clustered %v, topology %q; want %q, single node", info.Version, info.Clustered, info.Topology, want)
		}
		if info.UsedMemory <= 0 || info.Clients < 1 || info.Keys < 1 {
			t.Errorf("used memory %d, clients %d, keys %d: a live server with this test's key has more", info.UsedMemory, info.Clients, info.Keys)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		c := relaytest.Cluster(t)
		info := readInfo(t, c)
		nodes, err := c.Do(context.Background(), c.B().ClusterNodes().Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		primaries := 0
		for _, line := range strings.Split(strings.TrimSpace(nodes), "\n") {
			if f := strings.Fields(line); len(f) > 2 && strings.Contains(f[2], "master") && !strings.Contains(f[2], "fail") {
				primaries++
			}
		}
		if want := expectedVersion(t, c); info.Version != want || !info.Clustered {
			t.Errorf("got version %q, clustered %v; want %q, clustered", info.Version, info.Clustered, want)
		}
		if want := "cluster: " + strconv.Itoa(primaries) + " shards"; !strings.HasPrefix(info.Topology, want) {
			t.Errorf("topology %q; CLUSTER NODES lists %d primaries", info.Topology, primaries)
		}
	})
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		info := readInfo(t, relaytest.Embedded(t))
		if info.Clustered || info.Topology != "single node" || info.Version == "" {
			t.Errorf("embedded: %+v", info)
		}
	})
}

// readInfo writes one key in a private namespace, so the server holds at
// least one, and reads the fleet page's facts.
func readInfo(t *testing.T, c valkey.Client) ValkeyInfo {
	t.Helper()
	ns := relaytest.Namespace(t, c)
	ctx := context.Background()
	if err := c.Do(ctx, c.B().Set().Key(ns+":info-probe").Value("1").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	info, err := StoreSource{Client: c}.Valkey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// expectedVersion is what the page should call the server, from the
// server's own INFO server section, read line by line here.
func expectedVersion(t *testing.T, c valkey.Client) string {
	t.Helper()
	txt, err := c.Do(context.Background(), c.B().Info().Section("server").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	var valkeyV, redisV string
	for _, line := range strings.Split(txt, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch k {
		case "valkey_version":
			valkeyV = v
		case "redis_version":
			redisV = v
		}
	}
	t.Logf("server: valkey_version=%q redis_version=%q", valkeyV, redisV)
	if valkeyV != "" {
		return "valkey " + valkeyV
	}
	if redisV == "" {
		t.Fatal("the server's INFO names no version")
	}
	return "redis " + redisV
}
