package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/byollm/relay-go/test/relaytest"

	"github.com/byollm/relay-go/internal/store"
)

// `relay migrate` records the layout of a new namespace and leaves one in
// this layout alone; a relay started on a namespace of another layout
// refuses to start, saying what to do, and migrate, which has no step from
// it, refuses too and writes nothing.
func TestMigrateLayouts(t *testing.T) {
	ctx := context.Background()
	c := relaytest.Client(t)
	env := func(ns string) map[string]string {
		return map[string]string{"RELAY_VALKEY_URL": relaytest.ValkeyURL(), "RELAY_NAMESPACE": ns,
			"RELAY_LISTEN": "127.0.0.1:0", "RELAY_ADMIN_LISTEN": "off"}
	}
	version := func(ns string) string {
		v, _ := c.Do(ctx, c.B().Hget().Key(ns+":{"+ns+"}:layout").Field("version").Build()).ToString()
		return v
	}

	ns := namespace(t)
	code, out, errs := runBinary(t, env(ns), "migrate")
	if code != exitOK || !strings.Contains(out, fmt.Sprintf("new; layout v%d recorded", store.LayoutVersion)) || version(ns) != fmt.Sprint(store.LayoutVersion) {
		t.Fatalf("migrate a new namespace: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, errs = runBinary(t, env(ns), "migrate")
	if code != exitOK || !strings.Contains(out, fmt.Sprintf("already in layout v%d", store.LayoutVersion)) {
		t.Fatalf("migrate again: exit %d, stdout %q, stderr %q", code, out, errs)
	}

	for _, tc := range []struct{ version, start, migrate string }{
		{"3", "new RELAY_NAMESPACE", "can neither read nor move"},
		{fmt.Sprint(store.LayoutVersion + 1), "newer than this relay", "newer than this relay"},
	} {
		ns := namespace(t)
		if err := c.Do(ctx, c.B().Hset().Key(ns+":{"+ns+"}:layout").FieldValue().
			FieldValue("version", tc.version).FieldValue("shards", "16").FieldValue("salt", "00112233445566778899aabbccddeeff").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		code, out, errs := runBinary(t, env(ns))
		if code != exitRuntime || !strings.Contains(errs, "layout v"+tc.version) || !strings.Contains(errs, tc.start) || strings.Contains(out, "ready") {
			t.Fatalf("start on a v%s namespace: exit %d, stdout %q, stderr %q", tc.version, code, out, errs)
		}
		code, out, errs = runBinary(t, env(ns), "migrate")
		if code != exitRuntime || !strings.Contains(errs, tc.migrate) || version(ns) != tc.version {
			t.Fatalf("migrate a v%s namespace: exit %d, stdout %q, stderr %q, record v%s", tc.version, code, out, errs, version(ns))
		}
	}
}

// olderReplicas names the replicas whose heartbeat record says an older
// layout, or none, and only them.
func TestOlderReplicas(t *testing.T) {
	recs := []json.RawMessage{
		json.RawMessage(`{"id":"new","version":"v1.2","layout":4}`),
		json.RawMessage(`{"id":"old","version":"v1.1","layout":3}`),
		json.RawMessage(`{"id":"none","version":"v1.0"}`),
		json.RawMessage(`{"id":"newer","version":"v2.0","layout":5}`),
	}
	got := olderReplicas(recs, 4)
	want := []string{`old (version "v1.1")`, `none (version "v1.0")`}
	if !slices.Equal(got, want) {
		t.Fatalf("older replicas %q, want %q", got, want)
	}
	if got := olderReplicas(recs[:1], 4); len(got) != 0 {
		t.Fatalf("a fleet of this layout: %q", got)
	}
}
