package main

import (
	"context"
	"strings"
	"testing"

	"github.com/byollm/relay-go/test/relaytest"
	"github.com/valkey-io/valkey-go"
)

// A relay started on a namespace an older relay wrote in the single-slot
// layout refuses to start, saying how to migrate; `relay migrate` leaves it
// alone while v1 jobs remain, and moves it with -drop-jobs (or once the old
// relays drained it), after which the relay starts.
func TestLegacyNamespaceRefusedThenMigrated(t *testing.T) {
	ns := namespace(t)
	opt, err := valkey.ParseURL(relaytest.ValkeyURL(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := valkey.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := ns + ":{" + ns + "}:"
	for _, cmd := range [][]string{
		{"ZADD", p + "all", "1", "c2l0ZQ:ajE"}, {"SADD", p + "st:queued", "c2l0ZQ:ajE"},
		{"HSET", p + "j:c2l0ZQ:ajE", "id", "j1", "state", "queued"}, {"SET", p + "seq", "1"},
	} {
		if err := c.Do(context.Background(), c.B().Arbitrary(cmd...).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"RELAY_VALKEY_URL": relaytest.ValkeyURL(t), "RELAY_NAMESPACE": ns,
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
	if code != exitOK || !strings.Contains(out, "layout v2") {
		t.Fatalf("migrate -drop-jobs: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	start(t, map[string]string{"RELAY_VALKEY_URL": relaytest.ValkeyURL(t), "RELAY_NAMESPACE": ns}) // ready within its deadline, or Fatal
}
