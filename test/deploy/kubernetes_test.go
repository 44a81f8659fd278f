package deploy_test

import (
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	kusttypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/byollm/relay-go/internal/config"
)

// typeMeta is read first to pick the Go type a document decodes into.
type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// newObject returns an empty object of the API type for apiVersion/kind.
func newObject(tm typeMeta) (any, bool) {
	switch tm.APIVersion + "/" + tm.Kind {
	case "v1/ServiceAccount":
		return &corev1.ServiceAccount{}, true
	case "v1/Secret":
		return &corev1.Secret{}, true
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}, true
	case "v1/Service":
		return &corev1.Service{}, true
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}, true
	case "apps/v1/StatefulSet":
		return &appsv1.StatefulSet{}, true
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, true
	case "autoscaling/v2/HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}, true
	case "networking.k8s.io/v1/NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, true
	case "networking.k8s.io/v1/Ingress":
		return &networkingv1.Ingress{}, true
	case "monitoring.coreos.com/v1/ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}, true
	case "monitoring.coreos.com/v1/PrometheusRule":
		return &monitoringv1.PrometheusRule{}, true
	case "kustomize.config.k8s.io/v1beta1/Kustomization", "kustomize.config.k8s.io/v1alpha1/Component":
		return &kusttypes.Kustomization{}, true
	}
	return nil, false
}

// decodeStrict decodes one document into its API type, refusing unknown or
// duplicate fields (a misspelt or misplaced field would otherwise be
// silently dropped by the API server).
func decodeStrict(doc []byte) (any, error) {
	var tm typeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, fmt.Errorf("read apiVersion/kind: %w", err)
	}
	obj, ok := newObject(tm)
	if !ok {
		return nil, fmt.Errorf("unexpected apiVersion/kind %s/%s", tm.APIVersion, tm.Kind)
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	return obj, nil
}

func TestManifestsDecodeStrictly(t *testing.T) {
	dir := filepath.Join(root(t), "deploy", "kubernetes")
	var files int
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			return err
		}
		files++
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		docs := splitDocs(b)
		if len(docs) == 0 {
			t.Errorf("%s: no document", path)
		}
		for i, doc := range docs {
			if _, err := decodeStrict(doc); err != nil {
				t.Errorf("%s document %d: %v", path, i, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 10 {
		t.Errorf("found only %d manifest files under %s", files, dir)
	}
}

// TestStrictDecodeRefusesMistakes shows the check above can fail.
func TestStrictDecodeRefusesMistakes(t *testing.T) {
	bad := map[string]string{
		"unknown field": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replica: 3\n",
		"misplaced":     "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  ports: [{port: 80, containerPort: 80}]\n",
		"duplicate":     "apiVersion: v1\nkind: Secret\nmetadata: {name: x}\nmetadata: {name: y}\n",
		"wrong kind":    "apiVersion: apps/v1\nkind: Deployments\nmetadata: {name: x}\n",
		"wrong type":    "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicas: three}\n",
	}
	for name, doc := range bad {
		if _, err := decodeStrict([]byte(doc)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// built is the output of one kustomize build, decoded into API types.
type built struct {
	objects map[string]any // "Kind/name"
}

func (b built) get(t *testing.T, kind, name string) any {
	t.Helper()
	o, ok := b.objects[kind+"/"+name]
	if !ok {
		t.Fatalf("build has no %s/%s; it has %v", kind, name, sortedKeys(b.objects))
	}
	return o
}

func kustomizeBuild(t *testing.T, rel string) built {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(root(t), rel))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", rel, err)
	}
	out := built{objects: map[string]any{}}
	for _, r := range m.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatalf("%s: %v", r.CurId(), err)
		}
		obj, err := decodeStrict(y)
		if err != nil {
			t.Fatalf("built %s does not decode: %v\n%s", r.CurId(), err, y)
		}
		out.objects[r.GetKind()+"/"+r.GetName()] = obj
	}
	return out
}

func envMap(t *testing.T, c corev1.Container) map[string]corev1.EnvVar {
	t.Helper()
	m := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		if _, dup := m[e.Name]; dup {
			t.Errorf("container %s sets %s twice", c.Name, e.Name)
		}
		m[e.Name] = e
	}
	return m
}

