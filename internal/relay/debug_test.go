package relay

import (
	"strings"
	"testing"

	"github.com/byollm/relay-go/internal/projection"
)

// TestDebugPerSite: with debug on, a site's page shows only that site's jobs
// and only devices whose owner consents to that site (the fix over §17.29).
func TestDebugPerSite(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.Debug = true })
	w := newWorld(t)
	carol := newKeys(t)
	w.fx.Devices = append(w.fx.Devices, projection.DeviceRecord{Owner: "carol", RunnerID: "runner_carol", Device: carol.id})
	w.fx.Consents = append(w.fx.Consents, projection.ConsentRecord{Owner: "carol", SiteID: "site_b"})
	w.install(e)

	expect(t, e.sitePost(w.siteA, "site_a", "enqueue", enqueueJSON(t, "site_a", e.stub("job-on-a", "alice", w.siteA))), 200, `{"jobId":"job-on-a","state":"queued"}`)
	expect(t, e.sitePost(w.siteB, "site_b", "enqueue", enqueueJSON(t, "site_b", e.stub("job-on-b<script>", "carol", w.siteB))), 200, `{"jobId":"job-on-b<script>","state":"queued"}`)
	for _, d := range []struct {
		k      keys
		runner string
	}{{w.alice, "runner_alice"}, {carol, "runner_carol"}} {
		if got := e.daemonPost(d.k, d.runner, "heartbeat", heartbeatJSON(t, d.runner, "0.1.1")); got.status != 200 {
			t.Fatalf("heartbeat %s: %d %s", d.runner, got.status, got.body)
		}
	}

	pageA := e.do("GET", "/debug?site=site_a", nil, nil)
	if pageA.status != 200 || pageA.ctype != "text/html; charset=utf-8" {
		t.Fatalf("debug page: %d %q", pageA.status, pageA.ctype)
	}
	body := string(pageA.body)
	for _, want := range []string{"job-on-a", "runner_alice", w.alice.keyID(), "Routed jobs (1)", "Presence (1)", `<meta http-equiv="refresh" content="1">`} {
		if !strings.Contains(body, want) {
			t.Errorf("site_a page lacks %q", want)
		}
	}
	for _, leak := range []string{"job-on-b", "runner_carol", carol.keyID(), "carol"} {
		if strings.Contains(body, leak) {
			t.Errorf("site_a page leaks %q", leak)
		}
	}

	pageB := string(e.do("GET", "/byollm/debug?site=site_b", nil, nil).body)
	if !strings.Contains(pageB, "job-on-b&lt;script&gt;") || strings.Contains(pageB, "<script>") {
		t.Errorf("site_b page must list its job, HTML-escaped")
	}
	if strings.Contains(pageB, "job-on-a") || strings.Contains(pageB, "runner_alice") {
		t.Errorf("site_b page leaks site_a's state")
	}
	// bob consents to site_b but has not connected; carol has.
	if !strings.Contains(pageB, "runner_carol") {
		t.Errorf("site_b page lacks its consenting device")
	}

	for _, q := range []string{"/debug", "/debug?site=", "/debug?site=site_zed", "/byollm/debug?other=site_a"} {
		expect(t, e.do("GET", q, nil, nil), 400, `{"error":"bad-request"}`)
	}
}
