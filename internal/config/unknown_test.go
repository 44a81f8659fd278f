package config

import (
	"strings"
	"testing"
)

func TestUnknownVars(t *testing.T) {
	t.Parallel()
	env := []string{
		"PATH=/usr/bin",
		"RELAY_VALKEY_URI=redis://10.0.0.1:6379/0", // the misspelling of issue 28
		"RELAY_ADMINTOKEN=x",
		"RELAY_LEASE=60000",
		"RELAY_COMPLETELY_DIFFERENT_THING=1",
		"RELAY_VALKEY_URL=redis://10.0.0.1:6379/0", // known
		"RELAY_FIXTURE_FILE=/p.json",               // a known alias
		"RELAY_ADMIN_URL=http://127.0.0.1:8081",    // read by the CLIs
		"RELAY_TEST_VALKEY_URL=redis://x",          // the test suites'
		"RELAY_=",
		"NOT_RELAY_VALKEY_URI=1",
	}
	got := UnknownVars(env)
	want := map[string]string{
		"RELAY_VALKEY_URI":                 "did you mean RELAY_VALKEY_URL?",
		"RELAY_ADMINTOKEN":                 "did you mean RELAY_ADMIN_TOKEN?",
		"RELAY_LEASE":                      "did you mean RELAY_LEASE_MS?",
		"RELAY_COMPLETELY_DIFFERENT_THING": "relay -h lists every setting",
		"RELAY_":                           "is ignored",
	}
	if len(got) != len(want) {
		t.Fatalf("got %d warnings, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for name, hint := range want {
		found := false
		for _, g := range got {
			if strings.HasPrefix(g, name+" is not a relay setting") && strings.Contains(g, hint) {
				found = true
			}
		}
		if !found {
			t.Errorf("no warning for %s containing %q in:\n%s", name, hint, strings.Join(got, "\n"))
		}
	}
	if w := UnknownVars(nil); len(w) != 0 {
		t.Errorf("empty environment: %q", w)
	}
}

func TestEditDistance(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"kitten", "sitting", 3}, {"RELAY_VALKEY_URI", "RELAY_VALKEY_URL", 1}} {
		if got := editDistance(c.a, c.b); got != c.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
}
