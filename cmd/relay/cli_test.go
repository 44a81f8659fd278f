package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/byollm/relay-go/test/relaytest"
)

// TestHelpListsEverySubcommand: relay -h names every subcommand, not the
// stale "(projection, later metrics/health)", and exits 0.
func TestHelpListsEverySubcommand(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"-h", "--help"} {
		code, stdout, stderr := runBinary(t, nil, arg)
		out := stdout + stderr
		if code != 0 {
			t.Fatalf("relay %s exited %d", arg, code)
		}
		for _, sub := range []string{"relay version", "relay projection", "relay policy", "relay pairing", "relay migrate", "relay healthcheck", "RELAY_VALKEY_URL"} {
			if !strings.Contains(out, sub) {
				t.Errorf("relay %s does not mention %q", arg, sub)
			}
		}
		if strings.Contains(out, "later metrics/health") {
			t.Errorf("relay %s still says \"later metrics/health\"", arg)
		}
	}
}

// TestSubcommandHelp: each subcommand's -h is its own usage (not the
// server's option list) and exits 0.
func TestSubcommandHelp(t *testing.T) {
	t.Parallel()
	for _, sub := range []string{"projection", "policy", "pairing", "migrate", "healthcheck"} {
		for _, h := range []string{"-h", "--help"} {
			code, stdout, stderr := runBinary(t, nil, sub, h)
			out := stdout + stderr
			if code != 0 {
				t.Errorf("relay %s %s exited %d:\n%s", sub, h, code, out)
			}
			if !strings.Contains(out, "relay "+sub) {
				t.Errorf("relay %s %s does not describe relay %s:\n%s", sub, h, sub, out)
			}
			if strings.Contains(out, "RELAY_BODY_TIMEOUT") {
				t.Errorf("relay %s %s prints the server's usage", sub, h)
			}
		}
	}
}

// TestUnknownVariableWarned: a misspelt RELAY_VALKEY_URI is warned about at
// start with the name it was meant to be; the relay still starts (on the
// embedded store, which it says), and durations in its JSON start line read
// as Go durations.
func TestUnknownVariableWarned(t *testing.T) {
	t.Parallel()
	r := start(t, map[string]string{"RELAY_VALKEY_URI": relaytest.ValkeyURL()})
	log := r.Log()
	if !strings.Contains(log, "RELAY_VALKEY_URI is not a relay setting and is ignored; did you mean RELAY_VALKEY_URL?") {
		t.Errorf("no warning naming RELAY_VALKEY_URL:\n%s", firstLines(log, 6))
	}
	if !strings.Contains(log, `"storeTimeout":"500ms"`) || !strings.Contains(log, `"bodyTimeout":"10s"`) {
		t.Errorf("the start line's durations are not Go durations:\n%s", firstLines(log, 2))
	}
}

// readyLine is the relay's "relay ready" log record.
func readyLine(t *testing.T, log string) map[string]any {
	t.Helper()
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, `"msg":"relay ready"`) {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("ready line %q: %v", l, err)
			}
			return m
		}
	}
	t.Fatalf("no ready line in:\n%s", log)
	return nil
}

// TestDurableSaysWhatTheServerDoes: the ready line's durable and
// appendfsync are the server's own settings: a server without the
// append-only file is not durable (and the relay warns), one with it is, with
// its fsync policy; the shared test server (Valkey 8 or Redis 7.0) is
// reported as its CONFIG GET says.
func TestDurableSaysWhatTheServerDoes(t *testing.T) {
	t.Parallel()
	off := relaytest.StartServer(t, "--appendonly", "no")
	on := relaytest.StartServer(t, "--appendonly", "yes", "--appendfsync", "everysec")
	shared := relaytest.Client(t)
	kv, err := shared.Do(context.Background(), shared.B().ConfigGet().Parameter("appendonly").Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		url     string
		durable bool
		fsync   string
	}{
		{"appendonly no", off.URL(), false, "everysec"},
		{"appendonly yes, everysec", on.URL(), true, "everysec"},
		{"shared server", relaytest.ValkeyURL(), kv["appendonly"] == "yes", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"RELAY_VALKEY_URL": tc.url, "RELAY_ADMIN_TOKEN": token}
			if tc.url == relaytest.ValkeyURL() {
				env["RELAY_NAMESPACE"] = namespace(t)
			}
			r := start(t, env)
			ready := readyLine(t, r.Log())
			if ready["durable"] != tc.durable || ready["embedded"] != false {
				t.Errorf("ready line says durable %v embedded %v, want durable %v", ready["durable"], ready["embedded"], tc.durable)
			}
			if tc.fsync != "" && ready["appendfsync"] != tc.fsync {
				t.Errorf("ready line says appendfsync %v, want %s", ready["appendfsync"], tc.fsync)
			}
			warned := strings.Contains(r.Log(), "the append-only file is off")
			if warned == tc.durable {
				t.Errorf("warning logged %v for durable %v", warned, tc.durable)
			}
		})
	}
	// The embedded store is never durable.
	r := start(t, map[string]string{"RELAY_ADMIN_TOKEN": token})
	if ready := readyLine(t, r.Log()); ready["durable"] != false || ready["embedded"] != true {
		t.Errorf("embedded: ready line %v", ready)
	}
}
