// Package lifecycle_test runs whole relay processes through the events of
// their life in production, under load from the load generator
// (internal/loadgen): rolling restarts behind a readiness-checking load
// balancer, and a Valkey outage with a real stop and restart. The numbers
// that must stay zero are the load generator's: jobs lost, jobs run twice.
package lifecycle_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/byollm/relay-go/test/relaytest"
	"github.com/valkey-io/valkey-go"
)

var (
	relayBin string // built once by TestMain
	binDir   string
)

func TestMain(m *testing.M) {
	code, err := buildAndRun(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lifecycle:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

// buildAndRun builds ./cmd/relay once for every test, so each replica start
// is a plain exec of the same binary.
func buildAndRun(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "relay-lifecycle-")
	if err != nil {
		return 0, fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	root, err := filepath.Abs("../..")
	if err != nil {
		return 0, err
	}
	binDir = dir
	relayBin = filepath.Join(dir, "relay")
	cmd := exec.Command("go", "build", "-o", relayBin, "./cmd/relay")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("go build ./cmd/relay: %w\n%s", err, out)
	}
	return m.Run(), nil
}

func testValkeyURL() string {
	if u := os.Getenv("RELAY_TEST_VALKEY_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// freePort returns a free loopback port for a listener that must come back
// on the same port after a restart. It is taken from below the kernel's
// ephemeral range, so no outgoing connection can occupy it while its
// replica or server is down; within one test run no port is handed out
// twice.
func freePort(t *testing.T) string {
	t.Helper()
	lo := ephemeralLow()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 200 {
		port := 0 // kernel's choice, when there is no room below the range
		if lo > 11000 {
			port = lo - 10000 + mrand.IntN(10000)
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		addr := ln.Addr().String()
		ln.Close()
		if portsGiven[addr] {
			continue
		}
		portsGiven[addr] = true
		return addr
	}
	t.Fatal("no free loopback port found")
	return ""
}

var (
	portsMu    sync.Mutex
	portsGiven = map[string]bool{}
)

// ephemeralLow is the first port of the kernel's ephemeral range (Linux;
// 32768 when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return n
}

// replica is one relay replica with fixed ports; it can be stopped and
// started again, as a pod restarted in place or a systemd unit.
type replica struct {
	name   string
	listen string // host:port of the planes
	admin  string // host:port of the admin listener
	env    []string
	logDir string

	mu    sync.Mutex
	cmd   *exec.Cmd
	done  chan struct{} // closed when the current process has exited
	err   error         // its Wait result
	log   string        // current log file
	start int           // incarnations so far
}

func newReplica(t *testing.T, name string, env []string) *replica {
	r := &replica{name: name, listen: freePort(t), admin: freePort(t), logDir: t.TempDir()}
	r.env = append(append([]string{}, env...),
		"RELAY_LISTEN="+r.listen,
		"RELAY_ADMIN_LISTEN="+r.admin,
		"RELAY_LOG_FORMAT=json",
		"RELAY_LOG_LEVEL=info",
	)
	t.Cleanup(func() { r.kill() })
	return r
}

func (r *replica) url() string      { return "http://" + r.listen }
func (r *replica) adminURL() string { return "http://" + r.admin }

// run starts a new process and waits for its ready line on stdout.
func (r *replica) run(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	r.start++
	logPath := filepath.Join(r.logDir, fmt.Sprintf("%s.%d.log", r.name, r.start))
	logFile, err := os.Create(logPath)
	if err != nil {
		r.mu.Unlock()
		t.Fatal(err)
	}
	cmd := exec.Command(relayBin)
	cmd.Env = r.env
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		r.mu.Unlock()
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		r.mu.Unlock()
		t.Fatalf("start %s: %v", r.name, err)
	}
	done := make(chan struct{})
	r.cmd, r.done, r.log, r.err = cmd, done, logPath, nil
	r.mu.Unlock()

	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, stdout)
		err := cmd.Wait()
		logFile.Close()
		r.mu.Lock()
		r.err = err
		r.mu.Unlock()
		close(done)
	}()
	select {
	case line := <-lines:
		var ready struct {
			Ready  bool   `json:"ready"`
			Listen string `json:"listen"`
			Admin  string `json:"admin"`
		}
		if err := json.Unmarshal([]byte(line), &ready); err != nil || !ready.Ready || ready.Listen != r.listen || ready.Admin != r.admin {
			t.Fatalf("%s ready line %q (%v), want listen %s admin %s", r.name, line, err, r.listen, r.admin)
		}
	case <-done:
		t.Fatalf("%s exited before ready: %v\n%s", r.name, r.exitErr(), r.logTail(40))
	case <-time.After(30 * time.Second):
		t.Fatalf("%s not ready after 30s\n%s", r.name, r.logTail(40))
	}
}

func (r *replica) exitErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// terminate sends SIGTERM, as the kubelet or docker stop does, and waits up
// to limit for the exit. It returns how long the exit took and the exit
// error (nil for status 0).
func (r *replica) terminate(t *testing.T, limit time.Duration) (time.Duration, error) {
	t.Helper()
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.mu.Unlock()
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM %s: %v", r.name, err)
	}
	select {
	case <-done:
		return time.Since(start), r.exitErr()
	case <-time.After(limit):
		t.Fatalf("%s did not exit within %v of SIGTERM\n%s", r.name, limit, r.logTail(40))
		return 0, nil
	}
}

// kill ends the current process, if any, by its pid (test cleanup).
func (r *replica) kill() {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Kill()
	<-done
}

// logTail returns the last n lines the current incarnation logged.
func (r *replica) logTail(n int) string {
	r.mu.Lock()
	path := r.log
	r.mu.Unlock()
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return r.name + " log:\n" + strings.Join(lines, "\n")
}

// probe GETs an admin path and returns the status (0 when unreachable).
func probe(ctx context.Context, hc *http.Client, url string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	res, err := hc.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 8<<20))
	return res.StatusCode, string(b)
}

// waitStatus polls url until it answers want, or fails the test at the
// deadline.
func waitStatus(t *testing.T, url string, want int, within time.Duration) time.Duration {
	t.Helper()
	hc := &http.Client{Timeout: time.Second}
	start := time.Now()
	for {
		st, body := probe(context.Background(), hc, url)
		if st == want {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("%s: still %d %s after %v, want %d", url, st, strings.TrimSpace(body), within, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cleanNamespace deletes every key of ns from the Valkey at url.
func cleanNamespace(t *testing.T, url, ns string) {
	opt, err := valkey.ParseURL(url)
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	opt.DisableCache = true
	c, err := valkey.NewClient(opt)
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := relaytest.DeleteKeys(ctx, c, ns+":*"); err != nil {
		t.Errorf("cleanup: %v", err)
	}
}

// relayLines keeps the relay_* series of a /metrics scrape, histogram
// buckets left out.
func relayLines(scrape string) string {
	var out []string
	for _, l := range strings.Split(scrape, "\n") {
		if strings.HasPrefix(l, "relay_") && !strings.Contains(l, "_bucket{") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
