// Package reference runs the reference relay (@byollm/relay@0.1.1, hosted by
// server.mjs in this directory) and Node snippets against the pinned npm
// packages, for Go tests and tools that compare with or interoperate with
// the original.
//
// node_modules is installed on first use with `npm ci` from the committed
// package-lock.json, so every run uses the exact pinned versions.
package reference

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"
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
	Stderr          io.Writer // where the server's stderr goes (nil: discarded)
}

// Server is a running relay process (the reference, or any process started
// with Launch).
type Server struct {
	URL      string // http://127.0.0.1:port, the relay planes
	AdminURL string // http://127.0.0.1:port, the projection admin plane
	Pid      int
	cmd      *exec.Cmd
	done     chan error
}

// Start launches server.mjs on loopback ports chosen by the kernel and waits
// until it reports them.
func Start(ctx context.Context, c Config) (*Server, error) {
	if err := Install(ctx); err != nil {
		return nil, err
	}
	cmd := exec.Command("node", "server.mjs")
	cmd.Dir = Dir()
	env := append(os.Environ(),
		"RELAY_LISTEN=127.0.0.1:0",
		"RELAY_ADMIN_LISTEN=127.0.0.1:0",
		"RELAY_ADMIN_TOKEN="+c.AdminToken,
		"RELAY_VERIFICATION_URL="+c.VerificationURL,
		"RELAY_BASE_PATH="+c.BasePath,
		"RELAY_UPDATE_OFFER="+c.UpdateOffer,
		"RELAY_DAEMON_FLOOR="+c.DaemonFloor,
	)
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
	cmd.Env = env
	cmd.Stderr = c.Stderr
	return Launch(ctx, cmd)
}

// Launch starts a relay process that, like server.mjs and cmd/relay, prints
// a ready line {"ready":true,"listen":...,"admin":...} as its first stdout
// line, and waits for that line. cmd must not have Stdout set.
func Launch(ctx context.Context, cmd *exec.Cmd) (*Server, error) {
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("relay stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start relay %s: %w", cmd.Path, err)
	}
	s := &Server{Pid: cmd.Process.Pid, cmd: cmd, done: make(chan error, 1)}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		first := true
		for sc.Scan() {
			if first {
				first = false
				var r struct {
					Ready  bool   `json:"ready"`
					Listen string `json:"listen"`
					Admin  string `json:"admin"`
				}
				if err := json.Unmarshal(sc.Bytes(), &r); err != nil || !r.Ready {
					ready <- fmt.Errorf("relay said %q instead of a ready line", sc.Text())
					continue
				}
				s.URL, s.AdminURL = "http://"+r.Listen, "http://"+r.Admin
				ready <- nil
			}
		}
		if first {
			ready <- errors.New("relay exited before it was ready")
		}
		s.done <- cmd.Wait()
	}()
	select {
	case err := <-ready:
		if err != nil {
			_ = cmd.Process.Kill()
			return nil, err
		}
		return s, nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		return nil, errors.New("relay not ready after 30s")
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		return nil, ctx.Err()
	}
}

// Stop terminates the server and waits for it.
func (s *Server) Stop() error {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return nil
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		return errors.New("reference relay ignored SIGTERM; killed")
	}
}
