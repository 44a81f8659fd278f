package valkeyconn_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/byollm/relay-go/internal/valkeyconn"
	"github.com/byollm/relay-go/test/relaytest"
)

// TestReadPersistence reads what private servers were started with: the
// append-only file off, on with everysec, on with always.
func TestReadPersistence(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		args      []string
		aof       bool
		fsync     string
		offListed bool
	}{
		{"aof off", []string{"--appendonly", "no"}, false, "everysec", true},
		{"aof everysec", []string{"--appendonly", "yes", "--appendfsync", "everysec"}, true, "everysec", false},
		{"aof always", []string{"--appendonly", "yes", "--appendfsync", "always"}, true, "always", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := relaytest.StartServer(t, tc.args...)
			c, closeFn, _, err := valkeyconn.Open(context.Background(), srv.URL(), 0, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer closeFn()
			p, err := valkeyconn.ReadPersistence(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			if p.AOF != tc.aof || p.Fsync != tc.fsync || (len(p.Off) > 0) != tc.offListed {
				t.Fatalf("got %+v, want aof %v, appendfsync %q", p, tc.aof, tc.fsync)
			}
		})
	}
}

// TestReadPersistenceSharedServer: the shared test server (RELAY_TEST_VALKEY_URL,
// Valkey 8 or Redis 7.0) answers, whatever it is configured with, and the
// answer agrees with its own CONFIG GET appendonly.
func TestReadPersistenceSharedServer(t *testing.T) {
	t.Parallel()
	c := relaytest.Client(t)
	p, err := valkeyconn.ReadPersistence(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := c.Do(context.Background(), c.B().ConfigGet().Parameter("appendonly").Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	if p.AOF != (kv["appendonly"] == "yes") || p.Fsync == "" || p.Fsync == "unknown" {
		t.Fatalf("got %+v, server says appendonly %q", p, kv["appendonly"])
	}
}

// TestReadPersistenceCluster asks every primary of the test cluster.
func TestReadPersistenceCluster(t *testing.T) {
	t.Parallel()
	c := relaytest.Cluster(t)
	p, err := valkeyconn.ReadPersistence(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if p.Fsync == "" || (!p.AOF && len(p.Off) == 0) {
		t.Fatalf("got %+v", p)
	}
	t.Logf("cluster: %+v", p)
}
