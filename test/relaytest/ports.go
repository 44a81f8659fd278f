package relaytest

import (
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Ports are taken from below the kernel's ephemeral range, so no outgoing
// connection can occupy one while its server is down (a restarted replica
// or Valkey comes back where its clients expect it), and none is handed out
// twice in one test process.
var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// ephemeralLow is the first port of the kernel's ephemeral range (32768 when
// it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		if n, err := strconv.Atoi(f[0]); err == nil {
			return n
		}
	}
	return 32768
}

// portFree reports whether nothing listens on the loopback port p and this
// process has not given it out. Called with portsMu held.
func portFree(p int) bool {
	if portsGiven[p] {
		return false
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
	if err != nil {
		return false
	}
	_ = ln.Close()
	return true
}

// FixedPort returns a free loopback host:port below the ephemeral range,
// reserved for this test process.
func FixedPort(t testing.TB) string {
	t.Helper()
	lo := ephemeralLow()
	if lo <= 11000 {
		t.Fatalf("ephemeral port range starts at %d: no room below it for fixed test ports", lo)
	}
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 200 {
		p := lo - 10000 + mrand.IntN(10000) //nolint:gosec // a port, not a secret
		if portFree(p) {
			portsGiven[p] = true
			return fmt.Sprintf("127.0.0.1:%d", p)
		}
	}
	t.Fatal("no free loopback port below the ephemeral range")
	return ""
}

// FreeRun returns the first of n consecutive free loopback ports whose
// cluster bus ports (+10000) are free too, all reserved for this test
// process (a private Valkey Cluster).
func FreeRun(t testing.TB, n int) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
next:
	for range 200 {
		base := 12000 + mrand.IntN(9000) //nolint:gosec // a port, not a secret
		for p := base; p < base+n; p++ {
			if !portFree(p) || !portFree(p+10000) {
				continue next
			}
		}
		for p := base; p < base+n; p++ {
			portsGiven[p], portsGiven[p+10000] = true, true
		}
		return base
	}
	t.Fatalf("no %d consecutive free loopback ports for a cluster", n)
	return 0
}
