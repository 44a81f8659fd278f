package deploy_test

import (
	"crypto/rand"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/byollm/relay-go/internal/config"
	"github.com/byollm/relay-go/internal/policy"
	"github.com/byollm/relay-go/internal/relay"
	"github.com/byollm/relay-go/internal/store"
)

var update = flag.Bool("update", false, "rewrite generated deploy files (the PrometheusRule) from their sources")

// perConnBytes is what one open connection may cost the relay at most
// (goroutine, buffers, up to 16 KiB of parsed headers): the "~40 KiB" of
// the documented bound.
const perConnBytes = 40 << 10

// worstCase is the documented memory bound of one relay: RELAY_MAX_CONNS
// on each of 2 listeners at perConnBytes, plus twice the body budget (a
// body's buffer while the one it outgrew is still garbage, or its parse).
func worstCase(maxConns int, bodyBudget int64) int64 {
	return int64(maxConns)*2*perConnBytes + 2*bodyBudget
}

// parseGoMemLimit reads GOMEMLIMIT as the Go runtime does: a byte count
// with an optional B, KiB, MiB, GiB or TiB suffix.
func parseGoMemLimit(v string) (int64, error) {
	units := []struct {
		s string
		m int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	m := int64(1)
	for _, u := range units {
		if strings.HasSuffix(v, u.s) {
			v, m = strings.TrimSuffix(v, u.s), u.m
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("GOMEMLIMIT %q is not a size the Go runtime reads", v)
	}
	return n * m, nil
}

// parseValkeyBytes reads a memory size as valkey.conf does: k/m/g are
// powers of 1000, kb/mb/gb of 1024, case-insensitive.
func parseValkeyBytes(v string) (int64, error) {
	l := strings.ToLower(v)
	units := []struct {
		s string
		m int64
	}{{"kb", 1 << 10}, {"mb", 1 << 20}, {"gb", 1 << 30}, {"k", 1e3}, {"m", 1e6}, {"g", 1e9}}
	m := int64(1)
	for _, u := range units {
		if strings.HasSuffix(l, u.s) {
			l, m = strings.TrimSuffix(l, u.s), u.m
			break
		}
	}
	n, err := strconv.ParseInt(l, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a Valkey memory size", v)
	}
	return n * m, nil
}

// argValue is the value after name in a command line ("" if absent).
func argValue(args []string, name string) string {
	if i := slices.Index(args, name); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}

// memoryPlan is what the deploy files promise about memory, from one
// deployment flavour (Kubernetes base or compose).
type memoryPlan struct {
	where       string
	relayLimit  int64
	goMemLimit  string
	maxConns    int
	bodyBudget  int64
	siteLimits  store.SiteLimits
	valkeyLimit int64
	valkeyArgs  []string
}

// problems holds the plan to its promises: the relay fits its limit in
// the worst case and the runtime is told about the limit; Valkey is capped
// below its container with noeviction and persists; one site cannot fill
// Valkey. It returns what is broken and a line of the figures.
func (p memoryPlan) problems() (probs []string, figures string) {
	bad := func(format string, a ...any) { probs = append(probs, p.where+": "+fmt.Sprintf(format, a...)) }
	worst := worstCase(p.maxConns, p.bodyBudget)
	if p.relayLimit < worst {
		bad("relay memory limit %d MiB is below its documented worst case %d MiB (RELAY_MAX_CONNS %d x 2 x 40 KiB + 2 x RELAY_BODY_BYTES_IN_FLIGHT %d MiB): raise the limit or lower the two",
			p.relayLimit>>20, worst>>20, p.maxConns, p.bodyBudget>>20)
	}
	gml, err := parseGoMemLimit(p.goMemLimit)
	if err != nil {
		bad("%v", err)
	} else if gml < worst || gml > p.relayLimit*95/100 {
		bad("GOMEMLIMIT %s (%d MiB) must lie between the worst case (%d MiB; below it the collector would run flat out) and 95%% of the limit %d MiB (room for stacks and the runtime)",
			p.goMemLimit, gml>>20, worst>>20, p.relayLimit>>20)
	}

	if v := argValue(p.valkeyArgs, "--appendonly"); v != "yes" {
		bad("Valkey --appendonly %q, want yes (the routing store must survive a restart)", v)
	}
	if v := argValue(p.valkeyArgs, "--appendfsync"); v != "everysec" && v != "always" {
		bad("Valkey --appendfsync %q, want it stated: everysec or always", v)
	}
	if v := argValue(p.valkeyArgs, "--maxmemory-policy"); v != "noeviction" {
		bad("Valkey --maxmemory-policy %q, want noeviction (an evicted key is a lost job)", v)
	}
	mm, err := parseValkeyBytes(argValue(p.valkeyArgs, "--maxmemory"))
	switch {
	case err != nil || mm == 0:
		bad("Valkey --maxmemory %q (without it noeviction never refuses: the kernel kills Valkey at its limit)", argValue(p.valkeyArgs, "--maxmemory"))
	case p.valkeyLimit == 0:
		bad("Valkey has no container memory limit to size maxmemory against")
	case mm < p.valkeyLimit*70/100 || mm > p.valkeyLimit*85/100:
		bad("Valkey maxmemory %d MiB is not ~80%% of its limit %d MiB (70-85%%: room for the AOF rewrite's fork and client buffers)", mm>>20, p.valkeyLimit>>20)
	default:
		for _, w := range store.SiteLimitsOverMemory(p.siteLimits, []store.ServerMemory{{MaxMemory: mm}}) {
			bad("%s", w)
		}
	}
	return probs, fmt.Sprintf("%s: relay limit %d MiB, worst case %d MiB, GOMEMLIMIT %s; Valkey limit %d MiB, maxmemory %d MiB, per-site bytes %d MiB",
		p.where, p.relayLimit>>20, worst>>20, p.goMemLimit, p.valkeyLimit>>20, mm>>20, p.siteLimits.Default.Bytes>>20)
}

func (p memoryPlan) check(t *testing.T) {
	t.Helper()
	probs, figures := p.problems()
	for _, pr := range probs {
		t.Error(pr)
	}
	t.Log(figures)
}

// basePlan reads the memory plan of the Kubernetes base, and the pieces
// the memory-bound test runs the relay with.
func basePlan(t *testing.T) (memoryPlan, config.Config) {
	t.Helper()
	b := kustomizeBuild(t, "deploy/kubernetes/base")
	dep := b.get(t, "Deployment", "relay").(*appsv1.Deployment)
	c := dep.Spec.Template.Spec.Containers[0]
	cfg := loadPodConfig(t, b, c, dep.Spec.Template.Spec.Volumes)
	env := envMap(t, c)
	sts := b.get(t, "StatefulSet", "valkey").(*appsv1.StatefulSet)
	vc := sts.Spec.Template.Spec.Containers[0]
	if env["GOMEMLIMIT"].ValueFrom != nil {
		t.Fatalf("GOMEMLIMIT from %+v: a resourceFieldRef gives 100%% of the limit, leaving the runtime no room; set ~90%%", env["GOMEMLIMIT"].ValueFrom)
	}
	return memoryPlan{
		where:       "kubernetes base",
		relayLimit:  c.Resources.Limits.Memory().Value(),
		goMemLimit:  env["GOMEMLIMIT"].Value,
		maxConns:    cfg.MaxConns,
		bodyBudget:  cfg.BodyBytesInFlight,
		siteLimits:  cfg.SiteLimits,
		valkeyLimit: vc.Resources.Limits.Memory().Value(),
		valkeyArgs:  vc.Args,
	}, cfg
}

func TestKubernetesMemoryPlan(t *testing.T) {
	p, _ := basePlan(t)
	p.check(t)
}

func TestComposeMemoryPlan(t *testing.T) {
	c := loadCompose(t)
	env := map[string]string{}
	for k, v := range c.Services["relay-1"].Environment {
		env[k] = interpolate(t, v)
	}
	env["RELAY_PROJECTION_FILE"] = "" // its mount is TestCompose's business
	cfg, err := config.Load(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatalf("relay-1's environment: %v", err)
	}
	memLimit := func(name string) int64 {
		v := c.Services[name].MemLimit
		n, err := parseValkeyBytes(strings.TrimSuffix(v, "b") + "b") // compose: 512m = 512 MiB
		if v == "" || err != nil {
			t.Errorf("%s: mem_limit %q", name, v)
		}
		return n
	}
	vk := c.Services["valkey"]
	if vk.Command[0] != "valkey-server" {
		t.Fatalf("valkey command %v", vk.Command)
	}
	memoryPlan{
		where:       "docker-compose.yml",
		relayLimit:  memLimit("relay-1"),
		goMemLimit:  env["GOMEMLIMIT"],
		maxConns:    cfg.MaxConns,
		bodyBudget:  cfg.BodyBytesInFlight,
		siteLimits:  cfg.SiteLimits,
		valkeyLimit: memLimit("valkey"),
		valkeyArgs:  vk.Command[1:],
	}.check(t)
}

// The checks above can fail: a plan that breaks each promise is refused.
func TestMemoryPlanRefusesMistakes(t *testing.T) {
	good := memoryPlan{where: "good", relayLimit: 512 << 20, goMemLimit: "460MiB", maxConns: 2048, bodyBudget: 128 << 20,
		siteLimits: store.SiteLimits{Default: store.SiteLimit{Bytes: 256 << 20}}, valkeyLimit: 1 << 30,
		valkeyArgs: []string{"--appendonly", "yes", "--appendfsync", "everysec", "--maxmemory", "800mb", "--maxmemory-policy", "noeviction"}}
	bad := map[string]func(p *memoryPlan){
		"the old 256Mi limit": func(p *memoryPlan) { p.relayLimit = 256 << 20 },
		"GOMEMLIMIT = limit":  func(p *memoryPlan) { p.goMemLimit = "512MiB" },
		"GOMEMLIMIT unset":    func(p *memoryPlan) { p.goMemLimit = "" },
		"no maxmemory":        func(p *memoryPlan) { p.valkeyArgs = slices.Delete(slices.Clone(p.valkeyArgs), 4, 6) },
		"no fsync stated":     func(p *memoryPlan) { p.valkeyArgs = slices.Delete(slices.Clone(p.valkeyArgs), 2, 4) },
		"maxmemory = limit": func(p *memoryPlan) {
			p.valkeyArgs = []string{"--appendonly", "yes", "--appendfsync", "always", "--maxmemory", "1gb", "--maxmemory-policy", "noeviction"}
		},
		"site limit 1GiB": func(p *memoryPlan) { p.siteLimits.Default.Bytes = 1 << 30 },
	}
	if probs, _ := good.problems(); probs != nil {
		t.Fatalf("the good plan is refused: %v", probs)
	}
	for name, breakIt := range bad {
		p := good
		breakIt(&p)
		if probs, _ := p.problems(); probs == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// commentedEnv finds env entries left commented in a manifest
// ("# - name: X" then "#   value: V"): settings a deployment turns on.
var commentedEnv = regexp.MustCompile(`(?m)^\s*#\s*- name: (\w+)\s*\n\s*#\s+value: (\S+)\s*$`)

// TestBaseCarriesRealSettings: every setting a real deployment needs is in
// the base, set or commented where it is deployment-specific, and each
// works when turned on.
func TestBaseCarriesRealSettings(t *testing.T) {
	b := kustomizeBuild(t, "deploy/kubernetes/base")
	dep := b.get(t, "Deployment", "relay").(*appsv1.Deployment)
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	env := envMap(t, c)

	cfg := loadPodConfig(t, b, c, pod.Volumes)
	if u, err := url.Parse(cfg.VerificationURL); cfg.VerificationURL == "" || err != nil || u.Scheme != "https" {
		t.Errorf("RELAY_VERIFICATION_URL %q: real daemons get 501 at pairing without it; set an https example to replace", cfg.VerificationURL)
	}
	if len(cfg.TrustedProxies) == 0 {
		t.Error("no RELAY_TRUSTED_PROXIES: behind an Ingress every client would share the controller's address for the pairing limit")
	}
	for _, name := range []string{"RELAY_VERIFICATION_URL", "RELAY_TRUSTED_PROXIES"} {
		if _, ok := env[name]; !ok {
			t.Errorf("%s missing", name)
		}
	}

	// The grant engine: a Secret volume that may be absent (pods start
	// without it), a policy ConfigMap, and both variables commented with
	// paths inside those mounts.
	raw := string(readFile(t, "deploy/kubernetes/base/relay-deployment.yaml"))
	commented := map[string]string{}
	for _, m := range commentedEnv.FindAllStringSubmatch(raw, -1) {
		commented[m[1]] = m[2]
	}
	keyPath, polPath := commented["RELAY_GRANT_KEY_FILE"], commented["RELAY_POLICY_FILE"]
	if keyPath == "" || polPath == "" {
		t.Fatalf("relay-deployment.yaml does not carry RELAY_GRANT_KEY_FILE and RELAY_POLICY_FILE commented (found %v)", commented)
	}
	var keySecret string
	for _, vm := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name != vm.Name {
				continue
			}
			switch {
			case v.Secret != nil && strings.HasPrefix(keyPath, vm.MountPath+"/"):
				keySecret = v.Secret.SecretName
				if v.Secret.Optional == nil || !*v.Secret.Optional {
					t.Errorf("grant key Secret volume is not optional: pods would not start before the Secret exists")
				}
			case v.ConfigMap != nil && strings.HasPrefix(polPath, vm.MountPath+"/"):
				cm := b.get(t, "ConfigMap", v.ConfigMap.Name).(*corev1.ConfigMap)
				doc, ok := cm.Data[strings.TrimPrefix(polPath, vm.MountPath+"/")]
				if !ok {
					t.Errorf("ConfigMap %s has no key for %s", cm.Name, polPath)
				} else if _, err := policy.Parse([]byte(doc), false); err != nil {
					t.Errorf("the base policy document does not parse: %v", err)
				}
			}
		}
	}
	if keySecret == "" {
		t.Fatalf("no Secret volume mounted where RELAY_GRANT_KEY_FILE=%s points", keyPath)
	}
	// Turned on as the comments say (the Secret created with the
	// documented command), the relay accepts the environment.
	seed := make([]byte, 32)
	_, _ = rand.Read(seed)
	b.objects["Secret/"+keySecret] = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: keySecret},
		StringData: map[string]string{filepath.Base(keyPath): base64.StdEncoding.EncodeToString(seed) + "\n"}}
	on := c.DeepCopy()
	on.Env = append(on.Env, corev1.EnvVar{Name: "RELAY_GRANT_KEY_FILE", Value: keyPath}, corev1.EnvVar{Name: "RELAY_POLICY_FILE", Value: polPath})
	cfg = loadPodConfig(t, b, *on, pod.Volumes)
	if cfg.GrantMode() != config.GrantsBuiltin || cfg.PolicyFile == "" {
		t.Errorf("with the commented settings on: grant mode %q, policy file %q", cfg.GrantMode(), cfg.PolicyFile)
	}
}

