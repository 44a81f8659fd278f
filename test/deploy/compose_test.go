package deploy_test

import (
	"bufio"
	"bytes"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/byollm/relay-go/internal/config"
	"github.com/byollm/relay-go/internal/projection"
)

// composeFile is the part of the Compose specification these files use;
// strict decoding refuses any key outside it, so a typo cannot hide.
type composeFile struct {
	Name     string                    `json:"name"`
	XRelay   map[string]any            `json:"x-relay"`
	Services map[string]composeService `json:"services"`
	Volumes  map[string]any            `json:"volumes"`
}

type composeService struct {
	Build           *composeBuild       `json:"build"`
	Image           string              `json:"image"`
	Hostname        string              `json:"hostname"`
	Restart         string              `json:"restart"`
	ReadOnly        bool                `json:"read_only"`
	CapDrop         []string            `json:"cap_drop"`
	SecurityOpt     []string            `json:"security_opt"`
	Environment     map[string]string   `json:"environment"`
	Volumes         []string            `json:"volumes"`
	Expose          []string            `json:"expose"`
	Ports           []string            `json:"ports"`
	StopGracePeriod string              `json:"stop_grace_period"`
	MemLimit        string              `json:"mem_limit"`
	DependsOn       any                 `json:"depends_on"`
	Command         []string            `json:"command"`
	Profiles        []string            `json:"profiles"`
	Healthcheck     *composeHealthcheck `json:"healthcheck"`
}

type composeBuild struct {
	Context    string            `json:"context"`
	Dockerfile string            `json:"dockerfile"`
	Args       map[string]string `json:"args"`
}

