package chaos_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"
)

// The processes of a chaos run: relay replicas and a private redis-server,
// each on a fixed loopback port so a restart comes back where the clients
// expect it. test/lifecycle has its own copies of the same ideas; these add
// SIGKILL and keep every incarnation's log for a failure report.

// fixedPort returns a free loopback host:port below the kernel's ephemeral
// range, so no outgoing connection can take it while its server is down.
func fixedPort(t *testing.T) string {
	t.Helper()
	lo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				lo = n
			}
		}
	}
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 200 {
		port := 0
		if lo > 11000 {
			port = lo - 10000 + mrand.IntN(10000)
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		addr := ln.Addr().String()
		ln.Close()
		if !portsGiven[addr] {
			portsGiven[addr] = true
			return addr
		}
	}
	t.Fatal("no free loopback port")
	return ""
}

var (
	portsMu    sync.Mutex
	portsGiven = map[string]bool{}
)

// proc is one incarnation of a child process.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func (p *proc) running() bool {
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop sends sig and waits up to limit for the exit.
func (p *proc) stop(sig syscall.Signal, limit time.Duration) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %v: %w", sig, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(limit):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("still running %v after %v", limit, sig)
	}
}

// relayProc is one relay replica.
type relayProc struct {
	name, listen, admin, logDir string
	env                         []string
	starts                      int
	cur                         *proc
}

func newRelay(t *testing.T, name string, env []string) *relayProc {
	r := &relayProc{name: name, listen: fixedPort(t), admin: fixedPort(t), logDir: t.TempDir()}
	r.env = append(append([]string{}, env...), "RELAY_LISTEN="+r.listen, "RELAY_ADMIN_LISTEN="+r.admin, "RELAY_LOG_FORMAT=json")
	t.Cleanup(func() {
		if r.cur.running() {
			_ = r.cur.stop(syscall.SIGKILL, 10*time.Second)
		}
	})
	return r
}

func (r *relayProc) url() string      { return "http://" + r.listen }
func (r *relayProc) adminURL() string { return "http://" + r.admin }

// start runs a new incarnation and waits for its ready line.
func (r *relayProc) start() error {
	r.starts++
	logPath := filepath.Join(r.logDir, fmt.Sprintf("%s.%d.log", r.name, r.starts))
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(relayBin)
	cmd.Env = r.env
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", r.name, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	r.cur = p
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, stdout)
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	select {
	case line := <-lines:
		var ready struct {
			Ready bool `json:"ready"`
		}
		if json.Unmarshal([]byte(line), &ready) != nil || !ready.Ready {
			return fmt.Errorf("%s: ready line %q", r.name, line)
		}
		return nil
	case <-p.done:
		return fmt.Errorf("%s exited before ready (%v):\n%s", r.name, p.err, tail(logPath, 30))
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s not ready after 30s:\n%s", r.name, tail(logPath, 30))
	}
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// storeProc is a redis-server of this test alone, persisting every write to an
// append-only file with an fsync before the reply (appendfsync always), so
// even a SIGKILL loses nothing a client was told had happened. The shared
// test server is never touched.
type storeProc struct {
	bin, addr, dir string
	starts         int
	cur            *proc
}

func newStore(t *testing.T) *storeProc {
	t.Helper()
	bin := os.Getenv("RELAY_TEST_REDIS_SERVER")
	for _, name := range []string{"valkey-server", "redis-server"} {
		if bin != "" {
			break
		}
		bin, _ = exec.LookPath(name)
	}
	if bin == "" {
		t.Fatal("no valkey-server or redis-server on PATH (set RELAY_TEST_REDIS_SERVER): the chaos test restarts a server of its own")
	}
	s := &storeProc{bin: bin, addr: fixedPort(t), dir: t.TempDir()}
	t.Cleanup(func() {
		if s.cur.running() {
			_ = s.cur.stop(syscall.SIGKILL, 10*time.Second)
		}
	})
	return s
}

func (s *storeProc) url() string { return "redis://" + s.addr + "/0" }

// start runs the server on its port and directory and waits until it
// answers PING, the append-only file loaded.
func (s *storeProc) start() error {
	_, port, _ := strings.Cut(s.addr, ":")
	s.starts++
	logPath := filepath.Join(s.dir, fmt.Sprintf("server.%d.log", s.starts))
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin,
		"--bind", "127.0.0.1", "--port", port, "--dir", s.dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "",
		"--daemonize", "no", "--logfile", "", "--maxmemory-policy", "noeviction")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	s.cur = p
	go func() { p.err = cmd.Wait(); logFile.Close(); close(p.done) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := s.client()
		if err == nil {
			err = c.Do(context.Background(), c.B().Ping().Build()).Error()
			c.Close()
			if err == nil {
				return nil
			}
		}
		if !p.running() {
			return fmt.Errorf("%s exited at start:\n%s", s.bin, tail(logPath, 30))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not answering after 20s (%v):\n%s", s.bin, err, tail(logPath, 30))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *storeProc) client() (valkey.Client, error) {
	return valkey.NewClient(valkey.ClientOption{InitAddress: []string{s.addr}, DisableCache: true, DisableRetry: true})
}