// TestIngressExample: the example routes to the relay Service's http port,
// never the admin one, and lets the largest body through.
func TestIngressExample(t *testing.T) {
	b := kustomizeBuild(t, "deploy/kubernetes/base")
	obj, err := decodeStrict(readFile(t, "deploy/kubernetes/examples/ingress.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ing, ok := obj.(*networkingv1.Ingress)
	if !ok {
		t.Fatalf("examples/ingress.yaml holds a %T", obj)
	}
	var paths int
	for _, r := range ing.Spec.Rules {
		for _, p := range r.HTTP.Paths {
			paths++
			svc := p.Backend.Service
			if svc == nil {
				t.Fatalf("path %s has no Service backend", p.Path)
			}
			s := b.get(t, "Service", svc.Name).(*corev1.Service)
			var found bool
			for _, sp := range s.Spec.Ports {
				found = found || (svc.Port.Name != "" && sp.Name == svc.Port.Name) || (svc.Port.Number != 0 && sp.Port == svc.Port.Number)
			}
			if !found || svc.Name != "relay" || svc.Port.Name == "admin" {
				t.Errorf("path %s routes to %s port %+v; want the relay Service's http port", p.Path, svc.Name, svc.Port)
			}
		}
	}
	if paths == 0 || len(ing.Spec.TLS) == 0 {
		t.Errorf("the example needs a rule and TLS: %+v", ing.Spec)
	}
	q, err := resource.ParseQuantity(strings.ToUpper(strings.TrimSuffix(ing.Annotations["nginx.ingress.kubernetes.io/proxy-body-size"], "m")) + "Mi")
	if err != nil || q.Value() < relay.MaxBodyBytes {
		t.Errorf("proxy-body-size %q lets less than the planes' largest body (%d MiB) through", ing.Annotations["nginx.ingress.kubernetes.io/proxy-body-size"], relay.MaxBodyBytes>>20)
	}
}

// alertsFile is deploy/prometheus/alerts.yaml, decoded strictly into the
// Operator's rule types (so it is a valid PrometheusRule spec).
func alertsSpec(t *testing.T) monitoringv1.PrometheusRuleSpec {
	t.Helper()
	var spec monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(readFile(t, "deploy/prometheus/alerts.yaml"), &spec); err != nil {
		t.Fatalf("alerts.yaml as a PrometheusRule spec: %v", err)
	}
	if len(spec.Groups) == 0 || len(spec.Groups[0].Rules) == 0 {
		t.Fatal("alerts.yaml has no rules")
	}
	return spec
}

const ruleHeader = `# GENERATED from deploy/prometheus/alerts.yaml by
#   go test ./test/deploy -run TestMonitoringComponent -update
# Do not edit: edit alerts.yaml and regenerate (the test fails while they differ).
`

// TestMonitoringComponent: the optional component adds a ServiceMonitor
// that scrapes the relay's admin port as job "relay" (what the alerts
// name) and a PrometheusRule holding exactly alerts.yaml.
func TestMonitoringComponent(t *testing.T) {
	spec := alertsSpec(t)
	rulePath := "deploy/kubernetes/components/monitoring/prometheusrule.yaml"
	if *update {
		pr := monitoringv1.PrometheusRule{
			TypeMeta:   metav1.TypeMeta{APIVersion: "monitoring.coreos.com/v1", Kind: "PrometheusRule"},
			ObjectMeta: metav1.ObjectMeta{Name: "relay", Labels: map[string]string{"app.kubernetes.io/name": "relay"}},
			Spec:       spec,
		}
		y, err := yaml.Marshal(pr)
		if err != nil {
			t.Fatal(err)
		}
		y = regexp.MustCompile(`(?m)^  creationTimestamp: null\n`).ReplaceAll(y, nil)
		if err := os.WriteFile(filepath.Join(root(t), rulePath), append([]byte(ruleHeader), y...), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	b := kustomizeBuild(t, "deploy/kubernetes/overlays/monitoring")
	base := kustomizeBuild(t, "deploy/kubernetes/base")
	for k := range base.objects {
		if _, ok := b.objects[k]; !ok {
			t.Errorf("the monitoring overlay lost %s", k)
		}
	}
	pr := b.get(t, "PrometheusRule", "relay").(*monitoringv1.PrometheusRule)
	if !reflect.DeepEqual(pr.Spec, spec) {
		t.Errorf("%s differs from deploy/prometheus/alerts.yaml; regenerate: go test ./test/deploy -run TestMonitoringComponent -update", rulePath)
	}
	if !strings.HasPrefix(string(readFile(t, rulePath)), ruleHeader) {
		t.Errorf("%s lost its GENERATED header", rulePath)
	}

	sm := b.get(t, "ServiceMonitor", "relay").(*monitoringv1.ServiceMonitor)
	pod := b.get(t, "Deployment", "relay").(*appsv1.Deployment).Spec.Template
	var scraped []string
	for k, o := range b.objects {
		if s, ok := o.(*corev1.Service); ok && matches(sm.Spec.Selector.MatchLabels, s.Labels) && matches(s.Spec.Selector, pod.Labels) {
			for _, p := range s.Spec.Ports {
				for _, ep := range sm.Spec.Endpoints {
					if ep.Port == p.Name {
						scraped = append(scraped, k+":"+p.Name)
						if p.TargetPort.String() != "admin" || ep.Path != "/metrics" {
							t.Errorf("ServiceMonitor scrapes %s port %s → %s path %s; want the admin port's /metrics", k, p.Name, p.TargetPort.String(), ep.Path)
						}
					}
				}
			}
		}
	}
	if !slices.Equal(scraped, []string{"Service/relay-admin:admin"}) {
		t.Errorf("ServiceMonitor scrapes %v, want exactly Service/relay-admin:admin (once)", scraped)
	}
	var jobRelay bool
	for _, ep := range sm.Spec.Endpoints {
		for _, r := range ep.RelabelConfigs {
			jobRelay = jobRelay || (r.TargetLabel == "job" && r.Replacement != nil && *r.Replacement == "relay")
		}
	}
	if !jobRelay || !strings.Contains(string(readFile(t, "deploy/prometheus/alerts.yaml")), `job="relay"`) {
		t.Error(`the alerts name job="relay"; the ServiceMonitor must relabel its targets so`)
	}
}
