package relaytest

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// StartServer starts a private server of t's own (ValkeyServer without
// persistence, plus extra command-line args such as "--lua-time-limit",
// "10"), for tests that kill, freeze (SIGSTOP), demote or overload a server:
// the shared test server is never treated so. It returns once the server
// answers PING, and kills it (thawed first) when t ends.
func StartServer(t testing.TB, args ...string) *ValkeyServer {
	t.Helper()
	v := newValkeyServer(t, false, args...)
	if err := v.Start(); err != nil {
		t.Fatalf("relaytest: private server: %v", err)
	}
	t.Cleanup(func() {
		_ = v.Signal(syscall.SIGCONT) // a frozen server ignores SIGKILL's cleanup until thawed
		v.Kill()
	})
	return v
}

// ServerBinary is the server tests start for themselves:
// RELAY_TEST_REDIS_SERVER, else valkey-server or redis-server on PATH. It
// fails t when there is none.
func ServerBinary(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("RELAY_TEST_REDIS_SERVER")
	for _, name := range []string{"valkey-server", "redis-server"} {
		if bin != "" {
			break
		}
		bin, _ = exec.LookPath(name)
	}
	if bin == "" {
		t.Fatal("relaytest: no valkey-server or redis-server on PATH (or set RELAY_TEST_REDIS_SERVER): this test needs a server of its own")
	}
	return bin
}