type composeHealthcheck struct {
	Test     []string `json:"test"`
	Interval string   `json:"interval"`
	Timeout  string   `json:"timeout"`
	Retries  int      `json:"retries"`
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	var c composeFile
	if err := yaml.UnmarshalStrict(readFile(t, "docker-compose.yml"), &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return c
}

// interpolation matches ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?msg}.
var interpolation = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}`)

// interpolate resolves a value as Compose would with an empty host
// environment; it reports a ${VAR:?} that would refuse to start.
func interpolate(t *testing.T, v string) string {
	t.Helper()
	return interpolation.ReplaceAllStringFunc(v, func(m string) string {
		sub := interpolation.FindStringSubmatch(m)
		switch sub[2] {
		case ":-", "-":
			return sub[3]
		case ":?", "?":
			t.Errorf("%s makes `docker compose up` fail without it", m)
		}
		return ""
	})
}

// hostPath resolves a bind mount "./src:/dst[:ro]" to (host source, target).
func bindMount(t *testing.T, spec string) (src, dst string, bind bool) {
	t.Helper()
	parts := strings.Split(spec, ":")
	if len(parts) < 2 {
		t.Fatalf("volume %q has no target", spec)
	}
	if !strings.HasPrefix(parts[0], "./") {
		return parts[0], parts[1], false
	}
	return filepath.Join(root(t), parts[0]), parts[1], true
}

func TestCompose(t *testing.T) {
	c := loadCompose(t)
	envNames := relayEnvNames(t)

	wantServices := []string{"lb", "otel-collector", "prometheus", "relay-1", "relay-2", "relay-3", "valkey"}
	if got := sortedKeys(c.Services); !slices.Equal(got, wantServices) {
		t.Fatalf("services %v, want %v", got, wantServices)
	}
	relays := []string{"relay-1", "relay-2", "relay-3"}

	// Valkey: official image, append-only file on a named volume.
	vk := c.Services["valkey"]
	if !strings.HasPrefix(vk.Image, "valkey/valkey:") {
		t.Errorf("valkey image %q", vk.Image)
	}
	cmd := strings.Join(vk.Command, " ")
	if !strings.Contains(cmd, "--appendonly yes") || !strings.Contains(cmd, "--maxmemory-policy noeviction") {
		t.Errorf("valkey command %q: want appendonly and noeviction", cmd)
	}
	valkeyPort := "6379"
	if i := slices.Index(vk.Command, "--port"); i >= 0 {
		valkeyPort = vk.Command[i+1]
	}
	var dataVolume bool
	for _, v := range vk.Volumes {
		src, dst, bind := bindMount(t, v)
		if !bind && dst == "/data" {
			if _, ok := c.Volumes[src]; !ok {
				t.Errorf("valkey volume %q is not declared under volumes:", src)
			}
			dataVolume = true
		}
	}
	if !dataVolume || vk.Healthcheck == nil {
		t.Errorf("valkey needs a named volume on /data and a healthcheck: %+v", vk)
	}

	var listenPort, adminPort int
	for i, name := range relays {
		s := c.Services[name]
		if s.Build == nil || s.Build.Context != "." {
			t.Fatalf("%s must build from the repository root: %+v", name, s.Build)
		}
		if _, err := os.Stat(filepath.Join(root(t), s.Build.Dockerfile)); err != nil {
			t.Errorf("%s: dockerfile %s: %v", name, s.Build.Dockerfile, err)
		}
		// The image is stamped with the version and revision: the build
		// passes both, and the Dockerfile declares each.
		df := string(readFile(t, s.Build.Dockerfile))
		for _, arg := range []string{"VERSION", "REVISION"} {
			if _, ok := s.Build.Args[arg]; !ok {
				t.Errorf("%s: the build does not pass %s (the image would not say which build it runs)", name, arg)
			}
			if !strings.Contains(df, "ARG "+arg) {
				t.Errorf("%s: %s passes %s but %s declares no ARG %s", name, name, arg, s.Build.Dockerfile, arg)
			}
		}
		if s.Hostname != name {
			t.Errorf("%s hostname %q", name, s.Hostname)
		}
		if !s.ReadOnly || !slices.Equal(s.CapDrop, []string{"ALL"}) {
			t.Errorf("%s must be read_only with cap_drop ALL", name)
		}
		// Only relay-1's admin port, on the host's loopback, for the load
		// generator and `relay projection` run on the host.
		if wantPorts := map[string][]string{"relay-1": {"127.0.0.1:8081:8081"}}[name]; !slices.Equal(s.Ports, wantPorts) {
			t.Errorf("%s publishes %v, want %v (the planes go through the load balancer; the admin port on loopback only)", name, s.Ports, wantPorts)
		}

		// Every variable is one the relay reads, and the values pass the
		// relay's own validation (with the mounted files seen at their
		// host paths).
		mounts := map[string]string{}
		for _, v := range s.Volumes {
			src, dst, bind := bindMount(t, v)
			if bind {
				if _, err := os.Stat(src); err != nil {
					t.Errorf("%s mounts %s: %v", name, v, err)
				}
				mounts[dst] = src
			}
		}
		env := map[string]string{}
		for k, v := range s.Environment {
			if !envNames[k] {
				t.Errorf("%s sets %s, which the relay does not read (known: %v)", name, k, sortedKeys(envNames))
			}
			for _, m := range interpolation.FindAllStringSubmatch(v, -1) {
				if !envNames[m[1]] {
					t.Errorf("%s interpolates ${%s}, not a relay variable", name, m[1])
				}
			}
			env[k] = interpolate(t, v)
		}
		projFile := env["RELAY_PROJECTION_FILE"]
		host, ok := mounts[projFile]
		if !ok {
			t.Errorf("%s: RELAY_PROJECTION_FILE=%s is not a mounted file (mounts %v)", name, projFile, mounts)
		} else {
			env["RELAY_PROJECTION_FILE"] = host
			if _, err := projection.Parse(readFile(t, strings.TrimPrefix(host, root(t)+"/"))); err != nil {
				t.Errorf("%s: mounted projection %s is not a valid RelayFixture: %v", name, host, err)
			}
		}
		cfg, err := config.Load(nil, func(k string) string { return env[k] }, io.Discard)
		if err != nil {
			t.Fatalf("%s: the relay refuses this environment: %v", name, err)
		}
		if cfg.Embedded() {
			t.Fatalf("%s runs on the embedded store: replicas would not share state", name)
		}
		u, err := url.Parse(cfg.ValkeyURL)
		if err != nil || u.Hostname() != "valkey" || u.Port() != valkeyPort {
			t.Errorf("%s: RELAY_VALKEY_URL %q must point at the valkey service on %s", name, cfg.ValkeyURL, valkeyPort)
		}
		lp, ap := portOf(t, cfg.Listen), portOf(t, cfg.AdminListen)
		if strings.HasPrefix(cfg.AdminListen, "127.") || strings.HasPrefix(cfg.AdminListen, "localhost") {
			t.Errorf("%s: admin listener %q on loopback is unreachable for the balancer's checks", name, cfg.AdminListen)
		}
		for _, p := range []int{lp, ap} {
			if !slices.Contains(s.Expose, strconv.Itoa(p)) {
				t.Errorf("%s does not expose port %d (expose %v)", name, p, s.Expose)
			}
		}
		grace, err := time.ParseDuration(s.StopGracePeriod)
		if err != nil || grace <= cfg.DrainPeriod+cfg.ShutdownTimeout {
			t.Errorf("%s stop_grace_period %q must exceed drain period %v + shutdown timeout %v", name, s.StopGracePeriod, cfg.DrainPeriod, cfg.ShutdownTimeout)
		}
		if cfg.DrainPeriod == 0 {
			t.Errorf("%s: no drain period; HAProxy would keep sending requests to a replica that is shutting down", name)
		}
		if i == 0 {
			listenPort, adminPort = lp, ap
		} else if lp != listenPort || ap != adminPort {
			t.Errorf("%s listens on %d/%d, relay-1 on %d/%d", name, lp, ap, listenPort, adminPort)
		}
	}

	// The balancer's backends are exactly the replicas, on their listen
	// port, checked on the admin port's /readyz.
	lb := c.Services["lb"]
	cfgPath := ""
	for _, v := range lb.Volumes {
		if src, dst, bind := bindMount(t, v); bind && strings.HasSuffix(dst, "haproxy.cfg") {
			cfgPath = src
		}
	}
	if cfgPath == "" {
		t.Fatalf("lb mounts no haproxy.cfg: %v", lb.Volumes)
	}
	hc := parseHAProxy(t, cfgPath)
	var backends []string
	for _, srv := range hc.servers {
		host, port, _ := strings.Cut(srv, ":")
		backends = append(backends, host)
		if port != strconv.Itoa(listenPort) {
			t.Errorf("haproxy server %s: port %s, relays listen on %d", srv, port, listenPort)
		}
	}
	if !slices.Equal(backends, relays) {
		t.Errorf("haproxy servers %v, want %v", backends, relays)
	}
	if hc.checkPort != strconv.Itoa(adminPort) || hc.checkPath != "/readyz" {
		t.Errorf("haproxy checks port %s path %s, want %d /readyz", hc.checkPort, hc.checkPath, adminPort)
	}
	if len(lb.Ports) != 1 || !strings.HasSuffix(lb.Ports[0], ":"+hc.bindPort) {
		t.Errorf("lb publishes %v, haproxy binds %s", lb.Ports, hc.bindPort)
	}

	// Optional collector: profile-gated, config mounted, OTLP/HTTP port
	// matching what the relays would be pointed at.
	oc := c.Services["otel-collector"]
	if !slices.Equal(oc.Profiles, []string{"otel"}) {
		t.Errorf("otel-collector profiles %v, want [otel]", oc.Profiles)
	}
	var ocCfg struct {
		Receivers struct {
			OTLP struct {
				Protocols struct {
					HTTP struct {
						Endpoint string `json:"endpoint"`
					} `json:"http"`
				} `json:"protocols"`
			} `json:"otlp"`
		} `json:"receivers"`
		Service struct {
			Pipelines map[string]struct {
				Receivers []string `json:"receivers"`
			} `json:"pipelines"`
		} `json:"service"`
	}
	for _, v := range oc.Volumes {
		if src, _, bind := bindMount(t, v); bind {
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal(b, &ocCfg); err != nil {
				t.Fatalf("collector config: %v", err)
			}
		}
	}
	otlpPort := strconv.Itoa(portOf(t, ocCfg.Receivers.OTLP.Protocols.HTTP.Endpoint))
	if otlpPort != "4318" || !slices.Contains(oc.Expose, otlpPort) || !slices.Contains(ocCfg.Service.Pipelines["traces"].Receivers, "otlp") {
		t.Errorf("collector: OTLP/HTTP on %q, expose %v, traces pipeline %v", otlpPort, oc.Expose, ocCfg.Service.Pipelines)
	}
	if !bytes.Contains(readFile(t, "docker-compose.yml"), []byte("http://otel-collector:"+otlpPort)) {
		t.Errorf("docker-compose.yml does not tell how to point the relays at http://otel-collector:%s", otlpPort)
	}

	// Prometheus scrapes every replica's admin port.
	pm := c.Services["prometheus"]
	var promCfg struct {
		ScrapeConfigs []struct {
			MetricsPath   string `json:"metrics_path"`
			StaticConfigs []struct {
				Targets []string `json:"targets"`
			} `json:"static_configs"`
		} `json:"scrape_configs"`
	}
	for _, v := range pm.Volumes {
		if src, _, bind := bindMount(t, v); bind {
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal(b, &promCfg); err != nil {
				t.Fatalf("prometheus config: %v", err)
			}
		}
	}
	var targets []string
	for _, sc := range promCfg.ScrapeConfigs {
		if sc.MetricsPath != "/metrics" {
			t.Errorf("scrape path %q", sc.MetricsPath)
		}
		for _, st := range sc.StaticConfigs {
			targets = append(targets, st.Targets...)
		}
	}
	var want []string
	for _, r := range relays {
		want = append(want, r+":"+strconv.Itoa(adminPort))
	}
	if !slices.Equal(targets, want) {
		t.Errorf("prometheus targets %v, want %v", targets, want)
	}
}

type haproxyConf struct {
	servers              []string // host:port, in order
	checkPort, checkPath string
	bindPort             string
}

func parseHAProxy(t *testing.T, path string) haproxyConf {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var hc haproxyConf
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		switch {
		case fields[0] == "server" && len(fields) >= 3:
			hc.servers = append(hc.servers, fields[2])
		case fields[0] == "bind" && len(fields) >= 2:
			hc.bindPort = strings.TrimPrefix(fields[1], ":")
		case fields[0] == "option" && len(fields) >= 4 && fields[1] == "httpchk":
			hc.checkPath = fields[3]
		case fields[0] == "default-server":
			if i := slices.Index(fields, "port"); i >= 0 && i+1 < len(fields) {
				hc.checkPort = fields[i+1]
			}
		}
	}
	return hc
}
