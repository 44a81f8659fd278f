package telemetry_test

import (
	"context"
	"testing"
	"time"
)

// TestReadyAndOldestQueuedGauges: relay_ready follows the readiness reader
// on each scrape; relay_site_oldest_queued_seconds reports each site's age
// at scrape time (0 when none is queued) and forgets a site that the next
// refresh no longer names.
func TestReadyAndOldestQueuedGauges(t *testing.T) {
	tel, _ := setup(t)
	m := tel.Metrics()
	ready := true
	m.ObserveReady(func(context.Context) bool { return ready })
	m.SetSiteOldestQueued(map[string]time.Time{"site_a": time.Now().Add(-400 * time.Second), "site_b": {}})

	fams := scrape(t, tel)
	if g := find(fams, "relay_ready", nil); g == nil || g.GetGauge().GetValue() != 1 {
		t.Fatalf("relay_ready = %v, want 1", g)
	}
	a := find(fams, "relay_site_oldest_queued_seconds", map[string]string{"site": "site_a"})
	if a == nil || a.GetGauge().GetValue() < 400 || a.GetGauge().GetValue() > 460 {
		t.Fatalf("site_a age = %v, want about 400 s", a)
	}
	if b := find(fams, "relay_site_oldest_queued_seconds", map[string]string{"site": "site_b"}); b == nil || b.GetGauge().GetValue() != 0 {
		t.Fatalf("site_b age = %v, want 0 (nothing queued)", b)
	}

	ready = false
	m.SetSiteOldestQueued(map[string]time.Time{"site_b": {}})
	fams = scrape(t, tel)
	if g := find(fams, "relay_ready", nil); g == nil || g.GetGauge().GetValue() != 0 {
		t.Fatalf("relay_ready = %v, want 0", g)
	}
	if a := find(fams, "relay_site_oldest_queued_seconds", map[string]string{"site": "site_a"}); a != nil {
		t.Fatalf("site_a still reported after it left: %v", a)
	}
}