func namedPort(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port named %q", c.Name, name)
	return 0
}

func matches(sel map[string]string, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func TestKustomizeBase(t *testing.T) {
	b := kustomizeBuild(t, "deploy/kubernetes/base")
	want := []string{
		"ConfigMap/relay-policy", "ConfigMap/relay-projection", "Deployment/relay", "HorizontalPodAutoscaler/relay",
		"NetworkPolicy/relay", "NetworkPolicy/valkey", "PodDisruptionBudget/relay", "Secret/relay-admin",
		"Service/relay", "Service/relay-admin", "Service/valkey", "Service/valkey-headless",
		"ServiceAccount/relay", "StatefulSet/valkey",
	}
	if got := sortedKeys(b.objects); !slices.Equal(got, want) {
		t.Errorf("base builds %v, want %v", got, want)
	}
	envNames := relayEnvNames(t)

	dep := b.get(t, "Deployment", "relay").(*appsv1.Deployment)
	pod := dep.Spec.Template
	// The autoscaler owns the replica count: a count in the Deployment
	// too would be reset by every apply and fought by the HPA.
	if dep.Spec.Replicas != nil {
		t.Errorf("relay Deployment sets replicas %d beside the HPA; leave the count to the HPA", *dep.Spec.Replicas)
	}
	if !matches(dep.Spec.Selector.MatchLabels, pod.Labels) {
		t.Errorf("Deployment selector %v does not select its pods %v", dep.Spec.Selector.MatchLabels, pod.Labels)
	}
	if pod.Labels["app.kubernetes.io/part-of"] != "byollm-relay" {
		t.Errorf("common label missing from pods: %v", pod.Labels)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("relay pod has %d containers", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	if c.Image != "byollm/relay-go:dev" {
		t.Errorf("relay image %q (kustomize images: not applied?)", c.Image)
	}
	env := envMap(t, c)
	for name := range env {
		if !envNames[name] {
			t.Errorf("Deployment sets %s, which the relay does not read (known: %v)", name, sortedKeys(envNames))
		}
	}
	httpPort, adminPort := namedPort(t, c, "http"), namedPort(t, c, "admin")
	if got := portOf(t, env["RELAY_LISTEN"].Value); int32(got) != httpPort {
		t.Errorf("RELAY_LISTEN port %d, container port http %d", got, httpPort)
	}
	if got := portOf(t, env["RELAY_ADMIN_LISTEN"].Value); int32(got) != adminPort || strings.HasPrefix(env["RELAY_ADMIN_LISTEN"].Value, "127.") {
		t.Errorf("RELAY_ADMIN_LISTEN %q must listen beyond loopback on the admin port %d (probes come from the node)", env["RELAY_ADMIN_LISTEN"].Value, adminPort)
	}

	// Probes on the admin listener: liveness /healthz, readiness /readyz.
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s probe missing or not HTTP", name)
			continue
		}
		if p.HTTPGet.Port.String() != "admin" {
			t.Errorf("%s probe port %v, want the admin port", name, p.HTTPGet.Port.String())
		}
		wantPath := map[string]string{"liveness": "/healthz", "readiness": "/readyz", "startup": "/healthz"}[name]
		if p.HTTPGet.Path != wantPath {
			t.Errorf("%s probe path %q, want %q", name, p.HTTPGet.Path, wantPath)
		}
	}

	// Hardening.
	psc, sc := pod.Spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("pod securityContext must run as a non-root uid: %+v", psc)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container securityContext must be read-only, no escalation, drop ALL: %+v", sc)
	}
	if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
		t.Error("relay pods mount a service-account token they never use")
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources incomplete: %+v", c.Resources)
	}
	keys := map[string]bool{}
	for _, tsc := range pod.Spec.TopologySpreadConstraints {
		keys[tsc.TopologyKey] = true
		if tsc.LabelSelector == nil || !matches(tsc.LabelSelector.MatchLabels, pod.Labels) {
			t.Errorf("spread constraint %s does not select the relay pods", tsc.TopologyKey)
		}
	}
	if !keys["kubernetes.io/hostname"] || !keys["topology.kubernetes.io/zone"] {
		t.Errorf("topologySpreadConstraints over %v, want hostname and zone", keys)
	}

	// The relay accepts this environment (Secrets resolved, the projection
	// ConfigMap written where the mount would put it).
	cfg := loadPodConfig(t, b, c, pod.Spec.Volumes)
	if cfg.Embedded() {
		t.Error("the Deployment runs replicas on separate embedded stores")
	}
	if cfg.DrainPeriod == 0 {
		t.Error("no RELAY_DRAIN_PERIOD: pods would stop serving before endpoints are updated")
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= cfg.DrainPeriod+cfg.ShutdownTimeout {
		t.Errorf("terminationGracePeriodSeconds %v must exceed drain %v + shutdown %v", g, cfg.DrainPeriod, cfg.ShutdownTimeout)
	}

	// Admin token from the Secret.
	tok := env["RELAY_ADMIN_TOKEN"]
	if tok.Value != "" || tok.ValueFrom == nil || tok.ValueFrom.SecretKeyRef == nil {
		t.Fatalf("RELAY_ADMIN_TOKEN must come from a Secret: %+v", tok)
	}
	sec := b.get(t, "Secret", tok.ValueFrom.SecretKeyRef.Name).(*corev1.Secret)
	if _, ok := sec.StringData[tok.ValueFrom.SecretKeyRef.Key]; !ok {
		t.Errorf("Secret %s has no key %s", sec.Name, tok.ValueFrom.SecretKeyRef.Key)
	}
	if v := sec.StringData[tok.ValueFrom.SecretKeyRef.Key]; v != "" {
		t.Errorf("the base Secret carries a token %q; it must be empty (fail closed) and set per environment", v)
	}

	// Projection file: the variable points into a mounted ConfigMap key.
	projFile := env["RELAY_PROJECTION_FILE"].Value
	var mounted bool
	for _, vm := range c.VolumeMounts {
		if !strings.HasPrefix(projFile, vm.MountPath+"/") {
			continue
		}
		if vm.SubPath != "" {
			t.Errorf("projection mounted with subPath: ConfigMap edits would never reach the pod")
		}
		for _, v := range pod.Spec.Volumes {
			if v.Name != vm.Name || v.ConfigMap == nil {
				continue
			}
			cm := b.get(t, "ConfigMap", v.ConfigMap.Name).(*corev1.ConfigMap)
			key := strings.TrimPrefix(projFile, vm.MountPath+"/")
			if _, ok := cm.Data[key]; ok {
				mounted = true
			} else {
				t.Errorf("ConfigMap %s has no key %s (has %v)", cm.Name, key, sortedKeys(cm.Data))
			}
		}
	}
	if !mounted {
		t.Errorf("RELAY_PROJECTION_FILE=%s is not inside a mounted ConfigMap", projFile)
	}

	// Valkey: the URL names the Valkey Service, which selects the
	// StatefulSet, which persists an append-only file.
	u, err := url.Parse(env["RELAY_VALKEY_URL"].Value)
	if err != nil || u.Hostname() == "" {
		t.Fatalf("RELAY_VALKEY_URL %q: %v", env["RELAY_VALKEY_URL"].Value, err)
	}
	vsvc := b.get(t, "Service", u.Hostname()).(*corev1.Service)
	sts := b.get(t, "StatefulSet", "valkey").(*appsv1.StatefulSet)
	if !matches(vsvc.Spec.Selector, sts.Spec.Template.Labels) {
		t.Errorf("Service %s does not select the Valkey pods", vsvc.Name)
	}
	if len(vsvc.Spec.Ports) != 1 || fmt.Sprint(vsvc.Spec.Ports[0].Port) != u.Port() {
		t.Errorf("RELAY_VALKEY_URL port %s, Service ports %+v", u.Port(), vsvc.Spec.Ports)
	}
	if _, ok := b.objects["Service/"+sts.Spec.ServiceName]; !ok {
		t.Errorf("StatefulSet serviceName %q has no Service", sts.Spec.ServiceName)
	}
	vc := sts.Spec.Template.Spec.Containers[0]
	args := strings.Join(vc.Args, " ")
	if !strings.Contains(args, "--appendonly yes") || !strings.Contains(args, "--maxmemory-policy noeviction") {
		t.Errorf("Valkey args %q: want appendonly and noeviction", args)
	}
	if !strings.HasPrefix(vc.Image, "valkey/valkey:") {
		t.Errorf("Valkey image %q", vc.Image)
	}
	if len(sts.Spec.VolumeClaimTemplates) != 1 || len(vc.VolumeMounts) != 1 ||
		vc.VolumeMounts[0].Name != sts.Spec.VolumeClaimTemplates[0].Name || vc.VolumeMounts[0].MountPath != "/data" {
		t.Errorf("Valkey data is not on its volume claim: mounts %+v", vc.VolumeMounts)
	}
	if sts.Spec.Template.Spec.SecurityContext == nil || sts.Spec.Template.Spec.SecurityContext.FSGroup == nil {
		t.Error("Valkey pod without fsGroup cannot write its volume as non-root")
	}

	// Services, budget and autoscaler select the relay pods.
	svc := b.get(t, "Service", "relay").(*corev1.Service)
	if !matches(svc.Spec.Selector, pod.Labels) || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "http" {
		t.Errorf("Service relay: selector %v ports %+v; want the http port only", svc.Spec.Selector, svc.Spec.Ports)
	}
	adminSvc := b.get(t, "Service", "relay-admin").(*corev1.Service)
	if !matches(adminSvc.Spec.Selector, pod.Labels) || adminSvc.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("Service relay-admin must be a ClusterIP selecting the relay: %+v", adminSvc.Spec)
	}
	pdb := b.get(t, "PodDisruptionBudget", "relay").(*policyv1.PodDisruptionBudget)
	if !matches(pdb.Spec.Selector.MatchLabels, pod.Labels) || pdb.Spec.MaxUnavailable == nil {
		t.Errorf("PDB: %+v", pdb.Spec)
	}
	hpa := b.get(t, "HorizontalPodAutoscaler", "relay").(*autoscalingv2.HorizontalPodAutoscaler)
	if hpa.Spec.ScaleTargetRef.Kind != "Deployment" || hpa.Spec.ScaleTargetRef.Name != dep.Name ||
		hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas < 3 || hpa.Spec.MaxReplicas <= *hpa.Spec.MinReplicas {
		t.Errorf("HPA: %+v", hpa.Spec)
	}

	// NetworkPolicy: public port open, admin port only from this namespace
	// and from Prometheus.
	np := b.get(t, "NetworkPolicy", "relay").(*networkingv1.NetworkPolicy)
	if !matches(np.Spec.PodSelector.MatchLabels, pod.Labels) {
		t.Errorf("NetworkPolicy relay does not select the relay pods")
	}
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			if p.Port == nil {
				t.Errorf("ingress rule without a port opens every port: %+v", rule)
				continue
			}
			switch p.Port.String() {
			case "http":
			case "admin":
				if len(rule.From) == 0 {
					t.Errorf("admin port open to everyone")
				}
				for _, peer := range rule.From {
					if peer.IPBlock != nil {
						t.Errorf("admin port open to an IP block %+v", peer.IPBlock)
					}
					if peer.NamespaceSelector != nil && (peer.PodSelector == nil || len(peer.PodSelector.MatchLabels) == 0) {
						t.Errorf("admin port open to every pod of selected namespaces: %+v", peer)
					}
				}
			default:
				t.Errorf("NetworkPolicy opens unexpected port %s", p.Port.String())
			}
		}
	}
	vnp := b.get(t, "NetworkPolicy", "valkey").(*networkingv1.NetworkPolicy)
	if len(vnp.Spec.Ingress) != 1 || len(vnp.Spec.Ingress[0].From) != 1 ||
		!matches(vnp.Spec.Ingress[0].From[0].PodSelector.MatchLabels, pod.Labels) {
		t.Errorf("Valkey NetworkPolicy must admit the relay pods only: %+v", vnp.Spec.Ingress)
	}
}

