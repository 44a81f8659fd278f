package chaos_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/test/relaytest"
)

// storeProc is a redis-server of this test alone, persisting every write to an
// append-only file with an fsync before the reply (appendfsync always), so
// even a SIGKILL loses nothing a client was told had happened. The shared
// test server is never touched.
type storeProc struct {
	*relaytest.Process
	addr string
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
	addr := relaytest.FixedPort(t)
	_, port, _ := strings.Cut(addr, ":")
	p := relaytest.NewProcess(t, "store", bin,
		"--bind", "127.0.0.1", "--port", port, "--dir", t.TempDir(),
		"--appendonly", "yes", "--appendfsync", "always", "--save", "",
		"--daemonize", "no", "--logfile", "", "--maxmemory-policy", "noeviction")
	p.Env = relaytest.Environ()
	return &storeProc{Process: p, addr: addr}
}

func (s *storeProc) url() string { return "redis://" + s.addr + "/0" }

// start runs the server on its port and directory and waits until it
// answers PING, the append-only file loaded.
func (s *storeProc) start() error {
	if err := s.Start(); err != nil {
		return err
	}
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
		if !s.Running() {
			return fmt.Errorf("%s exited at start:\n%s", s.Path, s.Tail(30))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not answering after 20s (%v):\n%s", s.Path, err, s.Tail(30))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *storeProc) client() (valkey.Client, error) {
	return valkey.NewClient(valkey.ClientOption{InitAddress: []string{s.addr}, DisableCache: true, DisableRetry: true})
}
