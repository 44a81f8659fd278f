package deploy_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/byollm/relay-go/internal/config"
)

const chartDir = "deploy/helm/relay"

// chartValues reads a values file of the chart ("" for none) and applies
// overrides (dotted paths) on top.
func chartValues(t *testing.T, file string, set map[string]any) map[string]any {
	t.Helper()
	vals := map[string]any{}
	if file != "" {
		v, err := common.ReadValuesFile(filepath.Join(root(t), chartDir, file))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		vals = v
	}
	for path, val := range set {
		m := vals
		parts := strings.Split(path, ".")
		for _, p := range parts[:len(parts)-1] {
			next, ok := m[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[p] = next
			}
			m = next
		}
		m[parts[len(parts)-1]] = val
	}
	return vals
}

// helmRender renders the chart with the Helm v4 SDK, as `helm template`
// does, and decodes every object strictly like the kustomize builds.
func helmRender(t *testing.T, vals map[string]any) built {
	t.Helper()
	ch, err := loader.Load(filepath.Join(root(t), chartDir))
	if err != nil {
		t.Fatalf("load the chart: %v", err)
	}
	rv, err := chartutil.ToRenderValues(ch, vals, common.ReleaseOptions{Name: "relay", Namespace: "byollm", IsInstall: true}, common.DefaultCapabilities)
	if err != nil {
		t.Fatalf("values: %v", err)
	}
	files, err := engine.Render(ch, rv)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	out := built{objects: map[string]any{}}
	for name, content := range files {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for _, doc := range splitDocs([]byte(content)) {
			obj, err := decodeStrict(doc)
			if err != nil {
				t.Fatalf("%s does not decode: %v\n%s", name, err, doc)
			}
			var meta struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			_ = yaml.Unmarshal(doc, &meta)
			key := meta.Kind + "/" + meta.Metadata.Name
			if _, dup := out.objects[key]; dup {
				t.Fatalf("the chart renders %s twice", key)
			}
			out.objects[key] = obj
		}
	}
	return out
}

// comparable is an object without its metadata (the chart adds Helm's
// labels), with JSON documents in ConfigMaps compared by content.
func comparable(t *testing.T, obj any) map[string]any {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "metadata")
	if data, ok := m["data"].(map[string]any); ok {
		for k, v := range data {
			var doc any
			if s, ok := v.(string); ok && json.Unmarshal([]byte(s), &doc) == nil {
				data[k] = doc
			}
		}
	}
	return m
}

// agree requires the chart and a kustomize build to render the same
// objects, each the same but for metadata.
func agree(t *testing.T, what string, chart, kust built) {
	t.Helper()
	if c, k := sortedKeys(chart.objects), sortedKeys(kust.objects); !slices.Equal(c, k) {
		t.Errorf("%s: the chart renders %v, kustomize builds %v", what, c, k)
	}
	for key, ko := range kust.objects {
		co, ok := chart.objects[key]
		if !ok {
			continue
		}
		c, k := comparable(t, co), comparable(t, ko)
		if !reflect.DeepEqual(c, k) {
			cj, _ := yaml.Marshal(c)
			kj, _ := yaml.Marshal(k)
			t.Errorf("%s: %s differs.\nchart:\n%s\nkustomize:\n%s", what, key, cj, kj)
		}
	}
}

func TestHelmLint(t *testing.T) {
	for _, file := range []string{"", "values-production.yaml"} {
		lint := action.NewLint()
		lint.Strict = true
		lint.Namespace = "byollm"
		res := lint.Run([]string{filepath.Join(root(t), chartDir)}, chartValues(t, file, nil))
		if res.TotalChartsLinted != 1 || len(res.Errors) > 0 {
			t.Errorf("helm lint --strict (values %q): %d charts linted, errors %v", file, res.TotalChartsLinted, res.Errors)
		}
		for _, m := range res.Messages {
			t.Logf("lint (values %q): %v", file, m)
		}
	}
}

