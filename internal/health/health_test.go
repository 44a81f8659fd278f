package health_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/health"
	"github.com/byollm/relay-go/test/outageproxy"
	"github.com/byollm/relay-go/test/relaytest"
)

// getJSON GETs a health report.
func getJSON(t *testing.T, url string) (int, health.Report) {
	t.Helper()
	var rep health.Report
	return relaytest.GetJSON(t, url, &rep), rep
}

func serve(c *health.Checker) *httptest.Server {
	mux := http.NewServeMux()
	mux.Handle("/healthz", c.Healthz())
	mux.Handle("/readyz", c.Readyz())
	return httptest.NewServer(mux)
}

func TestReadiness(t *testing.T) {
	t.Parallel()
	var valkeyDown, noProjection atomic.Bool
	c := health.New(health.Options{Timeout: 200 * time.Millisecond, Logger: relaytest.Logger(t)})
	c.Add("valkey", func(context.Context) error {
		if valkeyDown.Load() {
			return errors.New("connection refused")
		}
		return nil
	})
	c.Add("projection", func(context.Context) error {
		if noProjection.Load() {
			return errors.New("no projection loaded")
		}
		return nil
	})
	srv := serve(c)
	defer srv.Close()

	steps := []struct {
		name         string
		down, noProj bool
		wantCode     int
		wantStatus   string
		wantChecks   map[string]string
	}{
		{"all ok", false, false, 200, "ready", map[string]string{"valkey": "ok", "projection": "ok"}},
		{"valkey down", true, false, 503, "not-ready", map[string]string{"valkey": "connection refused", "projection": "ok"}},
		{"both down", true, true, 503, "not-ready", map[string]string{"valkey": "connection refused", "projection": "no projection loaded"}},
		{"recovered by itself", false, false, 200, "ready", map[string]string{"valkey": "ok", "projection": "ok"}},
	}
	for _, s := range steps {
		valkeyDown.Store(s.down)
		noProjection.Store(s.noProj)
		code, rep := getJSON(t, srv.URL+"/readyz")
		if code != s.wantCode || rep.Status != s.wantStatus {
			t.Errorf("%s: /readyz %d %q, want %d %q", s.name, code, rep.Status, s.wantCode, s.wantStatus)
		}
		for k, v := range s.wantChecks {
			if rep.Checks[k] != v {
				t.Errorf("%s: check %s = %q, want %q", s.name, k, rep.Checks[k], v)
			}
		}
		// Liveness never follows the store.
		if code, rep := getJSON(t, srv.URL+"/healthz"); code != 200 || rep.Status != "ok" {
			t.Errorf("%s: /healthz %d %q", s.name, code, rep.Status)
		}
	}
}

func TestHangingCheckTimesOut(t *testing.T) {
	c := health.New(health.Options{Timeout: 100 * time.Millisecond, Logger: relaytest.Logger(t)})
	release := make(chan struct{})
	defer close(release)
	c.Add("ignores-context", func(context.Context) error { <-release; return nil })
	c.Add("panics", func(context.Context) error { panic("boom") })
	srv := serve(c)
	defer srv.Close()
	start := time.Now()
	code, rep := getJSON(t, srv.URL+"/readyz")
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Errorf("/readyz took %v with a 100ms check timeout", elapsed)
	}
	if code != 503 || rep.Checks["ignores-context"] != "no answer within 100ms" || rep.Checks["panics"] != "check panicked: boom" {
		t.Errorf("/readyz %d %+v", code, rep)
	}
}

func TestProbe(t *testing.T) {
	t.Parallel()
	c := health.New(health.Options{Logger: relaytest.Logger(t)})
	c.Add("valkey", func(context.Context) error { return errors.New("down") })
	srv := serve(c)
	defer srv.Close()
	ctx := context.Background()
	if err := health.Probe(ctx, srv.URL+"/healthz"); err != nil {
		t.Errorf("Probe /healthz: %v", err)
	}
	if err := health.Probe(ctx, srv.URL+"/readyz"); err == nil {
		t.Error("Probe /readyz succeeded with a failing check")
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	if err := health.Probe(ctx, "http://"+addr+"/healthz"); err == nil {
		t.Error("Probe of a closed port succeeded")
	}
}

// TestValkeyOutage runs the real Valkey check through a proxy: readiness
// fails fast while Valkey is unreachable and returns by itself afterwards.
func TestValkeyOutage(t *testing.T) {
	opt, err := valkey.ParseURL(relaytest.ValkeyURL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := outageproxy.New(t, opt.InitAddress[0])
	opt.InitAddress = []string{proxy.Addr()}
	opt.DisableCache = true
	opt.ConnWriteTimeout = 300 * time.Millisecond
	client, err := valkey.NewClient(opt)
	if err != nil {
		t.Fatalf("valkey client: %v", err)
	}
	defer client.Close()

	c := health.New(health.Options{Timeout: 500 * time.Millisecond, Logger: relaytest.Logger(t)})
	c.Add("valkey", health.ValkeyPing(client))
	srv := serve(c)
	defer srv.Close()

	if code, rep := getJSON(t, srv.URL+"/readyz"); code != 200 {
		t.Fatalf("/readyz before outage: %d %+v", code, rep)
	}
	proxy.Down()
	start := time.Now()
	code, rep := getJSON(t, srv.URL+"/readyz")
	if code != 503 || rep.Checks["valkey"] == "ok" {
		t.Errorf("/readyz during outage: %d %+v", code, rep)
	}
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Errorf("/readyz during outage took %v; must fail fast", elapsed)
	}
	proxy.Up(t)
	relaytest.WaitFor(t, 5*time.Second, "readiness back after the outage", func() bool {
		code, _ := getJSON(t, srv.URL+"/readyz")
		return code == 200
	})
}
