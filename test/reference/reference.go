// Package reference runs the reference relay (@byollm/relay@0.1.1, hosted by
// server.mjs in this directory) and Node snippets against the pinned npm
// packages, for Go tests and tools that compare with or interoperate with
// the original.
//
// node_modules is installed on first use with `npm ci` from the committed
// package-lock.json, so every run uses the exact pinned versions.
package reference

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/byollm/relay-go/test/relaytest"
)

// Dir is the absolute path of test/reference.
func Dir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("reference: cannot locate source directory")
	}
	return filepath.Dir(file)
}

// Install runs `npm ci` in Dir() unless node_modules already holds the
// pinned relay. It takes a file lock so parallel test binaries do not race.
func Install(ctx context.Context) error {
	dir := Dir()
	lock, err := os.OpenFile(filepath.Join(dir, ".install.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("reference install lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("reference install lock: %w", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // released on close anyway
	if installed(dir) {
		return nil
	}
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("npm ci in %s: %w\n%s", dir, err, out)
	}
	if !installed(dir) {
		return fmt.Errorf("npm ci in %s left no @byollm/relay@0.1.1", dir)
	}
	return nil
}

func installed(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "node_modules", "@byollm", "relay", "package.json"))
	if err != nil {
		return false
	}
	var pkg struct {
		Version string `json:"version"`
	}
	return json.Unmarshal(b, &pkg) == nil && pkg.Version == "0.1.1"
}

// RunNode runs an ES module snippet with Node from Dir(), so it can import
// @byollm/relay and @byollm/protocol, feeding it stdin; it returns stdout.
func RunNode(ctx context.Context, script string, stdin []byte) ([]byte, error) {
	if err := Install(ctx); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "node", "--input-type=module", "-e", script)
	cmd.Dir = Dir()
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("node: %w\n%s", err, stderr.String())
	}
	return out, nil
}

// Config is the reference relay's configuration; zero values take the
// server's defaults (see server.mjs).
type Config struct {
	AdminToken      string // required for the admin plane to accept anything
	LeaseMs         int64
	VerificationURL string
	BasePath        string
	SweepMs         int64 // 0: server default (1000); negative: off
	Debug           bool
	UpdateOffer     string
	DaemonFloor     string
}

// Start runs server.mjs on fixed loopback ports and waits for its ready
// line; it is stopped when the test ends.
func Start(t testing.TB, c Config) *relaytest.Relay {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := Install(ctx); err != nil {
		t.Fatal(err)
	}
	env := []string{
		"RELAY_VERIFICATION_URL=" + c.VerificationURL,
		"RELAY_BASE_PATH=" + c.BasePath,
		"RELAY_UPDATE_OFFER=" + c.UpdateOffer,
		"RELAY_DAEMON_FLOOR=" + c.DaemonFloor,
	}
	if c.LeaseMs > 0 {
		env = append(env, "RELAY_LEASE_MS="+strconv.FormatInt(c.LeaseMs, 10))
	}
	switch {
	case c.SweepMs > 0:
		env = append(env, "RELAY_SWEEP_MS="+strconv.FormatInt(c.SweepMs, 10))
	case c.SweepMs < 0:
		env = append(env, "RELAY_SWEEP_MS=0")
	}
	if c.Debug {
		env = append(env, "RELAY_DEBUG=1")
	}
	return relaytest.StartRelay(t, relaytest.RelayConfig{
		Name: "reference", Bin: "node", Args: []string{"server.mjs"}, Dir: Dir(), Env: env, Token: c.AdminToken,
	})
}
