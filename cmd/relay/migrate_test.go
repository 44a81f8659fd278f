package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/byollm/relay-go/test/relaytest"

	"github.com/byollm/relay-go/internal/store"
)

// A relay started on a namespace an older relay wrote in the single-slot
// layout refuses to start, saying how to migrate; `relay migrate` leaves it
// alone while v1 jobs remain, and moves it with -drop-jobs (or once the old
// relays drained it), after which the relay starts.
func TestLegacyNamespaceRefusedThenMigrated(t *testing.T) {
	ns := namespace(t)
	c := relaytest.Client(t)
	p := ns + ":{" + ns + "}:"
	for _, cmd := range [][]string{
		{"ZADD", p + "all", "1", "c2l0ZQ:ajE"}, {"SADD", p + "st:queued", "c2l0ZQ:ajE"},
		{"HSET", p + "j:c2l0ZQ:ajE", "id", "j1", "state", "queued"}, {"SET", p + "seq", "1"},
	} {
		if err := c.Do(context.Background(), c.B().Arbitrary(cmd...).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"RELAY_VALKEY_URL": relaytest.ValkeyURL(), "RELAY_NAMESPACE": ns,
		"RELAY_LISTEN": "127.0.0.1:0", "RELAY_ADMIN_LISTEN": "off"}

	code, out, errs := runBinary(t, env)
	if code != exitRuntime || !strings.Contains(errs, "single-slot key layout (v1)") || !strings.Contains(errs, "relay migrate") || strings.Contains(out, "ready") {
		t.Fatalf("start on a v1 namespace: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, errs = runBinary(t, env, "migrate")
	if code != exitRuntime || !strings.Contains(out, "1 jobs still in the v1 layout") {
		t.Fatalf("migrate with a job left: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, errs = runBinary(t, env, "migrate", "-drop-jobs")
	if code != exitOK || !strings.Contains(out, fmt.Sprintf("layout v%d", store.LayoutVersion)) {
		t.Fatalf("migrate -drop-jobs: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	start(t, map[string]string{"RELAY_VALKEY_URL": relaytest.ValkeyURL(), "RELAY_NAMESPACE": ns}) // ready within its deadline, or Fatal
	code, out, errs = runBinary(t, env, "migrate")
	if code != exitOK || !strings.Contains(out, fmt.Sprintf("already in layout v%d", store.LayoutVersion)) {
		t.Fatalf("migrate again: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

// A namespace whose layout record says v2 (the same keys, job records with
// whole blobs) is refused with the way to move it; `relay migrate` rewrites
// the version and the relay starts.
func TestLayoutV2NamespaceRefusedThenMigrated(t *testing.T) {
	ns := namespace(t)
	c := relaytest.Client(t)
	p := ns + ":{" + ns + "}:"
	if err := c.Do(context.Background(), c.B().Hset().Key(p+"layout").FieldValue().
		FieldValue("version", "2").FieldValue("shards", "16").FieldValue("salt", "00112233445566778899aabbccddeeff").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"RELAY_VALKEY_URL": relaytest.ValkeyURL(), "RELAY_NAMESPACE": ns,
		"RELAY_LISTEN": "127.0.0.1:0", "RELAY_ADMIN_LISTEN": "off"}
	code, out, errs := runBinary(t, env)
	if code != exitRuntime || !strings.Contains(errs, "layout v2") || !strings.Contains(errs, "relay migrate") || strings.Contains(out, "ready") {
		t.Fatalf("start on a v2 namespace: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, errs = runBinary(t, env, "migrate")
	if code != exitOK || !strings.Contains(out, fmt.Sprintf("layout v2 -> v%d", store.LayoutVersion)) {
		t.Fatalf("migrate v2: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if v, err := c.Do(context.Background(), c.B().Hget().Key(p+"layout").Field("version").Build()).ToString(); err != nil || v != fmt.Sprint(store.LayoutVersion) {
		t.Fatalf("layout version after migrate: %q %v", v, err)
	}
	start(t, map[string]string{"RELAY_VALKEY_URL": relaytest.ValkeyURL(), "RELAY_NAMESPACE": ns})
}

// A namespace of layout v3 is served as it is by this relay (a rolling
// upgrade: relays of v3 and v4 side by side). `relay migrate` refuses to move
// it to v4 while a replica that reads only v3 is live (a heartbeat record
// without a layout, as v3 relays write it), names that replica, and moves
// it once the record has expired; a running relay of this version keeps
// serving throughout and does not block it.
func TestLayoutV3NamespaceServedThenMigrated(t *testing.T) {
	ns := namespace(t)
	c := relaytest.Client(t)
	ctx := context.Background()
	p := ns + ":{" + ns + "}:"
	if err := c.Do(ctx, c.B().Hset().Key(p+"layout").FieldValue().
		FieldValue("version", "3").FieldValue("shards", "16").FieldValue("salt", "00112233445566778899aabbccddeeff").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"RELAY_VALKEY_URL": relaytest.ValkeyURL(), "RELAY_NAMESPACE": ns}
	start(t, env) // ready on the v3 namespace, or Fatal
	st, err := store.New(ctx, c, store.Options{Namespace: ns, Logger: relaytest.Discard()})
	if err != nil || st.Layout() != 3 {
		t.Fatalf("store on the v3 namespace: layout %d, %v", st.Layout(), err)
	}
	if _, err := st.PutReplicaRecord(ctx, "old-replica", []byte(`{"id":"old-replica","version":"v3-relay"}`), 3000); err != nil {
		t.Fatal(err)
	}
	// Wait for the running relay's own record too.
	for i := 0; ; i++ {
		if recs, _ := st.ReplicaRecords(ctx, 10); len(recs) >= 2 {
			break
		} else if i == 100 {
			t.Fatalf("replica records %d, want the relay's and the v3 one", len(recs))
		}
		time.Sleep(50 * time.Millisecond)
	}
	code, out, errs := runBinary(t, env, "migrate")
	// Only the v3 replica is named: the running relay's record says v4.
	if code != exitRuntime || !strings.Contains(errs, `old-replica (version "v3-relay")`) || strings.Count(errs, "(version") != 1 {
		t.Fatalf("migrate with a v3 replica live: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if v, _ := c.Do(ctx, c.B().Hget().Key(p+"layout").Field("version").Build()).ToString(); v != "3" {
		t.Fatalf("a refused migrate moved the record to %q", v)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, out, errs = runBinary(t, env, "migrate")
		if code == exitOK || time.Now().After(deadline) {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	if code != exitOK || !strings.Contains(out, fmt.Sprintf("layout v3 -> v%d", store.LayoutVersion)) {
		t.Fatalf("migrate once the v3 replica is gone: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if v, _ := c.Do(ctx, c.B().Hget().Key(p+"layout").Field("version").Build()).ToString(); v != fmt.Sprint(store.LayoutVersion) {
		t.Fatalf("layout version after migrate: %q", v)
	}
	code, out, errs = runBinary(t, env, "migrate")
	if code != exitOK || !strings.Contains(out, fmt.Sprintf("already in layout v%d", store.LayoutVersion)) {
		t.Fatalf("migrate again: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}
