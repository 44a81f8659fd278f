// Package testproc runs the processes of the fault tests (test/chaos,
// test/cluster): relay replicas on fixed loopback ports that can be
// SIGKILLed or SIGTERMed and restarted where their clients expect them,
// each incarnation's log kept for a failure report.
package testproc

import (
	"bufio"
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
)

// FixedPort returns a free loopback host:port below the kernel's ephemeral
// range, so no outgoing connection can take it while its server is down.
func FixedPort(t *testing.T) string {
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

// Proc is one incarnation of a child process: Done closes when it has
// exited, with Err its exit status.
type Proc struct {
	Cmd  *exec.Cmd
	Done chan struct{}
	Err  error
}

// Running reports whether the process has not exited yet.
func (p *Proc) Running() bool {
	if p == nil {
		return false
	}
	select {
	case <-p.Done:
		return false
	default:
		return true
	}
}

// Stop sends sig and waits up to limit for the exit (then SIGKILL).
func (p *Proc) Stop(sig syscall.Signal, limit time.Duration) error {
	if err := p.Cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %v: %w", sig, err)
	}
	select {
	case <-p.Done:
		return nil
	case <-time.After(limit):
		_ = p.Cmd.Process.Kill()
		<-p.Done
		return fmt.Errorf("still running %v after %v", limit, sig)
	}
}

// Relay is one relay replica on fixed ports, restartable; every
// incarnation's log is kept in LogDir for a failure report.
type Relay struct {
	Name, Listen, Admin, LogDir string
	bin                         string
	env                         []string
	starts                      int
	Cur                         *Proc
}

// NewRelay prepares a replica of the relay binary bin with env (plus its
// listen addresses and JSON logs); it is killed at cleanup.
func NewRelay(t *testing.T, bin, name string, env []string) *Relay {
	r := &Relay{Name: name, Listen: FixedPort(t), Admin: FixedPort(t), LogDir: t.TempDir(), bin: bin}
	r.env = append(append([]string{}, env...), "RELAY_LISTEN="+r.Listen, "RELAY_ADMIN_LISTEN="+r.Admin, "RELAY_LOG_FORMAT=json")
	t.Cleanup(func() {
		if r.Cur.Running() {
			_ = r.Cur.Stop(syscall.SIGKILL, 10*time.Second)
		}
	})
	return r
}

// URL is the replica's planes, AdminURL its admin listener.
func (r *Relay) URL() string      { return "http://" + r.Listen }
func (r *Relay) AdminURL() string { return "http://" + r.Admin }

// Start runs a new incarnation and waits for its ready line.
func (r *Relay) Start() error {
	r.starts++
	logPath := filepath.Join(r.LogDir, fmt.Sprintf("%s.%d.log", r.Name, r.starts))
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(r.bin)
	cmd.Env = r.env
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", r.Name, err)
	}
	p := &Proc{Cmd: cmd, Done: make(chan struct{})}
	r.Cur = p
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, stdout)
		p.Err = cmd.Wait()
		logFile.Close()
		close(p.Done)
	}()
	select {
	case line := <-lines:
		var ready struct {
			Ready bool `json:"ready"`
		}
		if json.Unmarshal([]byte(line), &ready) != nil || !ready.Ready {
			return fmt.Errorf("%s: ready line %q", r.Name, line)
		}
		return nil
	case <-p.Done:
		return fmt.Errorf("%s exited before ready (%v):\n%s", r.Name, p.Err, Tail(logPath, 30))
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s not ready after 30s:\n%s", r.Name, Tail(logPath, 30))
	}
}

// Tail is the last n lines of the file at path (or why it cannot be read).
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// FreeRun finds n consecutive free loopback ports below the ephemeral range
// whose cluster bus ports (+10000) are free too, and reserves them against
// FixedPort and later runs in this process.
func FreeRun(t *testing.T, n int) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	free := func(p int) bool {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return false
		}
		ln.Close()
		return !portsGiven[fmt.Sprintf("127.0.0.1:%d", p)]
	}
next:
	for range 200 {
		base := 12000 + mrand.IntN(9000) //nolint:gosec // a port, not a secret
		for p := base; p < base+n; p++ {
			if !free(p) || !free(p+10000) {
				continue next
			}
		}
		for p := base; p < base+n; p++ {
			portsGiven[fmt.Sprintf("127.0.0.1:%d", p)] = true
		}
		return base
	}
	t.Fatalf("no %d free loopback ports for a cluster", n)
	return 0
}
