package cluster_test

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

// The processes of a cluster fault run: relay replicas (as test/chaos runs
// them, SIGKILL included) and a private Valkey Cluster of this test alone,
// made by .ci/cluster on free ports, so the destructive tests never touch
// the shared cluster at RELAY_TEST_VALKEY_CLUSTER_URL.

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

// privateCluster is a 3-primary cluster with one replica per primary.
type privateCluster struct {
	base int
	dir  string
	url  string
}

// newPrivateCluster starts one with .ci/cluster and stops it at cleanup.
func newPrivateCluster(t *testing.T) *privateCluster {
	t.Helper()
	c := &privateCluster{base: freeBase(t), dir: t.TempDir()}
	cmd := exec.Command("bash", "../../.ci/cluster", "start")
	cmd.Env = append(os.Environ(), fmt.Sprintf("CLUSTER_BASE_PORT=%d", c.base), "CLUSTER_DIR="+c.dir)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf(".ci/cluster start: %v\n%s%s", err, out, stderr)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	c.url = lines[len(lines)-1]
	t.Cleanup(func() {
		stop := exec.Command("bash", "../../.ci/cluster", "stop")
		stop.Env = cmd.Env
		if out, err := stop.CombinedOutput(); err != nil {
			t.Logf(".ci/cluster stop: %v\n%s", err, out)
		}
	})
	return c
}

// freeBase finds six consecutive free loopback ports below the ephemeral
// range whose cluster bus ports (+10000) are free too.
func freeBase(t *testing.T) int {
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
		for p := base; p < base+6; p++ {
			if !free(p) || !free(p+10000) {
				continue next
			}
		}
		for p := base; p < base+6; p++ {
			portsGiven[fmt.Sprintf("127.0.0.1:%d", p)] = true
		}
		return base
	}
	t.Fatal("no six free loopback ports for a cluster")
	return 0
}

// node opens a plain client to one node (no redirects), for admin commands.
func node(t *testing.T, addr string) valkey.Client {
	t.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		t.Fatalf("connect %s: %v", addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr, master string // master: the primary's id, for a replica
	primary          bool
	slots            []string
}

func (c *privateCluster) nodes(t *testing.T, via string) []clusterNode {
	t.Helper()
	n := node(t, via)
	text, err := n.Do(context.Background(), n.B().ClusterNodes().Build()).ToString()
	if err != nil {
		t.Fatalf("CLUSTER NODES via %s: %v", via, err)
	}
	// RESP3 sends CLUSTER NODES as a verbatim string, which keeps its
	// "txt:" format prefix here.
	text = strings.TrimPrefix(text, "txt:")
	var out []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		cn := clusterNode{id: f[0], addr: strings.SplitN(f[1], "@", 2)[0], primary: strings.Contains(f[2], "master")}
		if f[3] != "-" {
			cn.master = f[3]
		}
		if strings.Contains(f[2], "fail") && !strings.Contains(f[2], "fail?") {
			continue // a node the cluster has given up on
		}
		cn.slots = f[8:]
		out = append(out, cn)
	}
	return out
}

// owner is the primary serving slot, as node via sees it, and its replica.
func (c *privateCluster) owner(t *testing.T, via string, slot int) (primary, replica clusterNode) {
	t.Helper()
	primary, replica, ok := c.findOwner(t, via, slot)
	if !ok {
		t.Fatalf("no primary serves slot %d (via %s): %+v", slot, via, c.nodes(t, via))
	}
	return primary, replica
}

// findOwner is owner, reporting false while no live primary serves slot.
func (c *privateCluster) findOwner(t *testing.T, via string, slot int) (primary, replica clusterNode, ok bool) {
	t.Helper()
	all := c.nodes(t, via)
	for _, n := range all {
		if !n.primary {
			continue
		}
		for _, r := range n.slots {
			lo, hi, found := strings.Cut(r, "-")
			if !found {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 == nil && err2 == nil && a <= slot && slot <= b {
				primary = n
			}
		}
	}
	if primary.id == "" {
		return primary, replica, false
	}
	for _, n := range all {
		if n.master == primary.id {
			replica = n
		}
	}
	return primary, replica, true
}

// pid is the process id of the server on addr.
func (c *privateCluster) pid(t *testing.T, addr string) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr)
	b, err := os.ReadFile(filepath.Join(c.dir, port, "server.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// keyslot is the cluster slot of key.
func (c *privateCluster) keyslot(t *testing.T, key string) int {
	t.Helper()
	n := node(t, fmt.Sprintf("127.0.0.1:%d", c.base))
	slot, err := n.Do(context.Background(), n.B().ClusterKeyslot().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return int(slot)
}
