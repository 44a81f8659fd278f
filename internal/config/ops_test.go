package config

import (
	"github.com/byollm/relay-go/internal/store"
	"io"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDrainAndOTLPOptions(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		env     map[string]string
		drain   time.Duration
		otlp    string
		problem string
	}{
		{name: "defaults", drain: 0, otlp: ""},
		{name: "set", env: map[string]string{"RELAY_DRAIN_PERIOD": "5s", "RELAY_OTLP_ENDPOINT": "http://otel-collector:4318"}, drain: 5 * time.Second, otlp: "http://otel-collector:4318"},
		{name: "negative drain", env: map[string]string{"RELAY_DRAIN_PERIOD": "-1s"}, problem: "RELAY_DRAIN_PERIOD"},
		{name: "huge drain", env: map[string]string{"RELAY_DRAIN_PERIOD": "1h"}, problem: "RELAY_DRAIN_PERIOD"},
		{name: "endpoint without scheme", env: map[string]string{"RELAY_OTLP_ENDPOINT": "otel-collector:4318"}, problem: "RELAY_OTLP_ENDPOINT"},
		{name: "endpoint password not echoed", env: map[string]string{"RELAY_OTLP_ENDPOINT": "ftp://u:hunter2@x"}, problem: "RELAY_OTLP_ENDPOINT"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Load(nil, func(k string) string { return c.env[k] }, io.Discard)
			if c.problem != "" {
				if err == nil || !strings.Contains(err.Error(), c.problem) {
					t.Fatalf("Load = %v, want a problem naming %s", err, c.problem)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Errorf("error echoes a password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.DrainPeriod != c.drain || cfg.OTLPEndpoint != c.otlp {
				t.Errorf("DrainPeriod %v OTLPEndpoint %q, want %v %q", cfg.DrainPeriod, cfg.OTLPEndpoint, c.drain, c.otlp)
			}
		})
	}
}

func TestEnvVars(t *testing.T) {
	t.Parallel()
	vars := EnvVars()
	for _, want := range []string{"RELAY_VALKEY_URL", "RELAY_LISTEN", "RELAY_ADMIN_LISTEN", "RELAY_DRAIN_PERIOD", "RELAY_OTLP_ENDPOINT", "RELAY_FIXTURE_FILE", "RELAY_SWEEP_MS"} {
		if !slices.Contains(vars, want) {
			t.Errorf("EnvVars lacks %s", want)
		}
	}
	// Every listed name is really read: setting it to garbage changes Load's verdict or result.
	base, err := Load(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vars {
		cfg, err := Load(nil, func(k string) string {
			if k == v {
				return "not a valid value !"
			}
			return ""
		}, io.Discard)
		if err == nil && reflect.DeepEqual(cfg, base) {
			t.Errorf("%s is listed but Load ignores it", v)
		}
	}
}

func TestTrustedProxiesAndPairingsPerAddress(t *testing.T) {
	t.Parallel()
	cfg, err := Load(nil, envOf(map[string]string{"RELAY_TRUSTED_PROXIES": "10.0.0.0/8, 192.168.1.7 ,fd00::/8", "RELAY_PAIRINGS_PER_ADDRESS": "3"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.7/32"), netip.MustParsePrefix("fd00::/8")}
	if !reflect.DeepEqual(cfg.TrustedProxies, want) || cfg.PairingsPerAddress != 3 {
		t.Fatalf("got %v %d", cfg.TrustedProxies, cfg.PairingsPerAddress)
	}
	for env, val := range map[string]string{"RELAY_TRUSTED_PROXIES": "10.0.0.0/8,proxy.local", "RELAY_PAIRINGS_PER_ADDRESS": "0"} {
		if _, err := Load(nil, envOf(map[string]string{env: val}), io.Discard); err == nil || !strings.Contains(err.Error(), env) {
			t.Errorf("%s=%s: %v", env, val, err)
		}
	}
}

func TestPairingsPerNetworkAndMax(t *testing.T) {
	t.Parallel()
	cfg, err := Load(nil, envOf(map[string]string{"RELAY_PAIRINGS_PER_NETWORK": "50", "RELAY_PAIRINGS_MAX": "20000"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PairingsPerNetwork != 50 || cfg.PairingsMax != 20000 {
		t.Fatalf("got %d %d", cfg.PairingsPerNetwork, cfg.PairingsMax)
	}
	for _, c := range []struct{ env, val string }{
		{"RELAY_PAIRINGS_PER_NETWORK", "0"}, {"RELAY_PAIRINGS_PER_NETWORK", "100001"}, {"RELAY_PAIRINGS_PER_NETWORK", "many"},
		{"RELAY_PAIRINGS_MAX", "9"}, {"RELAY_PAIRINGS_MAX", "100001"}, {"RELAY_PAIRINGS_MAX", "1e3"},
	} {
		if _, err := Load(nil, envOf(map[string]string{c.env: c.val}), io.Discard); err == nil || !strings.Contains(err.Error(), c.env) {
			t.Errorf("%s=%q: %v", c.env, c.val, err)
		}
	}
}

func TestSiteLimits(t *testing.T) {
	t.Parallel()
	l, err := ParseSiteLimits(" *=jobs:500,rate:off ; siteA=bytes:64MiB,jobs:10;tricky=id=rate:0.5,burst:2; siteB=jobs:off")
	if err != nil {
		t.Fatal(err)
	}
	def := store.SiteLimit{Jobs: 500, Bytes: 1 << 30, Burst: 400}
	want := store.SiteLimits{Default: def, Sites: map[string]store.SiteLimit{
		"siteA":     {Jobs: 10, Bytes: 64 << 20, Burst: 400},
		"tricky=id": {Jobs: 500, Bytes: 1 << 30, Rate: 0.5, Burst: 2},
		"siteB":     {Bytes: 1 << 30, Burst: 400},
	}}
	if !reflect.DeepEqual(l, want) {
		t.Fatalf("got  %+v\nwant %+v", l, want)
	}
	if l.For("other") != def {
		t.Fatalf("unnamed site: %+v", l.For("other"))
	}
	for _, bad := range []string{"siteA", "=jobs:1", "a=jobs:-1", "a=bytes:1TB", "a=rate:fast", "a=color:red", "a=jobs", "a=rate:5,burst:0"} {
		_, err := Load(nil, envOf(map[string]string{"RELAY_SITE_LIMITS": bad}), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "RELAY_SITE_LIMITS") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
