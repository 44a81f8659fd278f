package relaytest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// Binaries are built once per test process, on first use, into one temp
// directory that Main removes at the end.
var builds struct {
	mu   sync.Mutex
	dir  string
	done map[string]*build
}

type build struct {
	once sync.Once
	path string
	err  error
}

// Main runs the package's tests and removes the binaries built for them:
// call it from TestMain (func TestMain(m *testing.M) { relaytest.Main(m) }).
func Main(m *testing.M) {
	code := m.Run()
	builds.mu.Lock()
	if builds.dir != "" {
		_ = os.RemoveAll(builds.dir)
	}
	builds.mu.Unlock()
	os.Exit(code)
}

// ModuleRoot is the repository's root directory (where go.mod is).
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// RelayBinary is ./cmd/relay, built once per test process.
func RelayBinary(t testing.TB) string {
	t.Helper()
	return Build(t, "relay", nil, "./cmd/relay")
}

// LoadgenBinary is ./cmd/loadgen, built once per test process.
func LoadgenBinary(t testing.TB) string {
	t.Helper()
	return Build(t, "loadgen", nil, "./cmd/loadgen")
}

// Build runs `go build -o <name> args...` in the module root with env added
// to the environment, once per name in this test process, and returns the
// binary's path. A failed build fails every test asking for it.
func Build(t testing.TB, name string, env []string, args ...string) string {
	t.Helper()
	builds.mu.Lock()
	if builds.done == nil {
		builds.done = map[string]*build{}
	}
	b := builds.done[name]
	if b == nil {
		b = &build{}
		builds.done[name] = b
	}
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "relaytest-bin-")
		if err != nil {
			builds.mu.Unlock()
			t.Fatalf("temp dir for binaries: %v", err)
		}
		builds.dir = dir
	}
	dir := builds.dir
	builds.mu.Unlock()
	b.once.Do(func() {
		b.path = filepath.Join(dir, name)
		cmd := exec.Command("go", append([]string{"build", "-o", b.path}, args...)...)
		cmd.Dir = ModuleRoot()
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %v: %w\n%s", args, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}
