package deploy_test

import (
	"debug/elf"
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/byollm/relay-go/internal/config"
	"github.com/byollm/relay-go/test/relaytest"
)

// instruction is one Dockerfile instruction with continuations joined.
type instruction struct {
	cmd  string // upper-cased
	args string
}

func parseDockerfile(t *testing.T, rel string) []instruction {
	t.Helper()
	var out []instruction
	var cur strings.Builder
	for _, line := range strings.Split(string(readFile(t, rel)), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasPrefix(trimmed, "#") { // comment inside a continuation
			continue
		}
		if strings.HasSuffix(trimmed, `\`) {
			cur.WriteString(strings.TrimSuffix(trimmed, `\`) + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)})
		cur.Reset()
	}
	return out
}

// shellWords splits a simple shell command line (quotes, no expansions).
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		t.Fatalf("unterminated quote in %q", s)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}

// dockerBuild is what the Dockerfile says about the relay image.
type dockerBuild struct {
	env       []string // VAR=value before `go build`
	buildArgs []string // arguments after `go build`
	output    string   // -o path
	stages    []string // FROM lines
	copied    string   // where the binary lands in the final image
	user      string
	env2      map[string]string // ENV of the final stage
	expose    []string
	health    []string
	entry     []string
}

func readDockerfile(t *testing.T) dockerBuild {
	t.Helper()
	var d dockerBuild
	d.env2 = map[string]string{}
	final := false
	for _, in := range parseDockerfile(t, "deploy/Dockerfile") {
		switch in.cmd {
		case "FROM":
			d.stages = append(d.stages, in.args)
			final = len(d.stages) > 1
		case "RUN":
			words := shellWords(t, in.args)
			i := slices.Index(words, "go")
			if i < 0 || i+1 >= len(words) || words[i+1] != "build" {
				continue
			}
			d.env = words[:i]
			d.buildArgs = words[i+2:]
			if j := slices.Index(d.buildArgs, "-o"); j >= 0 && j+1 < len(d.buildArgs) {
				d.output = d.buildArgs[j+1]
			}
		case "COPY":
			if final && strings.HasPrefix(in.args, "--from=build ") {
				f := strings.Fields(in.args)
				if len(f) == 3 && f[1] == d.output {
					d.copied = f[2]
				}
			}
		case "USER":
			d.user = in.args
		case "ENV":
			if final {
				for _, kv := range shellWords(t, in.args) {
					k, v, ok := strings.Cut(kv, "=")
					if !ok {
						t.Fatalf("ENV %q: use KEY=value", kv)
					}
					d.env2[k] = v
				}
			}
		case "EXPOSE":
			d.expose = strings.Fields(in.args)
		case "HEALTHCHECK":
			if _, cmd, ok := strings.Cut(in.args, "CMD "); ok {
				if err := json.Unmarshal([]byte(cmd), &d.health); err != nil {
					t.Fatalf("HEALTHCHECK CMD must be exec form (no shell in the image): %v", err)
				}
			}
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(in.args), &d.entry); err != nil {
				t.Fatalf("ENTRYPOINT must be exec form: %v", err)
			}
		}
	}
	return d
}

func TestDockerfile(t *testing.T) {
	d := readDockerfile(t)
	if len(d.stages) != 2 || !strings.HasPrefix(d.stages[0], "golang:1.26 ") || !strings.HasSuffix(d.stages[0], " AS build") {
		t.Errorf("stages %q: want a golang:1.26 build stage and one runtime stage", d.stages)
	}
	if rt := d.stages[len(d.stages)-1]; !(strings.HasPrefix(rt, "gcr.io/distroless/static") && strings.HasSuffix(rt, ":nonroot")) && rt != "scratch" {
		t.Errorf("runtime stage %q: want distroless/static nonroot or scratch", rt)
	}
	uid, _, _ := strings.Cut(d.user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("USER %q: want a numeric non-root uid (runAsNonRoot checks it)", d.user)
	}
	for _, want := range []string{"CGO_ENABLED=0", "GOOS=linux"} {
		if !slices.Contains(d.env, want) {
			t.Errorf("go build runs without %s: %v", want, d.env)
		}
	}
	for _, want := range []string{"-trimpath", "./cmd/relay"} {
		if !slices.Contains(d.buildArgs, want) {
			t.Errorf("go build args %q lack %q", d.buildArgs, want)
		}
	}
	// Stripped, and stamped with the version and commit (.git is not in
	// the build context, so they come in as build arguments).
	ldflags := ""
	for _, a := range d.buildArgs {
		if v, ok := strings.CutPrefix(a, "-ldflags="); ok {
			ldflags = v
		}
	}
	for _, want := range []string{"-s -w", "-X github.com/byollm/relay-go/internal/buildinfo.version=${VERSION}", "-X github.com/byollm/relay-go/internal/buildinfo.revision=${REVISION}"} {
		if !strings.Contains(ldflags, want) {
			t.Errorf("go build -ldflags %q lacks %q", ldflags, want)
		}
	}
	if d.copied == "" || len(d.entry) != 1 || d.entry[0] != d.copied {
		t.Errorf("the built %s must be copied into the image and be its ENTRYPOINT (copied %q, entrypoint %q)", d.output, d.copied, d.entry)
	}
	if !slices.Equal(d.health, []string{d.copied, "healthcheck"}) {
		t.Errorf("HEALTHCHECK %q, want [%s healthcheck]", d.health, d.copied)
	}

	// The image's environment is one the relay accepts, and it exposes the
	// ports the relay listens on.
	names := relayEnvNames(t)
	for k := range d.env2 {
		if !names[k] {
			t.Errorf("Dockerfile ENV %s is not a relay variable", k)
		}
	}
	cfg, err := config.Load(nil, func(k string) string { return d.env2[k] }, io.Discard)
	if err != nil {
		t.Fatalf("the relay refuses the image's environment: %v", err)
	}
	for _, addr := range []string{cfg.Listen, cfg.AdminListen} {
		if strings.HasPrefix(addr, "127.") {
			t.Errorf("%s listens on loopback inside a container", addr)
		}
		if p := strconv.Itoa(portOf(t, addr)); !slices.Contains(d.expose, p) {
			t.Errorf("EXPOSE %v lacks %s", d.expose, p)
		}
	}

	// The build context keeps what the build needs and drops the bulk.
	ignore := strings.Fields(stripComments(string(readFile(t, "deploy/Dockerfile.dockerignore"))))
	for _, want := range []string{".git", "**/node_modules"} {
		if !slices.Contains(ignore, want) {
			t.Errorf("Dockerfile.dockerignore lacks %s", want)
		}
	}
	for _, pat := range ignore {
		for _, needed := range []string{"go.mod", "go.sum", "cmd", "cmd/relay", "internal", "lua"} {
			if ok, _ := filepath.Match(pat, needed); ok || pat == needed || strings.HasPrefix(needed, pat+"/") {
				t.Errorf("Dockerfile.dockerignore pattern %q drops %s, which the build needs", pat, needed)
			}
		}
	}
}

func TestMain(m *testing.M) { relaytest.Main(m) }

// The version and revision relayBinary stamps, as docker build --build-arg would.
const imageVersion, imageRevision = "v0.0.0-image-test", "0123456789abcdef0123456789abcdef01234567"

// relayBinary builds the relay once with the Dockerfile's own go build
// command (its environment and arguments, only the -o path changed): the
// binary the image would contain.
func relayBinary(t *testing.T) string {
	t.Helper()
	d := readDockerfile(t)
	args := slices.Clone(d.buildArgs)
	if i := slices.Index(args, "-o"); i >= 0 {
		args = slices.Delete(args, i, i+2)
	}
	// The build arguments docker would substitute.
	for i, a := range args {
		args[i] = strings.NewReplacer("${VERSION}", imageVersion, "${REVISION}", imageRevision).Replace(a)
	}
	return relaytest.Build(t, "relay-image", d.env, args...)
}

// TestStaticBinary checks the Dockerfile's build is a static, stripped ELF
// that starts without a loader or libc.
func TestStaticBinary(t *testing.T) {
	out := relayBinary(t)
	f, err := elf.Open(out)
	if err != nil {
		t.Fatalf("not an ELF: %v", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("binary has PT_INTERP: it needs a dynamic loader the image does not have")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("binary links shared libraries %v (%v)", libs, err)
	}
	if f.Section(".symtab") != nil {
		t.Error("binary keeps its symbol table; -ldflags=-s was not applied")
	}

	// It says which build it is.
	if b, err := exec.Command(out, "version").Output(); err != nil || !strings.Contains(string(b), imageVersion) || !strings.Contains(string(b), imageRevision) {
		t.Errorf("relay version = %q (%v), want the stamped %s and %s", b, err, imageVersion, imageRevision)
	}

	// It runs with nothing but itself: -h answers and exits 0.
	run := exec.Command(out, "-h")
	run.Env = []string{}
	b, err := run.CombinedOutput()
	if err != nil || !strings.Contains(string(b), "RELAY_VALKEY_URL") {
		t.Errorf("relay -h: %v\n%s", err, b)
	}
}
