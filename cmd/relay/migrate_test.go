package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

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
	if code != exitOK || !strings.Contains(out, "already in layout v3") {
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
	if v, err := c.Do(context.Background(), c.B().Hget().Key(p+"layout").Field("version").Build()).ToString(); err != nil || v != "3" {
		t.Fatalf("layout version after migrate: %q %v", v, err)
	}
	start(t, map[string]string{"RELAY_VALKEY_URL": relaytest.ValkeyURL(), "RELAY_NAMESPACE": ns})
}