// TestHelmAgreesWithKustomize: with its default values the chart renders
// exactly the base's objects, with monitoring on exactly the monitoring
// overlay's, and with the Ingress on the example's spec.
func TestHelmAgreesWithKustomize(t *testing.T) {
	agree(t, "default values vs the base", helmRender(t, chartValues(t, "", nil)), kustomizeBuild(t, "deploy/kubernetes/base"))
	agree(t, "monitoring.enabled vs overlays/monitoring", helmRender(t, chartValues(t, "", map[string]any{"monitoring.enabled": true})),
		kustomizeBuild(t, "deploy/kubernetes/overlays/monitoring"))

	ing := helmRender(t, chartValues(t, "", map[string]any{"ingress.enabled": true})).get(t, "Ingress", "relay")
	example, err := decodeStrict(readFile(t, "deploy/kubernetes/examples/ingress.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if c, e := comparable(t, ing), comparable(t, example); !reflect.DeepEqual(c, e) {
		t.Errorf("the chart's Ingress %v differs from examples/ingress.yaml %v", c, e)
	}

	// The chart's copy of the alerts is the file itself.
	if a, b := readFile(t, "deploy/prometheus/alerts.yaml"), readFile(t, chartDir+"/files/alerts.yaml"); !bytes.Equal(a, b) {
		if *update {
			if err := os.WriteFile(filepath.Join(root(t), chartDir, "files", "alerts.yaml"), a, 0o644); err != nil {
				t.Fatal(err)
			}
		} else {
			t.Errorf("%s/files/alerts.yaml differs from deploy/prometheus/alerts.yaml; copy it (or run with -update)", chartDir)
		}
	}
}

// TestHelmProduction renders the production example: the relay accepts
// its environment once the Secrets it names exist, the grant engine is on,
// Valkey is external, and the memory plan still holds.
func TestHelmProduction(t *testing.T) {
	b := helmRender(t, chartValues(t, "values-production.yaml", nil))
	for _, gone := range []string{"StatefulSet/valkey", "Service/valkey", "NetworkPolicy/valkey", "Secret/relay-admin"} {
		if _, ok := b.objects[gone]; ok {
			t.Errorf("production renders %s", gone)
		}
	}
	for _, want := range []string{"Ingress/relay", "ServiceMonitor/relay", "PrometheusRule/relay", "HorizontalPodAutoscaler/relay"} {
		b.get(t, strings.Split(want, "/")[0], strings.Split(want, "/")[1])
	}
	dep := b.get(t, "Deployment", "relay").(*appsv1.Deployment)
	if dep.Spec.Replicas != nil {
		t.Error("the chart's Deployment sets replicas beside the HPA")
	}
	// The Secrets the operator creates first.
	seed := make([]byte, 32)
	_, _ = rand.Read(seed)
	for name, data := range map[string]map[string]string{
		"relay-admin":     {"admin-token": "0123456789abcdef0123456789abcdef"},
		"relay-grant-key": {"grant.key": base64.StdEncoding.EncodeToString(seed)},
		"relay-valkey":    {"url": "rediss://default:secret@my-valkey.example:6380/0"},
	} {
		b.objects["Secret/"+name] = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: data}
	}
	c := dep.Spec.Template.Spec.Containers[0]
	cfg := loadPodConfig(t, b, c, dep.Spec.Template.Spec.Volumes)
	if cfg.GrantMode() != config.GrantsBuiltin || cfg.PolicyFile == "" || cfg.Embedded() || cfg.VerificationURL != "https://byollm.example.org/device" {
		t.Errorf("production config: grants %q, policy %q, embedded %v, verification %q", cfg.GrantMode(), cfg.PolicyFile, cfg.Embedded(), cfg.VerificationURL)
	}
	env := envMap(t, c)
	if v := env["RELAY_VALKEY_URL"]; v.ValueFrom == nil || v.ValueFrom.SecretKeyRef == nil || v.ValueFrom.SecretKeyRef.Name != "relay-valkey" {
		t.Errorf("RELAY_VALKEY_URL %+v, want it from Secret relay-valkey", v)
	}
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Secret != nil && (v.Secret.Optional == nil || *v.Secret.Optional) {
			t.Errorf("with grants on, the key Secret volume %s must not be optional (a pod without its key must not start)", v.Name)
		}
	}
	probs, figures := memoryPlan{where: "helm production", relayLimit: c.Resources.Limits.Memory().Value(), goMemLimit: env["GOMEMLIMIT"].Value,
		maxConns: cfg.MaxConns, bodyBudget: cfg.BodyBytesInFlight, siteLimits: cfg.SiteLimits,
		// Valkey is external here: only the relay's side is checked.
		valkeyLimit: 1 << 30, valkeyArgs: []string{"--appendonly", "yes", "--appendfsync", "everysec", "--maxmemory", "800mb", "--maxmemory-policy", "noeviction"}}.problems()
	for _, p := range probs {
		t.Error(p)
	}
	t.Log(figures)
}
