package opsview

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/byollm/relay-go/internal/loadgen"
	"github.com/byollm/relay-go/test/relaytest"
)

// Counters the exporter shows only once something has counted: a load
// that goes well does not make them. Each names the OpenTelemetry
// instrument internal/telemetry declares for it, which the test finds in
// the source instead.
var onlyOnEvent = map[string]string{
	"relay_unsealed_churn_reports_total": "relay.unsealed_churn.reports",
	"relay_valkey_script_errors_total":   "relay.valkey.script.errors",
	"relay_site_limit_refusals_total":    "relay.site.limit.refusals",
	"relay_grant_calls_total":            "relay.grant.calls",
}

var metricName = regexp.MustCompile(`\b(relay_[a-z0-9_]+|up)\b`)

// queries reads every PromQL expression of the dashboard and the alerts.
func queries(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	root := relaytest.ModuleRoot()
	b, err := os.ReadFile(filepath.Join(root, "deploy", "grafana", "relay.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			out["dashboard: "+p.Title] = append(out["dashboard: "+p.Title], tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if v.Definition != "" {
			out["dashboard variable"] = append(out["dashboard variable"], v.Definition)
		}
	}
	b, err = os.ReadFile(filepath.Join(root, "deploy", "prometheus", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if len(r.Annotations["action"]) < 40 {
				t.Errorf("alert %s: no sentence on what to do (annotations.action)", r.Alert)
			}
			out["alert: "+r.Alert] = append(out["alert: "+r.Alert], r.Expr)
		}
	}
	return out
}

// TestDashboardAndAlertsNameExportedMetrics scrapes a real relay after a
// small load (with abandoned grants, so sweeps requeue) and requires every
// metric a dashboard panel or an alert names to be one it exports; then
// checks the rules with promtool.
func TestDashboardAndAlertsNameExportedMetrics(t *testing.T) {
	qs := queries(t)
	if len(qs) < 20 {
		t.Fatalf("only %d dashboard panels and alerts found", len(qs))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := startReplicas(t, 1, "RELAY_LEASE_MS=2000", "RELAY_QUEUE_AGE_INTERVAL=200ms")
	s := r.servers[0]
	rep, err := loadgen.Run(ctx, loadgen.Config{Replicas: []string{s.URL()}, AdminURLs: []string{s.AdminURL()}, StatusURLs: []string{s.AdminURL()}, AdminToken: adminToken,
		Sites: 2, Daemons: 3, Jobs: 40, Concurrency: 6, AbandonEvery: 10, LeaseMs: 2000, Drain: 60 * time.Second, TTL: 10 * time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("load: enqueued %d collected %d", rep.Jobs.Enqueued, rep.Jobs.Collected)

	res, err := http.Get(s.AdminURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{"up": true} // Prometheus' own, per scrape target
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		exported[name] = true
	}
	res.Body.Close()
	src, err := os.ReadFile(filepath.Join(relaytest.ModuleRoot(), "internal", "telemetry", "metrics.go"))
	if err != nil {
		t.Fatal(err)
	}

	used := map[string]bool{}
	for where, exprs := range qs {
		for _, e := range exprs {
			names := metricName.FindAllString(e, -1)
			if len(names) == 0 {
				t.Errorf("%s: %q names no relay metric", where, e)
			}
			for _, n := range names {
				used[n] = true
				if exported[n] {
					continue
				}
				if inst, ok := onlyOnEvent[n]; ok && strings.Contains(string(src), `"`+inst+`"`) {
					continue
				}
				t.Errorf("%s: %s is not a metric the relay exports (%q)", where, n, e)
			}
		}
	}
	var list []string
	for n := range used {
		list = append(list, n)
	}
	sort.Strings(list)
	t.Logf("%d metrics named: %s", len(list), strings.Join(list, " "))

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool is missing: .ci/run installs it (apt-get install prometheus)")
		}
		t.Skip("promtool is not installed (apt-get install -y prometheus); the rules were not checked")
	}
	out, err := exec.CommandContext(ctx, promtool, "check", "rules", filepath.Join(relaytest.ModuleRoot(), "deploy", "prometheus", "alerts.yaml")).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	t.Logf("%s", strings.TrimSpace(string(out)))
}