func TestKustomizeExternalValkey(t *testing.T) {
	b := kustomizeBuild(t, "deploy/kubernetes/overlays/external-valkey")
	for _, gone := range []string{"StatefulSet/valkey", "Service/valkey", "Service/valkey-headless", "NetworkPolicy/valkey"} {
		if _, ok := b.objects[gone]; ok {
			t.Errorf("overlay still has %s", gone)
		}
	}
	dep := b.get(t, "Deployment", "relay").(*appsv1.Deployment)
	env := envMap(t, dep.Spec.Template.Spec.Containers[0])
	v := env["RELAY_VALKEY_URL"]
	if v.Value != "" || v.ValueFrom == nil || v.ValueFrom.SecretKeyRef == nil || v.ValueFrom.SecretKeyRef.Name != "relay-valkey" {
		t.Errorf("RELAY_VALKEY_URL in the overlay: %+v, want it from Secret relay-valkey", v)
	}
	if o := v.ValueFrom.SecretKeyRef.Optional; o != nil && *o {
		t.Error("an optional Valkey secret would start replicas on separate embedded stores")
	}
	if _, ok := env["RELAY_ADMIN_TOKEN"]; !ok {
		t.Error("overlay lost the rest of the environment")
	}
}

// loadPodConfig runs the relay's configuration loader on a container's
// environment as the kubelet would present it.
func loadPodConfig(t *testing.T, b built, c corev1.Container, volumes []corev1.Volume) config.Config {
	t.Helper()
	dir := t.TempDir()
	mountHost := map[string]string{} // mountPath -> temp dir holding the ConfigMap's keys
	for _, vm := range c.VolumeMounts {
		for _, v := range volumes {
			if v.Name != vm.Name || (v.ConfigMap == nil && v.Secret == nil) {
				continue
			}
			var files map[string]string
			if v.ConfigMap != nil {
				files = b.get(t, "ConfigMap", v.ConfigMap.Name).(*corev1.ConfigMap).Data
			} else if sec, ok := b.objects["Secret/"+v.Secret.SecretName]; ok {
				files = sec.(*corev1.Secret).StringData
			} else if v.Secret.Optional == nil || !*v.Secret.Optional {
				t.Fatalf("volume %s: Secret %s is neither in the build nor optional", v.Name, v.Secret.SecretName)
			}
			host := filepath.Join(dir, v.Name)
			if err := os.MkdirAll(host, 0o755); err != nil {
				t.Fatal(err)
			}
			for k, data := range files {
				if err := os.WriteFile(filepath.Join(host, k), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			mountHost[vm.MountPath] = host
		}
	}
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			sec := b.get(t, "Secret", e.ValueFrom.SecretKeyRef.Name).(*corev1.Secret)
			env[e.Name] = sec.StringData[e.ValueFrom.SecretKeyRef.Key]
		case e.ValueFrom != nil:
			t.Fatalf("%s: unsupported valueFrom %+v", e.Name, e.ValueFrom)
		default:
			env[e.Name] = e.Value
		}
		for mp, host := range mountHost {
			if strings.HasPrefix(env[e.Name], mp+"/") {
				env[e.Name] = host + strings.TrimPrefix(env[e.Name], mp)
			}
		}
	}
	cfg, err := config.Load(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatalf("the relay refuses the Deployment's environment: %v", err)
	}
	return cfg
}
